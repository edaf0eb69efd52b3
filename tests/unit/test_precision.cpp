// plan/precision: which tensors --dtype keeps in their saved dtype, and why: transformers' patterns
// matched as transformers matches them (checked against a regex search over every pattern of the
// table), key map declarations, --keep-dtype globs, --cast-all; the planner writing a kept tensor
// in its saved dtype; config.json's dtype after a cast (write/assets). The export checked by
// transformers itself is tests/interop/precision_test.py's.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "check/hf_schema.h"
#include "metadata_models.h"
#include "plan/plan.h"
#include "plan/precision.h"
#include "util/error.h"
#include "write/assets.h"

using namespace dcpctl;
using nlohmann::json;

namespace {

PrecisionPolicy policy(std::optional<DType> cast, json config = nullptr, std::vector<std::string> globs = {},
                       bool cast_all = false, std::vector<KeyMap> maps = {}) {
  PrecisionInputs in;
  in.cast = cast;
  in.config = std::move(config);
  in.keep_globs = std::move(globs);
  in.cast_all = cast_all;
  in.maps = std::move(maps);
  return PrecisionPolicy(in);
}

const char* kBias = "model.layers.1.mlp.gate.e_score_correction_bias";

}  // namespace

TEST_CASE("precision: the table is transformers 5.24.0's, per model_type") {
  const KeepInFp32& t = keep_in_fp32();
  CHECK(t.transformers == "5.24.0");
  // The models issue 48 names, each keeping its router's correction bias, and since transformers
  // 5.24 its weight (issue 79: `gate.weight` joined their _keep_in_fp32_modules_strict).
  for (const char* type : {"deepseek_v3", "deepseek_v32", "glm4_moe", "glm_moe_dsa", "dots1", "exaone_moe", "hy_v3",
                           "mimo_v2_flash", "solar_open"}) {
    INFO(type);
    REQUIRE(t.strict_of(type) != nullptr);
    CHECK(*t.strict_of(type) ==
          std::vector<std::string>{"e_score_correction_bias",
                                   type == std::string("mimo_v2_flash") ? "mlp.gate.weight" : "gate.weight"});
  }
  CHECK(*t.strict_of("deepseek_v2") == std::vector<std::string>{"gate.weight"});
  CHECK(*t.strict_of("ernie4_5_moe") == std::vector<std::string>{"e_score_correction_bias", "gate.weight"});
  CHECK(t.strict_of("llama") == nullptr);
  CHECK(t.strict_of("no_such_model") == nullptr);
  REQUIRE(t.fp16_of("t5") != nullptr);
  CHECK(*t.fp16_of("t5") == std::vector<std::string>{"wo"});
}

TEST_CASE("precision: a transformers pattern is a regex searched in the key, as transformers does") {
  CHECK(transformers_pattern_matches("e_score_correction_bias", kBias));
  CHECK(transformers_pattern_matches("gate.weight", "model.layers.0.mlp.gate.weight"));
  CHECK(transformers_pattern_matches("gate.weight", "model.layers.0.mlp.gate_weight"));  // `.` is any character
  CHECK_FALSE(transformers_pattern_matches("gate.weight", "model.layers.0.mlp.gate.bias"));
  CHECK(transformers_pattern_matches("norm", "model.layers.0.input_layernorm.weight"));  // anywhere in the key
  CHECK(transformers_pattern_matches("layers.*.sinks", "model.layers.7.self_attn.sinks"));
  CHECK_FALSE(transformers_pattern_matches("sinks.*x", "model.layers.7.self_attn.sinks"));
  CHECK(transformers_pattern_matches("wo", "encoder.block.0.layer.1.DenseReluDense.wo.weight"));
  CHECK_FALSE(transformers_pattern_matches("wo", "encoder.block.0.layer.1.DenseReluDense.wi.weight"));

  // Every pattern of the table against keys that hold it, lack it, or hold it with a character
  // changed: the same answer as std::regex_search of the pattern with `*` -> `.*` (the body
  // build_glob_alternation gives Python's re.search).
  std::vector<std::string> keys{kBias,
                                "model.layers.0.mlp.gate.weight",
                                "lm_head.weight",
                                "model.norm.weight",
                                "model.layers.3.self_attn.sinks",
                                "encoder.block.0.layer.1.DenseReluDense.wo.weight"};
  const KeepInFp32& t = keep_in_fp32();
  for (const auto* lists : {&t.strict, &t.fp16})
    for (const auto& [type, pats] : *lists)
      for (const auto& p : pats) {
        std::string body;
        for (char c : p) body += c == '*' ? std::string(".*") : std::string(1, c);
        std::regex re(body);
        std::vector<std::string> tries = keys;
        tries.push_back("model.layers.2." + p + ".weight");
        std::string changed = p;
        changed[0] = changed[0] == 'q' ? 'z' : 'q';
        tries.push_back("model.layers.2." + changed);
        for (const auto& k : tries) {
          INFO(type << ": pattern '" << p << "' on '" << k << "'");
          CHECK(transformers_pattern_matches(p, k) == std::regex_search(k, re));
        }
      }
}

