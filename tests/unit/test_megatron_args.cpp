// check/megatron_args.h's table on the rows no fixture reaches (no MoE checkpoint here carries
// Megatron-LM's args): the routers of Qwen-MoE, Mixtral, GLM-4.5 and DeepSeek-V3, Llama 3 RoPE
// scaling, interleaved RoPE, the config classes' defaults. The args are what Megatron-LM's
// argparse gives (field names and defaults of megatron-core 0.19.2's megatron.training.arguments);
// the reading of real ones is tests/e2e/megatron_args_test.py's.
#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include "check/megatron_args.h"
#include "util/error.h"
#include "view/maps/keymap.h"

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
json rules(const std::string& variant) {
  return variant_args(load_key_map("megatron"), variant);
}

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

  // DeepSeek-V3: routed_scaling_factor's default 2.5 (these args predate MLA's fields: no MLA rows).
  a.values["moe_router_score_function"] = "sigmoid";
  a.values["moe_router_topk_scaling_factor"] = 2.5;
  c["model_type"] = "deepseek_v3";
  c["n_group"] = 1;  // DeepseekV3Config's default 8 groups, 4 chosen: not these args' routing
  c["topk_group"] = 1;
  CHECK(fails(a, c, "deepseek_v3").empty());
  a.values["rotary_interleaved"] = true;  // MLA's even/odd RoPE columns, then no rotate-half of pairs
  CHECK_THAT(fails(a, c, "deepseek_v3"),
             Contains("(it cannot represent rotary_interleaved), but args.rotary_interleaved = True"));
  a.values["rotary_interleaved"] = false;
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

