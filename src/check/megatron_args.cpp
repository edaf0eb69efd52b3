#include "check/megatron_args.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "item/item_reader.h"
#include "meta/checkpoint.h"
#include "pickle/repr.h"
#include "pickle/tree.h"
#include "util/error.h"
#include "view/maps/keymap.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr const char* kArgsCommonState = "common_state/shard_0_1";

// The Namespace's fields JSON can hold; null when `v` is not an argparse.Namespace.
json args_namespace_fields(const pickle::Value& v) {
  if (!v.is(pickle::Kind::Object) || !v.is_global("argparse", "Namespace")) return nullptr;
  const pickle::Value& state = v.as_object().state;
  if (!state.is(pickle::Kind::Dict)) return nullptr;
  json out = json::object();
  const pickle::Items kv = state.items();
  for (uint64_t i = 0; i + 1 < kv.size(); i += 2) {
    if (!kv[i].is(pickle::Kind::Str)) continue;
    json j;
    if (pickle::to_json(kv[i + 1], j)) out[std::string(kv[i].as_str())] = std::move(j);
  }
  return out;
}

// How the variant's Hugging Face config reads the args: its "args" in the map (megatron.json's
// variants), checked here since this file is its only reader.
//   attention        "gqa": num_key_value_heads and head_dim are compared, multi_latent_attention
//                    False; "mla": not those, multi_latent_attention True
//   rope             "rotate_half": the RoPE rows of the table; "mla": multi-latent attention's
//                    (check_mla_rope: rope_type, YaRN, rope_interleave); "yarn": GPT-OSS's YaRN
//                    (position_embedding_type yarn, check_yarn); "unchecked": none
//   sizes            [[config field, args field], ...]: sizes compared where config.json states
//                    them, null included (DeepSeek-V3's MLA: q_lora_rank null is no q LoRA)
//   dense_layers     which layers are dense, against moe_layer_freq (check_dense_layers):
//                    "first_k_dense_replace", "mlp_only_layers" (with decoder_sparse_step), "none"
//   activation       "swiglu" (absent: hidden_act silu = --swiglu) or "quick_geglu" (GPT-OSS's clamped
//                    SwiGLU: --quick-geglu, glu_linear_offset 1, activation_func_clamp_value = swiglu_limit)
//   sinks            true: learnable attention sinks (softmax_type learnable)
//   sliding_window   true: sliding_window and layer_types against window_size and window_attn_skip_freq
//   moe_ffn          the config field of the routed experts' size (Mixtral's is intermediate_size)
//   router           score_function softmax | sigmoid; norm_topk_prob: "not_pre_softmax" (compared
//                    with not moe_router_pre_softmax), "renormalized" (the class always renormalizes:
//                    moe_router_pre_softmax False), "topk_above_1" (megatron-core renormalizes a
//                    sigmoid top k when k > 1); routed_scaling: whether routed_scaling_factor exists;
//                    name: how messages call the router (absent: the config's model_type);
//                    groups: {"n_group", "topk_group": config fields, "top_per_group": how many
//                    scores the class sums per group} (group-limited routing, check_router_groups)
//   config_defaults  model_type -> transformers 5.23's class defaults of the settings no shape shows
//                    (rms_norm_eps, rope_theta, partial_rotary_factor, tie_word_embeddings,
//                    hidden_act, num_experts_per_tok, norm_topk_prob, routed_scaling_factor; printed
//                    from each class: LlamaConfig() and so on); a model_type not listed: only what
//                    config.json states is compared
struct VariantArgs {
  bool mla = false, rope_checked = true, sigmoid = false, routed_scaling = false;
  bool yarn = false, quick_geglu = false, sinks = false, sliding_window = false, mla_rope = false;
  std::string moe_ffn = "moe_intermediate_size", router_name, norm_topk, dense_layers;
  json sizes = json::array();  // [[config field, args field], ...]
  json groups;                 // router "groups", or null
  json defaults;               // config_defaults[model_type], or null

  bool known() const { return defaults.is_object(); }
  std::optional<json> dflt(const char* field) const {
    if (!known() || !defaults.contains(field)) return std::nullopt;
    return defaults[field];
  }
};

VariantArgs variant_args_of(const json& a, const std::string& model_type) {
  auto bad = [](const std::string& what) {
    throw UsageError(Where("key map"),
                     "the variant's \"args\": " + what + " (src/check/megatron_args.cpp lists the fields)");
  };
  if (!a.is_object()) bad("not an object");
  auto text = [&](const json& o, const char* field, std::initializer_list<const char*> allowed) {
    const json v = o.value(field, json());
    if (!v.is_string()) bad(std::string("\"") + field + "\" is missing");
    for (const char* x : allowed)
      if (v == x) return v.get<std::string>();
    bad(std::string("\"") + field + "\" = " + v.dump() + " is none of the values it takes");
    return std::string();
  };
  VariantArgs v;
  v.mla = text(a, "attention", {"gqa", "mla"}) == "mla";
  const std::string rope = text(a, "rope", {"rotate_half", "mla", "unchecked", "yarn"});
  v.rope_checked = rope == "rotate_half";
  v.mla_rope = rope == "mla";
  v.yarn = rope == "yarn";
  if (a.contains("sizes")) {
    v.sizes = a["sizes"];
    bool ok = v.sizes.is_array();
    for (const json& p : ok ? v.sizes : json::array())
      ok = ok && p.is_array() && p.size() == 2 && p[0].is_string() && p[1].is_string();
    if (!ok) bad("\"sizes\" is a list of [config field, args field] pairs");
  }
  if (a.contains("dense_layers"))
    v.dense_layers = text(a, "dense_layers", {"first_k_dense_replace", "mlp_only_layers", "none"});
  if (a.contains("activation")) v.quick_geglu = text(a, "activation", {"swiglu", "quick_geglu"}) == "quick_geglu";
  for (const char* f : {"sinks", "sliding_window"})
    if (a.contains(f) && !a[f].is_boolean()) bad(std::string("\"") + f + "\" is a boolean");
  v.sinks = a.value("sinks", false);
  v.sliding_window = a.value("sliding_window", false);
  v.moe_ffn = text(a, "moe_ffn", {"moe_intermediate_size", "intermediate_size"});
  const json r = a.value("router", json());
  if (!r.is_object()) bad("\"router\" is missing");
  v.sigmoid = text(r, "score_function", {"softmax", "sigmoid"}) == "sigmoid";
  v.norm_topk = text(r, "norm_topk_prob", {"not_pre_softmax", "renormalized", "topk_above_1"});
  if (!r.value("routed_scaling", json()).is_boolean()) bad("router \"routed_scaling\" is a boolean");
  v.routed_scaling = r["routed_scaling"].get<bool>();
  v.router_name = r.value("name", model_type);
  if (r.contains("groups")) {
    const json g = r["groups"];
    if (!g.is_object() || !g.value("n_group", json()).is_string() || !g.value("topk_group", json()).is_string() ||
        !g.value("top_per_group", json()).is_number_integer())
      bad("router \"groups\" is {\"n_group\": FIELD, \"topk_group\": FIELD, \"top_per_group\": N}");
    v.groups = g;
  }
  const json d = a.value("config_defaults", json::object());
  if (d.is_object() && d.contains(model_type) && d[model_type].is_object()) v.defaults = d[model_type];
  return v;
}

