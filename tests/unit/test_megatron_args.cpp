// check/megatron_args.h's table on the rows no fixture reaches (no MoE checkpoint here carries
// Megatron-LM's args): the routers of Qwen-MoE, Mixtral, GLM-4.5 and DeepSeek-V3, Llama 3 RoPE
// scaling, interleaved RoPE, the config classes' defaults. The args are what Megatron-LM's
// argparse gives (field names and defaults of megatron-core 0.19.2's megatron.training.arguments);
// the reading of real ones is tests/e2e/megatron_args_test.py's.
#include <catch2/catch.hpp>

#include <string>

#include "check/megatron_args.h"
#include "view/maps/keymap.h"
#include "util/error.h"

using namespace dcpctl;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// A dense Llama's args (megatron-core's defaults where the command line says nothing).
MegatronArgs llama_args() {
  return {"ckpt: item 'args'",
          {{"num_layers", 2},
           {"hidden_size", 64},
           {"num_attention_heads", 4},
           {"group_query_attention", true},
           {"num_query_groups", 2},
           {"kv_channels", 16},
           {"ffn_hidden_size", 128},
           {"num_experts", nullptr},
           {"moe_ffn_hidden_size", nullptr},
           {"moe_router_topk", 2},
           {"moe_router_pre_softmax", false},
           {"moe_router_score_function", "softmax"},
           {"moe_router_topk_scaling_factor", nullptr},
           {"untie_embeddings_and_output_weights", true},
           {"swiglu", true},
           {"normalization", "RMSNorm"},
           {"norm_epsilon", 1e-5},
           {"rotary_base", 500000},
           {"position_embedding_type", "rope"},
           {"rotary_interleaved", false},
           {"rotary_percent", 1.0},
           {"use_rope_scaling", false},
           {"rope_scaling_factor", 8.0},
           {"rotary_seq_len_interpolation_factor", nullptr}}};
}

json llama_config() {
  return {{"model_type", "llama"},    {"num_hidden_layers", 2},
          {"hidden_size", 64},        {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"intermediate_size", 128},
          {"rms_norm_eps", 1e-5},     {"rope_parameters", {{"rope_theta", 500000.0}, {"rope_type", "default"}}}};
}

// The variant's "args" as the built-in map holds them (megatron.json).
json rules(const std::string& variant) { return variant_args(load_key_map("megatron"), variant); }

std::string fails(const MegatronArgs& a, const json& c, const std::string& variant) {
  try {
    check_megatron_args(a, c, "cfg/config.json", rules(variant));
  } catch (const UnsupportedError& e) {
    return e.what();
  }
  return "";
}

bool compared(const json& checked, const std::string& config_field, const std::string& arg_field) {
  for (const json& c : checked)
    if (c["config"] == config_field && c["args"] == arg_field) return true;
  return false;
}

}  // namespace

TEST_CASE("megatron args: a dense Llama agrees; the settings no shape shows are compared", "[megatron_args]") {
  const json checked = check_megatron_args(llama_args(), llama_config(), "cfg/config.json", rules("llama_qwen"));
  CHECK(compared(checked, "num_key_value_heads", "num_query_groups"));
  CHECK(compared(checked, "rms_norm_eps", "norm_epsilon"));
  CHECK(compared(checked, "rope_parameters.rope_theta", "rotary_base"));
  CHECK(
      compared(checked, "tie_word_embeddings", "untie_embeddings_and_output_weights"));  // LlamaConfig's default False
  CHECK(compared(checked, "hidden_act", "swiglu"));
  CHECK_FALSE(compared(checked, "num_experts_per_tok", "moe_router_topk"));  // not an MoE
  CHECK_FALSE(compared(checked, "head_dim", "kv_channels"));                 // a size config.json leaves out
}

