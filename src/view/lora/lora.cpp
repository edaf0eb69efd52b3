#include "view/lora/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "meta/derived.h"
#include "view/lora/lora_torchtune.h"
#include "meta/pieces.h"
#include "util/error.h"
#include "util/numeric.h"
#include "view/kernels.h"
#include "view/lora/lora_experts.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// A merged weight: its base chunk, and the whole A and B, merged as PEFT's merge_and_unload merges
// (view/kernels.h), in the base's dtype. DoRA's (a magnitude vector) scales each output row of
// W + s·B·A by magnitude / the row's norm: a chunk that holds part of a row reads the other chunks
// of its rows too (one at a time, in column order) for the norm.
class LoraMergedWeight final : public DerivedTensor {
 public:
  LoraMergedWeight(std::string path, TensorMeta base, TensorMeta a, TensorMeta b, double scale, bool transposed,
                   std::optional<TensorMeta> magnitude, int64_t experts = 0, bool scale_b_first = false)
      : path_(std::move(path)),
        w_(std::move(base)),
        a_(std::move(a)),
        b_(std::move(b)),
        scale_(scale),
        transposed_(transposed),
        m_(std::move(magnitude)),
        experts_(experts),
        scale_b_first_(scale_b_first) {}
  const TensorMeta& follows() const override { return w_; }

  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const DType dt = *w_.dtype;
    const uint64_t numel = w_.chunk_numel(chunk), bytes = numel * itemsize(dt);
    // The whole chunk is computed: into dst when that is what is asked (a float32 base in place).
    read_part(Where(path_, std::nullopt, w_.fqn), "chunk " + std::to_string(chunk), bytes, from, n, dst,
              [&](uint8_t* out) {
                below.read(w_, chunk, 0, bytes, out);
                std::vector<float> a = read_whole_float(below, a_), b = read_whole_float(below, b_);
                if (scale_b_first_)  // torchtune's ((alpha / r) * B) @ A: B scaled in float32 first
                  for (float& x : b) x *= static_cast<float>(scale_);
                const Box box = chunk_box(w_, chunk);
                if (dt == DType::Float32 && !m_) {
                  add_delta(reinterpret_cast<float*>(out), box, a, b);
                } else {
                  std::vector<float> values(numel);
                  cast_elements(dt, DType::Float32, out, reinterpret_cast<uint8_t*>(values.data()), numel);
                  add_delta(values.data(), box, a, b);
                  if (m_) dora(below, box, a, b, values);
                  cast_elements(DType::Float32, dt, reinterpret_cast<const uint8_t*>(values.data()), out, numel);
                }
              });
  }

  // A and B read whole (as saved, then as float32, with one chunk of each in flight), and the
  // chunk: its copy when a part is asked, its float32 values when the base is not float32 or the
  // adapter is DoRA; DoRA's magnitude, and, for a chunk that holds part of its rows, one other
  // chunk of them at a time (as saved and as float32).
  uint64_t working_bytes(size_t chunk) const override {
    const uint64_t numel = w_.chunk_numel(chunk), item = itemsize(*w_.dtype);
    uint64_t need = whole(a_) + whole(b_) + numel * item + (*w_.dtype == DType::Float32 && !m_ ? 0 : numel * 4);
    if (experts_ > 0) need += b_.numel() / static_cast<uint64_t>(experts_) * 4;  // one expert's B
    if (m_) {
      need += whole(*m_);
      if (w_.chunk_sizes(chunk)[1] != w_.shape[1]) {
        uint64_t most = 0;
        for (size_t c = 0; c < w_.num_chunks(); ++c) most = std::max(most, w_.chunk_numel(c));
        need += most * (item + 4);
      }
    }
    return need;
  }

 private:
  float scale() const { return scale_b_first_ ? 1.0f : static_cast<float>(scale_); }
  // The box's delta: B·A's, or (a 3-D ParamWrapper's) each expert's B_e·A_e.
  void add_delta(float* v, const Box& box, const std::vector<float>& a, const std::vector<float>& b) const {
    if (experts_ > 0)
      add_lora_expert_deltas(v, box, a.data(), a_.shape[1], b.data(), b_.shape[0], a_.shape[0] / experts_, experts_,
                             scale(), transposed_, delta_dtype());
    else
      add_lora_delta(v, box, a.data(), a_.shape[1], b.data(), a_.shape[0], scale(), transposed_, delta_dtype());
  }
  // PEFT's delta is in lora_B's dtype.
  DType delta_dtype() const { return lora_delta_dtype(*b_.dtype); }
  // What torch adds W + delta in: the base's dtype when the delta's is the same, else float32.
  DType sum_dtype() const { return *w_.dtype == delta_dtype() ? *w_.dtype : DType::Float32; }
  static uint64_t whole(const TensorMeta& t) {
    uint64_t most = 0;
    for (size_t c = 0; c < t.num_chunks(); ++c) most = std::max(most, t.chunk_numel(c) * itemsize(*t.dtype));
    return t.numel() * (itemsize(*t.dtype) + 4) + most;
  }

  // DoRA (PEFT's DoraLinearVariant.merge_unsafe): `values`, the box's W + delta as float32, become
  // magnitude / norm(row of W + delta) · (W + delta), in the dtypes torch computes them in.
  void dora(const TensorReads& below, const Box& box, const std::vector<float>& a, const std::vector<float>& b,
            std::vector<float>& values) const {
    const DType sum_dt = sum_dtype();
    const int64_t rows = box.sizes[0], cols = box.sizes[1], r0 = box.offsets[0], row_len = w_.shape[1];
    round_to(values.data(), values.size(), sum_dt);
    std::vector<DoraNorm> norms(static_cast<size_t>(rows));
    if (cols == row_len) {
      for (int64_t i = 0; i < rows; ++i) norms[static_cast<size_t>(i)].add(values.data() + i * cols, 0, cols, row_len);
    } else {
      // The chunks that hold parts of these rows, in column order, each read whole, merged as
      // this one is, and summed into the rows' norms.
      std::vector<size_t> parts;
      for (size_t c = 0; c < w_.num_chunks(); ++c) {
        const int64_t *o = w_.chunk_offsets(c), *z = w_.chunk_sizes(c);
        if (o[0] < r0 + rows && o[0] + z[0] > r0 && z[1] > 0) parts.push_back(c);
      }
      std::sort(parts.begin(), parts.end(),
                [&](size_t x, size_t y) { return w_.chunk_offsets(x)[1] < w_.chunk_offsets(y)[1]; });
      for (size_t c : parts) {
        const Box pb = chunk_box(w_, c);
        const uint64_t pn = w_.chunk_numel(c);
        std::vector<uint8_t> raw(pn * itemsize(*w_.dtype));
        below.read(w_, c, 0, raw.size(), raw.data());
        std::vector<float> pv(pn);
        cast_elements(*w_.dtype, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(pv.data()), pn);
        add_lora_delta(pv.data(), pb, a.data(), a_.shape[1], b.data(), a_.shape[0], scale(), transposed_,
                       delta_dtype());
        round_to(pv.data(), pv.size(), sum_dt);
        const int64_t lo = std::max(r0, pb.offsets[0]), hi = std::min(r0 + rows, pb.offsets[0] + pb.sizes[0]);
        for (int64_t r = lo; r < hi; ++r)
          norms[static_cast<size_t>(r - r0)].add(pv.data() + (r - pb.offsets[0]) * pb.sizes[1], pb.offsets[1],
                                                 pb.sizes[1], row_len);
      }
    }
    std::vector<float> norm(static_cast<size_t>(rows)), mag = read_whole_float(below, *m_);
    for (int64_t i = 0; i < rows; ++i) norm[static_cast<size_t>(i)] = norms[static_cast<size_t>(i)].finish(row_len);
    round_to(norm.data(), norm.size(), sum_dt);
    const DType factor_dt = *m_->dtype == sum_dt ? sum_dt : DType::Float32;
    dora_scale_rows(values.data(), rows, cols, mag.data() + r0, norm.data(), factor_dt);
  }

  std::string path_;  // the checkpoint's metadata, for messages
  TensorMeta w_, a_, b_;
  double scale_;
  bool transposed_;
  std::optional<TensorMeta> m_;  // DoRA's magnitude vector [out]
  int64_t experts_;              // a 3-D ParamWrapper's E (A [r·E, in], B [out, r·E]); 0 otherwise
  bool scale_b_first_;           // torchtune's order: (s·B)·A, each s·B rounded to float32
};

