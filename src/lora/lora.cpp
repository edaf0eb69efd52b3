#include "lora/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "lora/lora_experts.h"
#include "meta/derived.h"
#include "meta/pieces.h"
#include "util/error.h"
#include "util/numeric.h"
#include "view/kernels.h"
#include "view/lora/lora_torchtune.h"

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

// `key` less its last `tail` and every `.base_layer`: the module of an expert stack's per-expert tensors.
std::string experts_module(std::string key, const std::string& tail) {
  key.erase(key.size() - tail.size());
  for (size_t q; (q = key.find(".base_layer")) != std::string::npos && (q + 11 == key.size() || key[q + 11] == '.');)
    key.erase(q, 11);
  return key;
}

// A key in the model's names: `base_model.model.` and every `.base_layer` removed.
std::string model_key(const std::string& k) {
  std::string out = k;
  size_t p = peft_prefix_at(out);
  if (p != std::string::npos) out.erase(p, kPeftPrefix.size());
  for (size_t q; (q = out.find(".base_layer.")) != std::string::npos;) out.erase(q, 11);
  return out;
}

// The checkpoint's LoRA model, refused unless it is one dcpctl exports or merges.
LoraModel checked_lora(const Checkpoint& ck) {
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
  return lora;
}

// lora_view, a step at a time: the adapter and its config, how MoE experts are written, what each
// tensor becomes (dropped, renamed, or its adapter merged in), the view over those, and the adapter
// config PEFT would write with its summary. Each step reads what the earlier ones decided; the
// LoraLayer pointers it keeps point into lora_, so a builder is neither copied nor moved.
class LoraViewBuilder {
 public:
  LoraViewBuilder(const Checkpoint& ck, const Selection& selection, const LoraRequest& rq, const ModelConfig& model)
      : ck_(ck), md_(ck.md), rq_(rq), model_(model), lora_(checked_lora(ck)), merge_(rq.mode == LoraMode::Merge) {
    select(selection);
    choose_adapter();
    read_config();
    plan_experts();
  }
  LoraViewBuilder(const LoraViewBuilder&) = delete;
  LoraViewBuilder& operator=(const LoraViewBuilder&) = delete;

  Checkpoint build() {
    out_name_.assign(md_.tensors.size(), std::string());
    keep_.assign(md_.tensors.size(), false);
    if (tune_ && !merge_) plan_torchtune_names();
    if (merge_)
      plan_merge();
    else
      plan_adapter();
    Checkpoint view = ck_;
    // No view below derives a tensor (a dequantized one is refused above), so the new table carries
    // none; a merged weight reads its base, A and B as saved.
    std::shared_ptr<DerivedTable> table = table_over(nullptr);
    fill_view(view, *table);
    count_ranks();
    const json cfg = peft_config();
    if (!merge_) table->output.adapter_config = cfg;
    table->views["lora"] = summary(cfg);
    view.derived = std::move(table);
    return view;
  }

 private:
  const TensorMeta& tensor(int t) const { return md_.tensors[static_cast<size_t>(t)]; }
  const SelectedItem* selected(int t) const { return by_tensor_[static_cast<size_t>(t)]; }
  void put(size_t t, std::string name) { keep_[t] = true, out_name_[t] = std::move(name); }

  // The items: the selection, or, without one, the model the adapters are in ({"model": ...}).
  void select(const Selection& selection) {
    sel_ = selection;
    if (sel_.empty()) sel_.prefix = common_prefix(lora_);
    items_ = select_items(md_, sel_);
    by_tensor_.assign(md_.tensors.size(), nullptr);
    for (const SelectedItem& it : items_)
      if (it.tensor) by_tensor_[it.index] = &it;
  }

  // The adapter: --lora-name, or the only one among the selected.
  void choose_adapter() {
    std::vector<std::string> names;
    for (const LoraLayer& l : lora_.layers)
      if (l.a >= 0 && selected(l.a) && std::find(names.begin(), names.end(), l.adapter) == names.end())
        names.push_back(l.adapter);
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + (n.empty() ? std::string("(unnamed)") : n);
    if (names.empty()) throw UsageError(Where(ck_.metadata_path), "the selection holds no LoRA adapter");
    if (!rq_.name.empty()) {
      if (std::find(names.begin(), names.end(), rq_.name) == names.end())
        throw UsageError(Where(ck_.metadata_path),
                         "--lora-name " + rq_.name + ": no such adapter; the checkpoint holds " + list);
      adapter_ = rq_.name;
    } else if (names.size() > 1) {
      throw UsageError(Where(ck_.metadata_path), "the checkpoint holds " + std::to_string(names.size()) +
                                                     " LoRA adapters (" + list + "): choose one with --lora-name");
    } else {
      adapter_ = names[0];
    }
  }

