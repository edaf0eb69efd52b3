#include "meta/lora_keys.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <unordered_map>

#include "meta/checkpoint.h"
#include "meta/geometry.h"
#include "util/error.h"

namespace dcpctl {

using nlohmann::json;

static std::vector<std::string_view> split_key(std::string_view key) {
  std::vector<std::string_view> out;
  for (size_t a = 0;;) {
    size_t b = key.find('.', a);
    out.push_back(key.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
    if (b == std::string_view::npos) return out;
    a = b + 1;
  }
}

static std::string join_segments(const std::vector<std::string_view>& s, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to; ++i) {
    if (i > from) out += '.';
    out += s[i];
  }
  return out;
}

// Where PEFT's `base_model.model.` starts in `key` (at a segment boundary), or npos.
size_t peft_prefix_at(std::string_view key) {
  for (size_t p = key.find(kPeftPrefix); p != std::string_view::npos; p = key.find(kPeftPrefix, p + 1))
    if (p == 0 || key[p - 1] == '.') return p;
  return std::string_view::npos;
}

// The module's key under the PeftModel's base model ("model.layers.0.self_attn.q_proj"): what
// PEFT's rank_pattern / alpha_pattern are matched against.
std::string module_in_model(const std::string& module) {
  size_t p = peft_prefix_at(module);
  return p == std::string::npos ? module : module.substr(p + kPeftPrefix.size());
}

// PEFT's _remove_adapter_name_from_state_dict_key: `.NAME` at the end (a Parameter) or as the
// second to last part (a Module's parameter); then LoRA's DoRA rename
// (lora_magnitude_vector.NAME.weight is saved as lora_magnitude_vector).
std::string peft_saved_key(const std::string& key, const std::string& adapter) {
  if (adapter.empty()) return key;
  std::string k = key;
  if (k.size() > adapter.size() + 1 &&
      k.compare(k.size() - adapter.size() - 1, std::string::npos, "." + adapter) == 0) {
    k.resize(k.size() - adapter.size() - 1);
    return k;
  }
  size_t last = k.rfind('.');
  if (last != std::string::npos && last > adapter.size() &&
      k.compare(last - adapter.size() - 1, adapter.size() + 1, "." + adapter) == 0)
    k.erase(last - adapter.size() - 1, adapter.size() + 1);
  const std::string dora = "lora_magnitude_vector.weight";
  if (k.size() >= dora.size() && k.compare(k.size() - dora.size(), std::string::npos, dora) == 0)
    k.resize(k.size() - 7);
  return k;
}

static constexpr std::string_view kWrapper = ".base_layer";

// A ParamWrapper's module without its `.base_layer` wrappers ("…mlp.experts.base_layer" ->
// "…mlp.experts"), and how many it had.
static std::string unwrapped(std::string m, int* depth = nullptr) {
  int k = 0;
  while (m.size() > kWrapper.size() && m.compare(m.size() - kWrapper.size(), std::string::npos, kWrapper) == 0)
    m.resize(m.size() - kWrapper.size()), ++k;
  if (depth) *depth = k;
  return m;
}

static std::string last_part(const std::string& key) {
  size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

std::string LoraLayer::target() const {
  return wrapper ? unwrapped(module) + (param.empty() ? "" : "." + param) : module;
}

std::vector<std::string> LoraModel::targets(const std::string& adapter) const {
  std::set<std::string> out;
  for (const LoraLayer& l : layers)
    if (l.adapter == adapter && !l.wrapper) out.insert(last_part(l.module));
  return {out.begin(), out.end()};
}

std::vector<std::string> LoraModel::target_parameters(const std::string& adapter) const {
  std::set<std::string> out;
  for (const LoraLayer& l : layers)
    if (l.adapter == adapter && l.wrapper && !l.param.empty())
      out.insert(last_part(unwrapped(l.module)) + "." + l.param);
  return {out.begin(), out.end()};
}

// PEFT's ParamWrappers (target_parameters): a layer whose module is wrapped (ends in `.base_layer`)
// or wraps another layer is one; its base is one of the parameters `R.base_layer.….base_layer.P`
// of its unwrapped module R, at the deepest nesting. The innermost wrapper adapts the parameter
// registered first (PEFT wraps a module's parameters in named_parameters order, each wrapper around
// the one before): the wrapper k levels from the outside adapts the (n-1-k)th of the n parameters
// in the saved order, when its A and B fit it; else the only one they fit.
static void find_param_bases(const Metadata& md, LoraModel& m) {
  std::set<std::pair<std::string, std::string>> modules;
  for (const LoraLayer& l : m.layers) modules.insert({l.module, l.adapter});
  std::map<std::string, std::vector<std::pair<int, int>>> wrapped;  // R -> (depth, tensor), saved order
  for (size_t i = 0; i < md.tensors.size(); ++i) {
    const std::string& k = md.tensors[i].fqn;
    size_t q = k.find(".base_layer.");
    if (q == std::string::npos) continue;
    size_t at = q + 1;
    int depth = 0;
    while (k.compare(at, 11, "base_layer.") == 0) at += 11, ++depth;
    if (k.find('.', at) == std::string::npos) wrapped[k.substr(0, q)].push_back({depth, static_cast<int>(i)});
  }
  for (LoraLayer& l : m.layers) {
    int k = 0;
    const std::string root = unwrapped(l.module, &k);
    l.wrapper = k > 0 || modules.count({l.module + std::string(kWrapper), l.adapter});
    if (!l.wrapper || l.base >= 0 || l.a < 0 || l.b < 0 || l.embedding) continue;
    auto it = wrapped.find(root);
    if (it == wrapped.end()) continue;
    int n = 0;
    for (const auto& [d, t] : it->second) n = std::max(n, d);
    std::vector<int> params;
    for (const auto& [d, t] : it->second)
      if (d == n) params.push_back(t);
    const TensorMeta& a = md.tensors[static_cast<size_t>(l.a)];
    const TensorMeta& b = md.tensors[static_cast<size_t>(l.b)];
    // 0: A and B do not fit; 1: [E, out, in] (or [out, in]); 2: [E, in, out].
    auto fit = [&](int t) {
      const TensorMeta& w = md.tensors[static_cast<size_t>(t)];
      if (a.ndim() != 2 || b.ndim() != 2 || a.shape[0] != b.shape[1]) return 0;
      if (w.ndim() == 2) return w.shape[0] == b.shape[0] && w.shape[1] == a.shape[1] ? 1 : 0;
      if (w.ndim() != 3 || w.shape[0] <= 0 || a.shape[0] % w.shape[0] != 0) return 0;
      if (w.shape[1] == b.shape[0] && w.shape[2] == a.shape[1]) return 1;
      return w.shape[1] == a.shape[1] && w.shape[2] == b.shape[0] ? 2 : 0;
    };
    int chosen = -1, how = 0;
    const int want = n - 1 - k;
    if (want >= 0 && static_cast<size_t>(want) < params.size() && (how = fit(params[static_cast<size_t>(want)])))
      chosen = params[static_cast<size_t>(want)];
    else
      for (int t : params)
        if (int f = fit(t)) {
          if (chosen >= 0) {
            chosen = -1;
            break;
          }
          chosen = t, how = f;
        }
    if (chosen < 0) continue;
    const TensorMeta& w = md.tensors[static_cast<size_t>(chosen)];
    l.base = chosen;
    l.param = last_part(w.fqn);
    l.experts = w.ndim() == 3 ? w.shape[0] : 0;
    l.param_transposed = how == 2;
  }
}

namespace {

// The adapters of a checkpoint found from its keys alone: each key's parts read from the left
// until one names what the key is (a PEFT or torchtune adapter's tensor, a saved module, an
// original module), then the wrappers' bases placed.
class LoraFinder {
 public:
  explicit LoraFinder(const Metadata& md) : md_(md) {
    by_name_.reserve(md.tensors.size());
    for (size_t i = 0; i < md.tensors.size(); ++i) by_name_.emplace(md.tensors[i].fqn, static_cast<int>(i));
  }

  LoraModel find() {
    find_bridge();
    for (size_t i = 0; i < md_.tensors.size(); ++i) {
      const std::vector<std::string_view> s = split_key(md_.tensors[i].fqn);
      for (size_t k = 1; k < s.size(); ++k)
        if (read_part(s, k, static_cast<int>(i))) break;
    }
    // A `magnitude` with no lora_a/lora_b beside it is no torchtune adapter.
    m_.layers.erase(std::remove_if(m_.layers.begin(), m_.layers.end(),
                                   [](const LoraLayer& l) { return l.torchtune && l.a < 0 && l.b < 0; }),
                    m_.layers.end());
    for (const LoraLayer& l : m_.layers)
      if (l.torchtune) adapter_seen("");
    find_param_bases(md_, m_);
    return std::move(m_);
  }

 private:
  void adapter_seen(const std::string& a) {
    if (std::find(m_.adapters.begin(), m_.adapters.end(), a) == m_.adapters.end()) m_.adapters.push_back(a);
  }

  // The layer of (module, adapter), made on first sight with its base: PEFT's M.base_layer.weight
  // (and .bias), torchtune's M.weight.
  LoraLayer& layer_at(const std::string& module, const std::string& adapter, bool tune) {
    auto [it, fresh] = layer_of_.emplace(std::make_pair(module, adapter), m_.layers.size());
    if (fresh) {
      LoraLayer l;
      l.module = module;
      l.adapter = adapter;
      l.torchtune = tune;
      const std::string base = module + (tune ? ".weight" : ".base_layer.weight"), bias = module + ".base_layer.bias";
      if (auto b = by_name_.find(base); b != by_name_.end()) l.base = b->second;
      if (auto b = by_name_.find(bias); !tune && b != by_name_.end()) l.base_bias = b->second;
      m_.layers.push_back(std::move(l));
    }
    return m_.layers[it->second];
  }

  // Megatron-Bridge's adapters (LoraForeign): recognised, named, never taken for PEFT's.
  void find_bridge() {
    static const std::regex bridge(R"(^(.*)\.(adapter(?:_[a-z]+)?)\.linear_(in|out)\.weight$)");
    std::set<std::string> seen;
    for (const TensorMeta& t : md_.tensors) {
      std::smatch mt;
      if (!std::regex_match(t.fqn, mt, bridge)) continue;
      if (m_.foreign.empty()) m_.foreign.push_back({"megatron-bridge", t.fqn, {}, {}, 0});
      LoraForeign& f = m_.foreign.front();
      const std::string module = mt[1].str();
      if (seen.insert(module + "." + mt[2].str()).second) ++f.modules;
      f.targets.insert(module.substr(module.rfind('.') + 1));
      if (mt[3] == "in" && !t.shape.empty()) f.ranks.insert(t.shape[0]);
    }
  }

  // Part k of tensor i's key s. True: the key is settled there (taken, or no adapter's after all);
  // false: read on.
  bool read_part(const std::vector<std::string_view>& s, size_t k, int i) {
    const std::string_view part = s[k];
    const size_t rest = s.size() - k - 1;
    // A module's parameter ends in weight or bias (an optimizer's state of it goes on: .exp_avg).
    const bool param = s.back() == "weight" || s.back() == "bias";
    if (part == "modules_to_save" && rest >= 2 && param) {
      auto key = std::make_pair(join_segments(s, 0, k), std::string(s[k + 1]));
      auto [it, fresh] = saved_of_.emplace(key, m_.saved.size());
      if (fresh) m_.saved.push_back({key.first, key.second, {}});
      m_.saved[it->second].tensors.push_back(i);
      adapter_seen(key.second);
      return true;
    }
    if (part == "original_module" && rest >= 1 && param) {
      m_.originals.push_back(i);
      return true;
    }
    // torchtune's LoRALinear / DoRALinear (view/lora/lora_torchtune.h): M.lora_a.weight, M.lora_b.weight,
    // M.magnitude, the base M.weight; no adapter name.
    const bool tune_ab = (part == "lora_a" || part == "lora_b") && rest == 1 && s[k + 1] == "weight";
    if (tune_ab || (part == "magnitude" && rest == 0)) {
      LoraLayer& l = layer_at(join_segments(s, 0, k), "", true);
      (tune_ab ? (part == "lora_a" ? l.a : l.b) : l.magnitude) = i;
      return true;
    }
    const bool linear = part == "lora_A" || part == "lora_B",
               emb = part == "lora_embedding_A" || part == "lora_embedding_B", mag = part == "lora_magnitude_vector";
    if (!linear && !emb && !mag) return false;
    std::string adapter;
    bool bias = false;
    if (!peft_adapter(s, k, linear, emb, adapter, bias)) return true;
    LoraLayer& l = layer_at(join_segments(s, 0, k), adapter, false);
    if (mag)
      l.magnitude = i;
    else if (bias)
      l.b_bias = part == "lora_B" ? i : l.b_bias;
    else if (part == "lora_A" || part == "lora_embedding_A")
      l.a = i;
    else
      l.b = i;
    if (emb) l.embedding = true;
    adapter_seen(adapter);
    return true;
  }

  // A PEFT adapter's part at k (lora_A/B, lora_embedding_A/B, else lora_magnitude_vector): the
  // adapter's name, and whether this is a bias. False: the parts after it are no adapter's.
  static bool peft_adapter(const std::vector<std::string_view>& s, size_t k, bool linear, bool emb,
                           std::string& adapter, bool& bias) {
    const size_t rest = s.size() - k - 1;
    if (linear) {
      if (rest == 2 && (s[k + 2] == "weight" || s[k + 2] == "bias"))
        adapter = s[k + 1], bias = s[k + 2] == "bias";
      else if (rest == 1 && (s[k + 1] == "weight" || s[k + 1] == "bias"))
        bias = s[k + 1] == "bias";
      else
        return false;
    } else if (emb) {
      if (rest == 1)
        adapter = s[k + 1];
      else if (rest != 0)
        return false;
    } else {
      if (rest == 2 && s[k + 2] == "weight")
        adapter = s[k + 1];
      else if (rest == 1)
        adapter = s[k + 1];
      else if (rest != 0)
        return false;
    }
    return true;
  }

  const Metadata& md_;
  LoraModel m_;
  std::unordered_map<std::string_view, int> by_name_;
  std::map<std::pair<std::string, std::string>, size_t> layer_of_;
  std::map<std::pair<std::string, std::string>, size_t> saved_of_;
};

}  // namespace

LoraModel find_lora(const Metadata& md) {
  return LoraFinder(md).find();
}

int64_t lora_rank(const Metadata& md, const LoraLayer& l) {
  if (l.a < 0 || md.tensors[static_cast<size_t>(l.a)].ndim() != 2) return 0;
  const int64_t rows = md.tensors[static_cast<size_t>(l.a)].shape[0];
  return l.experts > 0 ? rows / l.experts : rows;
}

json LoraModel::describe(const Metadata& md) const {
  json adapters = json::array();
  bool base = false;
  for (const std::string& name : this->adapters) {
    std::set<int64_t> ranks;
    size_t modules = 0;
    bool emb = false, dora = false, bias = false, wrappers = false, tune = false;
    std::set<int64_t> experts;
    for (const LoraLayer& l : layers) {
      if (l.adapter != name) continue;
      ++modules;
      ranks.insert(lora_rank(md, l));
      wrappers = wrappers || l.wrapper;
      tune = tune || l.torchtune;
      if (l.experts > 0) experts.insert(l.experts);
      emb = emb || l.embedding;
      dora = dora || l.magnitude >= 0;
      bias = bias || l.b_bias >= 0;
      base = base || l.base >= 0;
    }
    json saved_modules = json::array();
    for (const LoraSavedModule& s : saved)
      if (s.adapter == name) saved_modules.push_back(s.module);
    adapters.push_back({{"name", name.empty() ? json(nullptr) : json(name)},
                        {"modules", modules},
                        {"targets", targets(name)},
                        {"ranks", std::vector<int64_t>(ranks.begin(), ranks.end())},
                        {"embedding", emb},
                        {"dora", dora},
                        {"layout", tune       ? "torchtune"
                                   : dora     ? "dora"
                                   : wrappers ? "peft-parameter"
                                              : "peft-linear"},
                        {"lora_bias", bias},
                        {"modules_to_save", saved_modules}});
    adapters.back()["target_parameters"] = target_parameters(name);
    adapters.back()["experts"] = std::vector<int64_t>(experts.begin(), experts.end());
  }
  for (const LoraForeign& f : foreign) {
    adapters.push_back({{"name", nullptr},
                        {"modules", f.modules},
                        {"targets", std::vector<std::string>(f.targets.begin(), f.targets.end())},
                        {"ranks", std::vector<int64_t>(f.ranks.begin(), f.ranks.end())},
                        {"embedding", false},
                        {"dora", false},
                        {"layout", f.layout},
                        {"lora_bias", false},
                        {"modules_to_save", json::array()},
                        {"target_parameters", json::array()},
                        {"experts", json::array()}});
  }
  if (layers.empty())
    return {{"adapters", adapters},
            {"base_model", false},
            {"hint", "Megatron-Bridge's LoRA (adapter.linear_in / linear_out, as " + foreign.front().example +
                         "; also verl's Megatron backend): dcpctl does not export or merge it (--lora adapter and "
                         "merge exit 5); Megatron-Bridge's own export writes a PEFT adapter"}};
  std::string hint =
      "consolidate --lora adapter -o DIR/ writes a PEFT adapter folder (adapter_model.safetensors, "
      "adapter_config.json)";
  if (base) hint += "; --lora merge writes the base model with the adapter folded in";
  if (this->adapters.size() > 1) hint += "; --lora-name NAME picks the adapter";
  return {{"adapters", adapters}, {"base_model", base}, {"hint", hint}};
}

Findings check_lora(const Metadata& md, const LoraModel& lora) {
  Findings out;
  auto problem = [&](int ti, const std::string& msg) {
    out.push_back({"lora-shape", Where(md.source, std::nullopt, md.tensors[static_cast<size_t>(ti)].fqn), msg});
  };
  for (const LoraLayer& l : lora.layers) {
    if (l.a < 0 || l.b < 0) {
      int have = l.a >= 0 ? l.a : l.b >= 0 ? l.b : l.magnitude;
      if (have >= 0)
        problem(have,
                std::string("LoRA ") + (l.a < 0 ? "B" : "A") + " without its " + (l.a < 0 ? "A" : "B") + " beside it");
      continue;
    }
    const TensorMeta& a = md.tensors[static_cast<size_t>(l.a)];
    const TensorMeta& b = md.tensors[static_cast<size_t>(l.b)];
    if (a.ndim() != 2 || b.ndim() != 2) {
      problem(a.ndim() != 2 ? l.a : l.b,
              "a LoRA matrix of shape " + dims_text(a.ndim() != 2 ? a.shape : b.shape) + ": LoRA's A and B are 2-D");
      continue;
    }
    // A [r, in] and B [out, r]; an Embedding's A [r, num] and B [dim, r].
    if (a.shape[0] != b.shape[1]) {
      problem(l.b, "rank " + std::to_string(b.shape[1]) + " (shape " + dims_text(b.shape) + ") but its A, '" + a.fqn +
                       "', has rank " + std::to_string(a.shape[0]) + " (shape " + dims_text(a.shape) +
                       "): one of them is a slice of the adapter (a sharded save that kept one rank's part?)");
      continue;
    }
    if (l.base >= 0 && l.param.empty()) {  // a ParamWrapper's base was chosen by its fit
      const TensorMeta& w = md.tensors[static_cast<size_t>(l.base)];
      // The base's [out, in] (an Embedding's [num, dim]); fan_in_fan_out (GPT-2's Conv1D) keeps [in, out].
      int64_t rows = l.embedding ? a.shape[1] : b.shape[0], cols = l.embedding ? b.shape[0] : a.shape[1];
      bool fits = w.ndim() == 2 && ((w.shape[0] == rows && w.shape[1] == cols) ||
                                    (!l.embedding && w.shape[0] == cols && w.shape[1] == rows));
      if (!fits)
        problem(
            w.shape.size() == 2 && w.shape[0] != rows && w.shape[1] != rows ? l.b : l.a,
            "the adapter's " + std::string(l.embedding ? "[num_embeddings, embedding_dim]" : "[out, in]") + " is [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "] (A " + dims_text(a.shape) + ", B " +
                dims_text(b.shape) + ") but its base layer '" + w.fqn + "' is " + dims_text(w.shape) +
                ": the adapter is a slice of what the base layer needs (a sharded save that kept one rank's part?)");
    }
    if (l.magnitude >= 0) {
      const TensorMeta& m = md.tensors[static_cast<size_t>(l.magnitude)];
      const int64_t out_features = b.shape[0];  // an Embedding's: its embedding_dim
      if (m.ndim() != 1 || m.shape[0] != out_features)
        problem(l.magnitude, "DoRA's magnitude vector is " + dims_text(m.shape) + "; its layer has " +
                                 std::to_string(out_features) + " output features");
    }
  }
  return out;
}

}  // namespace dcpctl