std::string args_shown(const json& v) {
  return v.is_null() ? "None" : v.is_boolean() ? (v.get<bool>() ? "True" : "False") : v.dump();
}

bool args_same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::fabs(x - y) <= 1e-6 * std::max(std::fabs(x), std::fabs(y));
  }
  return a == b;
}

class ArgsChecker {
 public:
  ArgsChecker(const MegatronArgs& args, const json& config, std::string model_type)
      : args_(args), config_(config), model_type_(std::move(model_type)) {}

  // config.json's `key` (a top-level field), or nullopt.
  std::optional<json> stated(const std::string& key) const {
    auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return std::nullopt;
    return *it;
  }
  // A RoPE setting (config_rope_field).
  std::optional<std::pair<json, std::string>> rope(const std::string& key) const {
    return config_rope_field(config_, key);
  }
  // config.json's `key` as written, null included (nullopt: absent).
  std::optional<json> given(const std::string& key) const {
    auto it = config_.find(key);
    if (it == config_.end()) return std::nullopt;
    return *it;
  }
  json arg(const std::string& name) const { return args_.values.value(name, json()); }
  bool has_arg(const std::string& name) const { return args_.values.contains(name); }

  // config.json's `field` (its value `cv`, `from`: "config.json" or the class default) against the
  // args' `arg_field` (its value `av`): agree, or a problem.
  // `said`: how the args are named in a message when `av` is derived from them ("" : args.FIELD = av).
  void compare(const std::string& field, const json& cv, const std::string& from, const std::string& arg_field,
               const json& av, const std::string& said = "") {
    if (!has_arg(arg_field.substr(0, arg_field.find(' ')))) return;  // an older Megatron-LM without the field
    if (args_same_value(cv, av)) {
      checked_.push_back({{"config", field}, {"args", arg_field}, {"value", cv}, {"config_from", from}});
      return;
    }
    problems_.push_back(field + " = " + args_shown(cv) + (from == "config.json" ? "" : " (" + from + ")") + ", but " +
                        (said.empty() ? "args." + arg_field + " = " + args_shown(av) : said));
  }
  // A setting with no config.json field: the args must hold `want` (what `what` can represent).
  void require(const std::string& what, const std::string& arg_field, const json& want) {
    if (!has_arg(arg_field)) return;
    const json av = arg(arg_field);
    if (args_same_value(av, want)) {
      checked_.push_back({{"config", what}, {"args", arg_field}, {"value", want}, {"config_from", "model"}});
      return;
    }
    problems_.push_back(what + ", but args." + arg_field + " = " + args_shown(av));
  }
  // A size field: compared only where config.json states it (the tensors decide the rest).
  void size(const std::string& field, const std::string& arg_field, const json& av) {
    if (auto cv = stated(field)) compare(field, *cv, "config.json", arg_field, av);
  }
  // A setting config.json may leave to its class's default.
  void setting(const std::string& field, std::optional<json> cv, std::optional<json> dflt, const std::string& arg_field,
               const json& av, const std::string& said = "") {
    if (cv) return compare(field, *cv, "config.json", arg_field, av, said);
    if (dflt) return compare(field, *dflt, model_type_ + "'s default", arg_field, av, said);
  }

  const std::string& model_type() const { return model_type_; }
  json checked_ = json::array();
  std::vector<std::string> problems_;

 private:
  const MegatronArgs& args_;
  const json& config_;
  std::string model_type_;
};

// GPT-OSS's clamped SwiGLU (GptOssExperts: (up + 1) * gate * sigmoid(alpha * gate), gate clamped
// above and up on both sides at swiglu_limit) is megatron-core's quick_gelu GLU (--quick-geglu:
// x * sigmoid(1.702 x)) with glu_linear_offset 1 and activation_func_clamp_value the limit.
void check_quick_geglu(ArgsChecker& c, const VariantArgs& v) {
  c.require("GPT-OSS's gated x * sigmoid(alpha * x) MLP (--quick-geglu)", "quick_geglu", true);
  c.require("GPT-OSS's (up + 1) in its gated MLP", "glu_linear_offset", 1.0);
  c.setting("swiglu_limit", c.stated("swiglu_limit"), v.dflt("swiglu_limit"), "activation_func_clamp_value",
            c.arg("activation_func_clamp_value"));
  if (c.has_arg("quick_geglu"))  // megatron-core's quick_gelu fixes alpha at 1.702
    c.setting("swiglu_alpha", c.stated("swiglu_alpha"), json(1.702), "quick_geglu (megatron-core's fixed 1.702)",
              1.702);
}

