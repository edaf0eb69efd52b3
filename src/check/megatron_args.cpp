#include "check/megatron_args.h"

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
//   attention        "gqa": num_key_value_heads and head_dim are compared; "mla": not (MLA's sizes)
//   rope             "rotate_half": the RoPE rows of the table; "unchecked": none (DeepSeek-V3's YaRN)
//   moe_ffn          the config field of the routed experts' size (Mixtral's is intermediate_size)
//   router           score_function softmax | sigmoid; norm_topk_prob: "not_pre_softmax" (compared
//                    with not moe_router_pre_softmax), "renormalized" (the class always renormalizes:
//                    moe_router_pre_softmax False), "topk_above_1" (megatron-core renormalizes a
//                    sigmoid top k when k > 1); routed_scaling: whether routed_scaling_factor exists;
//                    name: how messages call the router (absent: the config's model_type)
//   config_defaults  model_type -> transformers 5.23's class defaults of the settings no shape shows
//                    (rms_norm_eps, rope_theta, partial_rotary_factor, tie_word_embeddings,
//                    hidden_act, num_experts_per_tok, norm_topk_prob, routed_scaling_factor; printed
//                    from each class: LlamaConfig() and so on); a model_type not listed: only what
//                    config.json states is compared
struct VariantArgs {
  bool mla = false, rope_checked = true, sigmoid = false, routed_scaling = false;
  std::string moe_ffn = "moe_intermediate_size", router_name, norm_topk;
  json defaults;  // config_defaults[model_type], or null

  bool known() const { return defaults.is_object(); }
  std::optional<json> dflt(const char* field) const {
    if (!known() || !defaults.contains(field)) return std::nullopt;
    return defaults[field];
  }
};