TEST_CASE("precision: model types from config.json and its sub-configs") {
  json cfg = {{"model_type", "glm4v_moe"},
              {"text_config", {{"model_type", "glm4v_moe_text"}}},
              {"vision_config", {{"model_type", "glm4v_moe_vision"}}},
              {"other", {{"model_type", "glm4v_moe"}}},
              {"hidden_size", 8}};
  CHECK(config_model_types(cfg) == std::vector<std::string>{"glm4v_moe", "glm4v_moe_text", "glm4v_moe_vision"});
  CHECK(config_model_types(json()).empty());
  CHECK(config_model_types(json{{"text_config", {{"model_type", "qwen3_moe"}}}}) ==
        std::vector<std::string>{"qwen3_moe"});
}

TEST_CASE("precision: the model's list keeps its tensors when --dtype narrows") {
  json ds = {{"model_type", "deepseek_v3"}};
  for (DType d : {DType::BFloat16, DType::Float16, DType::Float8_E4M3FN}) {
    PrecisionPolicy p = policy(d, ds);
    INFO(torch_name(d));
    // A key the model schema holds: the schema's dtype, in on-disk names.
    CHECK(p.reason(kBias) ==
          std::string("transformers 5.24.0 DeepseekV3ForCausalLM (model_type deepseek_v3) keeps "
                      "model.layers.#.mlp.gate.e_score_correction_bias in float32 when it loads in ") +
              (d == DType::BFloat16 ? "bfloat16" : "float16") + " (model schema)");
    // The router's weight: float32 since transformers 5.24 (5.23 cast it).
    CHECK(p.reason("model.layers.1.mlp.gate.weight") ==
          std::string("transformers 5.24.0 DeepseekV3ForCausalLM (model_type deepseek_v3) keeps "
                      "model.layers.#.mlp.gate.weight in float32 when it loads in ") +
              (d == DType::BFloat16 ? "bfloat16" : "float16") + " (model schema)");
    CHECK(p.reason("model.layers.1.mlp.up_proj.weight").empty());
    // Another writer's name: transformers' list, searched in the key.
    CHECK(p.reason("layers.1.moe.e_score_correction_bias") ==
          "transformers 5.24.0 deepseek_v3 _keep_in_fp32_modules_strict 'e_score_correction_bias'");
  }
  // What transformers renames on load is kept under its on-disk name (hy_v3's mlp.expert_bias is
  // its in-memory e_score_correction_bias), which the lists alone do not match.
  CHECK(policy(DType::BFloat16, json{{"model_type", "hy_v3"}})
            .reason("model.layers.1.mlp.expert_bias")
            .find("(model schema)") != std::string::npos);
  // Casting up loses nothing: transformers keeps nothing then, nor does dcpctl.
  CHECK(policy(DType::Float32, ds).reason(kBias).empty());
  CHECK(policy(DType::Float64, ds).reason(kBias).empty());
  CHECK(policy(std::nullopt, ds).reason(kBias).empty());
  // No config, or a model that keeps nothing: nothing kept.
  CHECK(policy(DType::BFloat16).reason(kBias).empty());
  CHECK(policy(DType::BFloat16, json{{"model_type", "llama"}}).reason(kBias).empty());
  // A composite model's text part.
  CHECK(!policy(DType::BFloat16, json{{"model_type", "x"}, {"text_config", {{"model_type", "glm4_moe"}}}})
             .reason(kBias)
             .empty());
  // _keep_in_fp32_modules: float16 (and fp8) only, as transformers loads in float16 only.
  const char* wo = "encoder.block.0.layer.1.DenseReluDense.wo.weight";
  json t5 = {{"model_type", "t5"}};
  CHECK(policy(DType::Float16, t5).reason(wo) ==
        "transformers 5.24.0 T5ForConditionalGeneration (model_type t5) keeps "
        "encoder.block.#.layer.#.DenseReluDense.wo.weight in float32 when it loads in float16 (model schema)");
  CHECK(!policy(DType::Float8_E5M2, t5).reason(wo).empty());
  CHECK(policy(DType::BFloat16, t5).reason(wo).empty());
}

