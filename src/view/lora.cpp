#include "view/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "meta/derived.h"
#include "meta/pieces.h"
#include "util/error.h"
#include "util/numeric.h"
#include "view/kernels.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// A merged weight: its base chunk, and the whole A and B, merged as PEFT's merge_and_unload merges
// (view/kernels.h), in the base's dtype.
class LoraMergedWeight final : public DerivedTensor {
 public:
  LoraMergedWeight(std::string path, TensorMeta base, TensorMeta a, TensorMeta b, double scale, bool transposed)
      : path_(std::move(path)),
        w_(std::move(base)),
        a_(std::move(a)),
        b_(std::move(b)),
        scale_(scale),
        transposed_(transposed) {}
  const TensorMeta& follows() const override { return w_; }

  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const DType dt = *w_.dtype;
    const uint64_t numel = w_.chunk_numel(chunk), bytes = numel * itemsize(dt);
    if (n == UINT64_MAX) n = bytes - std::min(from, bytes);
    if (from > bytes || n > bytes - from)
      throw FormatError(Where(path_, std::nullopt, w_.fqn),
                        "chunk " + std::to_string(chunk) + ": bytes [" + std::to_string(from) + ", +" +
                            std::to_string(n) + ") asked of a chunk of " + std::to_string(bytes) + " bytes");
    if (n == 0) return;
    auto as_float = [&](const TensorMeta& t) {
      std::vector<uint8_t> raw = below.read_whole(t);
      std::vector<float> out(t.numel());
      cast_elements(*t.dtype, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(out.data()), out.size());
      return out;
    };
    // The whole chunk is computed: into dst when that is what is asked (a float32 base in place).
    std::vector<uint8_t> own(from == 0 && n == bytes ? 0 : bytes);
    uint8_t* out = own.empty() ? static_cast<uint8_t*>(dst) : own.data();
    below.read(w_, chunk, 0, bytes, out);
    std::vector<float> a = as_float(a_), b = as_float(b_);
    const DType bt = *b_.dtype;
    const DType delta = bt == DType::BFloat16 || bt == DType::Float16 ? bt : DType::Float32;
    const Box box = chunk_box(w_, chunk);
    const float scale = static_cast<float>(scale_);
    if (dt == DType::Float32) {
      add_lora_delta(reinterpret_cast<float*>(out), box, a.data(), a_.shape[1], b.data(), a_.shape[0], scale,
                     transposed_, delta);
    } else {
      std::vector<float> values(numel);
      cast_elements(dt, DType::Float32, out, reinterpret_cast<uint8_t*>(values.data()), numel);
      add_lora_delta(values.data(), box, a.data(), a_.shape[1], b.data(), a_.shape[0], scale, transposed_, delta);
      cast_elements(DType::Float32, dt, reinterpret_cast<const uint8_t*>(values.data()), out, numel);
    }
    if (!own.empty()) std::memcpy(dst, own.data() + from, n);
  }

  // A and B read whole (as saved, then as float32, with one chunk of each in flight), and the
  // chunk: its copy when a part is asked, its float32 values when the base is not float32.
  uint64_t working_bytes(size_t chunk) const override {
    const uint64_t numel = w_.chunk_numel(chunk), item = itemsize(*w_.dtype);
    auto whole = [](const TensorMeta& t) {
      uint64_t most = 0;
      for (size_t c = 0; c < t.num_chunks(); ++c) most = std::max(most, t.chunk_numel(c) * itemsize(*t.dtype));
      return t.numel() * (itemsize(*t.dtype) + 4) + most;
    };
    return whole(a_) + whole(b_) + numel * item + (*w_.dtype == DType::Float32 ? 0 : numel * 4);
  }

 private:
  std::string path_;  // the checkpoint's metadata, for messages
  TensorMeta w_, a_, b_;
  double scale_;
  bool transposed_;
};

// The prefix the LoRA keys share before `base_model.model.` ("model" for {"model": state_dict}),
// when there is one and it is the same for all; "" otherwise.
std::string common_prefix(const LoraModel& lora) {
  std::string prefix;
  for (size_t i = 0; i < lora.layers.size(); ++i) {
    const std::string& m = lora.layers[i].module;
    size_t p = peft_prefix_at(m);
    std::string mine = p == std::string::npos || p == 0 ? "" : m.substr(0, p - 1);
    if (i == 0)
      prefix = mine;
    else if (mine != prefix)
      return "";
  }
  return prefix;
}

}  // namespace