TEST_CASE("megatron args: RoPE contradictions", "[megatron_args]") {
  MegatronArgs a = llama_args();
  json c = llama_config();
  c["rope_parameters"]["rope_theta"] = 10000.0;
  CHECK_THAT(fails(a, c, "llama_qwen"),
             Contains("rope_parameters.rope_theta = 10000.0, but args.rotary_base = 500000") &&
                 Contains("cfg/config.json") && Contains("ckpt: item 'args'"));
  c = llama_config();
  a.values["rotary_interleaved"] = true;
  CHECK_THAT(fails(a, c, "llama_qwen"),
             Contains("cannot represent interleaved RoPE") && Contains("args.rotary_interleaved = True"));

  // Llama 3 scaling: rope_type llama3 with megatron-core's fixed factors.
  a = llama_args();
  a.values["use_rope_scaling"] = true;
  CHECK_THAT(fails(a, c, "llama_qwen"),
             Contains("rope_parameters.rope_type = \"default\", but args.use_rope_scaling = True"));
  c["rope_parameters"] = {{"rope_theta", 500000.0},  {"rope_type", "llama3"},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  CHECK(fails(a, c, "llama_qwen").empty());
  c["rope_parameters"]["factor"] = 32.0;
  CHECK_THAT(fails(a, c, "llama_qwen"), Contains("rope_parameters.factor = 32.0, but args.rope_scaling_factor = 8.0"));
  c["rope_parameters"]["factor"] = 8.0;
  c["rope_parameters"]["original_max_position_embeddings"] = 131072;
  CHECK_THAT(fails(a, c, "llama_qwen"), Contains("rope_parameters.original_max_position_embeddings = 131072"));
  a.values["use_rope_scaling"] = false;
  CHECK_THAT(fails(a, c, "llama_qwen"),
             Contains("rope_parameters.rope_type = \"llama3\", but args.use_rope_scaling = False"));

  // transformers < 5's top-level rope_theta and rope_scaling spellings.
  a = llama_args();
  c = llama_config();
  c.erase("rope_parameters");
  c["rope_theta"] = 500000.0;
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  CHECK_THAT(fails(a, c, "llama_qwen"), Contains("rope_scaling.type = \"linear\""));
  a.values["rotary_seq_len_interpolation_factor"] = 2.0;
  CHECK(fails(a, c, "llama_qwen").empty());
}

TEST_CASE("megatron args: Qwen-MoE's softmax router, norm_topk_prob = not pre-softmax", "[megatron_args]") {
  MegatronArgs a = llama_args();
  a.values["num_experts"] = 8;
  a.values["moe_ffn_hidden_size"] = 32;
  a.values["moe_router_topk"] = 2;
  json c = llama_config();
  c["model_type"] = "qwen3_moe";
  c["moe_intermediate_size"] = 32;
  c["num_experts"] = 8;
  c["num_experts_per_tok"] = 2;
  c["norm_topk_prob"] = true;
  const json checked = check_megatron_args(a, c, "cfg/config.json", rules("llama_qwen"));
  CHECK(compared(checked, "norm_topk_prob", "moe_router_pre_softmax"));
  CHECK(compared(checked, "num_experts_per_tok", "moe_router_topk"));
  CHECK(compared(checked, "moe_intermediate_size", "moe_ffn_hidden_size"));
  CHECK(compared(checked, "num_experts", "num_experts"));

  c["num_experts_per_tok"] = 4;
  CHECK_THAT(fails(a, c, "llama_qwen"), Contains("num_experts_per_tok = 4, but args.moe_router_topk = 2"));
  c["num_experts_per_tok"] = 2;
  c.erase("norm_topk_prob");  // Qwen3MoeConfig's default: False
  CHECK_THAT(fails(a, c, "llama_qwen"),
             Contains("norm_topk_prob = False (qwen3_moe's default), but args.moe_router_pre_softmax = False"));
  a.values["moe_router_pre_softmax"] = true;
  CHECK(fails(a, c, "llama_qwen").empty());
  a.values["moe_router_score_function"] = "sigmoid";
  CHECK_THAT(fails(a, c, "llama_qwen"), Contains("softmax router, but args.moe_router_score_function = \"sigmoid\""));
  a.values["moe_router_score_function"] = "softmax";
  a.values["moe_router_topk_scaling_factor"] = 2.5;
  CHECK_THAT(fails(a, c, "llama_qwen"),
             Contains("applies no routed scaling, but args.moe_router_topk_scaling_factor = 2.5"));
}

TEST_CASE("megatron args: Mixtral always renormalizes its top k", "[megatron_args]") {
  MegatronArgs a = llama_args();
  a.values["num_experts"] = 4;
  json c = llama_config();
  c["model_type"] = "mixtral";
  c["num_local_experts"] = 4;
  c["num_experts_per_tok"] = 2;
  const json checked = check_megatron_args(a, c, "cfg/config.json", rules("mixtral"));
  CHECK(compared(checked, "intermediate_size", "ffn_hidden_size"));  // the experts' ffn
  CHECK(compared(checked, "num_local_experts", "num_experts"));
  a.values["moe_router_pre_softmax"] = true;
  CHECK_THAT(fails(a, c, "mixtral"),
             Contains("Mixtral renormalizes its top-k probabilities, but args.moe_router_pre_softmax = True"));
}

TEST_CASE("megatron args: the sigmoid routers of GLM-4.5 and DeepSeek-V3", "[megatron_args]") {
  MegatronArgs a = llama_args();
  a.values["num_experts"] = 8;
  a.values["moe_ffn_hidden_size"] = 32;
  a.values["moe_router_topk"] = 2;
  a.values["moe_router_score_function"] = "sigmoid";
  a.values["rotary_percent"] = 0.5;
  json c = llama_config();
  c["model_type"] = "glm4_moe";
  c["n_routed_experts"] = 8;
  c["num_experts_per_tok"] = 2;
  // Glm4MoeConfig's defaults: partial_rotary_factor 0.5, norm_topk_prob True, routed_scaling_factor 1.0.
  const json checked = check_megatron_args(a, c, "cfg/config.json", rules("glm4_moe"));
  CHECK(compared(checked, "partial_rotary_factor", "rotary_percent"));
  CHECK(compared(checked, "norm_topk_prob", "moe_router_topk"));
  CHECK(compared(checked, "routed_scaling_factor", "moe_router_topk_scaling_factor"));
  a.values["rotary_percent"] = 1.0;
  CHECK_THAT(fails(a, c, "glm4_moe"),
             Contains("partial_rotary_factor = 0.5 (glm4_moe's default), but args.rotary_percent = 1.0"));
  a.values["rotary_percent"] = 0.5;
  c["routed_scaling_factor"] = 2.5;
  CHECK_THAT(fails(a, c, "glm4_moe"),
             Contains("routed_scaling_factor = 2.5, but args.moe_router_topk_scaling_factor = 1.0"));
  c.erase("routed_scaling_factor");
  a.values["moe_router_topk"] = 1;  // megatron-core does not renormalize one sigmoid score
  c["num_experts_per_tok"] = 1;
  CHECK_THAT(fails(a, c, "glm4_moe"),
             Contains("norm_topk_prob = True (glm4_moe's default), but args.moe_router_topk = 1"));
  a.values["moe_router_topk"] = 2;
  c["num_experts_per_tok"] = 2;
  a.values["moe_router_score_function"] = "softmax";
  CHECK_THAT(fails(a, c, "glm4_moe"), Contains("sigmoid router, but args.moe_router_score_function = \"softmax\""));

  // DeepSeek-V3: routed_scaling_factor's default 2.5; no RoPE-type or attention-size rows.
  a.values["moe_router_score_function"] = "sigmoid";
  a.values["moe_router_topk_scaling_factor"] = 2.5;
  a.values["rotary_interleaved"] = true;  // not compared for deepseek_v3 (rope_interleave: not in the table)
  c["model_type"] = "deepseek_v3";
  CHECK(fails(a, c, "deepseek_v3").empty());
  a.values["moe_router_topk_scaling_factor"] = nullptr;
  CHECK_THAT(
      fails(a, c, "deepseek_v3"),
      Contains("routed_scaling_factor = 2.5 (deepseek_v3's default), but args.moe_router_topk_scaling_factor = 1.0"));
}

TEST_CASE("megatron args: every contradiction named at once; an unknown model_type compares what config.json states",
          "[megatron_args]") {
  MegatronArgs a = llama_args();
  json c = llama_config();
  c["rms_norm_eps"] = 1e-6;
  c["tie_word_embeddings"] = true;
  c["hidden_act"] = "gelu";
  const std::string e = fails(a, c, "llama_qwen");
  CHECK_THAT(e, Contains("rms_norm_eps = 1e-06, but args.norm_epsilon = 1e-05") &&
                    Contains("tie_word_embeddings = True, but args.untie_embeddings_and_output_weights = True") &&
                    Contains("hidden_act = \"gelu\", but args.swiglu = True"));
  a.values["normalization"] = "LayerNorm";
  CHECK_THAT(fails(a, llama_config(), "llama_qwen"), Contains("RMSNorm, but args.normalization = \"LayerNorm\""));

  a = llama_args();
  c = {{"model_type", "somebody_else"}, {"hidden_size", 64}};
  const json checked = check_megatron_args(a, c, "cfg/config.json", rules("llama_qwen"));
  CHECK(compared(checked, "hidden_size", "hidden_size"));
  CHECK_FALSE(compared(checked, "rms_norm_eps", "norm_epsilon"));  // no class, no default: not compared
  CHECK_FALSE(compared(checked, "tie_word_embeddings", "untie_embeddings_and_output_weights"));
}

TEST_CASE("megatron args: a field an older Megatron-LM's args lack is not compared", "[megatron_args]") {
  MegatronArgs a = llama_args();
  for (const char* f : {"rotary_interleaved", "use_rope_scaling", "norm_epsilon", "swiglu"}) a.values.erase(f);
  a.values["layernorm_epsilon"] = 1e-5;
  const json checked = check_megatron_args(a, llama_config(), "cfg/config.json", rules("llama_qwen"));
  CHECK(compared(checked, "rms_norm_eps", "layernorm_epsilon"));
  CHECK_FALSE(compared(checked, "hidden_act", "swiglu"));
  CHECK_FALSE(compared(checked, "rope_parameters.rope_type", "use_rope_scaling"));
  CHECK(compared(checked, "rope_parameters.rope_theta", "rotary_base"));
}

TEST_CASE("megatron args: a variant is data (megatron.json's \"args\"), malformed data is refused",
          "[megatron_args]") {
  // A variant the code never names: a softmax router that applies routed scaling, its own class defaults.
  const json v = {{"attention", "gqa"},
                  {"rope", "rotate_half"},
                  {"moe_ffn", "moe_intermediate_size"},
                  {"router",
                   {{"name", "Made-up"}, {"score_function", "softmax"}, {"norm_topk_prob", "renormalized"},
                    {"routed_scaling", true}}},
                  {"config_defaults", {{"made_up", {{"rms_norm_eps", 1e-5}, {"routed_scaling_factor", 3.0}}}}}};
  MegatronArgs a = llama_args();
  a.values["num_experts"] = 4;
  a.values["moe_router_topk"] = 2;
  a.values["moe_router_score_function"] = "softmax";
  a.values["moe_router_pre_softmax"] = false;
  a.values["moe_router_topk_scaling_factor"] = 3.0;
  json c = llama_config();
  c["model_type"] = "made_up";
  c["num_experts_per_tok"] = 2;
  const json checked = check_megatron_args(a, c, "cfg/config.json", v);
  CHECK(compared(checked, "routed_scaling_factor", "moe_router_topk_scaling_factor"));  // the default 3.0
  CHECK(compared(checked, "Made-up renormalizes its top-k probabilities", "moe_router_pre_softmax"));
  a.values["moe_router_topk_scaling_factor"] = 1.0;
  try {
    check_megatron_args(a, c, "cfg/config.json", v);
    FAIL("a routed scaling of 1.0 against the variant's default 3.0 passed");
  } catch (const UnsupportedError& e) {
    CHECK_THAT(std::string(e.what()), Contains("routed_scaling_factor = 3.0 (made_up's default)"));
  }
  json bad = v;
  bad["router"]["score_function"] = "tanh";
  CHECK_THROWS_AS(check_megatron_args(a, c, "cfg/config.json", bad), UsageError);
  bad = v;
  bad.erase("attention");
  CHECK_THROWS_AS(check_megatron_args(a, c, "cfg/config.json", bad), UsageError);
  // Every built-in variant carries its "args" and a row of defaults for each model_type it lists.
  for (const KeyMap::Variant& var : load_key_map("megatron").variants) {
    INFO(var.name);
    REQUIRE(var.args.is_object());
    for (const std::string& t : var.model_types) CHECK(var.args["config_defaults"].contains(t));
  }
}