// torchtune's lora_B of q_proj / k_proj as PEFT's (tune_to_peft_adapter_weights): its rows permuted
// back to HF's RoPE order (view/lora/lora_torchtune.h), read whole.
class LoraPermutedRows final : public DerivedTensor {
 public:
  LoraPermutedRows(std::string path, TensorMeta t, std::vector<int64_t> rows)
      : path_(std::move(path)), t_(std::move(t)), rows_(std::move(rows)) {}
  const TensorMeta& follows() const override { return t_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const size_t item = itemsize(*t_.dtype);
    const uint64_t bytes = t_.chunk_numel(chunk) * item;
    read_part(
        Where(path_, std::nullopt, t_.fqn), "chunk " + std::to_string(chunk), bytes, from, n, dst, [&](uint8_t* out) {
          const std::vector<uint8_t> whole = below.read_whole(t_);
          const Box box = chunk_box(t_, chunk);
          const int64_t cols = t_.shape[1];
          for (int64_t i = 0; i < box.sizes[0]; ++i)
            std::memcpy(
                out + static_cast<size_t>(i * box.sizes[1]) * item,
                whole.data() +
                    static_cast<size_t>(rows_[static_cast<size_t>(box.offsets[0] + i)] * cols + box.offsets[1]) * item,
                static_cast<size_t>(box.sizes[1]) * item);
        });
  }
  uint64_t working_bytes(size_t chunk) const override {
    return t_.numel() * itemsize(*t_.dtype) + t_.chunk_numel(chunk) * itemsize(*t_.dtype);
  }

 private:
  std::string path_;
  TensorMeta t_;
  std::vector<int64_t> rows_;
};