Checkpoint lora_view(const Checkpoint& ck, const Selection& selection, const LoraRequest& rq) {
  const Metadata& md = ck.md;
  if (ck.derived && ck.derived->views.contains("dequantized"))
    throw UnsupportedError(
        Where(ck.dir),
        "--lora on a dequantized view (--dtype of fp8/MXFP4 weights): export or merge the adapter without --dtype");
  LoraModel lora = find_lora(md);
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
  // DoRA, by its magnitude vectors (whatever a config says) or by its config: merging it without
  // the magnitudes would write wrong weights.
  if (merge)
    for (const LoraLayer& l : lora.layers)
      if (l.adapter == adapter && l.magnitude >= 0)
        throw UnsupportedError(Where(ck.metadata_path, std::nullopt, md.tensors[static_cast<size_t>(l.magnitude)].fqn),
                               "the adapter is DoRA (a lora_magnitude_vector): dcpctl merges plain LoRA and rsLoRA; "
                               "export it with --lora adapter and merge it with PEFT");
  LoraConfig config = find_lora_config(ck, rq, adapter);
  if (const std::string variant = config.variant(); merge && !variant.empty())
    throw UnsupportedError(Where(config.path.empty() ? ck.dir : config.path),
                           "the adapter is " + variant +
                               ", whose merge is not W + s*B*A: dcpctl merges plain LoRA and rsLoRA; "
                               "export it with --lora adapter and merge it with PEFT");

  // What each tensor becomes: dropped, renamed, or (merge) the base weight with its adapter folded in.
  std::vector<std::string> out_name(md.tensors.size());
  std::vector<bool> keep(md.tensors.size(), false);
  std::unordered_map<size_t, const LoraLayer*> merged_at;  // base tensor -> its adapter
  auto peft_key = [&](size_t ti) {                         // the output key of a kept adapter tensor
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
          if (t >= 0 && by_tensor[static_cast<size_t>(t)])
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
                         "--lora merge needs the base layer '" + l.module +
                             ".base_layer.weight' in the selection; this checkpoint holds the adapter " +
                             "only: export it with --lora adapter, or merge it with the base model in PEFT");
      if (l.b_bias >= 0)
        throw UnsupportedError(
            Where(ck.metadata_path, std::nullopt, md.tensors[static_cast<size_t>(l.b_bias)].fqn),
            "a LoRA bias (lora_bias=True): dcpctl merges adapters without one; export it with --lora adapter");
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
  size_t merged = 0;
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
      const int64_t r = a.shape[0];
      const double alpha = config.alpha(module_in_model(l.module));
      const double scale = config.rslora() ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
      // An Embedding's delta is (B·A)ᵀ; so is a Linear's kept [in, out] (fan_in_fan_out, GPT-2's
      // Conv1D), as check_lora found it. A square one is [out, in] unless the config says otherwise.
      const bool out_in = base.shape[0] == b.shape[0] && base.shape[1] == a.shape[1];
      const bool transposed = l.embedding || !out_in || (config.fan_in_fan_out() && base.shape[0] == base.shape[1]);
      table->tensors[t.fqn] = {std::make_shared<LoraMergedWeight>(ck.metadata_path, base, a, b, scale, transposed),
                               nullptr};
      scales.push_back(scale);
      ++merged;
    }
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
      ranks.push_back({module_in_model(l.module), r});
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
  if (!cfg.contains("alpha_pattern")) cfg["alpha_pattern"] = json::object();
  if (!cfg.contains("target_modules") || cfg["target_modules"].is_null()) cfg["target_modules"] = lora.targets(adapter);
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
  if (!merge) table->output["adapter_config"] = cfg;
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
  if (merge && merged) {
    auto [lo, hi] = std::minmax_element(scales.begin(), scales.end());
    summary["scale"] = *lo == *hi ? json(*lo) : json{{"min", *lo}, {"max", *hi}};
  }
  view.derived = std::move(table);
  return view;
}

}  // namespace dcpctl
