// check/titan_config.h's rows on a model no run here trains: torchtitan 0.3.0's own DeepSeek-V3
// debugmodel, its model_spec as Trainer.Config.to_dict() writes it (make_titan_config.py:
// titan_config_models/deepseek_v3_debugmodel.json), against DeepseekV3Config fields. The finding and
// reading of real job configs beside real runs is tests/e2e/titan_config_test.py's.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "check/titan_config.h"
#include "util/error.h"

using namespace dcpctl;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

TitanJobConfig deepseek_job() {
  std::ifstream f(std::string(DCPCTL_SOURCE_DIR) +
                  "/tests/fixtures/layouts/titan_config_models/deepseek_v3_debugmodel.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return {"out/job_config.json", {{"model_spec", json::parse(ss.str())}, {"checkpoint", {{"folder", "checkpoint"}}}}};
}

// The debugmodel's values as DeepseekV3Config spells them (its router made a sigmoid: below).
json deepseek_config() {
  return {{"model_type", "deepseek_v3"},
          {"hidden_size", 256},
          {"vocab_size", 2048},
          {"num_hidden_layers", 6},
          {"num_attention_heads", 16},
          {"kv_lora_rank", 512},
          {"qk_nope_head_dim", 128},
          {"qk_rope_head_dim", 64},
          {"v_head_dim", 128},
          {"intermediate_size", 1024},
          {"moe_intermediate_size", 256},
          {"n_routed_experts", 8},
          {"num_experts_per_tok", 3},
          {"norm_topk_prob", false},
          {"routed_scaling_factor", 1.0},
          {"rms_norm_eps", 1e-5},
          {"tie_word_embeddings", false},
          {"rope_parameters",
           {{"rope_type", "yarn"},
            {"rope_theta", 10000.0},
            {"factor", 40.0},
            {"beta_fast", 32.0},
            {"beta_slow", 1.0},
            {"original_max_position_embeddings", 4096}}}};
}

void set_router(TitanJobConfig& job, const char* field, const json& v) {
  for (json& layer : job.values["model_spec"]["model"]["layers"])
    if (layer["moe"].is_object()) layer["moe"]["router"][field] = v;
}

}  // namespace

TEST_CASE("titan_config: DeepSeek-V3 debugmodel's softmax router is not DeepseekV3ForCausalLM's", "[titan_config]") {
  // torchtitan 0.3.0's deepseek_v3 debugmodel scores with a softmax; transformers' DeepSeek-V3
  // router is a sigmoid, and no config.json field says otherwise.
  const TitanJobConfig job = deepseek_job();
  const json rows = titan_config_rows("deepseek_v3");
  REQUIRE(rows.is_object());
  CHECK_THROWS_WITH(check_titan_job_config(job, deepseek_config(), "cfg/config.json", rows),
                    Contains("DeepSeek-V3's router scores with a sigmoid") &&
                        Contains("layers[1].moe.router.score_func = \"softmax\"") && Contains("out/job_config.json"));
  CHECK_THROWS_AS(check_titan_job_config(job, deepseek_config(), "cfg/config.json", rows), UnsupportedError);
}

TEST_CASE("titan_config: DeepSeek-V3 rows agree, then each changed setting is named", "[titan_config]") {
  TitanJobConfig job = deepseek_job();
  set_router(job, "score_func", "sigmoid");
  const json rows = titan_config_rows("deepseek_v3");
  const json checked = check_titan_job_config(job, deepseek_config(), "cfg/config.json", rows);
  std::set<std::string> got;
  for (const json& c : checked) got.insert(c["config"].get<std::string>());
  for (const char* f : {"hidden_size",
                        "vocab_size",
                        "num_hidden_layers",
                        "num_attention_heads",
                        "kv_lora_rank",
                        "qk_nope_head_dim",
                        "qk_rope_head_dim",
                        "v_head_dim",
                        "intermediate_size",
                        "moe_intermediate_size",
                        "n_routed_experts",
                        "num_experts_per_tok",
                        "norm_topk_prob",
                        "routed_scaling_factor",
                        "rms_norm_eps",
                        "tie_word_embeddings",
                        "rope_parameters.rope_theta",
                        "rope_parameters.rope_type",
                        "rope_parameters.factor",
                        "rope_parameters.beta_fast",
                        "rope_parameters.beta_slow",
                        "rope_parameters.original_max_position_embeddings"})
    CHECK(got.count(f) == 1);

  auto refused = [&](json cfg, const std::string& a, const std::string& b) {
    CHECK_THROWS_WITH(check_titan_job_config(job, cfg, "cfg/config.json", rows), Contains(a) && Contains(b));
  };
  json c = deepseek_config();
  c["routed_scaling_factor"] = 2.5;
  refused(c, "routed_scaling_factor = 2.5", "moe.router.route_scale = 1.0");
  c = deepseek_config();
  c.erase("routed_scaling_factor");  // DeepseekV3Config's default 2.5
  refused(c, "deepseek_v3's default", "route_scale = 1.0");
  c = deepseek_config();
  c["norm_topk_prob"] = true;
  refused(c, "norm_topk_prob = true", "moe.router.route_norm = false");
  c = deepseek_config();
  c["rope_parameters"]["factor"] = 4.0;
  refused(c, "rope_parameters.factor = 4.0", "rope.rope_factor = 40.0");
  c = deepseek_config();
  c["rope_parameters"]["rope_type"] = "default";
  refused(c, "rope_parameters.rope_type = \"default\"", "rope.scaling = \"yarn\"");
  c = deepseek_config();
  c["intermediate_size"] = 512;  // layer 0 is dense; the MoE layers have no feed_forward: no claim from them
  refused(c, "intermediate_size = 512", "layers[0].feed_forward.w1.out_features = 1024");
}

TEST_CASE("titan_config: what the job config lacks or the table does not know makes no claim", "[titan_config]") {
  TitanJobConfig job = deepseek_job();
  set_router(job, "score_func", "sigmoid");
  for (json& layer : job.values["model_spec"]["model"]["layers"]) layer["attention"]["rope"].erase("theta");
  json c = deepseek_config();
  c["rope_parameters"]["rope_theta"] = 1.0;
  const json checked = check_titan_job_config(job, c, "cfg/config.json", titan_config_rows("deepseek_v3"));
  for (const json& x : checked) CHECK(x["config"] != "rope_parameters.rope_theta");
  // a spelling of RoPE scaling the row does not know
  set_router(job, "score_func", "sigmoid");
  for (json& layer : job.values["model_spec"]["model"]["layers"]) layer["attention"]["rope"]["scaling"] = "ntk";
  CHECK_NOTHROW(check_titan_job_config(job, deepseek_config(), "cfg/config.json", titan_config_rows("deepseek_v3")));
  CHECK(titan_config_rows("gpt_oss").is_null());
}