// YaRN (position_embedding_type yarn; Megatron-LM's _apply_yarn_config_from_args: rotary_scaling_factor,
// yarn_original_max_position_embeddings, yarn_beta_fast, yarn_beta_slow, yarn_correction_range_round_to_int,
// mscale, mscale_all_dim, None taken as megatron-core's YarnRotaryEmbedding defaults 1, 4096, 32, 1,
// True, 1, 0) against transformers 5.23's _compute_yarn_parameters (a missing truncate is True, a
// missing factor max_position_embeddings / original_max_position_embeddings; the cos/sin scale
// attention_factor, else get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) with both
// given, else get_mscale(factor); megatron-core's _yarn_get_concentration_factor the same ratio).
void check_yarn(ArgsChecker& c, const VariantArgs& v) {
  // config.json's value of a RoPE field: stated (in rope_parameters or at the top level), else the
  // class's default when config.json gives no rope_parameters at all (GptOssConfig's), else `missing`.
  const bool own = c.stated("rope_parameters").has_value() || c.stated("rope_scaling").has_value();
  auto field = [&](const char* key, const json& missing) -> std::pair<json, std::string> {
    if (auto r = c.rope(key)) return {r->first, "config.json"};
    if (!own)
      if (auto d = v.dflt(key)) return {*d, c.model_type() + "'s default"};
    return {missing, "transformers' default"};
  };
  auto num = [](const json& j, double d) { return j.is_number() ? j.get<double>() : d; };
  auto [type, type_from] = field("rope_type", json("default"));
  if (type == json("default")) type = field("type", json("default")).first;
  const json pet = c.arg("position_embedding_type");
  c.compare("rope_parameters.rope_type", type, type_from, "position_embedding_type",
            pet == json("yarn") ? json("yarn") : json(pet),
            "args.position_embedding_type = " + args_shown(pet) + " (YaRN RoPE: rope_type \"yarn\")");
  c.require("Hugging Face's rotate_half RoPE (it cannot represent interleaved RoPE)", "rotary_interleaved", false);
  auto prf = field("partial_rotary_factor", json(1.0));
  c.compare("partial_rotary_factor", prf.first, prf.second, "rotary_percent", c.arg("rotary_percent"));
  if (type != json("yarn") || pet != json("yarn")) return;
  auto orig = field("original_max_position_embeddings", json());
  c.compare("rope_parameters.original_max_position_embeddings", orig.first, orig.second,
            "yarn_original_max_position_embeddings", json(num(c.arg("yarn_original_max_position_embeddings"), 4096)),
            "args.yarn_original_max_position_embeddings = " +
                args_shown(c.arg("yarn_original_max_position_embeddings")) + " (None: 4096)");
  auto factor = field("factor", json());
  if (factor.first.is_null() && c.stated("max_position_embeddings") && orig.first.is_number() &&
      orig.first.get<double>() > 0)
    factor = {json(num(*c.stated("max_position_embeddings"), 0) / orig.first.get<double>()),
              "max_position_embeddings / original_max_position_embeddings"};
  const double f_args = num(c.arg("rotary_scaling_factor"), 1.0);
  c.compare("rope_parameters.factor", factor.first, factor.second, "rotary_scaling_factor", json(f_args));
  auto bf = field("beta_fast", json(32.0)), bs = field("beta_slow", json(1.0));
  c.compare("rope_parameters.beta_fast", bf.first, bf.second, "yarn_beta_fast",
            json(num(c.arg("yarn_beta_fast"), 32.0)),
            "args.yarn_beta_fast = " + args_shown(c.arg("yarn_beta_fast")) + " (None: 32)");
  c.compare("rope_parameters.beta_slow", bs.first, bs.second, "yarn_beta_slow", json(num(c.arg("yarn_beta_slow"), 1.0)),
            "args.yarn_beta_slow = " + args_shown(c.arg("yarn_beta_slow")) + " (None: 1)");
  auto tr = field("truncate", json(true));
  const json round = c.arg("yarn_correction_range_round_to_int");
  c.compare("rope_parameters.truncate", tr.first, tr.second, "yarn_correction_range_round_to_int",
            json(round.is_boolean() ? round.get<bool>() : true),
            "args.yarn_correction_range_round_to_int = " + args_shown(round) + " (None: True)");
  // the cos/sin scale each side computes
  auto mscale = [](double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; };
  const double f_hf = num(factor.first, f_args);
  auto af = field("attention_factor", json()), ms = field("mscale", json()), msa = field("mscale_all_dim", json());
  double hf = af.first.is_number() ? af.first.get<double>()
              : (num(ms.first, 0) != 0 && num(msa.first, 0) != 0)
                  ? mscale(f_hf, num(ms.first, 0)) / mscale(f_hf, num(msa.first, 0))
                  : mscale(f_hf, 1.0);
  const double mg = mscale(f_args, num(c.arg("mscale"), 1.0)) / mscale(f_args, num(c.arg("mscale_all_dim"), 0.0));
  if (c.has_arg("mscale"))
    c.compare("YaRN's attention factor (rope_parameters attention_factor / mscale / mscale_all_dim)", json(hf),
              af.second, "mscale", json(mg),
              "args.mscale = " + args_shown(c.arg("mscale")) +
                  " and args.mscale_all_dim = " + args_shown(c.arg("mscale_all_dim")) +
                  " give megatron-core's YaRN concentration factor " + json(mg).dump());
}

