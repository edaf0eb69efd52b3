#include "check/hf_config_checks.h"

#include "check/hf_schema.h"
#include "view/maps/keymap_terms.h"
#include "view/moe_sparsity.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>
#include <set>

#include "meta/codecs/codecs.h"
#include "meta/keep_dtype_entry.h"

namespace dcpctl {

using nlohmann::json;

namespace hf_config_impl {

// The spellings of each field, canonical first (transformers' attribute_map of the configs that
// use them).
const std::vector<std::string> kLayers = {"num_hidden_layers", "n_layer", "num_layers", "n_layers"};
const std::vector<std::string>& kExperts = kExpertCountFields;
const std::vector<std::string> kNextn = {"num_nextn_predict_layers", "mtp_num_hidden_layers"};
const std::vector<std::string> kVocab = {"vocab_size", "n_vocab"};

class HfConfigView {
 public:
  explicit HfConfigView(const json& c)
      : top_(c), text_(c.contains("text_config") && c["text_config"].is_object() ? &c["text_config"] : nullptr) {}
  // Each name as written, then as the object's model_type's attribute_map spells it (both ways:
  // transformers reads `num_experts` of qwen3_moe as its `num_local_experts`).
  const json* find(const std::vector<std::string>& names) const {
    for (const json* j : {text_, &top_})
      if (j) {
        for (const auto& n : names)
          if (j->contains(n) && !(*j)[n].is_null()) return &(*j)[n];
        const json& amap = config_aliases(j->value("model_type", top_.value("model_type", std::string())));
        if (amap.is_object())
          for (const auto& n : names)
            for (const auto& [alias, real] : amap.items()) {
              const std::string other = alias == n && real.is_string() ? real.get<std::string>()
                                        : real == n                    ? alias
                                                                       : "";
              // One stack's count (BART's encoder_layers) is not the stack these checks compare.
              if (other.find("encoder") != std::string::npos || other.find("decoder") != std::string::npos) continue;
              if (!other.empty() && j->contains(other) && !(*j)[other].is_null()) return &(*j)[other];
            }
      }
    return nullptr;
  }
  std::optional<int64_t> integer(const std::vector<std::string>& names) const {
    const json* v = find(names);
    if (!v || !v->is_number_integer() || v->get<int64_t>() < 0) return std::nullopt;
    return v->get<int64_t>();
  }
  // The top level first: transformers ties a composite model's head by its top-level flag.
  std::optional<bool> tie() const {
    for (const json* j : {&top_, text_})
      if (j && j->contains("tie_word_embeddings") && (*j)["tie_word_embeddings"].is_boolean())
        return (*j)["tie_word_embeddings"].get<bool>();
    return std::nullopt;
  }
  std::optional<std::string> string(const std::vector<std::string>& names) const {
    const json* v = find(names);
    return v && v->is_string() ? std::optional<std::string>(v->get<std::string>()) : std::nullopt;
  }
  const json* object(const std::string& name) const {
    const json* v = find({name});
    return v && v->is_object() ? v : nullptr;
  }