  // The adapter's config (given, found beside the checkpoint, or torchtune's refusal), the experts
  // of an adapter saved without its base fitted from it, and a variant whose merge dcpctl does not
  // compute refused.
  void read_config() {
    // DoRA and lora_bias are known by their keys (a magnitude vector, lora_B's bias); a config that
    // says either where the keys have none cannot be the checkpoint's (PEFT would not load them).
    for (const LoraLayer& l : lora_.layers)
      if (l.adapter == adapter_)
        has_magnitude_ = has_magnitude_ || l.magnitude >= 0, has_bias_ = has_bias_ || l.b_bias >= 0;
    for (const LoraLayer& l : lora_.layers) tune_ = tune_ || l.torchtune;
    try {
      config_ = find_lora_config(ck_, rq_, adapter_);
    } catch (const UsageError& e) {
      if (!tune_) throw;
      // torchtune's checkpoints say neither r nor alpha: its checkpointer writes them in the PEFT
      // adapter_config.json beside its adapter; without one the scaling is not known.
      throw UnsupportedError(Where(ck_.dir), std::string("torchtune LoRA: ") + e.what() +
                                                 " (torchtune writes it beside its adapter: r and lora_alpha)");
    }
    fit_unbased_experts();
    LoraConfig others = config_;  // the config less what the keys show and dcpctl merges
    if (has_magnitude_) others.json.erase("use_dora");
    if (has_bias_) others.json.erase("lora_bias");
    if (const std::string variant = others.variant(); merge_ && !variant.empty())
      throw UnsupportedError(
          Where(config_.path.empty() ? ck_.dir : config_.path),
          "the adapter is " + variant +
              (variant.rfind("DoRA", 0) == 0 || variant.rfind("a LoRA bias", 0) == 0
                   ? " but the checkpoint holds none of its tensors (lora_magnitude_vector, "
                     "lora_B's bias): the config is not this adapter's"
                   : ", whose merge is not W + s*B*A (or DoRA's, or a LoRA bias's): dcpctl merges plain "
                     "LoRA, rsLoRA, DoRA and LoRA biases; export it with --lora adapter and merge it "
                     "with PEFT"));
  }

  // A ParamWrapper saved without its base (an adapter alone): its E from the config's r, never from
  // the fused shapes (lora_A [r·E, in]).
  void fit_unbased_experts() {
    for (LoraLayer& l : lora_.layers) {
      if (l.adapter != adapter_ || !l.wrapper || l.base >= 0 || l.a < 0 || tensor(l.a).ndim() != 2) continue;
      const int64_t rows = tensor(l.a).shape[0];
      const json r = config_.json.value("r", json());
      if (!r.is_number_integer() || r.get<int64_t>() <= 0 || rows % r.get<int64_t>() != 0)
        throw UsageError(Where(config_.path.empty() ? ck_.metadata_path : config_.path, std::nullopt, tensor(l.a).fqn),
                         "a target_parameters adapter (lora_A [r*E, in], " + std::to_string(rows) +
                             " rows) without its base parameter: its rank r is not in the checkpoint; give "
                             "--lora-config adapter_config.json with r");
      l.experts = rows / r.get<int64_t>();
    }
  }

  double scale_of(const LoraLayer& l) const {
    int64_t r = lora_rank(md_, l);
    // torchtune's merge scales by its config's rank (get_merged_lora_ckpt(sd, rank, alpha)).
    if (l.torchtune && config_.json.value("r", json()).is_number_integer()) r = config_.json["r"].get<int64_t>();
    const double alpha = config_.alpha(module_in_model(l.target()));
    return config_.rslora() ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
  }