// GPT-OSS's sliding window (transformers: a key within sliding_window positions of the query,
// itself included, on the layers layer_types calls "sliding_attention") is megatron-core's
// window_size (W - 1, 0) on the layers window_attn_skip_freq leaves windowed
// (is_layer_window_attention: an int N windows layer i unless (i + 1) % N == 0; a list windows
// the layers it holds 1 for; None: every layer).
void check_sliding_window(ArgsChecker& c, const VariantArgs& v) {
  if (!c.has_arg("window_size")) return;
  const json ws = c.arg("window_size"), freq = c.arg("window_attn_skip_freq");
  std::optional<json> sw = c.stated("sliding_window");
  const std::string sw_from = sw ? "config.json" : c.model_type() + "'s default";
  if (!sw) sw = v.dflt("sliding_window");
  const bool windowed = ws.is_array() && ws.size() == 2 && ws[0].is_number_integer() && ws[1].is_number_integer();
  if (sw && sw->is_number_integer())
    c.compare(
        "sliding_window", *sw, sw_from, "window_size",
        windowed && ws[1] == json(0) ? json(ws[0].get<int64_t>() + 1) : ws,
        "args.window_size = " + args_shown(ws) +
            (windowed ? " (a window of window_size[0] + 1 keys when window_size[1] is 0)" : " (no sliding window)"));
  const json layers = c.arg("num_layers");
  if (!layers.is_number_integer()) return;
  const int64_t n = layers.get<int64_t>();
  std::optional<json> lt = c.stated("layer_types");
  const std::string lt_from = lt ? "config.json" : c.model_type() + "'s default (sliding, full, ...)";
  json want = json::array(), got = json::array();
  for (int64_t i = 0; i < n; ++i)
    want.push_back(lt && lt->is_array() && i < static_cast<int64_t>(lt->size())
                       ? (*lt)[static_cast<size_t>(i)]
                       : json((i + 1) % 2 ? "sliding_attention" : "full_attention"));
  for (int64_t i = 0; i < n; ++i) {
    bool w = windowed;
    if (w && freq.is_number_integer())
      w = freq.get<int64_t>() > 0 && (i + 1) % freq.get<int64_t>() != 0;
    else if (w && freq.is_array())
      w = i < static_cast<int64_t>(freq.size()) && freq[static_cast<size_t>(i)] == json(1);
    got.push_back(w ? "sliding_attention" : "full_attention");
  }
  c.compare("layer_types", want, lt_from, "window_attn_skip_freq", got,
            "args.window_size = " + args_shown(ws) + " and args.window_attn_skip_freq = " + args_shown(freq) +
                " window the layers " + got.dump());
}

// transformers' and megatron-core's YaRN attention scale (both: 0.1 * m * ln(factor) + 1, 1 when
// factor <= 1).
double yarn_mscale(double factor, double m) {
  return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
}

double number_or(const json& v, double dflt) {
  return v.is_number() ? v.get<double>() : dflt;
}

std::string shown_number(double x) {
  return args_shown(json(x));
}

// Multi-latent attention's RoPE (variant "rope": "mla"): megatron-core 0.19.2's
// MultiLatentAttention against transformers 5.23's DeepseekV3Attention.
//   - megatron always takes the RoPE columns even then odd before the halves rotation
//     (apply_rotary_pos_emb(..., mla_rotary_interleaved=True)), transformers only with
//     rope_interleave (DeepseekV3Config's default True); rotary_interleaved on top of it (the
//     rotate-half of adjacent pairs) no Hugging Face config represents;
//   - args.rope_type None is MLATransformerConfig's default "yarn"; "rope" is rope_type "default";
//   - YaRN: factor = rotary_scaling_factor; original_max_position_embeddings, beta_fast and
//     beta_slow are MLATransformerConfig's fixed 4096, 32 and 1 (Megatron-LM has no argument for
//     them under MLA: --yarn-* are read for other attention only, argument_utils.py), truncate its
//     correction_range_round_to_int True; the two scales YaRN applies are compared as computed,
//     since both read mscale / mscale_all_dim differently: the cos/sin scale (transformers:
//     attention_factor, else mscale(f, mscale) / mscale(f, mscale_all_dim) when both are set, else
//     mscale(f, 1); megatron: mscale(f, mscale) / mscale(f, mscale_all_dim)) and the softmax scale
//     (transformers: mscale(f, mscale_all_dim)^2 when rope_type is not default and mscale_all_dim
//     is set; megatron: mscale(rotary_scaling_factor, mscale_all_dim)^2 always, plain RoPE included).
void check_mla_rope(ArgsChecker& c, const VariantArgs& v) {
  {
    std::optional<json> il = c.stated("rope_interleave");
    const bool stated = il.has_value();
    if (!il) il = v.dflt("rope_interleave");
    if (il)
      c.compare("rope_interleave", *il, stated ? "config.json" : c.model_type() + "'s default",
                "multi_latent_attention", json(true),
                "megatron-core's multi-latent attention always takes the RoPE columns even then odd "
                "(mla_rotary_interleaved; transformers: rope_interleave True)");
  }
  c.require("transformers' MLA RoPE (it cannot represent rotary_interleaved)", "rotary_interleaved", false);
  if (!c.has_arg("rope_type")) return;  // an older Megatron-LM: the RoPE type is not known
  auto type = c.rope("rope_type");
  if (!type) type = c.rope("type");
  const std::string hf_type = type && type->first.is_string() ? type->first.get<std::string>() : "default";
  const std::string type_field = type ? type->second : "rope_type";
  const json mg = c.arg("rope_type");
  const std::string mg_type = mg.is_string() ? mg.get<std::string>() : "yarn";
  const std::string want = mg_type == "rope" ? "default" : mg_type;
  c.compare(type_field, hf_type, type ? "config.json" : "default", "rope_type", want,
            "args.rope_type = " + args_shown(mg) + (mg.is_null() ? " (MLATransformerConfig's default \"yarn\")" : "") +
                " (rope_type \"" + want + "\")");
  if (hf_type != want) return;
  const double mg_factor = number_or(c.arg("rotary_scaling_factor"), 40.0);
  const double mg_mscale = number_or(c.arg("mscale"), 1.0), mg_all = number_or(c.arg("mscale_all_dim"), 0.0);
  const double mg_softmax = std::pow(yarn_mscale(mg_factor, mg_all), 2);
  const std::string mg_said = "args.rotary_scaling_factor " + shown_number(mg_factor) + ", mscale " +
                              shown_number(mg_mscale) + ", mscale_all_dim " + shown_number(mg_all);
  if (want == "default") {
    auto prf = c.rope("partial_rotary_factor");
    c.setting(prf ? prf->second : "partial_rotary_factor", prf ? std::optional<json>(prf->first) : std::nullopt,
              v.dflt("partial_rotary_factor"), "rotary_percent", c.arg("rotary_percent"));
    c.compare("(the softmax scale of unscaled RoPE)", 1.0, "model", "mscale_all_dim", mg_softmax,
              "megatron-core scales MLA's softmax by mscale(rotary_scaling_factor, mscale_all_dim)^2 = " +
                  shown_number(mg_softmax) + " (" + mg_said + ")");
    return;
  }
  if (want != "yarn") return;
  auto f = c.rope("factor");
  if (!f || !f->first.is_number()) {
    c.problems_.push_back("rope_parameters.factor is missing, but args.rotary_scaling_factor = " +
                          shown_number(mg_factor));
    return;
  }
  const double factor = f->first.get<double>();
  c.compare(f->second, f->first, "config.json", "rotary_scaling_factor", mg_factor);
  auto fixed = [&](const char* key, const json& mg_value, const json& hf_default, const std::string& why) {
    auto got = c.rope(key);
    const json hv = got ? got->first : hf_default;
    if (hv.is_null()) {
      c.problems_.push_back(std::string("rope_parameters.") + key + " is missing, but megatron-core's MLA uses " +
                            args_shown(mg_value) + " (" + why + ")");
      return;
    }
    c.compare(got ? got->second : std::string("rope_parameters.") + key, hv,
              got ? "config.json" : "transformers' default", "multi_latent_attention", mg_value,
              "megatron-core's MLA uses " + args_shown(mg_value) + " (" + why + ")");
  };
  fixed("original_max_position_embeddings", 4096, json(),
        "MLATransformerConfig's original_max_position_embeddings: no Megatron-LM argument sets it under MLA");
  fixed("beta_fast", 32.0, 32.0, "MLATransformerConfig's beta_fast");
  fixed("beta_slow", 1.0, 1.0, "MLATransformerConfig's beta_slow");
  fixed("truncate", true, true, "YarnRotaryEmbedding's correction_range_round_to_int");
  // The two scales, as each side computes them.
  auto hv = [&](const char* key) {
    auto got = c.rope(key);
    return got ? got->first : json();
  };
  const json h_mscale = hv("mscale"), h_all = hv("mscale_all_dim"), h_att = hv("attention_factor");
  const bool both = number_or(h_mscale, 0) != 0 && number_or(h_all, 0) != 0;
  const double hf_cos = h_att.is_number() ? h_att.get<double>()
                        : both ? yarn_mscale(factor, h_mscale.get<double>()) / yarn_mscale(factor, h_all.get<double>())
                               : yarn_mscale(factor, 1.0);
  const double mg_cos = yarn_mscale(mg_factor, mg_mscale) / yarn_mscale(mg_factor, mg_all);
  const double hf_softmax = number_or(h_all, 0) != 0 ? std::pow(yarn_mscale(factor, h_all.get<double>()), 2) : 1.0;
  const std::string hf_said = "factor " + shown_number(factor) + ", mscale " + args_shown(h_mscale) +
                              ", mscale_all_dim " + args_shown(h_all) +
                              (h_att.is_null() ? "" : ", attention_factor " + args_shown(h_att));
  c.compare("rope_parameters.mscale / mscale_all_dim (YaRN's cos/sin scale)", hf_cos, "config.json", "mscale", mg_cos,
            "megatron-core's is " + shown_number(mg_cos) + " (" + mg_said + "); transformers' from " + hf_said);
  c.compare("rope_parameters.mscale_all_dim (YaRN's softmax scale)", hf_softmax, "config.json", "mscale_all_dim",
            mg_softmax,
            "megatron-core's is " + shown_number(mg_softmax) + " (" + mg_said + "); transformers' from " + hf_said);
}