TEST_CASE("megatron args: a variant is data (megatron.json's \"args\"), malformed data is refused", "[megatron_args]") {
  // A variant the code never names: a softmax router that applies routed scaling, its own class defaults.
  const json v = {{"attention", "gqa"},
                  {"rope", "rotate_half"},
                  {"moe_ffn", "moe_intermediate_size"},
                  {"router",
                   {{"name", "Made-up"},
                    {"score_function", "softmax"},
                    {"norm_topk_prob", "renormalized"},
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

namespace {

// A DeepSeek-V3's args as Megatron-LM 0.19.2's parse_args + validate_args give them for
// make_megatron_args_torch_dist.py's MLA flags (--multi-latent-attention --q-lora-rank 12
// --kv-lora-rank 8 --qk-head-dim 8 --qk-pos-emb-head-dim 4 --v-head-dim 6 --rotary-scaling-factor 4
// --mscale 1 --mscale-all-dim 1 --moe-layer-freq [0]+[1] --moe-router-num-groups 2
// --moe-router-group-topk 1 ...; the fixture megatron_args_torch_dist/mla holds them).
MegatronArgs deepseek_args() {
  MegatronArgs a = llama_args();
  const json mla = {{"group_query_attention", false},
                    {"num_query_groups", 1},
                    {"multi_latent_attention", true},
                    {"q_lora_rank", 12},
                    {"kv_lora_rank", 8},
                    {"qk_head_dim", 8},
                    {"qk_pos_emb_head_dim", 4},
                    {"v_head_dim", 6},
                    {"rope_type", nullptr},
                    {"rotary_scaling_factor", 4.0},
                    {"mscale", 1.0},
                    {"mscale_all_dim", 1.0},
                    {"num_experts", 4},
                    {"moe_ffn_hidden_size", 16},
                    {"moe_router_topk", 2},
                    {"moe_router_score_function", "sigmoid"},
                    {"moe_router_topk_scaling_factor", 2.5},
                    {"moe_router_num_groups", 2},
                    {"moe_router_group_topk", 1},
                    {"moe_layer_freq", {0, 1}}};
  for (const auto& [k, v] : mla.items()) a.values[k] = v;
  return a;
}

json deepseek_config() {
  return {{"model_type", "deepseek_v3"},
          {"num_hidden_layers", 2},
          {"hidden_size", 64},
          {"num_attention_heads", 4},
          {"q_lora_rank", 12},
          {"kv_lora_rank", 8},
          {"qk_nope_head_dim", 8},
          {"qk_rope_head_dim", 4},
          {"v_head_dim", 6},
          {"n_routed_experts", 4},
          {"moe_intermediate_size", 16},
          {"num_experts_per_tok", 2},
          {"n_group", 2},
          {"topk_group", 1},
          {"first_k_dense_replace", 1},
          {"rms_norm_eps", 1e-5},
          {"rope_parameters",
           {{"rope_type", "yarn"},
            {"rope_theta", 500000.0},
            {"factor", 4.0},
            {"original_max_position_embeddings", 4096},
            {"beta_fast", 32.0},
            {"beta_slow", 1.0},
            {"mscale", 1.0},
            {"mscale_all_dim", 1.0}}}};
}

}  // namespace

TEST_CASE("megatron args: DeepSeek-V3's MLA sizes, YaRN and rope_interleave", "[megatron_args]") {
  const MegatronArgs a = deepseek_args();
  const json checked = check_megatron_args(a, deepseek_config(), "cfg/config.json", rules("deepseek_v3"));
  for (const auto& [cf, af] : {std::pair<const char*, const char*>{"q_lora_rank", "q_lora_rank"},
                               {"kv_lora_rank", "kv_lora_rank"},
                               {"qk_nope_head_dim", "qk_head_dim"},
                               {"qk_rope_head_dim", "qk_pos_emb_head_dim"},
                               {"v_head_dim", "v_head_dim"},
                               {"rope_interleave", "multi_latent_attention"},
                               {"rope_parameters.rope_type", "rope_type"},
                               {"rope_parameters.factor", "rotary_scaling_factor"},
                               {"rope_parameters.original_max_position_embeddings", "multi_latent_attention"},
                               {"rope_parameters.mscale / mscale_all_dim (YaRN's cos/sin scale)", "mscale"},
                               {"rope_parameters.mscale_all_dim (YaRN's softmax scale)", "mscale_all_dim"},
                               {"n_group", "moe_router_num_groups"},
                               {"topk_group", "moe_router_group_topk"},
                               {"first_k_dense_replace", "moe_layer_freq"}}) {
    INFO(cf);
    CHECK(compared(checked, cf, af));
  }
  CHECK_FALSE(compared(checked, "num_key_value_heads", "num_attention_heads"));  // MLA: not GQA's rows

  auto with = [](const std::function<void(json&)>& f) {
    json c = deepseek_config();
    f(c);
    return c;
  };
  CHECK_THAT(fails(a, with([](json& c) { c["kv_lora_rank"] = 16; }), "deepseek_v3"),
             Contains("kv_lora_rank = 16, but args.kv_lora_rank = 8"));
  CHECK_THAT(fails(a, with([](json& c) { c["qk_nope_head_dim"] = 16; }), "deepseek_v3"),
             Contains("qk_nope_head_dim = 16, but args.qk_head_dim = 8"));
  // No q LoRA (DeepSeek-V2-Lite, Moonlight): null is a value, compared as one.
  CHECK_THAT(fails(a, with([](json& c) { c["q_lora_rank"] = nullptr; }), "deepseek_v3"),
             Contains("q_lora_rank = None, but args.q_lora_rank = 12"));
  CHECK_THAT(
      fails(a, with([](json& c) { c["rope_interleave"] = false; }), "deepseek_v3"),
      Contains("rope_interleave = False, but megatron-core's multi-latent attention always takes the RoPE columns"));
  CHECK_THAT(fails(a, with([](json& c) { c["rope_parameters"]["factor"] = 40.0; }), "deepseek_v3"),
             Contains("rope_parameters.factor = 40.0, but args.rotary_scaling_factor = 4.0"));
  CHECK_THAT(
      fails(a, with([](json& c) { c["rope_parameters"]["original_max_position_embeddings"] = 256; }), "deepseek_v3"),
      Contains("rope_parameters.original_max_position_embeddings = 256, but megatron-core's MLA uses 4096"));
  CHECK_THAT(fails(a, with([](json& c) { c["rope_parameters"]["beta_fast"] = 16.0; }), "deepseek_v3"),
             Contains("rope_parameters.beta_fast = 16.0, but megatron-core's MLA uses 32.0"));
  // mscale_all_dim left out: transformers' cos/sin scale is mscale(4, 1) = 1.139 and its softmax is
  // not scaled; megatron's mscale(4, 1) / mscale(4, 1) = 1 and mscale(4, 1)^2 = 1.2965.
  const std::string e = fails(a, with([](json& c) { c["rope_parameters"].erase("mscale_all_dim"); }), "deepseek_v3");
  CHECK_THAT(e,
             Contains("YaRN's cos/sin scale) = 1.1386") &&
                 Contains("megatron-core's is 1.0 (args.rotary_scaling_factor 4.0, mscale 1.0, mscale_all_dim 1.0)"));
  CHECK_THAT(e, Contains("YaRN's softmax scale) = 1.0") && Contains("megatron-core's is 1.2964"));
  // attention_factor stated: taken as transformers takes it.
  CHECK(fails(a, with([](json& c) { c["rope_parameters"]["attention_factor"] = 1.0; }), "deepseek_v3").empty());
  CHECK_THAT(fails(a, with([](json& c) { c["rope_parameters"]["attention_factor"] = 1.5; }), "deepseek_v3"),
             Contains("YaRN's cos/sin scale) = 1.5"));

  // args.rope_type None is MLA's YaRN; "rope" is transformers' default RoPE, whose softmax megatron
  // still scales by mscale(rotary_scaling_factor, mscale_all_dim)^2.
  json plain = with([](json& c) { c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}}; });
  CHECK_THAT(fails(a, plain, "deepseek_v3"), Contains("rope_parameters.rope_type = \"default\", but args.rope_type = "
                                                      "None (MLATransformerConfig's default \"yarn\")"));
  MegatronArgs r = a;
  r.values["rope_type"] = "rope";
  CHECK_THAT(
      fails(r, plain, "deepseek_v3"),
      Contains("megatron-core scales MLA's softmax by mscale(rotary_scaling_factor, mscale_all_dim)^2 = 1.2964"));
  r.values["rotary_scaling_factor"] = 1.0;  // Megatron-LM's default
  CHECK(fails(r, plain, "deepseek_v3").empty());
  CHECK_THAT(fails(r, deepseek_config(), "deepseek_v3"),
             Contains("rope_parameters.rope_type = \"yarn\", but args.rope_type = \"rope\""));

  // A GQA variant under MLA args, and the other way.
  MegatronArgs g = llama_args();
  g.values["multi_latent_attention"] = true;
  CHECK_THAT(fails(g, llama_config(), "llama_qwen"),
             Contains("(not multi-latent), but args.multi_latent_attention = True"));
  MegatronArgs m = a;
  m.values["multi_latent_attention"] = false;
  CHECK_THAT(fails(m, deepseek_config(), "deepseek_v3"), Contains("multi-latent attention (the variant's q_a_proj"));
}

TEST_CASE("megatron args: group-limited routing and the dense layers", "[megatron_args]") {
  const MegatronArgs a = deepseek_args();
  auto with = [](const std::function<void(json&)>& f) {
    json c = deepseek_config();
    f(c);
    return c;
  };
  // n_group / topk_group left out: DeepseekV3Config's 8 and 4, but megatron's 2 groups, 1 chosen.
  CHECK_THAT(fails(a, with([](json& c) { c.erase("n_group"); }), "deepseek_v3"),
             Contains("n_group = 8 (deepseek_v3's default), but args.moe_router_num_groups = 2"));
  CHECK_THAT(fails(a, with([](json& c) {
                     c.erase("n_group");
                     c.erase("topk_group");
                   }),
                   "deepseek_v3"),
             Contains("n_group = 8 (deepseek_v3's default), but args.moe_router_num_groups = 2") &&
                 Contains("topk_group = 4 (deepseek_v3's default), but args.moe_router_group_topk = 1"));
  // No group limit either side: one group (GLM-4.5's default) against megatron's None.
  MegatronArgs u = a;
  u.values["moe_router_num_groups"] = nullptr;
  u.values["moe_router_group_topk"] = nullptr;
  const json checked = check_megatron_args(u, with([](json& c) {
                                             c["n_group"] = 1;
                                             c["topk_group"] = 1;
                                           }),
                                           "cfg/config.json", rules("deepseek_v3"));
  CHECK(compared(checked, "n_group, topk_group", "moe_router_num_groups, moe_router_group_topk"));
  CHECK_THAT(fails(u, deepseek_config(), "deepseek_v3"),
             Contains("(routing limited to 1 of 2 expert groups), but args.moe_router_num_groups = None, "
                      "moe_router_group_topk = None (no group limit)"));
  // Both limited alike, but megatron scores a group by its top 4 / 1 = 4, transformers by its top 2.
  MegatronArgs w = a;
  w.values["moe_router_topk"] = 4;
  CHECK_THAT(fails(w, with([](json& c) { c["num_experts_per_tok"] = 4; }), "deepseek_v3"),
             Contains("scores an expert group by its top 2 experts, but megatron-core by its top moe_router_topk / "
                      "moe_router_group_topk = 4 / 1 = 4"));

  // first_k_dense_replace against moe_layer_freq [0, 1] (layer 0 dense).
  CHECK_THAT(fails(a, with([](json& c) { c["first_k_dense_replace"] = 0; }), "deepseek_v3"),
             Contains("first_k_dense_replace = 0 (no dense layer), but args.moe_layer_freq = [0,1] (dense layers 0)"));
  CHECK_THAT(fails(a, with([](json& c) { c.erase("first_k_dense_replace"); }), "deepseek_v3"),
             Contains("first_k_dense_replace = 3 (deepseek_v3's default) (dense layers 0, 1)"));
  MegatronArgs every = a;
  every.values["moe_layer_freq"] = 1;  // Megatron-LM's default: every layer MoE
  CHECK(fails(every, with([](json& c) { c["first_k_dense_replace"] = 0; }), "deepseek_v3").empty());

  // Qwen-MoE's mlp_only_layers and decoder_sparse_step; Mixtral's every layer.
  MegatronArgs q = llama_args();
  q.values["num_experts"] = 4;
  q.values["moe_layer_freq"] = json::array({0, 1});
  json qc = llama_config();
  qc["model_type"] = "qwen3_moe";
  qc["norm_topk_prob"] = true;
  qc["num_experts_per_tok"] = 2;
  CHECK_THAT(fails(q, qc, "llama_qwen"),
             Contains("mlp_only_layers = [] (qwen3_moe's default) (no dense layer), but args.moe_layer_freq = [0,1]"));
  qc["mlp_only_layers"] = {0};
  CHECK(compared(check_megatron_args(q, qc, "cfg/config.json", rules("llama_qwen")), "mlp_only_layers",
                 "moe_layer_freq"));
  qc.erase("mlp_only_layers");
  qc["decoder_sparse_step"] = 2;  // layers 1, 3, ... MoE
  CHECK(compared(check_megatron_args(q, qc, "cfg/config.json", rules("llama_qwen")),
                 "mlp_only_layers, decoder_sparse_step = 2", "moe_layer_freq"));
  q.values["moe_layer_freq"] = 1;
  json mc = llama_config();
  mc["model_type"] = "mixtral";
  mc["num_experts_per_tok"] = 2;
  CHECK(
      compared(check_megatron_args(q, mc, "cfg/config.json", rules("mixtral")), "(every layer MoE)", "moe_layer_freq"));
  q.values["moe_layer_freq"] = 2;
  CHECK_THAT(fails(q, mc, "mixtral"),
             Contains("(every layer MoE) (no dense layer), but args.moe_layer_freq = 2 (dense layers 1)"));
}