VariantArgs variant_args_of(const json& a, const std::string& model_type) {
  auto bad = [](const std::string& what) {
    throw UsageError(Where("key map"), "the variant's \"args\": " + what + " (src/check/megatron_args.cpp lists the fields)");
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
  v.rope_checked = text(a, "rope", {"rotate_half", "unchecked"}) == "rotate_half";
  v.moe_ffn = text(a, "moe_ffn", {"moe_intermediate_size", "intermediate_size"});
  const json r = a.value("router", json());
  if (!r.is_object()) bad("\"router\" is missing");
  v.sigmoid = text(r, "score_function", {"softmax", "sigmoid"}) == "sigmoid";
  v.norm_topk = text(r, "norm_topk_prob", {"not_pre_softmax", "renormalized", "topk_above_1"});
  if (!r.value("routed_scaling", json()).is_boolean()) bad("router \"routed_scaling\" is a boolean");
  v.routed_scaling = r["routed_scaling"].get<bool>();
  v.router_name = r.value("name", model_type);
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
  // A RoPE setting: rope_parameters, the top level, then rope_scaling (older spellings).
  std::optional<std::pair<json, std::string>> rope(const std::string& key) const {
    for (const char* where : {"rope_parameters", "rope_scaling"}) {
      auto it = config_.find(where);
      if (it != config_.end() && it->is_object() && it->contains(key) && !(*it)[key].is_null())
        return std::make_pair((*it)[key], std::string(where) + "." + key);
      if (std::string(where) == "rope_parameters")
        if (auto top = stated(key)) return std::make_pair(*top, key);
    }
    return std::nullopt;
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

json check_megatron_args(const MegatronArgs& args, const json& config, const std::string& config_path,
                         const json& variant_args) {
  const std::string model_type = config.is_object() ? config.value("model_type", std::string()) : std::string();
  static const json kNone = json::object();
  ArgsChecker c(args, config.is_object() ? config : kNone, model_type);
  const VariantArgs v = variant_args_of(variant_args, model_type);
  const bool moe = !c.arg("num_experts").is_null();

  // ---- sizes (stated ones) ----
  c.size("num_hidden_layers", "num_layers", c.arg("num_layers"));
  c.size("hidden_size", "hidden_size", c.arg("hidden_size"));
  c.size("num_attention_heads", "num_attention_heads", c.arg("num_attention_heads"));
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
  } else {
    const bool own = !c.arg("moe_ffn_hidden_size").is_null();
    const std::string moe_ffn = own ? "moe_ffn_hidden_size" : "ffn_hidden_size";
    c.size(v.moe_ffn, moe_ffn, c.arg(moe_ffn));
    for (const char* f : {"num_experts", "n_routed_experts", "num_local_experts"})
      c.size(f, "num_experts", c.arg("num_experts"));
    c.setting("num_experts_per_tok", c.stated("num_experts_per_tok"),
              v.dflt("num_experts_per_tok"),
              "moe_router_topk", c.arg("moe_router_topk"));
  }

  // ---- the settings no shape shows ----
  c.setting("tie_word_embeddings", c.stated("tie_word_embeddings"), v.dflt("tie_word_embeddings"),
            "untie_embeddings_and_output_weights", json(!(c.arg("untie_embeddings_and_output_weights") == json(true))),
            "args.untie_embeddings_and_output_weights = " + args_shown(c.arg("untie_embeddings_and_output_weights")));
  {
    // transformers' ACT2FN: "silu" and "swish" are both SiLU; Megatron-LM's --swiglu is SiLU-gated.
    std::optional<json> act = c.stated("hidden_act");
    if (!act) act = v.dflt("hidden_act");
    if (act && c.has_arg("swiglu")) {
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
  }
  c.require("every variant's norm is RMSNorm", "normalization", "RMSNorm");
  {
    const std::string eps = c.has_arg("norm_epsilon") ? "norm_epsilon" : "layernorm_epsilon";
    c.setting("rms_norm_eps", c.stated("rms_norm_eps"), v.dflt("rms_norm_eps"), eps,
              c.arg(eps));
  }
  {
    auto theta = c.rope("rope_theta");
    c.setting(theta ? theta->second : "rope_theta", theta ? std::optional<json>(theta->first) : std::nullopt,
              v.dflt("rope_theta"), "rotary_base", c.arg("rotary_base"));
  }
  if (v.rope_checked) {
    c.require("Hugging Face's RoPE (no learned or absolute positions)", "position_embedding_type", "rope");
    c.require("Hugging Face's rotate_half RoPE (it cannot represent interleaved RoPE)", "rotary_interleaved", false);
    auto prf = c.rope("partial_rotary_factor");
    c.setting(prf ? prf->second : "partial_rotary_factor", prf ? std::optional<json>(prf->first) : std::nullopt,
              v.dflt("partial_rotary_factor"), "rotary_percent",
              c.arg("rotary_percent"));
    auto type = c.rope("rope_type");
    if (!type) type = c.rope("type");
    const std::string rope_type = type && type->first.is_string() ? type->first.get<std::string>() : "default";
    const std::string type_field = type ? type->second : "rope_type";
    const bool llama3 = c.arg("use_rope_scaling") == json(true);
    const json linear = c.arg("rotary_seq_len_interpolation_factor");
    if (llama3) {
      c.compare(type_field, rope_type, type ? "config.json" : "default", "use_rope_scaling", "llama3",
                "args.use_rope_scaling = True (Llama 3 RoPE scaling: rope_type \"llama3\")");
      if (rope_type == "llama3") {
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
        f("original_max_position_embeddings",
          "use_rope_scaling (megatron-core's fixed original_max_position_embeddings)", 8192);
      }
    } else if (!linear.is_null()) {
      c.compare(type_field, rope_type, type ? "config.json" : "default", "rotary_seq_len_interpolation_factor",
                "linear",
                "args.rotary_seq_len_interpolation_factor = " + args_shown(linear) +
                    " (linear RoPE scaling: rope_type \"linear\")");
      if (rope_type == "linear") {
        if (auto v = c.rope("factor"))
          c.compare(v->second, v->first, "config.json", "rotary_seq_len_interpolation_factor", linear);
      }
    } else {
      c.compare(type_field, rope_type, type ? "config.json" : "default", "use_rope_scaling", "default",
                "args.use_rope_scaling = " + args_shown(c.arg("use_rope_scaling")) +
                    " and no rotary_seq_len_interpolation_factor (unscaled RoPE: rope_type \"default\")");
    }
  }

  // ---- the router (the variant's "router") ----
  if (moe) {
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
    } else {
      const bool unscaled =
          scale.is_null() || (scale.is_number() && (scale.get<double>() == 0 || scale.get<double>() == 1));
      if (c.has_arg("moe_router_topk_scaling_factor") && !unscaled)
        c.problems_.push_back(v.router_name + "'s router applies no routed scaling, but args.moe_router_topk_scaling_factor = " +
                              args_shown(scale));
      else if (c.has_arg("moe_router_topk_scaling_factor"))
        c.checked_.push_back({{"config", "(no routed scaling)"},
                              {"args", "moe_router_topk_scaling_factor"},
                              {"value", scale},
                              {"config_from", "model"}});
    }
  }

  if (!c.problems_.empty()) {
    std::string text = "config.json disagrees with the training arguments the checkpoint carries (" + args.from + "):";
    for (const std::string& p : c.problems_) text += "\n  " + p;
    text +=
        "\n  the exported model would compute something else than the one trained: correct config.json (--assets DIR, "
        "--config FILE)";
    throw UnsupportedError(Where(config_path), text);
  }
  return std::move(c.checked_);
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
  const json rules = map.variant_args.is_object() ? map.variant_args : variant_args(load_key_map("megatron"), map.variant);
  map.args_checked = check_megatron_args(*args, config.json, config.path, rules);
}

}  // namespace dcpctl