// Group-limited routing (the router's "groups"): transformers' DeepSeek-V3 / GLM-4.5 routers pick
// topk_group of n_group expert groups, scoring a group by the sum of its top `top_per_group` (2)
// biased scores; megatron-core 0.19.2 (group_limited_topk, with moe_router_group_topk set) picks
// moe_router_group_topk of moe_router_num_groups groups scoring each by its top moe_router_topk /
// moe_router_group_topk. Both choose every group when topk_group >= n_group (no limit: megatron's
// default, moe_router_group_topk None); otherwise the counts must agree and megatron's per-group
// top must be transformers' 2 (DeepSeek-V3's 8 / 4), or the two pick other experts.
void check_router_groups(ArgsChecker& c, const VariantArgs& v) {
  if (!v.groups.is_object() || !c.has_arg("moe_router_group_topk")) return;
  const std::string nf = v.groups["n_group"], kf = v.groups["topk_group"];
  const int64_t per_group = v.groups["top_per_group"];
  std::optional<json> n = c.stated(nf), k = c.stated(kf);
  const std::string dflt_from = c.model_type() + "'s default";
  const std::string n_from = n ? "config.json" : dflt_from, k_from = k ? "config.json" : dflt_from;
  if (!n) n = v.dflt(nf.c_str());
  if (!k) k = v.dflt(kf.c_str());
  if (!n || !k || !n->is_number_integer() || !k->is_number_integer()) return;
  const std::string from = n_from == k_from ? n_from : "config.json and " + dflt_from;
  const json mn = c.arg("moe_router_num_groups"), mk = c.arg("moe_router_group_topk"), topk = c.arg("moe_router_topk");
  const bool hf_limited = k->get<int64_t>() < n->get<int64_t>();
  const bool mg_limited = mk.is_number_integer() && mk.get<int64_t>() > 0 &&
                          !(mn.is_number_integer() && mk.get<int64_t>() >= mn.get<int64_t>());
  const std::string hf_said = nf + " = " + args_shown(*n) + (n_from == k_from ? "" : " (" + n_from + ")") + ", " + kf +
                              " = " + args_shown(*k) + (k_from == "config.json" ? "" : " (" + k_from + ")");
  const std::string mg_said =
      "args.moe_router_num_groups = " + args_shown(mn) + ", moe_router_group_topk = " + args_shown(mk);
  if (!hf_limited && !mg_limited) {
    c.checked_.push_back({{"config", nf + ", " + kf},
                          {"args", "moe_router_num_groups, moe_router_group_topk"},
                          {"value", "no group limit"},
                          {"config_from", from}});
    return;
  }
  if (hf_limited != mg_limited) {
    c.problems_.push_back(hf_said +
                          (hf_limited
                               ? " (routing limited to " + args_shown(*k) + " of " + args_shown(*n) + " expert groups)"
                               : " (every group chosen: no limit)") +
                          ", but " + mg_said + (mg_limited ? " (group-limited routing)" : " (no group limit)"));
    return;
  }
  c.compare(nf, *n, n_from, "moe_router_num_groups", mn);
  c.compare(kf, *k, k_from, "moe_router_group_topk", mk);
  if (topk.is_number_integer() && topk.get<int64_t>() / mk.get<int64_t>() != per_group)
    c.problems_.push_back(
        v.router_name + " scores an expert group by its top " + std::to_string(per_group) +
        " experts, but megatron-core by its top moe_router_topk / moe_router_group_topk = " + args_shown(topk) + " / " +
        args_shown(mk) + " = " + std::to_string(topk.get<int64_t>() / mk.get<int64_t>()) + " (args)");
}