// A merged bias (lora_bias=True): PEFT's `bias += lora_B.bias * scaling`, in the bias's dtype.
class LoraMergedBias final : public DerivedTensor {
 public:
  LoraMergedBias(std::string path, TensorMeta bias, TensorMeta b_bias, double scale)
      : path_(std::move(path)), bias_(std::move(bias)), bb_(std::move(b_bias)), scale_(scale) {}
  const TensorMeta& follows() const override { return bias_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const DType dt = *bias_.dtype;
    const uint64_t numel = bias_.chunk_numel(chunk), bytes = numel * itemsize(dt);
    read_part(Where(path_, std::nullopt, bias_.fqn), "chunk " + std::to_string(chunk), bytes, from, n, dst,
              [&](uint8_t* raw) {
                below.read(bias_, chunk, 0, bytes, raw);
                std::vector<float> v(numel), b(bb_.numel());
                cast_elements(dt, DType::Float32, raw, reinterpret_cast<uint8_t*>(v.data()), numel);
                std::vector<uint8_t> braw = below.read_whole(bb_);
                cast_elements(*bb_.dtype, DType::Float32, braw.data(), reinterpret_cast<uint8_t*>(b.data()), b.size());
                add_lora_bias(v.data(), bias_.chunk_offsets(chunk)[0], static_cast<int64_t>(numel), b.data(),
                              static_cast<float>(scale_), lora_delta_dtype(*bb_.dtype));
                cast_elements(DType::Float32, dt, reinterpret_cast<const uint8_t*>(v.data()), raw, numel);
              });
  }
  uint64_t working_bytes(size_t chunk) const override {
    return bias_.chunk_numel(chunk) * (itemsize(*bias_.dtype) + 4) + bb_.numel() * (itemsize(*bb_.dtype) + 8);
  }

 private:
  std::string path_;
  TensorMeta bias_, bb_;
  double scale_;
};

// The prefix the LoRA keys share before `base_model.model.` ("model" for {"model": state_dict}),
// when there is one and it is the same for all; "" otherwise.
std::string common_prefix(const LoraModel& lora) {
  std::string prefix;
  for (size_t i = 0; i < lora.layers.size(); ++i) {
    const std::string& m = lora.layers[i].module;
    size_t p = peft_prefix_at(m);
    std::string mine = p == std::string::npos || p == 0 ? "" : m.substr(0, p - 1);
    // torchtune's keys have no PeftModel prefix: the state dict's own top-level key ("model").
    if (lora.layers[i].torchtune) mine = m.find('.') == std::string::npos ? "" : m.substr(0, m.find('.'));
    if (i == 0)
      prefix = mine;
    else if (mine != prefix)
      return "";
  }
  return prefix;
}

}  // namespace