TEST_CASE("precision: --keep-dtype globs, for any --dtype, asked first") {
  PrecisionPolicy p = policy(DType::Float32, nullptr, {"*.bias", "lm_head.*"});
  CHECK(p.reason("a.bias") == "--keep-dtype '*.bias'");
  CHECK(p.reason("lm_head.weight") == "--keep-dtype 'lm_head.*'");
  CHECK(p.reason("a.weight").empty());
  PrecisionPolicy both = policy(DType::BFloat16, json{{"model_type", "deepseek_v3"}}, {"*correction*"});
  CHECK(both.reason(kBias) == "--keep-dtype '*correction*'");
  json d = both.describe();
  CHECK(d["model_types"] == json::array({"deepseek_v3"}));
  CHECK(d["keep_dtype"] == json::array({"*correction*"}));
  CHECK(d["transformers"] == "5.24.0");
  CHECK(d["cast_all"] == false);
  CHECK(d["config"].is_null());
}

TEST_CASE("precision: key maps declare kept tensors on either side (keep_dtype)") {
  CHECK(map_pattern_matches("layers.{L}.moe.expert_bias_E", "layers.12.moe.expert_bias_E"));
  CHECK_FALSE(map_pattern_matches("layers.{L}.moe.expert_bias_E", "layers.x.moe.expert_bias_E"));
  CHECK_FALSE(map_pattern_matches("layers.{L}.moe.expert_bias_E", "layers.1.moe.expert_bias_E.x"));
  CHECK_FALSE(map_pattern_matches("layers.{L}.moe.expert_bias_E", "a.layers.1.moe.expert_bias_E"));
  CHECK(map_pattern_matches("model.layers.{M + n_layers}.mlp.gate.e_score_correction_bias",
                            "model.layers.61.mlp.gate.e_score_correction_bias"));
  CHECK(map_pattern_matches("a.{X}1.b", "a.211.b"));  // the digits backtrack

  KeyMap titan = load_key_map("torchtitan-deepseek-v3");
  size_t declared = 0;
  for (const auto& r : titan.rules) declared += r.keep_dtype;
  CHECK(declared == 2);  // the expert bias of the layers and of the MTP block
  PrecisionPolicy p = policy(DType::BFloat16, nullptr, {}, false, {titan});
  CHECK(p.reason("layers.3.moe.expert_bias_E").rfind("key map torchtitan-deepseek-v3 rule ", 0) == 0);
  CHECK(!p.reason("mtp_layers.0.moe.expert_bias_E").empty());
  CHECK(!p.reason(kBias).empty());
  CHECK(p.reason("layers.3.moe.router.gate.weight").empty());
  // The model's reason comes before a map's.
  CHECK(policy(DType::BFloat16, json{{"model_type", "deepseek_v3"}}, {}, false, {titan})
            .reason(kBias)
            .rfind("transformers", 0) == 0);
  // Casting up: a map's declaration is about narrowing too.
  CHECK(policy(DType::Float32, nullptr, {}, false, {titan}).reason("layers.3.moe.expert_bias_E").empty());

  // A map file: keep_dtype is a boolean.
  char path[] = "/tmp/dcpctl-map-XXXXXX.json";
  int fd = ::mkstemps(path, 5);
  REQUIRE(fd >= 0);
  ::close(fd);
  auto write_map = [&](const std::string& keep) {
    FILE* f = std::fopen(path, "wb");
    std::string text =
        R"({"schema": "dcpctl-map/1", "name": "m", "sides": ["a", "b"], "rules": [{"a": "x.{L}.bias", "b": "y.{L}.bias", "keep_dtype": )" +
        keep + "}]}";
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  };
  write_map("true");
  KeyMap m = load_key_map(path);
  CHECK(m.rules[0].keep_dtype);
  CHECK(policy(DType::Float16, nullptr, {}, false, {m}).reason("y.0.bias") == "key map m rule 0 (keep_dtype)");
  write_map("\"yes\"");
  CHECK_THROWS_AS(load_key_map(path), UsageError);
  std::remove(path);
}