// Which layers are MoE, 1 per layer: megatron-core's moe_layer_freq (an int N: every N-th layer
// from 0; a list: the pattern itself, gpt_layer_specs.get_gpt_decoder_block_spec) against the
// variant's config (first_k_dense_replace: layers >= k; Qwen-MoE's mlp_only_layers and
// decoder_sparse_step: i not listed and (i + 1) % step == 0; "none": every layer).
std::string layers_said(const std::vector<int>& moe) {
  std::string out;
  for (size_t i = 0; i < moe.size(); ++i)
    if (!moe[i]) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out.empty() ? "no dense layer" : "dense layers " + out;
}

void check_dense_layers(ArgsChecker& c, const VariantArgs& v) {
  if (v.dense_layers.empty() || !c.has_arg("moe_layer_freq") || !c.arg("num_layers").is_number_integer()) return;
  const int64_t L = c.arg("num_layers").get<int64_t>();
  if (L <= 0 || L > 100000) return;
  const json freq = c.arg("moe_layer_freq");
  std::vector<int> mg(L, 0), hf(L, 1);
  if (freq.is_number_integer() && freq.get<int64_t>() > 0) {
    for (int64_t i = 0; i < L; ++i) mg[i] = i % freq.get<int64_t>() == 0;
  } else if (freq.is_array() && static_cast<int64_t>(freq.size()) == L) {
    for (int64_t i = 0; i < L; ++i) mg[i] = freq[i] == json(1);
  } else {
    return;  // megatron-core itself refuses another pattern
  }
  std::string field, from = "config.json";
  json value;
  if (v.dense_layers == "first_k_dense_replace") {
    field = "first_k_dense_replace";
    std::optional<json> k = c.stated(field);
    if (!k) {
      k = v.dflt(field.c_str());
      from = c.model_type() + "'s default";
    }
    if (!k || !k->is_number_integer()) return;
    value = *k;
    for (int64_t i = 0; i < L; ++i) hf[i] = i >= k->get<int64_t>();
  } else if (v.dense_layers == "mlp_only_layers") {
    field = "mlp_only_layers";
    const json only = c.stated("mlp_only_layers").value_or(json::array());
    const json step = c.stated("decoder_sparse_step").value_or(json(1));
    if (!only.is_array() || !step.is_number_integer() || step.get<int64_t>() <= 0) return;
    if (!c.stated("mlp_only_layers") && !c.stated("decoder_sparse_step")) from = c.model_type() + "'s default";
    value = only;
    for (int64_t i = 0; i < L; ++i)
      hf[i] = std::find(only.begin(), only.end(), json(i)) == only.end() && (i + 1) % step.get<int64_t>() == 0;
    if (step.get<int64_t>() != 1) field += ", decoder_sparse_step = " + step.dump();
  } else {
    field = "(every layer MoE)";
    from = "model";
    value = "every layer";
  }
  if (mg == hf) {
    c.checked_.push_back({{"config", field}, {"args", "moe_layer_freq"}, {"value", value}, {"config_from", from}});
    return;
  }
  c.problems_.push_back(field + (v.dense_layers == "none" ? "" : " = " + args_shown(value)) +
                        (from == "config.json" || v.dense_layers == "none" ? "" : " (" + from + ")") + " (" +
                        layers_said(hf) + "), but args.moe_layer_freq = " + args_shown(freq) + " (" + layers_said(mg) +
                        ")");
}

}  // namespace

std::optional<MegatronArgs> read_megatron_args(const Checkpoint& ck, std::string* note) {
  const BytesMeta* args_item = nullptr;
  const BytesMeta* common = nullptr;
  for (const BytesMeta& b : ck.md.bytes) {
    if (b.fqn == "args") args_item = &b;
    if (b.fqn == kArgsCommonState) common = &b;
  }
  if (!args_item && !common) {
    if (note)
      *note =
          "the checkpoint carries no Megatron-LM args (no 'args' item, no common state): nothing compared with "
          "config.json";
    return std::nullopt;
  }
  ItemReader reader(ck);
  const BytesMeta& item = args_item ? *args_item : *common;
  const std::unique_ptr<pickle::Tree> tree = reader.read_bytes(item);
  const pickle::Value* v = &tree->root;
  std::string from = ck.dir + ": item '" + item.fqn + "'";
  if (!args_item) {  // torch_dist: [state], state['args']
    const pickle::Value* state = v->is(pickle::Kind::List) && v->items().size() == 1 ? &v->items()[0] : nullptr;
    v = state ? state->get("args") : nullptr;
    from += "['args']";
    if (!v) {
      if (note)
        *note =
            "the checkpoint's common state carries no Megatron-LM args (dist_checkpointing.save of a model): nothing "
            "compared with config.json";
      return std::nullopt;
    }
  }
  json fields = args_namespace_fields(*v);
  if (!fields.is_object()) {
    if (note)
      *note = from + " is not an argparse.Namespace (" + pickle::repr(*v, 80) + "): nothing compared with config.json";
    return std::nullopt;
  }
  return MegatronArgs{from + " (Megatron-LM's argparse.Namespace)", std::move(fields)};
}