Checkpoint lora_view(const Checkpoint& ck, const Selection& selection, const LoraRequest& rq, const ModelConfig& model) {
  const Metadata& md = ck.md;
  if (ck.derived && ck.derived->output.dequantized)
    throw UnsupportedError(
        Where(ck.dir),
        "--lora on a dequantized view (--dtype of fp8/MXFP4 weights): export or merge the adapter without --dtype");
  LoraModel lora = find_lora(md);
  if (lora.empty() && !lora.foreign.empty())
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, lora.foreign.front().example),
                           "Megatron-Bridge's LoRA layout (adapter.linear_in / adapter.linear_out beside the base "
                           "weight; also verl's Megatron backend): dcpctl does not export or merge it; export it with "
                           "Megatron-Bridge (its PEFT adapter export) or merge it there");
  if (lora.empty())
    throw UsageError(Where(ck.metadata_path),
                     "no LoRA adapter in this checkpoint (no lora_A/lora_B keys); --lora adapter and merge need one");
  Findings bad = check_lora(md, lora);
  if (!bad.empty())
    throw FormatError(
        bad.front().where,
        bad.front().message +
            (bad.size() > 1 ? " (and " + std::to_string(bad.size() - 1) + " more: dcpctl verify lists them)" : ""));
  // The items: the selection, or, without one, the model the adapters are in ({"model": ...}).
  Selection sel = selection;
  if (sel.empty()) sel.prefix = common_prefix(lora);
  std::vector<SelectedItem> items = select_items(md, sel);
  std::vector<const SelectedItem*> by_tensor(md.tensors.size(), nullptr);
  for (const SelectedItem& it : items)
    if (it.tensor) by_tensor[it.index] = &it;
  // The adapter: --lora-name, or the only one among the selected.
  std::vector<std::string> names;
  for (const LoraLayer& l : lora.layers)
    if (l.a >= 0 && by_tensor[static_cast<size_t>(l.a)] &&
        std::find(names.begin(), names.end(), l.adapter) == names.end())
      names.push_back(l.adapter);
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + (n.empty() ? std::string("(unnamed)") : n);
  if (names.empty()) throw UsageError(Where(ck.metadata_path), "the selection holds no LoRA adapter");
  std::string adapter;
  if (!rq.name.empty()) {
    if (std::find(names.begin(), names.end(), rq.name) == names.end())
      throw UsageError(Where(ck.metadata_path),
                       "--lora-name " + rq.name + ": no such adapter; the checkpoint holds " + list);
    adapter = rq.name;
  } else if (names.size() > 1) {
    throw UsageError(Where(ck.metadata_path), "the checkpoint holds " + std::to_string(names.size()) +
                                                  " LoRA adapters (" + list + "): choose one with --lora-name");
  } else {
    adapter = names[0];
  }
  const bool merge = rq.mode == LoraMode::Merge;
  // DoRA and lora_bias are known by their keys (a magnitude vector, lora_B's bias); a config that
  // says either where the keys have none cannot be the checkpoint's (PEFT would not load them).
  bool has_magnitude = false, has_bias = false;
  for (const LoraLayer& l : lora.layers)
    if (l.adapter == adapter) has_magnitude = has_magnitude || l.magnitude >= 0, has_bias = has_bias || l.b_bias >= 0;
  bool tune = false;
  for (const LoraLayer& l : lora.layers) tune = tune || l.torchtune;
  LoraConfig config;
  try {
    config = find_lora_config(ck, rq, adapter);
  } catch (const UsageError& e) {
    if (!tune) throw;
    // torchtune's checkpoints say neither r nor alpha: its checkpointer writes them in the PEFT
    // adapter_config.json beside its adapter; without one the scaling is not known.
    throw UnsupportedError(Where(ck.dir), std::string("torchtune LoRA: ") + e.what() +
                                              " (torchtune writes it beside its adapter: r and lora_alpha)");
  }
  // A ParamWrapper saved without its base (an adapter alone): its E from the config's r, never from
  // the fused shapes (lora_A [r·E, in]).
  for (LoraLayer& l : lora.layers)
    if (l.adapter == adapter && l.wrapper && l.base < 0 && l.a >= 0 &&
        md.tensors[static_cast<size_t>(l.a)].ndim() == 2) {
      const int64_t rows = md.tensors[static_cast<size_t>(l.a)].shape[0];
      const json r = config.json.value("r", json());
      if (!r.is_number_integer() || r.get<int64_t>() <= 0 || rows % r.get<int64_t>() != 0)
        throw UsageError(Where(config.path.empty() ? ck.metadata_path : config.path, std::nullopt,
                               md.tensors[static_cast<size_t>(l.a)].fqn),
                         "a target_parameters adapter (lora_A [r*E, in], " + std::to_string(rows) +
                             " rows) without its base parameter: its rank r is not in the checkpoint; give "
                             "--lora-config adapter_config.json with r");
      l.experts = rows / r.get<int64_t>();
    }
  LoraConfig others = config;  // the config less what the keys show and dcpctl merges
  if (has_magnitude) others.json.erase("use_dora");
  if (has_bias) others.json.erase("lora_bias");
  if (const std::string variant = others.variant(); merge && !variant.empty())
    throw UnsupportedError(
        Where(config.path.empty() ? ck.dir : config.path),
        "the adapter is " + variant +
            (variant.rfind("DoRA", 0) == 0 || variant.rfind("a LoRA bias", 0) == 0
                 ? " but the checkpoint holds none of its tensors (lora_magnitude_vector, "
                   "lora_B's bias): the config is not this adapter's"
                 : ", whose merge is not W + s*B*A (or DoRA's, or a LoRA bias's): dcpctl merges plain "
                   "LoRA, rsLoRA, DoRA and LoRA biases; export it with --lora adapter and merge it "
                   "with PEFT"));
  auto scale_of = [&](const LoraLayer& l) {
    int64_t r = lora_rank(md, l);
    // torchtune's merge scales by its config's rank (get_merged_lora_ckpt(sd, rank, alpha)).
    if (l.torchtune && config.json.value("r", json()).is_number_integer()) r = config.json["r"].get<int64_t>();
    const double alpha = config.alpha(module_in_model(l.target()));
    return config.rslora() ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
  };

  // --lora-layout: MoE experts adapted by target_parameters written one expert at a time
  // (view/lora/lora_experts.h): by default a merge's (what transformers' save_pretrained writes), an
  // adapter's when asked (what vLLM loads).
  std::unordered_map<size_t, const LoraLayer*> per_expert_at;  // its A (adapter) or stack (merge) -> the layer
  int64_t expert_rank = 0;
  bool has_experts = false;
  {
    std::string odd;
    for (const LoraLayer& l : lora.layers)
      if (l.adapter == adapter && l.wrapper && l.experts > 0 && l.a >= 0) {
        has_experts = true;
        expert_rank = lora_rank(md, l);
        if (expert_projections(l.param).empty() || l.param_transposed) odd = l.target();
      }
    if (rq.layout == LoraLayout::PerExpert && !has_experts)
      throw UsageError(Where(ck.metadata_path),
                       "--lora-layout per-expert: the adapter adapts no MoE experts' parameters (target_parameters)");
    if (rq.layout == LoraLayout::PerExpert && !odd.empty())
      throw UnsupportedError(Where(ck.metadata_path, std::nullopt, odd),
                             "--lora-layout per-expert: '" + odd +
                                 "' is not an [E, out, in] gate_up_proj or down_proj stack (GPT-OSS keeps [E, in, out] "
                                 "with gate and up interleaved): write it fused");
    const bool want = rq.layout == LoraLayout::PerExpert || (merge && rq.layout == LoraLayout::Default);
    if (want && odd.empty())
      for (const LoraLayer& l : lora.layers)
        if (l.adapter == adapter && l.wrapper && l.experts > 0 && l.a >= 0 && (merge ? l.base >= 0 : true))
          per_expert_at[static_cast<size_t>(merge ? l.base : l.a)] = &l;
  }
  const bool per_expert = !per_expert_at.empty();
  // The module of an expert stack's per-expert tensors: `key` less its last `tail` and every `.base_layer`.
  auto experts_module = [](std::string key, const std::string& tail) {
    key.erase(key.size() - tail.size());
    for (size_t q; (q = key.find(".base_layer")) != std::string::npos &&
                   (q + 11 == key.size() || key[q + 11] == '.');)
      key.erase(q, 11);
    return key;
  };

  // What each tensor becomes: dropped, renamed, or (merge) the base weight with its adapter folded in.
  std::vector<std::string> out_name(md.tensors.size());
  std::vector<bool> keep(md.tensors.size(), false);
  std::unordered_map<size_t, const LoraLayer*> merged_at;       // base tensor -> its adapter
  std::unordered_map<size_t, const LoraLayer*> merged_bias_at;  // base bias -> its adapter (lora_bias)
  // torchtune's adapter as its HF checkpointer converts it: PEFT's keys in the HF model's names, and
  // lora_B of q_proj / k_proj with its rows in HF's RoPE order (view/lora/lora_torchtune.h).
  std::unordered_map<size_t, std::string> tune_names;
  std::unordered_map<size_t, std::vector<int64_t>> tune_rows;
  if (tune && !merge) {
    std::string looked;
    std::optional<TorchtuneHeads> heads;
    bool heads_read = false;
    for (const LoraLayer& l : lora.layers) {
      if (!l.torchtune || l.a < 0 || !by_tensor[static_cast<size_t>(l.a)]) continue;
      const std::string& ka = by_tensor[static_cast<size_t>(l.a)]->key;
      const std::string rel = ka.substr(0, ka.size() - std::string(".lora_a.weight").size());
      const std::string hf = torchtune_hf_module(rel);
      if (hf.empty())
        throw UnsupportedError(Where(ck.metadata_path, std::nullopt, md.tensors[static_cast<size_t>(l.a)].fqn),
                               "torchtune LoRA on '" + rel +
                                   "', a module torchtune's HF name map (convert_weights._FROM_HF) does not name: "
                                   "dcpctl cannot give its PEFT name");
      const std::string p = std::string(kPeftPrefix) + hf;
      tune_names[static_cast<size_t>(l.a)] = p + ".lora_A.weight";
      if (l.b >= 0) tune_names[static_cast<size_t>(l.b)] = p + ".lora_B.weight";
      if (l.magnitude >= 0) tune_names[static_cast<size_t>(l.magnitude)] = p + ".lora_magnitude_vector";
      const bool q = hf.size() > 7 && hf.compare(hf.size() - 7, 7, ".q_proj") == 0;
      const bool k = hf.size() > 7 && hf.compare(hf.size() - 7, 7, ".k_proj") == 0;
      if ((q || k) && l.b >= 0) {
        if (!heads_read) heads = torchtune_heads(ck, config, model, &looked), heads_read = true;
        if (!heads)
          throw UnsupportedError(Where(ck.metadata_path, std::nullopt, md.tensors[static_cast<size_t>(l.b)].fqn),
                                 "torchtune LoRA on " + std::string(q ? "q_proj" : "k_proj") +
                                     ": PEFT's lora_B has its rows in HF's RoPE order, which needs the attention "
                                     "heads: no config.json with num_attention_heads (looked in " +
                                     looked + "; the adapter config's base_model_name_or_path names the base)");
        const int64_t n = q ? heads->heads : heads->kv_heads;
        const TensorMeta& b = md.tensors[static_cast<size_t>(l.b)];
        if (b.ndim() != 2 || b.shape[0] != n * heads->head_dim)
          throw FormatError(Where(ck.metadata_path, std::nullopt, b.fqn),
                            "lora_b is " + dims_text(b.shape) + " but the config's heads give " + std::to_string(n) +
                                " x " + std::to_string(heads->head_dim) + " rows");
        tune_rows[static_cast<size_t>(l.b)] = torchtune_rope_rows(n, heads->head_dim);
      }
    }
  }
  auto peft_key = [&](size_t ti) {  // the output key of a kept adapter tensor
    if (auto t = tune_names.find(ti); t != tune_names.end()) return t->second;
    std::string k = by_tensor[ti]->key;
    size_t p = peft_prefix_at(k);
    return peft_saved_key(p == std::string::npos ? k : k.substr(p), adapter);
  };
  auto model_key = [&](const std::string& k) {  // `base_model.model.` and `.base_layer` removed
    std::string out = k;
    size_t p = peft_prefix_at(out);
    if (p != std::string::npos) out.erase(p, kPeftPrefix.size());
    for (size_t q; (q = out.find(".base_layer.")) != std::string::npos;) out.erase(q, 11);
    return out;
  };
  std::vector<bool> lora_tensor(md.tensors.size(), false);
  for (const LoraLayer& l : lora.layers)
    for (int t : {l.a, l.b, l.b_bias, l.magnitude})
      if (t >= 0) lora_tensor[static_cast<size_t>(t)] = true;
  for (const LoraSavedModule& s : lora.saved)
    for (int t : s.tensors) lora_tensor[static_cast<size_t>(t)] = true;
  for (int t : lora.originals) lora_tensor[static_cast<size_t>(t)] = true;

  if (!merge) {
    for (const LoraLayer& l : lora.layers)
      if (l.adapter == adapter) {
        for (int t : {l.a, l.b, l.b_bias, l.magnitude})
          if (t >= 0 && by_tensor[static_cast<size_t>(t)] && !per_expert_at.count(static_cast<size_t>(l.a)))
            keep[static_cast<size_t>(t)] = true, out_name[static_cast<size_t>(t)] = peft_key(static_cast<size_t>(t));
        // A targeted embedding's base weight too, as PEFT's save_embedding_layers="auto" saves it.
        if (l.embedding && l.base >= 0 && by_tensor[static_cast<size_t>(l.base)])
          keep[static_cast<size_t>(l.base)] = true,
          out_name[static_cast<size_t>(l.base)] = peft_key(static_cast<size_t>(l.base));
      }
    // A module to save is saved as the module's own parameters: M.modules_to_save.NAME.weight -> M.weight.
    for (const LoraSavedModule& s : lora.saved)
      if (s.adapter == adapter)
        for (int t : s.tensors)
          if (by_tensor[static_cast<size_t>(t)]) {
            std::string k = peft_key(static_cast<size_t>(t));
            size_t q = k.find(".modules_to_save.");
            if (q != std::string::npos) k.erase(q, std::string(".modules_to_save").size());
            keep[static_cast<size_t>(t)] = true, out_name[static_cast<size_t>(t)] = k;
          }
  } else {
    std::set<std::string> saved_here;  // modules whose chosen adapter trained a copy
    for (const LoraSavedModule& s : lora.saved)
      if (s.adapter == adapter) saved_here.insert(s.module);
    for (size_t t = 0; t < md.tensors.size(); ++t) {
      if (!by_tensor[t] || lora_tensor[t]) continue;
      keep[t] = true;
      out_name[t] = model_key(by_tensor[t]->key);
    }
    for (const LoraSavedModule& s : lora.saved)
      if (s.adapter == adapter)
        for (int t : s.tensors)
          if (by_tensor[static_cast<size_t>(t)]) {
            std::string k = model_key(by_tensor[static_cast<size_t>(t)]->key);
            size_t q = k.find(".modules_to_save." + adapter + ".");
            if (q != std::string::npos) k.erase(q, std::string(".modules_to_save.").size() + adapter.size());
            keep[static_cast<size_t>(t)] = true, out_name[static_cast<size_t>(t)] = k;
          }
    // A module no chosen copy replaces keeps its original.
    for (int t : lora.originals) {
      if (!by_tensor[static_cast<size_t>(t)]) continue;
      std::string k = model_key(by_tensor[static_cast<size_t>(t)]->key);
      size_t q = k.find(".original_module.");
      std::string module = md.tensors[static_cast<size_t>(t)].fqn.substr(
          0, md.tensors[static_cast<size_t>(t)].fqn.find(".original_module."));
      if (q == std::string::npos || saved_here.count(module)) continue;
      k.erase(q, std::string(".original_module").size());
      keep[static_cast<size_t>(t)] = true, out_name[static_cast<size_t>(t)] = k;
    }
    for (const LoraLayer& l : lora.layers) {
      if (l.adapter != adapter) continue;
      if (l.base < 0 || !by_tensor[static_cast<size_t>(l.base)])
        throw UsageError(Where(ck.metadata_path, std::nullopt, md.tensors[static_cast<size_t>(l.a)].fqn),
                         "--lora merge needs " +
                             (l.wrapper ? "the parameter '" + l.target() + "' (under its base_layer. wrappers)"
                                        : "the base layer '" + l.module + ".base_layer.weight'") +
                             " in the selection; this checkpoint holds the adapter " +
                             "only: export it with --lora adapter, or merge it with the base model in PEFT");
      if (l.b_bias >= 0) {
        if (l.base_bias < 0 || !by_tensor[static_cast<size_t>(l.base_bias)])
          throw UnsupportedError(Where(ck.metadata_path, std::nullopt, md.tensors[static_cast<size_t>(l.b_bias)].fqn),
                                 "a LoRA bias (lora_bias=True) whose base layer has no bias '" + l.module +
                                     ".base_layer.bias' in the selection: PEFT cannot merge it either");
        merged_bias_at[static_cast<size_t>(l.base_bias)] = &l;
      }
      if (l.magnitude >= 0 && (l.embedding || config.fan_in_fan_out()))
        throw UnsupportedError(Where(ck.metadata_path, std::nullopt, md.tensors[static_cast<size_t>(l.magnitude)].fqn),
                               std::string("DoRA on ") + (l.embedding ? "an Embedding" : "a fan_in_fan_out layer") +
                                   ": dcpctl merges DoRA on Linear layers; export it with --lora adapter and merge "
                                   "it with PEFT");
      const TensorMeta& w = md.tensors[static_cast<size_t>(l.base)];
      if (!w.dtype || !(*w.dtype == DType::Float32 || *w.dtype == DType::BFloat16 || *w.dtype == DType::Float16 ||
                        *w.dtype == DType::Float64))
        throw UnsupportedError(Where(ck.metadata_path, std::nullopt, w.fqn),
                               "--lora merge of a " + w.dtype_name +
                                   " base weight: dcpctl merges into float32, float64, bfloat16 and float16 weights");
      merged_at[static_cast<size_t>(l.base)] = &l;
    }
  }

  // The view: the kept tensors in the selection's order, under their output names.
  Checkpoint view = ck;
  // No view below derives a tensor (a dequantized one is refused above), so the new table carries
  // none; a merged weight reads its base, A and B as saved.
  std::shared_ptr<DerivedTable> table = table_over(nullptr);
  size_t merged = 0, merged_biases = 0;
  std::vector<double> scales;
  view.md.tensors.clear();
  view.md.order.clear();
  view.md.planner_data.clear();
  view.md.has_planner_data = false;
  std::set<std::string> names_out;
  for (const SelectedItem& it : items) {
    if (!it.tensor) {
      if (!merge) continue;
      view.md.bytes[it.index].fqn = it.key;
      view.md.order.push_back({false, it.index});
      continue;
    }
    if (auto pe = per_expert_at.find(it.index); pe != per_expert_at.end()) {
      const LoraLayer& l = *pe->second;
      const TensorMeta& a = md.tensors[static_cast<size_t>(l.a)];
      const TensorMeta& b = md.tensors[static_cast<size_t>(l.b)];
      std::vector<ExpertTensor> parts =
          merge ? expert_merged(ck.metadata_path,
                                experts_module(model_key(by_tensor[it.index]->key), "." + l.param), l.param,
                                md.tensors[it.index], a, b, l.experts, static_cast<float>(scale_of(l)))
                : expert_adapter(ck.metadata_path, experts_module(peft_key(it.index), ".lora_A.weight"), l.param, a, b,
                                 l.experts);
      if (merge) scales.push_back(scale_of(l)), ++merged;
      for (ExpertTensor& x : parts) {
        if (!names_out.insert(x.meta.fqn).second)
          throw FormatError(Where(ck.metadata_path, std::nullopt, md.tensors[it.index].fqn),
                            "two tensors would both be written as '" + x.meta.fqn + "'");
        table->tensors[x.meta.fqn] = {std::move(x.tensor), nullptr};
        view.md.order.push_back({true, static_cast<uint32_t>(view.md.tensors.size())});
        view.md.tensors.push_back(std::move(x.meta));
      }
      continue;
    }
    if (!keep[it.index]) continue;
    TensorMeta t = md.tensors[it.index];
    t.fqn = out_name[it.index];
    if (!names_out.insert(t.fqn).second)
      throw FormatError(Where(ck.metadata_path, std::nullopt, md.tensors[it.index].fqn),
                        "two tensors would both be written as '" + t.fqn + "'");
    if (auto m = merged_at.find(it.index); m != merged_at.end()) {
      const LoraLayer& l = *m->second;
      const TensorMeta& base = md.tensors[it.index];
      const TensorMeta& a = md.tensors[static_cast<size_t>(l.a)];
      const TensorMeta& b = md.tensors[static_cast<size_t>(l.b)];
      const double scale = scale_of(l);
      // An Embedding's delta is (B·A)ᵀ; so is a Linear's kept [in, out] (fan_in_fan_out, GPT-2's
      // Conv1D), as check_lora found it. A square one is [out, in] unless the config says otherwise.
      const bool out_in = base.ndim() == 2 && base.shape[0] == b.shape[0] && base.shape[1] == a.shape[1];
      // A ParamWrapper's base is as find_lora fitted it ([E, out, in], or [E, in, out] transposed).
      const bool transposed =
          !l.param.empty() ? l.param_transposed
                           : l.embedding || !out_in || (config.fan_in_fan_out() && base.shape[0] == base.shape[1]);
      std::optional<TensorMeta> magnitude;
      if (l.magnitude >= 0) magnitude = md.tensors[static_cast<size_t>(l.magnitude)];
      table->tensors[t.fqn] = {std::make_shared<LoraMergedWeight>(ck.metadata_path, base, a, b, scale, transposed,
                                                                  std::move(magnitude), l.experts, l.torchtune),
                               nullptr};
      scales.push_back(scale);
      ++merged;
    }
    if (auto m = merged_bias_at.find(it.index); m != merged_bias_at.end()) {
      table->tensors[t.fqn] = {
          std::make_shared<LoraMergedBias>(ck.metadata_path, md.tensors[it.index],
                                           md.tensors[static_cast<size_t>(m->second->b_bias)], scale_of(*m->second)),
          nullptr};
      ++merged_biases;
    }
    if (auto p = tune_rows.find(it.index); p != tune_rows.end())
      table->tensors[t.fqn] = {std::make_shared<LoraPermutedRows>(ck.metadata_path, md.tensors[it.index], p->second),
                               nullptr};
    view.md.order.push_back({true, static_cast<uint32_t>(view.md.tensors.size())});
    view.md.tensors.push_back(std::move(t));
  }
  if (view.md.tensors.empty()) throw UsageError(Where(ck.metadata_path), "the selection leaves no tensor to write");

  // The adapter's config as PEFT writes it: what was given or found, completed from the shapes.
  json cfg = config.json;
  std::map<int64_t, size_t> rank_count;
  std::vector<std::pair<std::string, int64_t>> ranks;
  bool dora = false;
  for (const LoraLayer& l : lora.layers)
    if (l.adapter == adapter && l.a >= 0 && by_tensor[static_cast<size_t>(l.a)]) {
      int64_t r = lora_rank(md, l);
      ranks.push_back({module_in_model(l.target()), r});
      ++rank_count[r];
      dora = dora || l.magnitude >= 0;
    }
  int64_t r = 0;
  for (const auto& [rank, n] : rank_count)
    if (r == 0 || n > rank_count[r]) r = rank;
  if (!cfg.contains("peft_type")) cfg["peft_type"] = "LORA";
  if (cfg.contains("r") && cfg["r"].is_number_integer() && rank_count.count(cfg["r"].get<int64_t>()))
    r = cfg["r"].get<int64_t>();
  cfg["r"] = r;
  json pattern = cfg.contains("rank_pattern") && cfg["rank_pattern"].is_object() ? cfg["rank_pattern"] : json::object();
  for (const auto& [module, rank] : ranks) {
    bool named = false;
    for (const auto& [p, v] : pattern.items()) named = named || (pattern_matches(p, module) && v == rank);
    if (rank != r && !named) pattern[module] = rank;
  }
  cfg["rank_pattern"] = pattern;
  if (!cfg.contains("alpha_pattern") || !cfg["alpha_pattern"].is_object()) cfg["alpha_pattern"] = json::object();
  // An entry that names no module of this adapter (a config written for another model, or by a tool
  // that keyed it by a fused shape) says nothing true of it: the folder's config leaves it out.
  for (const char* field : {"rank_pattern", "alpha_pattern"}) {
    json kept = json::object();
    for (const auto& [p, v] : cfg[field].items()) {
      bool names = false;
      for (const auto& [module, rank] : ranks) names = names || pattern_matches(p, module);
      if (names) kept[p] = v;
    }
    cfg[field] = kept;
  }
  if (!cfg.contains("target_modules") || cfg["target_modules"].is_null()) cfg["target_modules"] = lora.targets(adapter);
  if (const auto params = lora.target_parameters(adapter);
      !params.empty() && (!cfg.contains("target_parameters") || cfg["target_parameters"].is_null()))
    cfg["target_parameters"] = params;
  if (!cfg.contains("modules_to_save") || cfg["modules_to_save"].is_null()) {
    json saved = json::array();
    for (const LoraSavedModule& sm : lora.saved)
      if (sm.adapter == adapter) {
        size_t dot = sm.module.rfind('.');
        saved.push_back(dot == std::string::npos ? sm.module : sm.module.substr(dot + 1));
      }
    cfg["modules_to_save"] = saved.empty() ? json(nullptr) : saved;
  }
  if (dora) cfg["use_dora"] = true;
  if (per_expert && !merge) {
    // vLLM's per-expert layout: the experts are modules (gate_proj, up_proj, down_proj), not parameters.
    cfg.erase("target_parameters");
    if (cfg["target_modules"].is_array()) {
      std::set<std::string> mods;
      for (const json& m : cfg["target_modules"])
        if (m.is_string()) mods.insert(m.get<std::string>());
      for (const auto& [t, l] : per_expert_at)
        for (const std::string& p : expert_projections(l->param)) mods.insert(p);
      cfg["target_modules"] = std::vector<std::string>(mods.begin(), mods.end());
    }
  }
  if (!rq.base_model.empty()) cfg["base_model_name_or_path"] = rq.base_model;
  const json defaults = {{"use_rslora", false},
                         {"use_dora", false},
                         {"fan_in_fan_out", false},
                         {"bias", "none"},
                         {"lora_dropout", 0.0},
                         {"inference_mode", true},
                         {"base_model_name_or_path", nullptr},
                         {"task_type", nullptr}};
  for (auto it = defaults.begin(); it != defaults.end(); ++it)
    if (!cfg.contains(it.key())) cfg[it.key()] = it.value();
  if (tune) {
    // torchtune's converter (tune_to_peft_adapter_config) writes its config as it is: r, lora_alpha,
    // target_modules in HF's names, peft_type, base_model_name_or_path. DoRA's needs use_dora for PEFT
    // to load its magnitude vectors (torchtune 0.6.1 leaves it out).
    cfg = config.json;
    if (dora) cfg["use_dora"] = true;
    if (!rq.base_model.empty()) cfg["base_model_name_or_path"] = rq.base_model;
  }
  if (!merge) table->output.adapter_config = cfg;
  json& summary = table->views["lora"];
  summary = {{"mode", merge ? "merge" : "adapter"},
             {"adapter", adapter.empty() ? json(nullptr) : json(adapter)},
             {"config", config.path.empty() ? json(nullptr) : json(config.path)},
             {"select", sel.prefix},
             {"r", r},
             {"lora_alpha", cfg["lora_alpha"]},
             {"use_rslora", config.rslora()},
             {"modules", ranks.size()},
             {"merged", merged}};
  if (has_experts) {
    // The rank every expert's adapter has (r, never r·E), and how the experts are written.
    summary["expert_rank"] = expert_rank;
    summary["layout"] = per_expert ? "per-expert" : "fused";
  }
  if (merge && merged_biases) summary["merged_biases"] = merged_biases;
  if (merge && has_magnitude) summary["dora"] = true;
  if (merge && merged) {
    auto [lo, hi] = std::minmax_element(scales.begin(), scales.end());
    summary["scale"] = *lo == *hi ? json(*lo) : json{{"min", *lo}, {"max", *hi}};
  }
  view.derived = std::move(table);
  return view;
}

}  // namespace dcpctl