 private:
  const json& top_;
  const json* text_;
};

bool float_dtype_name(const std::string& d) {
  return d == "float16" || d == "bfloat16" || d == "float32" || d == "float64";
}
// A quantized weight's dtype (torch's name): a codec's whose weight keeps its own name
// (meta/codecs/codecs.h: fp8-block's float8 types, F4's float4_e2m1fn_x2), or, as a safetensors
// header or a newer torch may spell one dcpctl has no dtype for, another float8 but the E8M0 scale
// type, F4 and the F6 types (no codec reads those yet).
bool quantized_dtype(const std::string& d) {
  for (const Codec* c : codecs())
    if (!*c->weight_suffix)
      for (const CodecRow& r : c->rows)
        if (d == torch_name(r.weight)) return true;
  return (d.rfind("float8_", 0) == 0 && d != "float8_e8m0fnu") || d == "F4" || d == "F6_E2M3" || d == "F6_E3M2";
}
// compressed-tensors' packed weight and its scale (no codec reads them yet): `X.weight_packed`
// beside `X.weight_scale`.
constexpr const char* kPacked = ".weight_packed";
bool key_ends(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

std::string list_indices(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < 16; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > 16) out += ", ... (" + std::to_string(v.size()) + " in all)";
  return out;
}

// transformers' should_convert_module and compressed-tensors' `ignore`: "re:" patterns match the
// module's name from its start; a plain name matches the module or any module it is a part of.
bool excluded(const std::string& module, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (p.rfind("re:", 0) == 0) {
      try {
        if (std::regex_search(module, std::regex("^(?:" + p.substr(3) + ")"))) return true;
      } catch (const std::regex_error&) {
      }
    } else if (!p.empty() && (module + ".").find(p + ".") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// Tensors a model keeps in float32 whatever its dtype (transformers' _keep_in_fp32_modules and
// what releases store so), and quantization scales, which have dtypes of their own: the codecs'
// (meta/codecs/codecs.h) and those of formats no codec reads yet (ModelOpt's, the KV cache's).
bool own_dtype(const std::string& key) {
  for (const Codec* c : codecs())
    if (key_ends(key, c->scale_suffix)) return true;
  static const char* kSuffixes[] = {"e_score_correction_bias",
                                    "expert_bias",  // a router's (LFM2-MoE, HY-V3, Megatron): loaders keep it float32
                                    ".A_log",
                                    ".dt_bias",
                                    ".D",
                                    "_scale_2",
                                    "global_scale",
                                    "input_scale",
                                    ".k_scale",
                                    ".v_scale"};
  for (const char* s : kSuffixes)
    if (key_ends(key, s)) return true;
  return false;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

std::string dims(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The formats a quantization_config names: compressed-tensors' top-level and per-group `format`s,
// ModelOpt's quant_algo.
std::set<std::string> quant_formats(const json& qc) {
  std::set<std::string> out;
  const std::string method = qc.value("quant_method", "");
  if (method == "compressed-tensors") {
    if (qc.contains("format") && qc["format"].is_string()) out.insert(qc["format"].get<std::string>());
    if (qc.contains("config_groups") && qc["config_groups"].is_object())
      for (const auto& [name, g] : qc["config_groups"].items())
        if (g.is_object() && g.contains("format") && g["format"].is_string())
          out.insert(g["format"].get<std::string>());
  } else if (method == "modelopt" && qc.contains("quant_algo") && qc["quant_algo"].is_string()) {
    out.insert(qc["quant_algo"].get<std::string>());
  }
  return out;
}

using Problem = std::function<void(const char*, const std::string&, const std::string&)>;

// The scales of each quantized weight against it, by the codec the quantization_config names
// (check_hf_config's comment in the header lists the codes); the global scales read through
// `read_scalar`, four bytes each.
class ScaleChecker {
 public:
  ScaleChecker(const json& qc, const std::map<std::string, const HfTensor*>& by_key, const Problem& problem,
               const Problem& warning)
      : qc_(qc),
        by_key_(by_key),
        problem_(problem),
        warning_(warning),
        method_(qc.value("quant_method", "")),
        formats_(quant_formats(qc)) {}

  void check_shapes() {
    for (const auto& [k, tp] : by_key_) {
      const HfTensor& w = *tp;
      const std::string module = k.substr(0, k.rfind('.'));
      if (method_ == "modelopt" && key_ends(k, ".weight") && at(module + ".weight_scale") && w.shape.size() == 2)
        check_modelopt(k, w, module);
      else if (method_ == "compressed-tensors" && w.shape.size() == 2)
        check_compressed_tensors(k, w, module);
      else if (method_ == "fp8" && key_ends(k, ".weight") && w.dtype.rfind("float8_", 0) == 0 && w.shape.size() == 2)
        check_fp8_blocks(k, w);
    }
  }

  // The direction: compressed-tensors stores 2688 / amax (above 1 for weights whose largest |w| is
  // below 2688, as Linear weights' are), ModelOpt amax / 2688 (below 1); the reciprocal decodes
  // every weight amax² / 2688² times too large or small. Then one value a fused group.
  void check_global_values(const ReadScalar& read_scalar) {
    if (!read_scalar || globals_.empty()) return;
    const bool ct = method_ == "compressed-tensors";
    std::map<std::string, std::vector<std::pair<std::string, double>>> groups;
    for (const auto& [weight, key] : globals_) {
      const std::optional<double> v = read_scalar(key);
      if (!v) continue;
      if (ct ? *v < 1 : *v > 1)
        problem_("quant-global-scale-inverted", key,
                 std::string(ct ? "compressed-tensors' weight_global_scale is 2688 / amax"
                                : "ModelOpt's weight_scale_2 is amax / 2688") +
                     ", but " + num(*v) + " decodes " + weight + " to magnitudes up to about " +
                     num(ct ? 2688 / *v : 2688 * *v) + ": the reciprocal of what the format stores?");
      groups[fused_group(weight)].push_back({key, *v});
    }
    for (const auto& [group, members] : groups) check_fused_group(group, members);
  }

 private:
  bool has(const char* f) const { return formats_.count(f) > 0; }
  // ModelOpt's quant_algo for `module`: a MIXED_PRECISION config's for that layer.
  bool has_at(const std::string& module, const char* f) const {
    return has("MIXED_PRECISION") ? modelopt_layer_algo(qc_, module) == f : has(f);
  }
  const HfTensor* at(const std::string& k) const {
    auto it = by_key_.find(k);
    return it == by_key_.end() ? nullptr : it->second;
  }
  static bool scalar(const HfTensor& t) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    return t.dtype == "float32" && n == 1 && t.shape.size() <= 1;
  }

  // `scale` of `weight`, which must be there in `dtype` with `shape`.
  void expect(const std::string& weight, const std::string& scale, const std::string& dtype,
              const std::vector<int64_t>& shape, const std::string& what) {
    const HfTensor* s = at(scale);
    const HfTensor& w = *at(weight);
    if (!s) {
      problem_("quant-scale-missing", weight,
               "a " + what + " weight (" + w.dtype + " " + dims(w.shape) + ") without its " +
                   scale.substr(scale.rfind('.') + 1) + " (" + scale + ")");
      return;
    }
    if (s->dtype != dtype || s->shape != shape)
      problem_("quant-scale-shape", scale,
               s->dtype + " " + dims(s->shape) + " is not the scale of " + what + " weight " + weight + " (" + w.dtype +
                   " " + dims(w.shape) + "): " + dtype + " " + dims(shape) + " expected");
  }

  // A global scale `name` beside `weight`: one float32, its value checked by check_global_values.
  void global(const std::string& weight, const std::string& name, const std::string& what) {
    const HfTensor& w = *at(weight);
    const std::string module = weight.substr(0, weight.rfind('.'));
    const HfTensor* g = at(module + "." + name);
    if (!g) {
      problem_("quant-scale-missing", weight,
               "a " + what + " weight (" + w.dtype + " " + dims(w.shape) + ") without its " + name + " (" + module +
                   "." + name + ")");
      return;
    }
    if (!scalar(*g))
      problem_("quant-scale-shape", g->key,
               g->dtype + " " + dims(g->shape) + " is not the global scale of " + what + " weight " + weight +
                   ": one float32 expected");
    else
      globals_.push_back({module + ".weight", g->key});
  }

  void check_modelopt(const std::string& k, const HfTensor& w, const std::string& module) {
    const int64_t N = w.shape[0];
    if ((has_at(module, "NVFP4") || has_at(module, "W4A16_NVFP4")) && w.dtype == "uint8") {
      const int64_t K = w.shape[1] * 2;
      expect(k, module + ".weight_scale", "float8_e4m3fn", {N, K / 16}, "ModelOpt NVFP4");
      global(k, "weight_scale_2", "ModelOpt NVFP4");
      if (has_at(module, "NVFP4") && !at(module + ".input_scale"))
        problem_("quant-scale-missing", k,
                 "a ModelOpt NVFP4 weight without its input_scale (" + module +
                     ".input_scale): quant_algo NVFP4 quantizes the activations with it (W4A16_NVFP4 needs none)");
    } else if (has_at(module, "MXFP8") && w.dtype == "float8_e4m3fn") {
      expect(k, module + ".weight_scale", "uint8", {N, w.shape[1] / 32}, "ModelOpt MXFP8");
    } else if ((has_at(module, "fp8_pb_wo") || has_at(module, "FP8_PB_WO")) && w.dtype == "float8_e4m3fn") {
      // one float32 a 128x128 block: [rb, 1, cb, 1] as the export writes it, or [rb, cb]
      const int64_t rb = (N + 127) / 128, cb = (w.shape[1] + 127) / 128;
      const HfTensor* s = at(module + ".weight_scale");
      if (!(s && s->dtype == "float32" && s->shape == std::vector<int64_t>{rb, cb}))
        expect(k, module + ".weight_scale", "float32", {rb, 1, cb, 1}, "ModelOpt FP8_PB_WO");
    } else if (has_at(module, "FP8") && w.dtype == "float8_e4m3fn") {
      const HfTensor& s = *at(module + ".weight_scale");
      if (!scalar(s))
        problem_(
            "quant-scale-shape", s.key,
            s.dtype + " " + dims(s.shape) + " is not the scale of ModelOpt FP8 weight " + k + ": one float32 expected");
      if (!at(module + ".input_scale"))
        problem_("quant-scale-missing", k,
                 "a ModelOpt FP8 weight without its input_scale (" + module +
                     ".input_scale): quant_algo FP8 quantizes the activations with it");
    }
  }

  void check_compressed_tensors(const std::string& k, const HfTensor& w, const std::string& module) {
    const int64_t N = w.shape[0];
    const bool nv = has("nvfp4-pack-quantized"), mx4 = has("mxfp4-pack-quantized"), mx6 = has("mxfp6-pack-quantized");
    if (key_ends(k, ".weight_packed") && w.dtype == "uint8" && mx6 && !nv && !mx4) {
      // four E2M3 codes in three bytes: [N, 3 K / 4]
      if (w.shape[1] % 3)
        problem_("quant-scale-shape", k,
                 "uint8 " + dims(w.shape) +
                     " is not a compressed-tensors MXFP6 weight_packed: four E2M3 codes in three bytes, its columns a "
                     "multiple of 3");
      else
        expect(k, module + ".weight_scale", "uint8", {N, w.shape[1] / 3 * 4 / 32}, "compressed-tensors MXFP6");
    } else if (key_ends(k, ".weight_packed") && w.dtype == "uint8" && nv != mx4 && !mx6) {
      const int64_t K = w.shape[1] * 2;
      if (nv) {
        expect(k, module + ".weight_scale", "float8_e4m3fn", {N, K / 16}, "compressed-tensors NVFP4");
        global(k, "weight_global_scale", "compressed-tensors NVFP4");
      } else {
        expect(k, module + ".weight_scale", "uint8", {N, K / 32}, "compressed-tensors MXFP4");
      }
    } else if (key_ends(k, ".weight") && w.dtype == "float8_e4m3fn" && has("mxfp8-quantized") && formats_.size() == 1) {
      expect(k, module + ".weight_scale", "uint8", {N, w.shape[1] / 32}, "compressed-tensors MXFP8");
    }
  }

  void check_fp8_blocks(const std::string& k, const HfTensor& w) {
    const json* bs = qc_.contains("weight_block_size") ? &qc_["weight_block_size"] : nullptr;
    if (!bs || !bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() || !(*bs)[1].is_number_integer())
      return;
    const HfTensor* s = at(k + "_scale_inv");
    const int64_t b0 = (*bs)[0].get<int64_t>(), b1 = (*bs)[1].get<int64_t>();
    if (!s || b0 <= 0 || b1 <= 0) return;
    const std::vector<int64_t> want{(w.shape[0] + b0 - 1) / b0, (w.shape[1] + b1 - 1) / b1};
    if (s->shape != want)
      problem_("quant-scale-shape", s->key,
               s->dtype + " " + dims(s->shape) + " is not the scale of FP8 weight " + k + " (" + w.dtype + " " +
                   dims(w.shape) + ") in blocks of " + std::to_string(b0) + "x" + std::to_string(b1) + ": " +
                   dims(want) + " expected");
  }

  void check_fused_group(const std::string& group, const std::vector<std::pair<std::string, double>>& members) {
    // The value most members hold (the first of a tie) is the group's; each other one is named.
    size_t ref = 0, most = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      const size_t n = static_cast<size_t>(
          std::count_if(members.begin(), members.end(), [&](const auto& m) { return m.second == members[i].second; }));
      if (n > most) most = n, ref = i;
    }
    // An expert's gate/up: vLLM's MoE methods check the two and load the fused w13 with gate_proj's
    // scale, warning "Accuracy may be affected" (llm-compressor 0.14 writes them so): a warning here
    // too. q/k/v and a dense gate/up are fused with no check (the largest scale): a problem.
    const bool expert = group.find(".experts.") != std::string::npos;
    for (const auto& [key, v] : members)
      if (v != members[ref].second)
        (expert ? warning_ : problem_)(
            "quant-global-scale-unfused", key,
            num(v) + ", but " + members[ref].first + " of the same fused group holds " + num(members[ref].second) +
                (expert ? ": vLLM fuses an expert's gate/up into one matrix and decodes it with gate_proj's global "
                          "scale (it warns \"Accuracy may be affected\"), so up_proj's weights are misread there"
                        : ": vLLM fuses the group into one matrix and decodes it with one global scale (the largest), "
                          "so the others' weights are misread"));
  }

  const json& qc_;
  const std::map<std::string, const HfTensor*>& by_key_;
  const Problem& problem_;
  const Problem& warning_;
  const std::string method_;
  const std::set<std::string> formats_;
  // The global scales whose fused groups and direction are checked: (the module's X.weight, the scale).
  std::vector<std::pair<std::string, std::string>> globals_;
};

void check_scales(const json& qc, const std::map<std::string, const HfTensor*>& by_key, const ReadScalar& read_scalar,
                  const Problem& problem, const Problem& warning) {
  ScaleChecker c(qc, by_key, problem, warning);
  c.check_shapes();
  c.check_global_values(read_scalar);
}

// check_hf_config's steps over one folder: each a group of fields compared with the tensors.
class ConfigChecker {
 public:
  ConfigChecker(const json& config, const std::string& config_path, const std::vector<HfTensor>& tensors)
      : config_(config), config_path_(config_path), tensors_(tensors), cfg_(config) {
    for (const auto& t : tensors) by_key_[t.key] = &t;
    find_stack();
  }

  void check_layers(bool require_mtp);
  void check_moe_sparsity();
  void check_experts();
  void check_vocab();
  void check_tie(const SameBytes& same_bytes);
  void check_quantization(const ReadScalar& read_scalar);
  void check_codec_beside();
  void check_dtype(const std::set<std::string>& kept_dtype, const std::map<std::string, std::string>& user_kept);
  ConfigCheckResult result() && { return std::move(out_); }

 private:
  void problem(const char* code, const std::string& key, const std::string& msg) {
    out_.problems.push_back({code, Where(config_path_, std::nullopt, key), msg});
  }
  void warning(const char* code, const std::string& key, const std::string& msg) {
    out_.warnings.push_back({code, Where(config_path_, std::nullopt, key), msg});
  }
  void find_stack();
  void check_mtp(const std::set<int64_t>& present, int64_t layers, int64_t nextn, bool require_mtp);
  void find_embedding();
  void check_quantized_weights(const std::vector<std::string>& skip);
  void check_orphan_scales();
  struct ExpertCount {
    int64_t numbered = 0;
    std::string counted;  // "the config counts 4 experts", "...moe_sparsity_config.num_experts[1] counts 3 experts"
    bool dense = false;   // the layer's moe_sparsity_config entry is null
  };
  ExpertCount expert_count(const std::string& key, int64_t experts) const;
  static ExpertCount expert_count_in(const json& config, int64_t experts, const std::string& whose);
  void check_pruned_layers(const std::map<std::string, std::set<int64_t>>& per_layer,
                           const std::vector<const HfTensor*>& fused);
  std::string effective_dtype(const std::string& d,
                              const std::function<bool(const HfTensor&, const std::string&)>& keeps) const;
  // A model the schema holds: its own keys say whether it has these (M2M-100's embedding is
  // model.shared.weight, FSMT's head model.decoder.output_projection.weight); the schema's
  // schema-key-missing reports them missing where it has them.
  bool schema_lacks(const std::string& key) const { return schema_ && !schema_defines(*schema_, config_, key); }

  const json& config_;
  const std::string& config_path_;
  const std::vector<HfTensor>& tensors_;
  const HfConfigView cfg_;
  const ModelSchema* schema_ = schema_for_config(config_);
  const std::optional<MoeSparsity> sparsity_ = find_moe_sparsity(config_);
  mutable std::optional<ExpertCount> global_count_;  // expert_count of a layer the model's own count holds
  std::map<std::string, const HfTensor*> by_key_;
  std::map<std::string, std::set<int64_t>> stacks_;  // <prefix>layers.N. by prefix
  std::string base_;                                 // the main stack's prefix
  bool have_stack_ = false;                          // one main stack
  std::string embed_;                                // the main embedding's key
  ConfigCheckResult out_;
};

// The layer stacks: <prefix>layers.N. by prefix, and the main one among them (not a vision,
// audio, MTP or encoder stack; a language model's where a composite model has several).
void ConfigChecker::find_stack() {
  static const std::regex kLayer(R"(^(.*?)layers\.(\d+)\.)");
  for (const auto& t : tensors_) {
    std::smatch m;
    if (std::regex_search(t.key, m, kLayer) && m[2].length() < 10) stacks_[m[1]].insert(std::stoll(m[2]));
  }
  auto side = [](const std::string& p) {
    for (const char* w : {"vision", "visual", "audio", "image", "speech", "mtp", "encoder"})
      if (p.find(w) != std::string::npos) return true;
    return false;
  };
  std::vector<std::string> main;
  for (const auto& [p, s] : stacks_)
    if (!side(p)) main.push_back(p);
  if (main.size() > 1) {
    std::vector<std::string> lm;
    for (const auto& p : main)
      if (p.find("language_model") != std::string::npos) lm.push_back(p);
    main = lm.size() == 1                                                ? lm
           : std::find(main.begin(), main.end(), "model.") != main.end() ? std::vector<std::string>{"model."}
                                                                         : std::vector<std::string>{};
  }
  base_ = main.size() == 1 ? main[0] : std::string();
  have_stack_ = main.size() == 1;
}

// Layers and MTP layers.
void ConfigChecker::check_layers(bool require_mtp) {
  const std::optional<int64_t> layers = cfg_.integer(kLayers);
  const int64_t nextn = cfg_.integer(kNextn).value_or(0);
  if (!have_stack_ || !layers || *layers >= (1 << 20)) return;
  out_.checked.push_back("num_hidden_layers");
  const std::set<int64_t>& present = stacks_[base_];
  std::vector<int64_t> missing, extra;
  for (int64_t i = 0; i < *layers; ++i)
    if (!present.count(i)) missing.push_back(i);
  for (int64_t i : present)
    if (i >= *layers + nextn) extra.push_back(i);
  if (!missing.empty())
    problem("layer-missing", base_ + "layers.",
            "num_hidden_layers is " + std::to_string(*layers) + " but no tensor of layer " + list_indices(missing) +
                " is here");
  if (!extra.empty())
    problem("layer-unexpected", base_ + "layers.",
            "tensors of layer " + list_indices(extra) + " are here but the config counts " + std::to_string(*layers) +
                " layers and " + std::to_string(nextn) + " MTP layers");
  check_mtp(present, *layers, nextn, require_mtp);
}

// MTP layers: in the stack after the last layer, or in a namespace of their own.
void ConfigChecker::check_mtp(const std::set<int64_t>& present, int64_t layers, int64_t nextn, bool require_mtp) {
  std::set<int64_t> mtp;
  for (int64_t i : present)
    if (i >= layers && i < layers + nextn) mtp.insert(i - layers);
  for (const auto& [p, s] : stacks_)
    if (p == "mtp." || key_ends(p, ".mtp.") || key_ends(p, "mtp_"))
      for (int64_t k : s) {
        if (k < nextn)
          mtp.insert(k);
        else
          problem("layer-unexpected", p + "layers.",
                  "MTP layer " + std::to_string(k) + " is here but the config counts " + std::to_string(nextn) +
                      " (num_nextn_predict_layers)");
      }
  if (nextn <= 0 || nextn >= (1 << 20)) return;
  out_.checked.push_back("num_nextn_predict_layers");
  std::vector<int64_t> lost;
  for (int64_t k = 0; k < nextn; ++k)
    if (!mtp.count(k)) lost.push_back(k);
  if (mtp.empty()) {
    Finding f{require_mtp ? "mtp-layer-missing" : "mtp-layers-absent",
              Where(config_path_, std::nullopt, base_ + "layers."),
              "num_nextn_predict_layers is " + std::to_string(nextn) + " but no MTP layer is here" +
                  (require_mtp ? std::string()
                               : std::string(" (transformers' save_pretrained leaves them out; vLLM's MTP "
                                             "speculative decoding needs them)"))};
    (require_mtp ? out_.problems : out_.warnings).push_back(std::move(f));
  } else if (!lost.empty()) {
    problem("mtp-layer-missing", base_ + "layers.",
            "num_nextn_predict_layers is " + std::to_string(nextn) + " but MTP layer " + list_indices(lost) +
                " is not here (the others are)");
  }
}

// A pruned model's moe_sparsity_config itself (view/moe_sparsity.h): what compressed-tensors'
// ExpertSparsityConfig validates, one entry a decoder layer, and the layers transformers, which does
// not read it, builds with the model's own count.
void ConfigChecker::check_moe_sparsity() {
  if (!sparsity_) return;
  out_.checked.push_back("moe_sparsity_config");
  const std::string& f = sparsity_->field;
  if (!sparsity_->invalid.empty()) {
    problem("moe-sparsity-invalid", f, sparsity_->invalid + " (compressed-tensors' ExpertSparsityConfig refuses it)");
    return;
  }
  if (sparsity_->method == "novice")
    throw UnsupportedError(Where(config_path_, std::nullopt, f),
                           "method \"novice\" (MoNe: pruned experts collapsed into constant novice experts, kept as "
                           "one tensor), a layout dcpctl does not read; it reads \"prune\" (pruned experts removed)");
  const std::optional<int64_t> layers = cfg_.integer(kLayers);
  const int64_t listed = static_cast<int64_t>(sparsity_->num_experts.size());
  if (layers && listed != *layers)
    problem("moe-sparsity-invalid", f,
            "num_experts lists " + std::to_string(listed) + " layers but num_hidden_layers is " +
                std::to_string(*layers) + " (one entry a decoder layer, null for a dense one)");
  const std::optional<int64_t> experts = cfg_.integer(kExperts);
  std::vector<int64_t> other;
  for (int64_t l = 0; l < listed; ++l)
    if (const auto& n = sparsity_->num_experts[static_cast<size_t>(l)]; n && experts && *n != *experts)
      other.push_back(l);
  if (!other.empty()) {
    const int64_t l = other.front();
    warning("moe-sparsity-per-layer", f,
            "num_experts[" + std::to_string(l) + "] is " + std::to_string(*sparsity_->num_experts[l]) +
                (other.size() > 1 ? " (and " + std::to_string(other.size() - 1) + " more layers differ)" : "") +
                " but the model's own count is " + std::to_string(*experts) +
                ": transformers does not read moe_sparsity_config and builds every MoE layer with " +
                std::to_string(*experts) +
                " experts, so from_pretrained refuses this folder (size mismatch); "
                "a loader that reads it (vLLM) is needed");
  }
}

// How many experts the keys of the layer `key` is in number, by the config: the layer's entry in
// a pruned model's moe_sparsity_config (view/moe_sparsity.h) where it has one, else the model's
// count; through the model schema's formula (LongCat's zero experts: n_routed_experts +
// zero_expert_num) where it has one. `dense`: the entry is null.
ConfigChecker::ExpertCount ConfigChecker::expert_count(const std::string& key, int64_t experts) const {
  const std::optional<int64_t> layer = sparsity_ ? decoder_layer(key) : std::nullopt;
  if (!layer || !sparsity_->covers(*layer)) {
    if (!global_count_) global_count_ = expert_count_in(config_, experts, "the config counts ");
    return *global_count_;
  }
  const std::string entry = sparsity_->field + ".num_experts[" + std::to_string(*layer) + "]";
  const std::optional<int64_t> n = sparsity_->count(*layer);
  if (!n) {
    ExpertCount dense;
    dense.dense = true;
    dense.counted = entry + " is null (a dense layer)";
    return dense;
  }
  return expert_count_in(config_with_experts(config_, *n), *n, entry + " counts ");
}

// The experts `config` numbers on disk (the model schema's formula, else `experts`), said after `whose`.
ConfigChecker::ExpertCount ConfigChecker::expert_count_in(const json& config, int64_t experts,
                                                          const std::string& whose) {
  ExpertCount out;
  const std::optional<std::pair<int64_t, std::string>> saved = schema_expert_count(config);
  out.numbered = saved ? saved->first : experts;
  out.counted = whose + std::to_string(out.numbered) + " experts";
  if (saved) out.counted += " (" + saved->second + ", as transformers saves them)";
  return out;
}

// Routed experts: per-expert keys (<layer>.experts.J.) and fused ones (<layer>.experts.NAME, the
// experts along dimension 0), each layer's against its count (expert_count).
void ConfigChecker::check_experts() {
  const std::optional<int64_t> experts = cfg_.integer(kExperts);
  if (!experts || *experts <= 0) return;
  static const std::regex kExpert(R"(^(.*(?:^|\.)experts)\.(\d+)\.)");
  static const std::regex kFused(R"(^(.*(?:^|\.)experts)\.([A-Za-z_][A-Za-z0-9_]*)$)");
  std::map<std::string, std::set<int64_t>> per_layer;
  std::vector<const HfTensor*> fused;
  for (const auto& t : tensors_) {
    std::smatch m;
    if (std::regex_search(t.key, m, kExpert) && m[2].length() < 10)
      per_layer[m[1]].insert(std::stoll(m[2]));
    else if (std::regex_match(t.key, m, kFused) && t.shape.size() >= 2)
      fused.push_back(&t);
  }
  if (per_layer.empty() && fused.empty()) return;
  out_.checked.push_back("experts");
  for (const HfTensor* t : fused) {
    const ExpertCount want = expert_count(t->key, *experts);
    if (want.dense || t->shape[0] != want.numbered)
      problem(
          "expert-count-mismatch", t->key,
          "a fused experts tensor of " + std::to_string(t->shape[0]) + " experts (dimension 0) but " + want.counted);
  }
  // Where the schema holds per-expert keys that no config field counts (ERNIE-4.5-VL's text and
  // vision experts in one list), the config's count is not compared with them.
  if (!schema_expert_count(config_) && schema_expert_count_unexplained(config_)) return;
  for (const auto& [layer, ids] : per_layer) {
    const ExpertCount want = expert_count(layer + ".", *experts);
    std::vector<int64_t> missing, extra;
    for (int64_t j = 0; j < want.numbered && j < (1 << 20); ++j)
      if (!ids.count(j)) missing.push_back(j);
    for (int64_t j : ids)
      if (want.dense || j >= want.numbered) extra.push_back(j);
    if (!missing.empty())
      problem("expert-missing", layer + ".",
              want.counted + " but expert " + list_indices(missing) + " has no tensor here");
    if (!extra.empty())
      problem("expert-count-mismatch", layer + ".", "expert " + list_indices(extra) + " is here but " + want.counted);
  }
  check_pruned_layers(per_layer, fused);
}

// A pruned model's MoE layers hold experts: a layer its moe_sparsity_config counts experts in
// that holds none is named (a dense layer holding some is, above).
void ConfigChecker::check_pruned_layers(const std::map<std::string, std::set<int64_t>>& per_layer,
                                        const std::vector<const HfTensor*>& fused) {
  if (!sparsity_ || !sparsity_->invalid.empty() || !have_stack_) return;
  std::set<int64_t> held;
  for (const auto& [layer, ids] : per_layer)
    if (auto l = decoder_layer(layer + ".")) held.insert(*l);
  for (const HfTensor* t : fused)
    if (auto l = decoder_layer(t->key)) held.insert(*l);
  const std::set<int64_t>& present = stacks_[base_];
  for (size_t l = 0; l < sparsity_->num_experts.size(); ++l) {
    const std::optional<int64_t>& n = sparsity_->num_experts[l];
    const int64_t layer = static_cast<int64_t>(l);
    if (n && *n > 0 && present.count(layer) && !held.count(layer))
      problem("expert-missing", base_ + "layers." + std::to_string(layer) + ".",
              sparsity_->field + ".num_experts[" + std::to_string(layer) + "] counts " + std::to_string(*n) +
                  " experts but layer " + std::to_string(layer) + " here holds no expert tensor");
  }
}

void ConfigChecker::find_embedding() {
  std::vector<std::string> embeds;
  for (const auto& t : tensors_)
    if (key_ends(t.key, "embed_tokens.weight")) embeds.push_back(t.key);
  if (have_stack_ && by_key_.count(base_ + "embed_tokens.weight"))
    embed_ = base_ + "embed_tokens.weight";
  else if (embeds.size() == 1)
    embed_ = embeds[0];
}

// The embedding, its rows, the head's.
void ConfigChecker::check_vocab() {
  find_embedding();
  const std::optional<int64_t> vocab = cfg_.integer(kVocab);
  bool any_embed = false;
  for (const auto& t : tensors_) any_embed = any_embed || t.key.find("embed") != std::string::npos;
  if (have_stack_ && vocab && !any_embed && base_.rfind("model.", 0) == 0 &&
      !schema_lacks(base_ + "embed_tokens.weight"))
    problem("embedding-missing", base_ + "embed_tokens.weight",
            "the config has vocab_size " + std::to_string(*vocab) + " but no embedding is here");
  if (!vocab) return;
  for (const std::string& k : {embed_, std::string("lm_head.weight")}) {
    auto it = by_key_.find(k);
    if (k.empty() || it == by_key_.end()) continue;
    const HfTensor& t = *it->second;
    if (t.shape.size() != 2 || !float_dtype_name(t.dtype)) continue;
    // The rows the model schema derives from the config where it derives them (Marian's decoder
    // embedding has decoder_vocab_size rows, mllama's text_config.vocab_size+8, Moshi's
    // vocab_size+1), else vocab_size; none where the schema derives the key's other dimension
    // but not its rows (Kyutai's: vocab_size + num_codebooks * codebook_vocab_size + 1).
    const auto rows = schema_dim(config_, k, 0);
    if (!rows && schema_dim_unexplained(config_, k, 0)) continue;
    out_.checked.push_back(k == embed_ ? "vocab_size" : "vocab_size (lm_head)");
    const int64_t want = rows ? rows->first : *vocab;
    if (t.shape[0] != want)
      problem("vocab-size-mismatch", k,
              std::to_string(t.shape[0]) + " rows but " +
                  (rows ? "the config makes it " + rows->second + " = " + std::to_string(want) + " (the model schema's)"
                        : "the config's vocab_size is " + std::to_string(want)));
  }
}

// tie_word_embeddings against the head that is here (after check_vocab, which finds the embedding).
void ConfigChecker::check_tie(const SameBytes& same_bytes) {
  const std::optional<bool> tie = cfg_.tie();
  bool head = false;
  for (const auto& t : tensors_) head = head || t.key.rfind("lm_head.", 0) == 0;
  if (tie && !*tie && !embed_.empty() && !head && base_.rfind("model.", 0) == 0 && !schema_lacks("lm_head.weight")) {
    out_.checked.push_back("tie_word_embeddings");
    problem("lm-head-missing", "lm_head.weight",
            "tie_word_embeddings is false but the folder holds no lm_head.weight: loaders initialise it at random");
  }
  // A class that never ties its head (the schema's head_untied: BigBirdPegasusForCausalLM) loads
  // the folder's lm_head.weight whatever the flag says: nothing to compare.
  if (!tie || !*tie || embed_.empty() || !by_key_.count("lm_head.weight") || (schema_ && schema_->head_untied)) return;
  out_.checked.push_back("tie_word_embeddings");
  const HfTensor &h = *by_key_["lm_head.weight"], &e = *by_key_[embed_];
  std::optional<bool> same =
      h.dtype == e.dtype && h.shape == e.shape ? same_bytes("lm_head.weight", embed_) : std::optional<bool>(false);
  if (!same)
    warning("tie-not-compared", "lm_head.weight",
            "tie_word_embeddings is true and lm_head.weight is here, sharded unlike " + embed_ + ": not compared");
  else if (!*same)
    problem("tied-head-differs", "lm_head.weight",
            "tie_word_embeddings is true but lm_head.weight differs from " + embed_ +
                " (loaders tie the head to the embedding and drop this one)");
}

// Quantization: every quantized weight has its scales; nothing the config excludes is quantized.
void ConfigChecker::check_quantization(const ReadScalar& read_scalar) {
  const json* qc = cfg_.object("quantization_config");
  if (!qc) return;
  out_.checked.push_back("quantization_config");
  std::vector<std::string> skip;
  for (const char* f : {"modules_to_not_convert", "ignore", "exclude_modules", "ignored_layers"})
    if (qc->contains(f) && (*qc)[f].is_array())
      for (const auto& p : (*qc)[f])
        if (p.is_string()) skip.push_back(p.get<std::string>());
  check_quantized_weights(skip);
  check_orphan_scales();
  check_scales(
      *qc, by_key_, read_scalar, [&](const char* c, const std::string& k, const std::string& m) { problem(c, k, m); },
      [&](const char* c, const std::string& k, const std::string& m) { warning(c, k, m); });
}

// The tensors a codec decodes beside its weights where no quantization_config names the format
// (Inkling2Loop's expert stacks: meta/codecs/codecs.h, Codec::expected_beside), each present in a
// dtype and shape its weight's format takes.
void ConfigChecker::check_codec_beside() {
  if (cfg_.object("quantization_config")) return;  // check_quantization's, by the config's format
  for (const auto& t : tensors_)
    for (const Codec* c : codecs())
      for (const Codec::Expected& e :
           c->expected_beside ? c->expected_beside(t.key, t.dtype, t.shape) : std::vector<Codec::Expected>()) {
        const auto it = by_key_.find(e.key);
        if (it == by_key_.end()) {
          problem("quant-scale-missing", t.key,
                  std::string(c->display) + " weight (" + t.dtype + " " + dims(t.shape) + ") without its " + e.what +
                      " (" + e.key + ")");
          continue;
        }
        const HfTensor& s = *it->second;
        const bool dtype_ok = std::find(e.dtypes.begin(), e.dtypes.end(), s.dtype) != e.dtypes.end();
        if (!dtype_ok || std::find(e.shapes.begin(), e.shapes.end(), s.shape) == e.shapes.end())
          problem("quant-scale-shape", e.key,
                  s.dtype + " " + dims(s.shape) + " is not the " + e.what + " of " + c->display + " weight " + t.key +
                      " (" + t.dtype + " " + dims(t.shape) + "): " + e.dtypes[0] + " " + dims(e.shapes[0]) +
                      " expected");
      }
}

void ConfigChecker::check_quantized_weights(const std::vector<std::string>& skip) {
  for (const auto& t : tensors_) {
    const std::string& k = t.key;
    // A codec's weight under a name of its own (mxfp4's X_blocks), scaled by X + its scale suffix.
    const Codec* named = nullptr;
    for (const Codec* c : codecs())
      if (!named && *c->weight_suffix && key_ends(k, c->weight_suffix)) named = c;
    const bool packed = key_ends(k, kPacked);
    if (!named && !packed && !(key_ends(k, ".weight") && quantized_dtype(t.dtype))) continue;
    const std::string module = k.substr(0, k.rfind('.'));
    std::vector<std::string> scales;
    if (named) {
      scales = {k.substr(0, k.size() - std::string(named->weight_suffix).size()) + named->scale_suffix};
    } else {
      // compressed-tensors' scale of X.weight_packed first (the one a message names); the codecs'
      // scales of a weight that keeps its name (fp8-block's X_scale_inv, F4's X_scale), then
      // compressed-tensors' and ModelOpt's X.weight_scale and DeepSeek-V4's X.scale.
      if (packed) scales.push_back(module + ".weight_scale");
      for (const Codec* c : codecs())
        if (!*c->weight_suffix) scales.push_back(k + c->scale_suffix);
      scales.push_back(module + ".weight_scale");
      scales.push_back(module + ".weight_scale_inv");
      scales.push_back(module + ".scale");
    }
    if (std::none_of(scales.begin(), scales.end(), [&](const std::string& s) { return by_key_.count(s) > 0; }))
      problem("quant-scale-missing", k,
              "a quantized weight (" + t.dtype + ") with no scale tensor (" + scales[0] + ")");
    if (excluded(module, skip))
      problem("quant-excluded-quantized", k,
              "the quantization_config leaves module " + module + " unquantized, but this weight is " + t.dtype);
  }
}

void ConfigChecker::check_orphan_scales() {
  for (const auto& t : tensors_) {
    const std::string& k = t.key;
    // A codec's scale (meta/codecs/codecs.h: orphan_tail) names its weight; X.weight_scale may
    // also be compressed-tensors' of X.weight_packed.
    std::vector<std::string> bases;
    for (const Codec* c : codecs())
      if (bases.empty() && *c->orphan_tail && key_ends(k, c->orphan_tail) &&
          (!*c->orphan_within || k.find(c->orphan_within) != std::string::npos)) {
        const std::string base = k.substr(0, k.size() - std::string(c->scale_suffix).size());
        bases.push_back(base + c->weight_suffix);
        if (key_ends(k, ".weight_scale")) bases.push_back(base + "_packed");
      }
    if (bases.empty()) continue;
    if (std::none_of(bases.begin(), bases.end(), [&](const std::string& b) { return by_key_.count(b) > 0; }))
      problem("quant-scale-orphan", k, "a scale tensor whose weight (" + bases[0] + ") is not here");
  }
}

// transformers' save_pretrained writes model.dtype, its first floating parameter's: a bfloat16
// model whose first parameter it keeps float32 (XLNet's mask_emb, made by torch.FloatTensor) is
// saved with dtype float32 over bfloat16 tensors. Such a folder, every float32 tensor one kept
// under the one other floating dtype its tensors hold, is checked as of that dtype (transformers'
// own, loaded as it loads its folder). Not a folder all bfloat16: its first parameter is not float32.
std::string ConfigChecker::effective_dtype(
    const std::string& d, const std::function<bool(const HfTensor&, const std::string&)>& keeps) const {
  if (d != "float32") return d;
  std::set<std::string> other;
  bool any32 = false;
  for (const auto& t : tensors_)
    if (float_dtype_name(t.dtype) && t.dtype != "float32")
      other.insert(t.dtype);
    else
      any32 = any32 || t.dtype == "float32";
  if (any32 && other.size() == 1 && (*other.begin() == "bfloat16" || *other.begin() == "float16") &&
      std::all_of(tensors_.begin(), tensors_.end(),
                  [&](const HfTensor& t) { return t.dtype != "float32" || keeps(t, *other.begin()); }))
    return *other.begin();
  return d;
}

// dtype: the weights' floating dtype is the config's, but for what keeps its own.
void ConfigChecker::check_dtype(const std::set<std::string>& kept_dtype,
                                const std::map<std::string, std::string>& user_kept) {
  const std::optional<std::string> d = cfg_.string({"dtype", "torch_dtype"});
  if (!d || !float_dtype_name(*d)) return;
  out_.checked.push_back("dtype");
  std::set<std::string> keys;
  for (const auto& t : tensors_) keys.insert(t.key);
  const std::set<std::string> beside = codecs_beside(keys);  // a codec's own tensors: dtypes of their own
  auto keeps = [&](const HfTensor& t, const std::string& dtype) {
    return own_dtype(t.key) || beside.count(t.key) || kept_dtype.count(t.key) ||
           schema_keeps_dtype(config_, t.key, t.dtype, dtype);
  };
  const std::string dtype = effective_dtype(*d, keeps);
  std::map<std::string, std::vector<std::string>> off;                              // dtype -> keys
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> by_user;  // (glob, dtype) -> keys
  for (const auto& t : tensors_)
    if (float_dtype_name(t.dtype) && t.dtype != dtype && !keeps(t, dtype)) {
      if (auto u = user_kept.find(t.key); u != user_kept.end())
        by_user[{u->second, t.dtype}].push_back(t.key);
      else
        off[t.dtype].push_back(t.key);
    }
  for (const auto& [dt, keys] : off)
    problem("dtype-mismatch", keys[0],
            std::to_string(keys.size()) + " tensor(s) are " + dt + " but the config's dtype is " + *d +
                (keys.size() > 1 ? " (the first named)" : ""));
  for (const auto& [what, keys] : by_user) {
    const auto& [glob, dt] = what;
    std::string named;
    for (size_t i = 0; i < keys.size() && i < 5; ++i) named += (i ? ", " : "") + keys[i];
    if (keys.size() > 5) named += " and " + std::to_string(keys.size() - 5) + " more";
    warning("dtype-kept-by-user", keys[0],
            std::to_string(keys.size()) + " tensor(s) are " + dt + " but the config's dtype is " + *d +
                ": kept in their saved dtype by --keep-dtype '" + glob +
                "' (the export's choice, recorded in the safetensors header's __metadata__ \"" + kKeepDtypeEntry +
                "\"): " + named + "; transformers' from_pretrained loads them in " + dtype +
                " all the same (it casts them; only its own keep-in-float32 lists stay float32)");
  }
}

}  // namespace hf_config_impl

using namespace hf_config_impl;

ConfigCheckResult check_hf_config(const json& config, const std::string& config_path,
                                  const std::vector<HfTensor>& tensors, const SameBytes& same_bytes, bool require_mtp,
                                  const ReadScalar& read_scalar, const std::set<std::string>& kept_dtype,
                                  const std::map<std::string, std::string>& user_kept) {
  if (!config.is_object()) {
    ConfigCheckResult out;
    out.problems.push_back({"config-invalid", Where(config_path), "not a JSON object"});
    return out;
  }
  ConfigChecker c(config, config_path, tensors);
  c.check_layers(require_mtp);
  c.check_moe_sparsity();
  c.check_experts();
  c.check_vocab();
  c.check_tie(same_bytes);
  c.check_quantization(read_scalar);
  c.check_codec_beside();
  c.check_dtype(kept_dtype, user_kept);
  return std::move(c).result();
}

}  // namespace dcpctl