namespace {

// ---- sizes (stated ones) ----
void check_sizes(ArgsChecker& c, const VariantArgs& v, bool moe) {
  c.size("num_hidden_layers", "num_layers", c.arg("num_layers"));
  c.size("hidden_size", "hidden_size", c.arg("hidden_size"));
  c.size("num_attention_heads", "num_attention_heads", c.arg("num_attention_heads"));
  c.require(v.mla ? "multi-latent attention (the variant's q_a_proj / kv_a_proj_with_mqa)"
                  : "the variant's q_proj / k_proj / v_proj attention (not multi-latent)",
            "multi_latent_attention", v.mla);
  for (const json& p : v.sizes)
    if (auto cv = c.given(p[0].get<std::string>()))
      c.compare(p[0].get<std::string>(), *cv, "config.json", p[1].get<std::string>(), c.arg(p[1].get<std::string>()));
  if (!v.mla) {
    const bool gqa = c.arg("group_query_attention") == json(true);
    c.size("num_key_value_heads", gqa ? "num_query_groups" : "num_attention_heads",
           c.arg(gqa ? "num_query_groups" : "num_attention_heads"));
    json kv = c.arg("kv_channels");
    if (kv.is_null() && c.arg("hidden_size").is_number_integer() && c.arg("num_attention_heads").is_number_integer() &&
        c.arg("num_attention_heads").get<int64_t>() > 0)
      kv = c.arg("hidden_size").get<int64_t>() / c.arg("num_attention_heads").get<int64_t>();
    c.size("head_dim", "kv_channels", kv);
  }
  if (!moe) {
    c.size("intermediate_size", "ffn_hidden_size", c.arg("ffn_hidden_size"));
    return;
  }
  const bool own = !c.arg("moe_ffn_hidden_size").is_null();
  const std::string moe_ffn = own ? "moe_ffn_hidden_size" : "ffn_hidden_size";
  c.size(v.moe_ffn, moe_ffn, c.arg(moe_ffn));
  for (const char* f : {"num_experts", "n_routed_experts", "num_local_experts"})
    c.size(f, "num_experts", c.arg("num_experts"));
  c.setting("num_experts_per_tok", c.stated("num_experts_per_tok"), v.dflt("num_experts_per_tok"), "moe_router_topk",
            c.arg("moe_router_topk"));
}

// transformers' ACT2FN: "silu" and "swish" are both SiLU; Megatron-LM's --swiglu is SiLU-gated.
void check_activation(ArgsChecker& c, const VariantArgs& v, const std::string& model_type) {
  if (v.quick_geglu) {
    check_quick_geglu(c, v);
    return;
  }
  std::optional<json> act = c.stated("hidden_act");
  if (!act) act = v.dflt("hidden_act");
  if (!act || !c.has_arg("swiglu")) return;
  const bool silu = *act == json("silu") || *act == json("swish");
  const json sw = c.arg("swiglu");
  if (silu && sw == json(true))
    c.checked_.push_back({{"config", "hidden_act"},
                          {"args", "swiglu"},
                          {"value", *act},
                          {"config_from", c.stated("hidden_act") ? "config.json" : model_type + "'s default"}});
  else
    c.problems_.push_back("hidden_act = " + args_shown(*act) +
                          (c.stated("hidden_act") ? "" : " (" + model_type + "'s default)") +
                          ", but args.swiglu = " + args_shown(sw) +
                          (sw == json(true) ? " (a SiLU-gated MLP: hidden_act \"silu\")"
                                            : " (the variant's MLP is SiLU-gated: swiglu True)"));
}

// Llama 3's RoPE scaling, linear scaling, or none: rope_type and its parameters.
void check_rope_scaling(ArgsChecker& c) {
  auto type = c.rope("rope_type");
  if (!type) type = c.rope("type");
  const std::string rope_type = type && type->first.is_string() ? type->first.get<std::string>() : "default";
  const std::string type_field = type ? type->second : "rope_type";
  const bool llama3 = c.arg("use_rope_scaling") == json(true);
  const json linear = c.arg("rotary_seq_len_interpolation_factor");
  if (llama3) {
    c.compare(type_field, rope_type, type ? "config.json" : "default", "use_rope_scaling", "llama3",
              "args.use_rope_scaling = True (Llama 3 RoPE scaling: rope_type \"llama3\")");
    if (rope_type != "llama3") return;
    auto f = [&](const char* key, const std::string& arg_field, const json& av) {
      if (auto v = c.rope(key))
        c.compare(v->second, v->first, "config.json", arg_field, av);
      else
        c.problems_.push_back(std::string("rope_parameters.") + key + " is missing, but args." + arg_field + " = " +
                              args_shown(av));
    };
    f("factor", "rope_scaling_factor", c.arg("rope_scaling_factor"));
    f("low_freq_factor", "use_rope_scaling (megatron-core's fixed low_freq_factor)", 1.0);
    f("high_freq_factor", "use_rope_scaling (megatron-core's fixed high_freq_factor)", 4.0);
    f("original_max_position_embeddings", "use_rope_scaling (megatron-core's fixed original_max_position_embeddings)",
      8192);
  } else if (!linear.is_null()) {
    c.compare(type_field, rope_type, type ? "config.json" : "default", "rotary_seq_len_interpolation_factor", "linear",
              "args.rotary_seq_len_interpolation_factor = " + args_shown(linear) +
                  " (linear RoPE scaling: rope_type \"linear\")");
    if (rope_type == "linear")
      if (auto v = c.rope("factor"))
        c.compare(v->second, v->first, "config.json", "rotary_seq_len_interpolation_factor", linear);
  } else {
    c.compare(type_field, rope_type, type ? "config.json" : "default", "use_rope_scaling", "default",
              "args.use_rope_scaling = " + args_shown(c.arg("use_rope_scaling")) +
                  " and no rotary_seq_len_interpolation_factor (unscaled RoPE: rope_type \"default\")");
  }
}

// The norm, its epsilon, RoPE's base, and (where the variant's RoPE is Hugging Face's) its kind.
void check_norm_and_rope(ArgsChecker& c, const VariantArgs& v) {
  c.require("every variant's norm is RMSNorm", "normalization", "RMSNorm");
  const std::string eps = c.has_arg("norm_epsilon") ? "norm_epsilon" : "layernorm_epsilon";
  c.setting("rms_norm_eps", c.stated("rms_norm_eps"), v.dflt("rms_norm_eps"), eps, c.arg(eps));
  auto theta = c.rope("rope_theta");
  c.setting(theta ? theta->second : "rope_theta", theta ? std::optional<json>(theta->first) : std::nullopt,
            v.dflt("rope_theta"), "rotary_base", c.arg("rotary_base"));
  if (!v.rope_checked) return;
  c.require("Hugging Face's RoPE (no learned or absolute positions)", "position_embedding_type", "rope");
  c.require("Hugging Face's rotate_half RoPE (it cannot represent interleaved RoPE)", "rotary_interleaved", false);
  auto prf = c.rope("partial_rotary_factor");
  c.setting(prf ? prf->second : "partial_rotary_factor", prf ? std::optional<json>(prf->first) : std::nullopt,
            v.dflt("partial_rotary_factor"), "rotary_percent", c.arg("rotary_percent"));
  check_rope_scaling(c);
}

// ---- the router (the variant's "router") and which layers are MoE ----
void check_router(ArgsChecker& c, const VariantArgs& v) {
  check_router_groups(c, v);
  check_dense_layers(c, v);
  const json topk = c.arg("moe_router_topk");
  const json scale = c.arg("moe_router_topk_scaling_factor");
  const std::string score = v.sigmoid ? "sigmoid" : "softmax";
  c.require(v.router_name + "'s " + score + " router", "moe_router_score_function", score);
  if (v.norm_topk == "topk_above_1") {
    const bool renorm = topk.is_number_integer() && topk.get<int64_t>() > 1;
    c.setting("norm_topk_prob", c.stated("norm_topk_prob"), v.dflt("norm_topk_prob"), "moe_router_topk", renorm,
              "args.moe_router_topk = " + args_shown(topk) +
                  " (megatron-core renormalizes a sigmoid router's top k when k > 1)");
  } else if (v.norm_topk == "renormalized") {
    c.require(v.router_name + " renormalizes its top-k probabilities", "moe_router_pre_softmax", false);
  } else {
    const bool pre = c.arg("moe_router_pre_softmax") == json(true);
    c.setting("norm_topk_prob", c.stated("norm_topk_prob"), v.dflt("norm_topk_prob"), "moe_router_pre_softmax",
              json(!pre),
              "args.moe_router_pre_softmax = " + args_shown(c.arg("moe_router_pre_softmax")) +
                  " (without it megatron-core renormalizes the top k: norm_topk_prob True)");
  }
  if (v.routed_scaling) {
    const json s = scale.is_number() && scale.get<double>() != 0 ? scale : json(1.0);
    c.setting("routed_scaling_factor", c.stated("routed_scaling_factor"), v.dflt("routed_scaling_factor"),
              "moe_router_topk_scaling_factor", s);
    return;
  }
  const bool unscaled =
      scale.is_null() || (scale.is_number() && (scale.get<double>() == 0 || scale.get<double>() == 1));
  if (c.has_arg("moe_router_topk_scaling_factor") && !unscaled)
    c.problems_.push_back(
        v.router_name +
        "'s router applies no routed scaling, but args.moe_router_topk_scaling_factor = " + args_shown(scale));
  else if (c.has_arg("moe_router_topk_scaling_factor"))
    c.checked_.push_back({{"config", "(no routed scaling)"},
                          {"args", "moe_router_topk_scaling_factor"},
                          {"value", scale},
                          {"config_from", "model"}});
}

}  // namespace