TEST_CASE("precision: the planner writes a kept tensor in its saved dtype, --cast-all casts it and says so") {
  Checkpoint ck = checkpoint({tensor(kBias, {4}, {{0, 4}}),
                              tensor("model.layers.1.mlp.shared_experts.up_proj.weight", {4, 2}, {{0, 0, 4, 2}}),
                              tensor("model.norm.weight", {2}, {{0, 2}}, DType::BFloat16)});
  PrecisionPolicy p = policy(DType::BFloat16, json{{"model_type", "deepseek_v3"}});
  Target t;
  t.precision = &p;
  WritePlan plan = plan_write(ck, {}, DType::BFloat16, t);
  REQUIRE(plan.tensors.size() == 3);
  CHECK(plan.tensors[0].dst == DType::Float32);
  CHECK(plan.tensors[1].dst == DType::BFloat16);
  CHECK(plan.total_bytes == 4 * 4 + 8 * 2 + 2 * 2);
  json s = plan.cast.summary();
  CHECK(s["tensors"] == 1);
  REQUIRE(s["kept"].size() == 1);
  CHECK(s["kept"][0]["key"] == kBias);
  CHECK(s["kept"][0]["dtype"] == "float32");
  CHECK(s["kept"][0]["reason"].get<std::string>().find("(model schema)") != std::string::npos);
  CHECK(s["policy"]["schema"]["class"] == "DeepseekV3ForCausalLM");
  CHECK(s["cast_anyway"].empty());
  CHECK(s["policy"]["model_types"] == json::array({"deepseek_v3"}));

  // Without the policy (as before it): everything cast.
  WritePlan plain = plan_write(ck, {}, DType::BFloat16, Target{});
  CHECK(plain.tensors[0].dst == DType::BFloat16);
  CHECK(plain.cast.summary()["policy"].is_null());

  PrecisionPolicy all = policy(DType::BFloat16, json{{"model_type", "deepseek_v3"}}, {}, true);
  t.precision = &all;
  WritePlan cast_all = plan_write(ck, {}, DType::BFloat16, t);
  CHECK(cast_all.tensors[0].dst == DType::BFloat16);
  json c = cast_all.cast.summary();
  CHECK(c["tensors"] == 2);
  CHECK(c["kept"].empty());
  REQUIRE(c["cast_anyway"].size() == 1);
  CHECK(c["cast_anyway"][0]["key"] == kBias);
  CHECK(c["cast_anyway"][0]["dtype"] == "float32");
  CHECK(c["policy"]["cast_all"] == true);
}