  // --lora-layout: MoE experts adapted by target_parameters written one expert at a time
  // (view/lora/lora_experts.h): by default a merge's (what transformers' save_pretrained writes), an
  // adapter's when asked (what vLLM loads).
  void plan_experts() {
    std::string odd;
    for (const LoraLayer& l : lora_.layers)
      if (l.adapter == adapter_ && l.wrapper && l.experts > 0 && l.a >= 0) {
        has_experts_ = true;
        expert_rank_ = lora_rank(md_, l);
        if (expert_projections(l.param).empty() || l.param_transposed) odd = l.target();
      }
    if (rq_.layout == LoraLayout::PerExpert && !has_experts_)
      throw UsageError(Where(ck_.metadata_path),
                       "--lora-layout per-expert: the adapter adapts no MoE experts' parameters (target_parameters)");
    if (rq_.layout == LoraLayout::PerExpert && !odd.empty())
      throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, odd),
                             "--lora-layout per-expert: '" + odd +
                                 "' is not an [E, out, in] gate_up_proj or down_proj stack (GPT-OSS keeps [E, in, out] "
                                 "with gate and up interleaved): write it fused");
    const bool want = rq_.layout == LoraLayout::PerExpert || (merge_ && rq_.layout == LoraLayout::Default);
    if (want && odd.empty())
      for (const LoraLayer& l : lora_.layers)
        if (l.adapter == adapter_ && l.wrapper && l.experts > 0 && l.a >= 0 && (merge_ ? l.base >= 0 : true))
          per_expert_at_[static_cast<size_t>(merge_ ? l.base : l.a)] = &l;
  }

  // torchtune's adapter as its HF checkpointer converts it: PEFT's keys in the HF model's names, and
  // lora_B of q_proj / k_proj with its rows in HF's RoPE order (view/lora/lora_torchtune.h).
  void plan_torchtune_names() {
    std::string looked;
    std::optional<TorchtuneHeads> heads;
    bool heads_read = false;
    for (const LoraLayer& l : lora_.layers) {
      if (!l.torchtune || l.a < 0 || !selected(l.a)) continue;
      const std::string& ka = selected(l.a)->key;
      const std::string rel = ka.substr(0, ka.size() - std::string(".lora_a.weight").size());
      const std::string hf = torchtune_hf_module(rel);
      if (hf.empty())
        throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, tensor(l.a).fqn),
                               "torchtune LoRA on '" + rel +
                                   "', a module torchtune's HF name map (convert_weights._FROM_HF) does not name: "
                                   "dcpctl cannot give its PEFT name");
      const std::string p = std::string(kPeftPrefix) + hf;
      tune_names_[static_cast<size_t>(l.a)] = p + ".lora_A.weight";
      if (l.b >= 0) tune_names_[static_cast<size_t>(l.b)] = p + ".lora_B.weight";
      if (l.magnitude >= 0) tune_names_[static_cast<size_t>(l.magnitude)] = p + ".lora_magnitude_vector";
      const bool q = hf.size() > 7 && hf.compare(hf.size() - 7, 7, ".q_proj") == 0;
      const bool k = hf.size() > 7 && hf.compare(hf.size() - 7, 7, ".k_proj") == 0;
      if (!(q || k) || l.b < 0) continue;
      if (!heads_read) heads = torchtune_heads(ck_, config_, model_, &looked), heads_read = true;
      if (!heads)
        throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, tensor(l.b).fqn),
                               "torchtune LoRA on " + std::string(q ? "q_proj" : "k_proj") +
                                   ": PEFT's lora_B has its rows in HF's RoPE order, which needs the attention "
                                   "heads: no config.json with num_attention_heads (looked in " +
                                   looked + "; the adapter config's base_model_name_or_path names the base)");
      const int64_t n = q ? heads->heads : heads->kv_heads;
      const TensorMeta& b = tensor(l.b);
      if (b.ndim() != 2 || b.shape[0] != n * heads->head_dim)
        throw FormatError(Where(ck_.metadata_path, std::nullopt, b.fqn),
                          "lora_b is " + dims_text(b.shape) + " but the config's heads give " + std::to_string(n) +
                              " x " + std::to_string(heads->head_dim) + " rows");
      tune_rows_[static_cast<size_t>(l.b)] = torchtune_rope_rows(n, heads->head_dim);
    }
  }

  std::string peft_key(size_t ti) const {  // the output key of a kept adapter tensor
    if (auto t = tune_names_.find(ti); t != tune_names_.end()) return t->second;
    std::string k = by_tensor_[ti]->key;
    size_t p = peft_prefix_at(k);
    return peft_saved_key(p == std::string::npos ? k : k.substr(p), adapter_);
  }

  // --lora adapter: the chosen adapter's tensors under PEFT's saved names, and its modules to save.
  void plan_adapter() {
    for (const LoraLayer& l : lora_.layers) {
      if (l.adapter != adapter_) continue;
      for (int t : {l.a, l.b, l.b_bias, l.magnitude})
        if (t >= 0 && selected(t) && !per_expert_at_.count(static_cast<size_t>(l.a)))
          put(static_cast<size_t>(t), peft_key(static_cast<size_t>(t)));
      // A targeted embedding's base weight too, as PEFT's save_embedding_layers="auto" saves it.
      if (l.embedding && l.base >= 0 && selected(l.base))
        put(static_cast<size_t>(l.base), peft_key(static_cast<size_t>(l.base)));
    }
    // A module to save is saved as the module's own parameters: M.modules_to_save.NAME.weight -> M.weight.
    for (const LoraSavedModule& s : lora_.saved)
      if (s.adapter == adapter_)
        for (int t : s.tensors)
          if (selected(t)) {
            std::string k = peft_key(static_cast<size_t>(t));
            size_t q = k.find(".modules_to_save.");
            if (q != std::string::npos) k.erase(q, std::string(".modules_to_save").size());
            put(static_cast<size_t>(t), k);
          }
  }

  // --lora merge: every model tensor under its model name, the chosen adapter's copies of its modules
  // to save (or the originals), and each adapted base weight (and bias) with its adapter folded in.
  void plan_merge() {
    std::vector<bool> lora_tensor(md_.tensors.size(), false);
    for (const LoraLayer& l : lora_.layers)
      for (int t : {l.a, l.b, l.b_bias, l.magnitude})
        if (t >= 0) lora_tensor[static_cast<size_t>(t)] = true;
    for (const LoraSavedModule& s : lora_.saved)
      for (int t : s.tensors) lora_tensor[static_cast<size_t>(t)] = true;
    for (int t : lora_.originals) lora_tensor[static_cast<size_t>(t)] = true;
    std::set<std::string> saved_here;  // modules whose chosen adapter trained a copy
    for (const LoraSavedModule& s : lora_.saved)
      if (s.adapter == adapter_) saved_here.insert(s.module);
    for (size_t t = 0; t < md_.tensors.size(); ++t)
      if (by_tensor_[t] && !lora_tensor[t]) put(t, model_key(by_tensor_[t]->key));
    for (const LoraSavedModule& s : lora_.saved)
      if (s.adapter == adapter_)
        for (int t : s.tensors)
          if (selected(t)) {
            std::string k = model_key(selected(t)->key);
            size_t q = k.find(".modules_to_save." + adapter_ + ".");
            if (q != std::string::npos) k.erase(q, std::string(".modules_to_save.").size() + adapter_.size());
            put(static_cast<size_t>(t), k);
          }
    // A module no chosen copy replaces keeps its original.
    for (int t : lora_.originals) {
      if (!selected(t)) continue;
      std::string k = model_key(selected(t)->key);
      size_t q = k.find(".original_module.");
      std::string module = tensor(t).fqn.substr(0, tensor(t).fqn.find(".original_module."));
      if (q == std::string::npos || saved_here.count(module)) continue;
      k.erase(q, std::string(".original_module").size());
      put(static_cast<size_t>(t), k);
    }
    for (const LoraLayer& l : lora_.layers)
      if (l.adapter == adapter_) plan_merged_layer(l);
  }

  void plan_merged_layer(const LoraLayer& l) {
    if (l.base < 0 || !selected(l.base))
      throw UsageError(Where(ck_.metadata_path, std::nullopt, tensor(l.a).fqn),
                       "--lora merge needs " +
                           (l.wrapper ? "the parameter '" + l.target() + "' (under its base_layer. wrappers)"
                                      : "the base layer '" + l.module + ".base_layer.weight'") +
                           " in the selection; this checkpoint holds the adapter " +
                           "only: export it with --lora adapter, or merge it with the base model in PEFT");
    if (l.b_bias >= 0) {
      if (l.base_bias < 0 || !selected(l.base_bias))
        throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, tensor(l.b_bias).fqn),
                               "a LoRA bias (lora_bias=True) whose base layer has no bias '" + l.module +
                                   ".base_layer.bias' in the selection: PEFT cannot merge it either");
      merged_bias_at_[static_cast<size_t>(l.base_bias)] = &l;
    }
    if (l.magnitude >= 0 && (l.embedding || config_.fan_in_fan_out()))
      throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, tensor(l.magnitude).fqn),
                             std::string("DoRA on ") + (l.embedding ? "an Embedding" : "a fan_in_fan_out layer") +
                                 ": dcpctl merges DoRA on Linear layers; export it with --lora adapter and merge "
                                 "it with PEFT");
    const TensorMeta& w = tensor(l.base);
    if (!w.dtype || !(*w.dtype == DType::Float32 || *w.dtype == DType::BFloat16 || *w.dtype == DType::Float16 ||
                      *w.dtype == DType::Float64))
      throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, w.fqn),
                             "--lora merge of a " + w.dtype_name +
                                 " base weight: dcpctl merges into float32, float64, bfloat16 and float16 weights");
    merged_at_[static_cast<size_t>(l.base)] = &l;
  }

  // The view: the kept tensors in the selection's order, under their output names.
  void fill_view(Checkpoint& view, DerivedTable& table) {
    view.md.tensors.clear();
    view.md.order.clear();
    view.md.planner_data.clear();
    view.md.has_planner_data = false;
    for (const SelectedItem& it : items_) {
      if (!it.tensor) {
        if (!merge_) continue;
        view.md.bytes[it.index].fqn = it.key;
        view.md.order.push_back({false, it.index});
      } else if (auto pe = per_expert_at_.find(it.index); pe != per_expert_at_.end()) {
        add_experts(view, table, it, *pe->second);
      } else if (keep_[it.index]) {
        add_tensor(view, table, it.index);
      }
    }
    if (view.md.tensors.empty()) throw UsageError(Where(ck_.metadata_path), "the selection leaves no tensor to write");
  }

  void claim_name(const std::string& name, size_t t) {
    if (!names_out_.insert(name).second)
      throw FormatError(Where(ck_.metadata_path, std::nullopt, md_.tensors[t].fqn),
                        "two tensors would both be written as '" + name + "'");
  }

  // An expert stack written one expert at a time (its merge's, or its adapter's).
  void add_experts(Checkpoint& view, DerivedTable& table, const SelectedItem& it, const LoraLayer& l) {
    const TensorMeta& a = tensor(l.a);
    const TensorMeta& b = tensor(l.b);
    std::vector<ExpertTensor> parts =
        merge_ ? expert_merged(ck_.metadata_path, experts_module(model_key(by_tensor_[it.index]->key), "." + l.param),
                               l.param, md_.tensors[it.index], a, b, l.experts, static_cast<float>(scale_of(l)))
               : expert_adapter(ck_.metadata_path, experts_module(peft_key(it.index), ".lora_A.weight"), l.param, a, b,
                                l.experts);
    if (merge_) scales_.push_back(scale_of(l)), ++merged_;
    for (ExpertTensor& x : parts) {
      claim_name(x.meta.fqn, it.index);
      table.tensors[x.meta.fqn] = {std::move(x.tensor), nullptr};
      view.md.order.push_back({true, static_cast<uint32_t>(view.md.tensors.size())});
      view.md.tensors.push_back(std::move(x.meta));
    }
  }

  // A kept tensor under its output name: as saved, merged with its adapter, or its rows permuted.
  void add_tensor(Checkpoint& view, DerivedTable& table, size_t index) {
    TensorMeta t = md_.tensors[index];
    t.fqn = out_name_[index];
    claim_name(t.fqn, index);
    if (auto m = merged_at_.find(index); m != merged_at_.end()) {
      const LoraLayer& l = *m->second;
      const TensorMeta& base = md_.tensors[index];
      const TensorMeta& a = tensor(l.a);
      const TensorMeta& b = tensor(l.b);
      const double scale = scale_of(l);
      // An Embedding's delta is (B·A)ᵀ; so is a Linear's kept [in, out] (fan_in_fan_out, GPT-2's
      // Conv1D), as check_lora found it. A square one is [out, in] unless the config says otherwise.
      const bool out_in = base.ndim() == 2 && base.shape[0] == b.shape[0] && base.shape[1] == a.shape[1];
      // A ParamWrapper's base is as find_lora fitted it ([E, out, in], or [E, in, out] transposed).
      const bool transposed =
          !l.param.empty() ? l.param_transposed
                           : l.embedding || !out_in || (config_.fan_in_fan_out() && base.shape[0] == base.shape[1]);
      std::optional<TensorMeta> magnitude;
      if (l.magnitude >= 0) magnitude = tensor(l.magnitude);
      table.tensors[t.fqn] = {std::make_shared<LoraMergedWeight>(ck_.metadata_path, base, a, b, scale, transposed,
                                                                 std::move(magnitude), l.experts, l.torchtune),
                              nullptr};
      scales_.push_back(scale);
      ++merged_;
    }
    if (auto m = merged_bias_at_.find(index); m != merged_bias_at_.end()) {
      table.tensors[t.fqn] = {std::make_shared<LoraMergedBias>(ck_.metadata_path, md_.tensors[index],
                                                               tensor(m->second->b_bias), scale_of(*m->second)),
                              nullptr};
      ++merged_biases_;
    }
    if (auto p = tune_rows_.find(index); p != tune_rows_.end())
      table.tensors[t.fqn] = {std::make_shared<LoraPermutedRows>(ck_.metadata_path, md_.tensors[index], p->second),
                              nullptr};
    view.md.order.push_back({true, static_cast<uint32_t>(view.md.tensors.size())});
    view.md.tensors.push_back(std::move(t));
  }

  // Each adapted module's rank (in the model's names), and the rank most of them have.
  void count_ranks() {
    std::map<int64_t, size_t> rank_count;
    for (const LoraLayer& l : lora_.layers)
      if (l.adapter == adapter_ && l.a >= 0 && selected(l.a)) {
        int64_t r = lora_rank(md_, l);
        ranks_.push_back({module_in_model(l.target()), r});
        ++rank_count[r];
        dora_ = dora_ || l.magnitude >= 0;
      }
    for (const auto& [rank, n] : rank_count)
      if (r_ == 0 || n > rank_count[r_]) r_ = rank;
    if (config_.json.contains("r") && config_.json["r"].is_number_integer() &&
        rank_count.count(config_.json["r"].get<int64_t>()))
      r_ = config_.json["r"].get<int64_t>();
  }

  // The adapter's config as PEFT writes it: what was given or found, completed from the shapes.
  json peft_config() const {
    json cfg = config_.json;
    if (!cfg.contains("peft_type")) cfg["peft_type"] = "LORA";
    cfg["r"] = r_;
    json pattern =
        cfg.contains("rank_pattern") && cfg["rank_pattern"].is_object() ? cfg["rank_pattern"] : json::object();
    for (const auto& [module, rank] : ranks_) {
      bool named = false;
      for (const auto& [p, v] : pattern.items()) named = named || (pattern_matches(p, module) && v == rank);
      if (rank != r_ && !named) pattern[module] = rank;
    }
    cfg["rank_pattern"] = pattern;
    if (!cfg.contains("alpha_pattern") || !cfg["alpha_pattern"].is_object()) cfg["alpha_pattern"] = json::object();
    // An entry that names no module of this adapter (a config written for another model, or by a tool
    // that keyed it by a fused shape) says nothing true of it: the folder's config leaves it out.
    for (const char* field : {"rank_pattern", "alpha_pattern"}) {
      json kept = json::object();
      for (const auto& [p, v] : cfg[field].items()) {
        bool names = false;
        for (const auto& [module, rank] : ranks_) names = names || pattern_matches(p, module);
        if (names) kept[p] = v;
      }
      cfg[field] = kept;
    }
    complete_targets(cfg);
    if (dora_) cfg["use_dora"] = true;
    if (!per_expert_at_.empty() && !merge_) per_expert_targets(cfg);
    if (!rq_.base_model.empty()) cfg["base_model_name_or_path"] = rq_.base_model;
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
    if (tune_) {
      // torchtune's converter (tune_to_peft_adapter_config) writes its config as it is: r, lora_alpha,
      // target_modules in HF's names, peft_type, base_model_name_or_path. DoRA's needs use_dora for PEFT
      // to load its magnitude vectors (torchtune 0.6.1 leaves it out).
      cfg = config_.json;
      if (dora_) cfg["use_dora"] = true;
      if (!rq_.base_model.empty()) cfg["base_model_name_or_path"] = rq_.base_model;
    }
    return cfg;
  }

  // target_modules, target_parameters and modules_to_save, where the config does not say them.
  void complete_targets(json& cfg) const {
    if (!cfg.contains("target_modules") || cfg["target_modules"].is_null())
      cfg["target_modules"] = lora_.targets(adapter_);
    if (const auto params = lora_.target_parameters(adapter_);
        !params.empty() && (!cfg.contains("target_parameters") || cfg["target_parameters"].is_null()))
      cfg["target_parameters"] = params;
    if (!cfg.contains("modules_to_save") || cfg["modules_to_save"].is_null()) {
      json saved = json::array();
      for (const LoraSavedModule& sm : lora_.saved)
        if (sm.adapter == adapter_) {
          size_t dot = sm.module.rfind('.');
          saved.push_back(dot == std::string::npos ? sm.module : sm.module.substr(dot + 1));
        }
      cfg["modules_to_save"] = saved.empty() ? json(nullptr) : saved;
    }
  }

  // vLLM's per-expert layout: the experts are modules (gate_proj, up_proj, down_proj), not parameters.
  void per_expert_targets(json& cfg) const {
    cfg.erase("target_parameters");
    if (!cfg["target_modules"].is_array()) return;
    std::set<std::string> mods;
    for (const json& m : cfg["target_modules"])
      if (m.is_string()) mods.insert(m.get<std::string>());
    for (const auto& [t, l] : per_expert_at_)
      for (const std::string& p : expert_projections(l->param)) mods.insert(p);
    cfg["target_modules"] = std::vector<std::string>(mods.begin(), mods.end());
  }

  json summary(const json& cfg) const {
    json s = {{"mode", merge_ ? "merge" : "adapter"},
              {"adapter", adapter_.empty() ? json(nullptr) : json(adapter_)},
              {"config", config_.path.empty() ? json(nullptr) : json(config_.path)},
              {"select", sel_.prefix},
              {"r", r_},
              {"lora_alpha", cfg.is_object() ? cfg.value("lora_alpha", json()) : json()},
              {"use_rslora", config_.rslora()},
              {"modules", ranks_.size()},
              {"merged", merged_}};
    if (has_experts_) {
      // The rank every expert's adapter has (r, never r·E), and how the experts are written.
      s["expert_rank"] = expert_rank_;
      s["layout"] = per_expert_at_.empty() ? "fused" : "per-expert";
    }
    if (merge_ && merged_biases_) s["merged_biases"] = merged_biases_;
    if (merge_ && has_magnitude_) s["dora"] = true;
    if (merge_ && merged_) {
      auto [lo, hi] = std::minmax_element(scales_.begin(), scales_.end());
      s["scale"] = *lo == *hi ? json(*lo) : json{{"min", *lo}, {"max", *hi}};
    }
    return s;
  }

  const Checkpoint& ck_;
  const Metadata& md_;
  const LoraRequest& rq_;
  const ModelConfig& model_;
  LoraModel lora_;
  const bool merge_;
  Selection sel_;
  std::vector<SelectedItem> items_;
  std::vector<const SelectedItem*> by_tensor_;
  std::string adapter_;
  bool tune_ = false, has_magnitude_ = false, has_bias_ = false;
  LoraConfig config_;
  std::unordered_map<size_t, const LoraLayer*> per_expert_at_;  // its A (adapter) or stack (merge) -> the layer
  int64_t expert_rank_ = 0;
  bool has_experts_ = false;
  // What each tensor becomes: dropped, renamed, or (merge) the base weight with its adapter folded in.
  std::vector<std::string> out_name_;
  std::vector<bool> keep_;
  std::unordered_map<size_t, const LoraLayer*> merged_at_;       // base tensor -> its adapter
  std::unordered_map<size_t, const LoraLayer*> merged_bias_at_;  // base bias -> its adapter (lora_bias)
  std::unordered_map<size_t, std::string> tune_names_;
  std::unordered_map<size_t, std::vector<int64_t>> tune_rows_;
  // What the view holds and the summary counts.
  std::set<std::string> names_out_;
  size_t merged_ = 0, merged_biases_ = 0;
  std::vector<double> scales_;
  std::vector<std::pair<std::string, int64_t>> ranks_;
  int64_t r_ = 0;
  bool dora_ = false;
};

}  // namespace

Checkpoint lora_view(const Checkpoint& ck, const Selection& selection, const LoraRequest& rq,
                     const ModelConfig& model) {
  return LoraViewBuilder(ck, selection, rq, model).build();
}

}  // namespace dcpctl