json check_megatron_args(const MegatronArgs& args, const json& config, const std::string& config_path,
                         const json& variant_args) {
  const std::string model_type = config.is_object() ? config.value("model_type", std::string()) : std::string();
  static const json kNone = json::object();
  ArgsChecker c(args, config.is_object() ? config : kNone, model_type);
  const VariantArgs v = variant_args_of(variant_args, model_type);
  const bool moe = !c.arg("num_experts").is_null();
  check_sizes(c, v, moe);
  // ---- the settings no shape shows ----
  c.setting("tie_word_embeddings", c.stated("tie_word_embeddings"), v.dflt("tie_word_embeddings"),
            "untie_embeddings_and_output_weights", json(!(c.arg("untie_embeddings_and_output_weights") == json(true))),
            "args.untie_embeddings_and_output_weights = " + args_shown(c.arg("untie_embeddings_and_output_weights")));
  check_activation(c, v, model_type);
  check_norm_and_rope(c, v);
  if (v.yarn) check_yarn(c, v);
  if (v.sinks) c.require("the model's learnable attention sinks (self_attn.sinks)", "softmax_type", "learnable");
  if (v.sliding_window) check_sliding_window(c, v);
  if (v.mla_rope) check_mla_rope(c, v);
  if (moe) check_router(c, v);
  if (!c.problems_.empty())
    throw_config_contradiction(
        config_path,
        "config.json disagrees with the training arguments the checkpoint carries (" + args.from + "):", c.problems_);
  return std::move(c.checked_);
}

void throw_config_contradiction(const std::string& config_path, const std::string& header,
                                const std::vector<std::string>& problems) {
  std::string text = header;
  for (const std::string& p : problems) text += "\n  " + p;
  text +=
      "\n  the exported model would compute something else than the one trained: correct config.json (--assets DIR, "
      "--config FILE)";
  throw UnsupportedError(Where(config_path), text);
}

std::optional<std::pair<json, std::string>> config_rope_field(const json& config, const std::string& key) {
  auto stated = [](const json& o, const std::string& k) { return o.is_object() && o.contains(k) && !o[k].is_null(); };
  for (const char* where : {"rope_parameters", "", "rope_scaling"}) {
    const json& o = *where ? config.value(where, json()) : config;
    if (stated(o, key)) return std::make_pair(o[key], *where ? std::string(where) + "." + key : key);
    if (std::string(where) == "rope_scaling" && key == "rope_type" && stated(o, "type"))
      return std::make_pair(o["type"], std::string("rope_scaling.type"));
  }
  return std::nullopt;
}

void check_megatron_map(const Checkpoint& saved, MappedModel& map, const MapConfig& config) {
  if (map.from != "megatron" || map.to != "hf") return;
  std::string note;
  std::optional<MegatronArgs> args = read_megatron_args(saved, &note);
  map.args_checked = json::array();
  if (!args) {
    map.args_note = note;
    return;
  }
  map.args_from = args->from;
  // A map file whose variants carry no "args" (a copy of an older megatron.json) reads them as the
  // built-in family's variant of the same name.
  const json rules =
      map.variant_args.is_object() ? map.variant_args : variant_args(load_key_map("megatron"), map.variant);
  map.args_checked = check_megatron_args(*args, config.json, config.path, rules);
}

}  // namespace dcpctl