TEST_CASE("precision: a model_type the schema lacks is found by its architectures, or refused for an HF folder") {
  // Kimi-K2's config: remote code (model_type kimi_k2) naming transformers' DeepseekV3ForCausalLM.
  const json kimi = {{"model_type", "kimi_k2"}, {"architectures", {"DeepseekV3ForCausalLM"}}};
  auto hf = [](json config, std::vector<std::string> globs = {}, bool cast_all = false) {
    PrecisionInputs in;
    in.cast = DType::BFloat16;
    in.config = std::move(config);
    in.config_path = "ckpt/config.json";
    in.keep_globs = std::move(globs);
    in.cast_all = cast_all;
    in.model_output = true;
    return PrecisionPolicy(in);
  };
  PrecisionPolicy p = hf(kimi);
  CHECK(p.reason(kBias).find("DeepseekV3ForCausalLM (model_type deepseek_v3) keeps") != std::string::npos);
  CHECK(p.reason("model.layers.1.mlp.gate.weight").find("transformers 5.24.0 DeepseekV3ForCausalLM") == 0);
  CHECK(p.reason("model.layers.1.mlp.shared_experts.up_proj.weight").empty());
  json d = p.describe();
  CHECK(d["schema"]["model_type"] == "deepseek_v3");
  CHECK(d["schema"]["found_by"] == "architectures");
  CHECK(d["schema_why"].is_null());
  CHECK(d["model_types"] == json::array({"kimi_k2"}));
  CHECK(policy(DType::BFloat16, json{{"model_type", "deepseek_v3"}}).describe()["schema"]["found_by"] == "model_type");
  // Neither its type nor its class: an HF folder is refused (exit 5) naming both and the ways out.
  const json unknown = {{"model_type", "no_such_model"}, {"architectures", {"NoSuchModelForCausalLM"}}};
  try {
    hf(unknown);
    FAIL("no refusal");
  } catch (const UnsupportedError& e) {
    const std::string m = e.what();
    CHECK(m.find("model_type no_such_model") != std::string::npos);
    CHECK(m.find("NoSuchModelForCausalLM") != std::string::npos);
    CHECK(m.find("--keep-dtype") != std::string::npos);
    CHECK(m.find("--cast-all") != std::string::npos);
    CHECK(m.find("ckpt/config.json") != std::string::npos);
  }
  CHECK_THROWS_AS(hf(json{{"architectures", {"NoSuchModelForCausalLM"}}}), UnsupportedError);
  // The user's decision ends it: what to keep, or nothing; the summary says no schema decided.
  PrecisionPolicy kept = hf(unknown, {"*.router_bias"});
  CHECK(kept.reason("model.layers.0.mlp.router_bias") == "--keep-dtype '*.router_bias'");
  CHECK(kept.describe()["schema"].is_null());
  CHECK(kept.describe()["schema_why"].get<std::string>().find("model_type no_such_model is not one transformers") !=
        std::string::npos);
  CHECK_NOTHROW(hf(unknown, {}, true));
  // A model_type the schema holds, another class named: known, its lists apply, not refused.
  PrecisionPolicy other = hf(json{{"model_type", "deepseek_v3"}, {"architectures", {"DeepseekV3Model"}}});
  CHECK(other.describe()["schema"].is_null());
  CHECK(other.describe()["schema_why"].get<std::string>().find("DeepseekV3Model") != std::string::npos);
  CHECK(other.reason(kBias).find("_keep_in_fp32_modules_strict") != std::string::npos);
  // An output with no config.json of its own (a .safetensors file, a DCP) is not refused; nor a run
  // with no config.json at all, which says so.
  CHECK(policy(DType::BFloat16, unknown).describe()["schema_why"].is_string());
  CHECK_NOTHROW(hf(nullptr));
  CHECK(hf(nullptr).describe()["schema_why"].get<std::string>().find("no config.json") != std::string::npos);
  // A type transformers defines that the schema could not build (PerceptionLM: its timm vision tower's
  // default architecture is no release's) is refused although no class of it declares keep-in-float32
  // modules (the lists do not say all); --keep-dtype ends the refusal.
  REQUIRE(hf_schema().failed_reason("perception_lm") != nullptr);
  CHECK(keep_in_fp32().strict_of("perception_lm") == nullptr);
  const json plm = {{"model_type", "perception_lm"}, {"architectures", {"PerceptionLMForConditionalGeneration"}}};
  CHECK_THROWS_AS(hf(plm), UnsupportedError);
  PrecisionPolicy kept_proj = hf(plm, {"*multi_modal_projector*"});
  CHECK(kept_proj.describe()["schema"].is_null());
  CHECK(kept_proj.describe()["schema_why"].get<std::string>().find("perception_lm") != std::string::npos);
  CHECK(!kept_proj.reason("model.multi_modal_projector.linear_1.bias").empty());
  CHECK(kept_proj.reason("model.language_model.layers.0.mlp.up_proj.weight").empty());
  // LFM2-MoE, whose class defaults leave layer_types null (the schema's real_config completes them):
  // the schema's, its router expert_bias kept float32 as transformers keeps it, though no list says so.
  REQUIRE(hf_schema().failed_reason("lfm2_moe") == nullptr);
  CHECK(keep_in_fp32().strict_of("lfm2_moe") == nullptr);
  PrecisionPolicy lfm2 = hf(json{{"model_type", "lfm2_moe"}, {"architectures", {"Lfm2MoeForCausalLM"}}});
  CHECK(lfm2.describe()["schema"].is_object());
  CHECK(lfm2.reason("model.layers.1.feed_forward.expert_bias").find("model schema") != std::string::npos);
  CHECK(lfm2.reason("model.layers.0.feed_forward.w1.weight").empty());
  REQUIRE(std::binary_search(hf_schema().skipped.begin(), hf_schema().skipped.end(), "ernie4_5_vl_moe_text"));
  // A part of a composite (ernie4_5_vl_moe_text, skipped: no class of its own) whose classes keep
  // tensors in float32 (its router's gate.weight and moe_statics) is cast by those lists, not refused.
  PrecisionPolicy ernie =
      hf(json{{"model_type", "ernie4_5_vl_moe_text"}, {"architectures", {"Ernie4_5_VLMoeTextModel"}}});
  CHECK(!ernie.reason("model.layers.1.mlp.gate.weight").empty());
  // A type transformers defines whose classes keep tensors in float32 but which the schema did not
  // build (SLANeXt, Pop2Piano: its "skipped") is not refused: its classes' lists decide, and
  // schema_why says no schema did (it was refused, exit 5).
  for (const char* t : {"slanext", "pop2piano"}) {
    REQUIRE(hf_schema().of(t) == nullptr);
    REQUIRE(std::binary_search(hf_schema().skipped.begin(), hf_schema().skipped.end(), t));
  }
  PrecisionPolicy sla = hf(json{{"model_type", "slanext"}, {"architectures", {"SLANeXtForTableRecognition"}}});
  CHECK(sla.describe()["schema"].is_null());
  CHECK(sla.describe()["schema_why"].get<std::string>().find("slanext") != std::string::npos);
  CHECK(sla.reason("head.structure_generator.0.weight").find("_keep_in_fp32_modules_strict") != std::string::npos);
  CHECK(sla.reason("backbone.encoder.layers.0.weight").empty());
  CHECK_NOTHROW(hf(json{{"model_type", "pop2piano"}, {"architectures", {"Pop2PianoForConditionalGeneration"}}}));
  // Casting up decides nothing: no refusal.
  PrecisionInputs up;
  up.cast = DType::Float32;
  up.config = unknown;
  up.model_output = true;
  CHECK_NOTHROW(PrecisionPolicy(up));
}

TEST_CASE("precision: config.json says the dtype written, keys in their order") {
  std::string in =
      R"({"architectures": ["X"], "dtype": "float32", "text_config": {"dtype": "float32", "a": 1}, "vision_config": {"b": 2}, "z": 0})";
  json out = json::parse(config_with_dtype(in, DType::BFloat16));
  CHECK(out["dtype"] == "bfloat16");
  CHECK(out["text_config"]["dtype"] == "bfloat16");
  CHECK(!out["vision_config"].contains("dtype"));
  CHECK(!out.contains("torch_dtype"));
  nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(config_with_dtype(in, DType::BFloat16));
  std::vector<std::string> keys;
  for (const auto& [k, v] : ordered.items()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"architectures", "dtype", "text_config", "vision_config", "z"});
  // An older config names torch_dtype: both are set.
  json old = json::parse(config_with_dtype(R"({"torch_dtype": "float32"})", DType::Float16));
  CHECK(old["torch_dtype"] == "float16");
  CHECK(old["dtype"] == "float16");
  CHECK(json::parse(config_with_dtype("{}", DType::BFloat16))["dtype"] == "bfloat16");
  CHECK(config_with_dtype("not json", DType::BFloat16) == "not json");
  CHECK(config_with_dtype("[1]", DType::BFloat16) == "[1]");
}
