// The HF checks' pure rules: the safetensors header audit (src/check/safetensors_audit.h) and
// config.json against a key list (src/check/hf_config_checks.h), the keys against the model schema
// (src/check/hf_schema.h). The folders real writers wrote,
// damaged, are tests/interop/hf_verify_test.py's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "check/hf_config_checks.h"
#include "check/hf_schema.h"
#include "check/safetensors_audit.h"
#include "meta/keep_dtype_entry.h"

using namespace dcpctl;
using nlohmann::json;

// The schema check's helpers (src/check/hf_schema.cpp), tested on their own.
namespace dcpctl::hf_schema_impl {
std::optional<int64_t> evaluate_dims(const json& config, const std::string& formula, const std::string& schema_type);
std::string block_id(const std::string& key, const std::string& pattern);
}  // namespace dcpctl::hf_schema_impl

namespace {

std::vector<std::string> codes(const Findings& f) {
  std::vector<std::string> out;
  for (const auto& x : f) out.push_back(x.code);
  return out;
}

bool has(const Findings& f, const std::string& code) {
  return std::any_of(f.begin(), f.end(), [&](const Finding& x) { return x.code == code; });
}

Findings audit(const std::string& header, uint64_t data) {
  return audit_safetensors_header(header, 8 + header.size(), data, "t").problems;
}

ConfigCheckResult config_check(const json& c, const std::vector<HfTensor>& t, bool require_mtp = false) {
  return check_hf_config(
      c, "config.json", t, [](const std::string&, const std::string&) { return std::optional<bool>(true); },
      require_mtp);
}

std::vector<HfTensor> llama(int layers, const std::string& dtype = "bfloat16") {
  std::vector<HfTensor> t = {{"model.embed_tokens.weight", dtype, {64, 16}},
                             {"lm_head.weight", dtype, {64, 16}},
                             {"model.norm.weight", dtype, {16}}};
  for (int i = 0; i < layers; ++i)
    t.push_back({"model.layers." + std::to_string(i) + ".mlp.down_proj.weight", dtype, {16, 32}});
  return t;
}

}  // namespace

TEST_CASE("hf audit: every header problem at once", "[hf]") {
  CHECK(
      audit(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
          16)
          .empty());
  // Duplicate key: both entries are seen, not the last alone.
  Findings f = audit(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
      16);
  CHECK(codes(f) == std::vector<std::string>{"duplicate-key"});
  // Overlap, a size that is not dtype x shape, and offsets past the data, in one header.
  f = audit(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("c":{"dtype":"BF16","shape":[3],"data_offsets":[12,16]},"d":{"dtype":"U8","shape":[4],"data_offsets":[16,20]}})",
      16);
  CHECK(has(f, "window-overlap"));
  CHECK(has(f, "size-mismatch"));
  CHECK(has(f, "window-out-of-file"));
  // A gap between tensors and after the last.
  CHECK(codes(audit(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 12)) ==
        std::vector<std::string>{"offsets-gap", "offsets-gap"});
  CHECK(codes(audit("{\"a\":", 0)) == std::vector<std::string>{"header-invalid"});
}

TEST_CASE("hf audit: F4 counts elements, F8_E8M0 is a byte", "[hf]") {
  CHECK(safetensors_dtype_bits("F4") == 4);
  CHECK(safetensors_dtype_bits("F8_E8M0") == 8);
  CHECK(
      audit(
          R"({"a":{"dtype":"F4","shape":[4,8],"data_offsets":[0,16]},"s":{"dtype":"F8_E8M0","shape":[4],"data_offsets":[16,20]}})",
          20)
          .empty());
  CHECK(codes(audit(R"({"a":{"dtype":"F4","shape":[4,8],"data_offsets":[0,32]}})", 32)) ==
        std::vector<std::string>{"size-mismatch"});
  CHECK(codes(audit(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2)) ==
        std::vector<std::string>{"size-mismatch"});
}

TEST_CASE("hf config: layers, MTP layers and experts", "[hf]") {
  json c = {{"num_hidden_layers", 2}, {"vocab_size", 64}, {"dtype", "bfloat16"}, {"tie_word_embeddings", false}};
  CHECK(config_check(c, llama(2)).problems.empty());
  CHECK(codes(config_check(c, llama(1)).problems) == std::vector<std::string>{"layer-missing"});
  CHECK(codes(config_check(c, llama(3)).problems) == std::vector<std::string>{"layer-unexpected"});
  // GPT-2's spelling, through the attribute_map.
  CHECK(codes(config_check({{"n_layer", 3}}, llama(2)).problems) == std::vector<std::string>{"layer-missing"});
  // A multimodal config: the text_config's count, the language model's stack.
  std::vector<HfTensor> vl = {{"model.language_model.layers.0.x.weight", "bfloat16", {2}},
                              {"model.visual.blocks.0.x", "bfloat16", {2}},
                              {"model.vision_tower.layers.5.x.weight", "bfloat16", {2}}};
  CHECK(config_check({{"text_config", {{"num_hidden_layers", 1}}}, {"num_hidden_layers", 9}}, vl).problems.empty());
  // MTP: all absent is a warning (or a problem on request), some absent a problem.
  json ds = {{"num_hidden_layers", 2}, {"num_nextn_predict_layers", 2}};
  ConfigCheckResult r = config_check(ds, llama(2));
  CHECK(r.problems.empty());
  CHECK(codes(r.warnings) == std::vector<std::string>{"mtp-layers-absent"});
  CHECK(codes(config_check(ds, llama(2), true).problems) == std::vector<std::string>{"mtp-layer-missing"});
  CHECK(codes(config_check(ds, llama(3)).problems) == std::vector<std::string>{"mtp-layer-missing"});
  CHECK(config_check(ds, llama(4)).problems.empty());
  std::vector<HfTensor> next = llama(2);
  next.push_back({"mtp.layers.0.x.weight", "bfloat16", {2}});
  next.push_back({"mtp.layers.1.x.weight", "bfloat16", {2}});
  CHECK(config_check(ds, next).problems.empty());
  // Experts, per expert and fused.
  std::vector<HfTensor> moe = llama(2);
  for (int j = 0; j < 3; ++j)
    moe.push_back({"model.layers.1.mlp.experts." + std::to_string(j) + ".w.weight", "bfloat16", {2, 2}});
  moe.push_back({"model.layers.1.mlp.shared_experts.w.weight", "bfloat16", {2, 2}});
  CHECK(config_check({{"num_local_experts", 3}}, moe).problems.empty());
  CHECK(codes(config_check({{"n_routed_experts", 4}}, moe).problems) == std::vector<std::string>{"expert-missing"});
  CHECK(codes(config_check({{"num_experts", 2}}, moe).problems) == std::vector<std::string>{"expert-count-mismatch"});
  std::vector<HfTensor> fused = {{"model.layers.0.mlp.experts.gate_up_proj", "bfloat16", {4, 16, 8}}};
  CHECK(config_check({{"num_local_experts", 4}}, fused).problems.empty());
  CHECK(codes(config_check({{"num_local_experts", 3}}, fused).problems) ==
        std::vector<std::string>{"expert-count-mismatch"});
}

// A pruned model (view/moe_sparsity.h): each layer's experts against its moe_sparsity_config
// entry, not the model's count; the folders the real pruner wrote are tests/interop/pruned_moe_test.py's.
TEST_CASE("hf config: per-layer expert counts of a pruned model", "[hf]") {
  std::vector<HfTensor> t = llama(3);
  for (int j = 0; j < 3; ++j)
    t.push_back({"model.layers.1.mlp.experts." + std::to_string(j) + ".w.weight", "bfloat16", {2, 2}});
  t.push_back({"model.layers.2.mlp.experts.gate_up_proj", "bfloat16", {2, 16, 8}});
  auto pruned = [](json counts, int64_t global = 3, std::string method = "prune") {
    return json{{"num_hidden_layers", 3},
                {"num_experts", global},
                {"quantization_config",
                 {{"quant_method", "compressed-tensors"},
                  {"config_groups", json::object()},
                  {"moe_sparsity_config", {{"method", method}, {"num_experts", counts}}}}}};
  };
  ConfigCheckResult r = config_check(pruned({nullptr, 3, 2}), t);
  CHECK(r.problems.empty());
  CHECK(codes(r.warnings) == std::vector<std::string>{"moe-sparsity-per-layer"});
  // Without it, the global count finds layer 2 short; a global count of 2, layer 1 long.
  CHECK(codes(config_check({{"num_hidden_layers", 3}, {"num_experts", 3}}, t).problems) ==
        std::vector<std::string>{"expert-count-mismatch"});
  // A layer off its own count, named.
  r = config_check(pruned({nullptr, 4, 2}), t);
  REQUIRE(codes(r.problems) == std::vector<std::string>{"expert-missing"});
  CHECK(r.problems[0].where.key == "model.layers.1.mlp.experts.");
  r = config_check(pruned({nullptr, 3, 3}), t);
  REQUIRE(codes(r.problems) == std::vector<std::string>{"expert-count-mismatch"});
  CHECK(r.problems[0].where.key == "model.layers.2.mlp.experts.gate_up_proj");
  // A null (dense) entry on a layer with experts; an entry counting experts where a layer has none.
  CHECK(codes(config_check(pruned({nullptr, nullptr, 2}), t).problems) ==
        std::vector<std::string>{"expert-count-mismatch"});
  r = config_check(pruned({2, 3, 2}), t);
  REQUIRE(codes(r.problems) == std::vector<std::string>{"expert-missing"});
  CHECK(r.problems[0].where.key == "model.layers.0.");
  // What ExpertSparsityConfig refuses, and a list that is not one entry a layer.
  CHECK(has(config_check(pruned({nullptr, 3.5, 2}), t).problems, "moe-sparsity-invalid"));
  CHECK(has(config_check(pruned({nullptr, true, 2}), t).problems, "moe-sparsity-invalid"));
  CHECK(has(config_check(pruned({nullptr, 3}), t).problems, "moe-sparsity-invalid"));
  // A multimodal config: the language model's text_config holds it.
  json vl = {{"text_config", pruned({nullptr, 3, 2})}};
  CHECK(config_check(vl, t).problems.empty());
  vl["text_config"]["quantization_config"]["moe_sparsity_config"]["num_experts"][1] = 4;
  r = config_check(vl, t);
  REQUIRE(codes(r.problems) == std::vector<std::string>{"expert-missing"});
  CHECK(r.problems[0].message.rfind("text_config.quantization_config.moe_sparsity_config.num_experts[1]", 0) == 0);
  // MoNe's novice experts: a layout not read.
  CHECK_THROWS_AS(config_check(pruned({nullptr, 3, 2}, 3, "novice"), t), UnsupportedError);
}

TEST_CASE("hf config: vocab, the head, quantization, dtype", "[hf]") {
  json c = {{"num_hidden_layers", 2}, {"vocab_size", 64}, {"dtype", "bfloat16"}, {"tie_word_embeddings", false}};
  CHECK(codes(config_check({{"vocab_size", 65}}, llama(2)).problems) ==
        std::vector<std::string>{"vocab-size-mismatch", "vocab-size-mismatch"});
  std::vector<HfTensor> headless = llama(2);
  headless.erase(headless.begin() + 1);
  CHECK(codes(config_check(c, headless).problems) == std::vector<std::string>{"lm-head-missing"});
  CHECK(config_check({{"tie_word_embeddings", true}}, headless).problems.empty());
  ConfigCheckResult differs = check_hf_config(
      {{"tie_word_embeddings", true}}, "config.json", llama(2),
      [](const std::string&, const std::string&) { return std::optional<bool>(false); }, false);
  CHECK(codes(differs.problems) == std::vector<std::string>{"tied-head-differs"});
  std::vector<HfTensor> fp32 = llama(2, "float32");
  fp32.push_back({"model.layers.1.mlp.gate.e_score_correction_bias", "float32", {4}});
  CHECK(codes(config_check(c, fp32).problems) == std::vector<std::string>{"dtype-mismatch"});
  std::vector<HfTensor> kept = llama(2);
  kept.push_back({"model.layers.1.mlp.gate.e_score_correction_bias", "float32", {4}});
  CHECK(config_check(c, kept).problems.empty());
  json q = {{"quantization_config", {{"quant_method", "fp8"}, {"modules_to_not_convert", {"lm_head", "mlp.experts"}}}}};
  std::vector<HfTensor> fp8 = {{"model.layers.0.mlp.down_proj.weight", "float8_e4m3fn", {16, 32}},
                               {"model.layers.0.mlp.down_proj.weight_scale_inv", "float32", {1, 1}},
                               {"model.layers.0.mlp.shared_experts.up_proj.weight", "float8_e4m3fn", {16, 32}},
                               {"model.layers.0.mlp.shared_experts.up_proj.weight_scale_inv", "float32", {1, 1}}};
  CHECK(config_check(q, fp8).problems.empty());
  std::vector<HfTensor> lost = fp8;
  lost.erase(lost.begin() + 1);
  CHECK(codes(config_check(q, lost).problems) == std::vector<std::string>{"quant-scale-missing"});
  lost = fp8;
  lost.erase(lost.begin());
  CHECK(codes(config_check(q, lost).problems) == std::vector<std::string>{"quant-scale-orphan"});
  std::vector<HfTensor> expert = {{"model.layers.0.mlp.experts.0.up_proj.weight", "float8_e4m3fn", {16, 32}},
                                  {"model.layers.0.mlp.experts.0.up_proj.weight_scale_inv", "float32", {1, 1}}};
  CHECK(codes(config_check(q, expert).problems) == std::vector<std::string>{"quant-excluded-quantized"});
  json ct = {{"quantization_config", {{"quant_method", "compressed-tensors"}, {"ignore", {"re:.*mlp[.]down_proj$"}}}}};
  CHECK(codes(config_check(ct, fp8).problems) == std::vector<std::string>{"quant-excluded-quantized"});
}

namespace {

// A whole LlamaForCausalLM of `layers` layers, hidden 16, intermediate 32, vocab 64, 2 heads of 8.
std::vector<HfTensor> llama_model(int layers) {
  std::vector<HfTensor> t = {{"model.embed_tokens.weight", "bfloat16", {64, 16}},
                             {"lm_head.weight", "bfloat16", {64, 16}},
                             {"model.norm.weight", "bfloat16", {16}}};
  for (int i = 0; i < layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
      t.push_back({l + "self_attn." + p + ".weight", "bfloat16", {16, 16}});
    t.push_back({l + "mlp.gate_proj.weight", "bfloat16", {32, 16}});
    t.push_back({l + "mlp.up_proj.weight", "bfloat16", {32, 16}});
    t.push_back({l + "mlp.down_proj.weight", "bfloat16", {16, 32}});
    t.push_back({l + "input_layernorm.weight", "bfloat16", {16}});
    t.push_back({l + "post_attention_layernorm.weight", "bfloat16", {16}});
  }
  return t;
}

const json kLlama = {{"model_type", "llama"},    {"architectures", {"LlamaForCausalLM"}},
                     {"hidden_size", 16},        {"intermediate_size", 32},
                     {"vocab_size", 64},         {"num_hidden_layers", 2},
                     {"num_attention_heads", 2}, {"tie_word_embeddings", false}};

Findings schema_problems(const json& c, const std::vector<HfTensor>& t) {
  return check_hf_schema(c, "config.json", t).problems;
}

}  // namespace

TEST_CASE("hf config: quantized weights against their scales and global scales", "[hf]") {
  // ModelOpt W4A16_NVFP4: q/k/v share weight_scale_2 (amax / 2688)
  json mo = {{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "W4A16_NVFP4"}}}};
  std::vector<HfTensor> t;
  std::map<std::string, double> v;
  for (const char* p : {"q_proj", "k_proj", "v_proj"}) {
    const std::string m = std::string("model.layers.0.self_attn.") + p;
    t.push_back({m + ".weight", "uint8", {8, 16}});
    t.push_back({m + ".weight_scale", "float8_e4m3fn", {8, 2}});
    t.push_back({m + ".weight_scale_2", "float32", {}});
    v[m + ".weight_scale_2"] = 0.001;
  }
  ReadScalar read = [&](const std::string& k) { return v.count(k) ? std::optional<double>(v[k]) : std::nullopt; };
  auto run = [&](const json& c, const std::vector<HfTensor>& ts) {
    return codes(check_hf_config(c, "config.json", ts, nullptr, false, read).problems);
  };
  CHECK(run(mo, t).empty());
  std::vector<HfTensor> bad = t;
  bad[1].shape = {8, 1};
  CHECK(run(mo, bad) == std::vector<std::string>{"quant-scale-shape"});
  bad = t;
  bad.erase(bad.begin() + 2);
  CHECK(run(mo, bad) == std::vector<std::string>{"quant-scale-missing"});
  json w4a4 = {{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}}};
  CHECK(run(w4a4, t) == std::vector<std::string>{"quant-scale-missing", "quant-scale-missing", "quant-scale-missing"});
  v["model.layers.0.self_attn.k_proj.weight_scale_2"] = 0.002;
  CHECK(run(mo, t) == std::vector<std::string>{"quant-global-scale-unfused"});
  for (auto& [k, x] : v) x = 1000;  // compressed-tensors' direction
  CHECK(run(mo, t) == std::vector<std::string>{"quant-global-scale-inverted", "quant-global-scale-inverted",
                                               "quant-global-scale-inverted"});
  CHECK(codes(check_hf_config(mo, "config.json", t, nullptr, false).problems).empty());  // no values read
  // compressed-tensors NVFP4: weight_global_scale is 2688 / amax
  json ct = {{"quantization_config", {{"quant_method", "compressed-tensors"}, {"format", "nvfp4-pack-quantized"}}}};
  std::vector<HfTensor> c = {{"model.layers.0.mlp.gate_proj.weight_packed", "uint8", {8, 16}},
                             {"model.layers.0.mlp.gate_proj.weight_scale", "float8_e4m3fn", {8, 2}},
                             {"model.layers.0.mlp.gate_proj.weight_global_scale", "float32", {1}}};
  v = {{"model.layers.0.mlp.gate_proj.weight_global_scale", 1000}};
  CHECK(run(ct, c).empty());
  v["model.layers.0.mlp.gate_proj.weight_global_scale"] = 0.001;
  CHECK(run(ct, c) == std::vector<std::string>{"quant-global-scale-inverted"});
  c[1].dtype = "bfloat16";
  c.pop_back();
  CHECK(run(ct, c) == std::vector<std::string>{"quant-scale-shape", "quant-scale-missing"});
}

TEST_CASE("hf schema: a config.json that counts layers otherwise is read as its class reads it", "[hf]") {
  // transformers 5.24's Dory saves each layer as an attention block and an mlp block: layer_types
  // with an "mlp" entry after each kind, the layer counts doubled (DoryConfig.to_dict); its
  // __post_init__ halves them back. The schema's saved_config says so.
  json dory = {{"model_type", "dory"},    {"num_hidden_layers", 4},
               {"n_input_layers", 2},     {"n_output_layers", 2},
               {"n_recurrent_layers", 0}, {"layer_types", {"sliding_attention", "mlp", "full_attention", "mlp"}}};
  const json read = config_as_loaded(dory);
  CHECK(read["num_hidden_layers"] == 2);
  CHECK(read["n_input_layers"] == 1);
  CHECK(read["n_recurrent_layers"] == 0);
  CHECK(read["layer_types"] == json::array({"sliding_attention", "full_attention"}));
  // Without "mlp" entries (a config.json written by hand, or an older writer): as it is.
  json plain = dory;
  plain["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  CHECK(config_as_loaded(plain) == plain);
  CHECK(config_as_loaded(kLlama) == kLlama);
}

TEST_CASE("hf schema: keys and shapes against the model's schema", "[hf]") {
  CHECK(schema_problems(kLlama, llama_model(2)).empty());
  CHECK(schema_pattern("model.layers.12.mlp.experts.3.w1.weight") == "model.layers.#.mlp.experts.#.w1.weight");
  // A near name: unexpected, the nearest named, and the layer that lost its norm.
  std::vector<HfTensor> near = llama_model(2);
  near.back().key = "model.layers.1.post_attention_layernorm.weigth";
  Findings f = schema_problems(kLlama, near);
  CHECK(codes(f) == std::vector<std::string>{"schema-key-unexpected", "schema-key-missing"});
  CHECK(f[0].message.find("nearest it defines: model.layers.#.post_attention_layernorm.weight") != std::string::npos);
  CHECK(f[1].message.find("layer 1 here does not") != std::string::npos);
  // An extra shared_expert_gate; a key only a flag brings (attention_bias).
  std::vector<HfTensor> extra = llama_model(2);
  extra.push_back({"model.layers.0.mlp.shared_expert_gate.weight", "bfloat16", {1, 16}});
  extra.push_back({"model.layers.0.self_attn.q_proj.bias", "bfloat16", {16}});
  f = schema_problems(kLlama, extra);
  CHECK(codes(f) == std::vector<std::string>{"schema-key-unexpected", "schema-key-unexpected"});
  CHECK(f[1].message.find("only with attention_bias=true") != std::string::npos);
  // With the flag set, every layer holds the four biases: the ones lost are missing (transformers
  // reports them), named with the flag.
  json biased = kLlama;
  biased["attention_bias"] = true;
  f = schema_problems(biased, extra);
  CHECK(codes(f) == std::vector<std::string>{"schema-key-unexpected", "schema-key-missing", "schema-key-missing",
                                             "schema-key-missing", "schema-key-missing"});
  CHECK(f[1].message.find("with attention_bias=true in config.json holds this tensor") != std::string::npos);
  for (const char* l : {"0", "1"})
    for (const char* p : {"q", "k", "v", "o"})
      if (std::string(l) != "0" || std::string(p) != "q")
        extra.push_back({std::string("model.layers.") + l + ".self_attn." + p + "_proj.bias", "bfloat16", {16}});
  CHECK(codes(schema_problems(biased, extra)) == std::vector<std::string>{"schema-key-unexpected"});
  // The head: required untied, optional tied; the final norm always.
  std::vector<HfTensor> headless = llama_model(2);
  headless.erase(headless.begin() + 1);
  CHECK(codes(schema_problems(kLlama, headless)) == std::vector<std::string>{"schema-key-missing"});
  json tied = kLlama;
  tied["tie_word_embeddings"] = true;
  CHECK(schema_problems(tied, headless).empty());
  // Shapes: the dims the schema derives from config fields.
  json wide = kLlama;
  wide["intermediate_size"] = 48;
  f = schema_problems(wide, llama_model(2));
  REQUIRE(f.size() == 6);  // gate, up, down of two layers
  CHECK(f[0].code == "schema-shape-mismatch");
  CHECK(f[0].message.find("intermediate_size = 48") != std::string::npos);
  // Old checkpoints' rotary buffers pass, as transformers' loader lets them.
  std::vector<HfTensor> rope = llama_model(2);
  rope.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "float32", {4}});
  CHECK(schema_problems(kLlama, rope).empty());
}

TEST_CASE("hf schema: what it does not hold is a note, dtypes and expert counts from it", "[hf]") {
  json odd = {{"model_type", "no_such_model"}};
  SchemaCheckResult r = check_hf_schema(odd, "config.json", llama_model(1));
  CHECK(r.problems.empty());
  CHECK(codes(r.notes) == std::vector<std::string>{"schema-not-checked"});
  CHECK(r.summary["checked"] == false);
  json other = kLlama;
  other["architectures"] = {"LlamaModel"};
  CHECK(codes(check_hf_schema(other, "config.json", llama_model(2)).notes) ==
        std::vector<std::string>{"schema-not-checked"});
  // A model_type the schema lacks (remote code, as Kimi-K2's kimi_k2 names DeepseekV3ForCausalLM) is
  // checked against the type whose own class its architectures names (LlamaForCausalLM: llama's,
  // not internlm3's, which the schema also builds with that class); keys the class does not save
  // are refused as usual.
  json remote = kLlama;
  remote["model_type"] = "remote_llama";
  remote["architectures"] = {"LlamaForCausalLM"};
  SchemaMatch m = match_schema(remote);
  REQUIRE(m.schema);
  CHECK(m.schema->type == "llama");
  CHECK(m.found_by == "architectures");
  SchemaCheckResult rr = check_hf_schema(remote, "config.json", llama_model(2));
  CHECK(rr.problems.empty());
  CHECK(rr.notes.empty());
  CHECK(rr.summary["checked"] == true);
  CHECK(rr.summary["found_by"] == "architectures");
  CHECK(rr.summary["schema_model_type"] == "llama");
  std::vector<HfTensor> near = llama_model(2);
  near.push_back({"model.layers.0.mlp.router.weight", "float32", {4, 8}});
  CHECK(codes(check_hf_schema(remote, "config.json", near).problems) ==
        std::vector<std::string>{"schema-key-unexpected"});
  remote["architectures"] = {"RemoteLlamaForCausalLM"};
  CHECK(!match_schema(remote).schema);
  CHECK(match_schema(remote).why.find("model_type remote_llama is not one transformers") != std::string::npos);
  CHECK(codes(check_hf_schema(remote, "config.json", llama_model(2)).notes) ==
        std::vector<std::string>{"schema-not-checked"});
  // Saved by a newer transformers than the schema's: the reason names that version (it defines the
  // type); an older one (remote code saved by any version) is not named.
  remote["transformers_version"] = "99.1.0";
  CHECK(match_schema(remote).why.find("config.json was saved by transformers 99.1.0, newer than the schema's " +
                                      hf_schema().transformers) != std::string::npos);
  remote["transformers_version"] = "4.57.1";
  CHECK(match_schema(remote).why.find("was saved by") == std::string::npos);
  remote["transformers_version"] = hf_schema().transformers;
  CHECK(match_schema(remote).why.find("was saved by") == std::string::npos);
  CHECK(match_schema(json{{"model_type", "llama"}}).found_by == "model_type");
  CHECK(hf_schema().of_class("MllamaForCausalLM")->type == "mllama_text_model");
  // T5's wo stays float32 loading in float16, not in bfloat16; the dtype check accepts it.
  json t5 = {{"model_type", "t5"}};
  CHECK(schema_keeps_dtype(t5, "encoder.block.0.layer.1.DenseReluDense.wo.weight", "float32", "float16"));
  CHECK(!schema_keeps_dtype(t5, "encoder.block.0.layer.1.DenseReluDense.wo.weight", "float32", "bfloat16"));
  t5["dtype"] = "float16";
  std::vector<HfTensor> t = {{"encoder.block.0.layer.1.DenseReluDense.wo.weight", "float32", {4, 4}},
                             {"shared.weight", "float16", {4, 4}}};
  CHECK(!has(config_check(t5, t).problems, "dtype-mismatch"));
  t[1].dtype = "float32";
  CHECK(has(config_check(t5, t).problems, "dtype-mismatch"));
  // LongCat-Flash numbers its zero experts after the routed ones, as transformers saves them.
  json lc = {{"model_type", "longcat_flash"}, {"n_routed_experts", 4}, {"zero_expert_num", 2}};
  REQUIRE(schema_expert_count(lc));
  CHECK(schema_expert_count(lc)->first == 6);
  std::vector<HfTensor> experts;
  for (int j = 0; j < 6; ++j)
    experts.push_back({"model.layers.0.mlp.experts." + std::to_string(j) + ".up_proj.weight", "bfloat16", {2, 2}});
  CHECK(!has(config_check(lc, experts).problems, "expert-count-mismatch"));
  experts.pop_back();
  CHECK(has(config_check(lc, experts).problems, "expert-missing"));
}

TEST_CASE("hf schema: keys and rows that come from two config fields, a head its class never ties", "[hf]") {
  // OPT's project_in exists when word_embed_proj_dim differs from hidden_size (the schema's "A!=B");
  // a field the config lacks has the class default, equal to the other's: the key is not there.
  json opt = {{"model_type", "opt"}, {"hidden_size", 64}, {"word_embed_proj_dim", 32}};
  const ModelSchema* s = schema_for_config(opt);
  REQUIRE(s);
  CHECK(schema_defines(*s, opt, "model.decoder.project_in.weight"));
  CHECK(schema_defines(*s, opt, "model.decoder.project_out.weight"));
  opt["word_embed_proj_dim"] = 64;
  CHECK(!schema_defines(*s, opt, "model.decoder.project_in.weight"));
  opt.erase("word_embed_proj_dim");
  CHECK(!schema_defines(*s, opt, "model.decoder.project_in.weight"));
  // Rows the schema derives past a field: a constant (mllama's text model: vocab_size + 8), another
  // field (DeepSeek's kv_a_proj_with_mqa: kv_lora_rank + qk_rope_head_dim), another vocabulary
  // (Marian's decoder: decoder_vocab_size).
  json ml = {{"model_type", "mllama_text_model"}, {"vocab_size", 256}};
  REQUIRE(schema_dim(ml, "model.embed_tokens.weight", 0));
  CHECK(*schema_dim(ml, "model.embed_tokens.weight", 0) == std::make_pair(int64_t(264), std::string("vocab_size+8")));
  json ds = {{"model_type", "deepseek_v3"}, {"kv_lora_rank", 16}, {"qk_rope_head_dim", 8}};
  REQUIRE(schema_dim(ds, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight", 0));
  CHECK(schema_dim(ds, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight", 0)->first == 24);
  json marian = {{"model_type", "marian"}, {"vocab_size", 256}, {"decoder_vocab_size", 300}};
  std::vector<HfTensor> dec = {{"model.decoder.embed_tokens.weight", "float32", {300, 8}}};
  CHECK(!has(config_check(marian, dec).problems, "vocab-size-mismatch"));
  dec[0].shape[0] = 256;
  Findings f = config_check(marian, dec).problems;
  REQUIRE(codes(f) == std::vector<std::string>{"vocab-size-mismatch"});
  CHECK(f[0].message.find("decoder_vocab_size = 300") != std::string::npos);
  // BigBirdPegasusForCausalLM loads its own lm_head whatever tie_word_embeddings says: a head
  // unlike the embedding is no tied-head-differs there; it is for a class that ties it.
  auto differs = [](const std::string&, const std::string&) { return std::optional<bool>(false); };
  std::vector<HfTensor> bb = {{"model.decoder.embed_tokens.weight", "float32", {64, 16}},
                              {"lm_head.weight", "float32", {64, 16}}};
  json bbc = {{"model_type", "bigbird_pegasus"}, {"tie_word_embeddings", true}, {"vocab_size", 64}};
  CHECK(!has(check_hf_config(bbc, "config.json", bb, differs, false).problems, "tied-head-differs"));
  bbc["model_type"] = "pegasus";
  CHECK(has(check_hf_config(bbc, "config.json", bb, differs, false).problems, "tied-head-differs"));
}

TEST_CASE("hf schema: indices numbered in names are the schema's to know, fixed names with digits are not", "[hf]") {
  // Inkling's vision layers are model.visual.layers.norm_N / linear_N, NLLB-MoE's experts
  // experts.expert_N: the schema's `named` prefixes say so; GPT-2's ln_1, BART's fc1 stay names.
  ModelSchema s;
  s.type = "made_up";
  for (const char* p :
       {"model.visual.layers.norm_#.weight", "model.visual.layers.linear_#.weight", "model.layers.#.mlp.fc1.weight",
        "model.layers.#.ln_1.weight", "model.layers.#.ffn.experts.expert_#.fc1.weight", "model.norm_1.weight"}) {
    SchemaKey k;
    k.pattern = p;
    s.keys.push_back(k);
  }
  std::sort(s.keys.begin(), s.keys.end(), [](const SchemaKey& a, const SchemaKey& b) { return a.pattern < b.pattern; });
  s.named = {{"model.layers.#.ffn.experts.expert_#", "num_experts"},
             {"model.visual.layers.linear_#", "vision_config.n_layers"},
             {"model.visual.layers.norm_#", "vision_config.n_layers-1"}};
  s.prefixes = {{"model.language_model.", "model."}};
  CHECK(s.named_pattern("model.visual.layers.norm_22.weight") == "model.visual.layers.norm_#.weight");
  CHECK(s.pattern_of("model.visual.layers.norm_22.weight") == "model.visual.layers.norm_#.weight");
  CHECK(s.pattern_of("model.visual.layers.linear_0.weight") == "model.visual.layers.linear_#.weight");
  CHECK(s.pattern_of("model.layers.3.ffn.experts.expert_127.fc1.weight") ==
        "model.layers.#.ffn.experts.expert_#.fc1.weight");
  CHECK(s.pattern_of("model.language_model.layers.3.ffn.experts.expert_9.fc1.weight") ==
        "model.layers.#.ffn.experts.expert_#.fc1.weight");  // through the loader's prefix
  // fc1, ln_1 and a fixed norm_1 outside a named prefix are names: found as they are, never `#`.
  CHECK(s.pattern_of("model.layers.3.mlp.fc1.weight") == "model.layers.#.mlp.fc1.weight");
  CHECK(s.pattern_of("model.layers.3.ln_1.weight") == "model.layers.#.ln_1.weight");
  CHECK(s.pattern_of("model.norm_1.weight") == "model.norm_1.weight");
  CHECK(s.named_pattern("model.layers.#.mlp.fc2.weight") == "model.layers.#.mlp.fc2.weight");
  CHECK(s.lookup(schema_pattern("model.layers.3.mlp.fc2.weight")) == nullptr);
  CHECK(s.lookup(schema_pattern("model.norm_2.weight")) == nullptr);
  // A numbered name under another prefix, or a key below the prefix the schema lacks, is not found.
  CHECK(s.lookup(schema_pattern("model.audio.layers.norm_3.weight")) == nullptr);
  CHECK(s.lookup(schema_pattern("model.visual.layers.norm_3.bias")) == nullptr);
  CHECK(s.lookup(schema_pattern("model.visual.layers.norm_.weight")) == nullptr);
  REQUIRE(s.named_of("model.visual.layers.norm_#.weight"));
  CHECK(s.named_of("model.visual.layers.norm_#.weight")->second == "vision_config.n_layers-1");
  CHECK(s.named_of("model.visual.layers.norm_#") == nullptr);
  CHECK(s.named_of("model.layers.#.mlp.fc1.weight") == nullptr);
  // A count may take a constant away (the last vision layer has no norm).
  json ink = {{"vision_config", {{"n_layers", 24}}}};
  REQUIRE(hf_schema_impl::evaluate_dims(ink, "vision_config.n_layers-1", ""));
  CHECK(*hf_schema_impl::evaluate_dims(ink, "vision_config.n_layers-1", "") == 23);
  CHECK(*hf_schema_impl::evaluate_dims(ink, "vision_config.n_layers+2", "") == 26);
  CHECK(!hf_schema_impl::evaluate_dims(ink, "vision_config.n_layers-vision_config.n_layers", ""));
  // The block a key is in: its path numbers, a number in a name not among them.
  CHECK(hf_schema_impl::block_id("model.layers.3.ffn.experts.expert_127.fc1.weight",
                                 "model.layers.#.ffn.experts.expert_#.fc1.weight") == "3");
  CHECK(hf_schema_impl::block_id("encoder.block.1.layer.12.mlp.experts.expert_5.wi.weight",
                                 "encoder.block.#.layer.#.mlp.experts.expert_#.wi.weight") == "1.12");
}

TEST_CASE("hf schema: an index numbered in a name is held to the count its config gives", "[hf]") {
  // Inkling's vision layers: linear_0..linear_{n-1} and norm_0..norm_{n-2} (the last layer projects to
  // the text width, with no norm), n = vision_config.n_layers; the schema was built with 8.
  json ink = {{"model_type", "inkling_mm_model"}, {"vision_config", {{"n_layers", 12}}}};
  const ModelSchema* s = schema_for_config(ink);
  REQUIRE(s);
  REQUIRE(s->named.size() == 2);
  std::vector<HfTensor> t;
  for (int i = 0; i < 12; ++i) {
    t.push_back({"model.visual.layers.linear_" + std::to_string(i) + ".weight", "float32", {4, 4}});
    if (i < 11) t.push_back({"model.visual.layers.norm_" + std::to_string(i) + ".weight", "float32", {4}});
  }
  // The findings about the vision layers' keys (the folder holds nothing else: the rest is missing).
  auto vision = [](const Findings& f) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& x : f)
      if (x.where.key.rfind("model.visual.layers.", 0) == 0) out.emplace_back(x.code, x.where.key);
    return out;
  };
  CHECK(vision(schema_problems(ink, t)).empty());
  std::vector<HfTensor> lost = t;
  lost.erase(std::remove_if(lost.begin(), lost.end(),
                            [](const HfTensor& x) { return x.key == "model.visual.layers.norm_5.weight"; }),
             lost.end());
  Findings f = schema_problems(ink, lost);
  REQUIRE(vision(f) == std::vector<std::pair<std::string, std::string>>{
                           {"schema-key-missing", "model.visual.layers.norm_5.weight"}});
  std::vector<HfTensor> past = t;
  past.push_back({"model.visual.layers.norm_11.weight", "float32", {4}});
  CHECK(vision(schema_problems(ink, past)) == std::vector<std::pair<std::string, std::string>>{
                                                  {"schema-key-unexpected", "model.visual.layers.norm_11.weight"}});
  ink["vision_config"]["n_layers"] = 13;  // the config counts one more layer than the folder has
  CHECK(vision(schema_problems(ink, t)) ==
        std::vector<std::pair<std::string, std::string>>{{"schema-key-missing", "model.visual.layers.linear_12.weight"},
                                                         {"schema-key-missing", "model.visual.layers.norm_11.weight"}});
  // NLLB-MoE's experts.expert_N, as many as num_experts (its schema built with 128): counted per layer.
  json nllb = {{"model_type", "nllb-moe"}, {"num_experts", 4}};
  std::vector<HfTensor> e = {{"model.encoder.layers.3.ffn.router.classifier.weight", "float32", {4, 4}}};
  for (int j = 0; j < 4; ++j)
    for (const char* w : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
      e.push_back(
          {"model.encoder.layers.3.ffn.experts.expert_" + std::to_string(j) + "." + w, "float32",
           std::string(w).find("bias") != std::string::npos ? std::vector<int64_t>{4} : std::vector<int64_t>{4, 4}});
  auto experts = [](const Findings& f) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& x : f)
      if (x.where.key.find(".experts.expert_") != std::string::npos) out.emplace_back(x.code, x.where.key);
    return out;
  };
  CHECK(experts(schema_problems(nllb, e)).empty());
  nllb["num_experts"] = 3;
  CHECK(experts(schema_problems(nllb, e)) ==
        std::vector<std::pair<std::string, std::string>>{
            {"schema-key-unexpected", "model.encoder.layers.3.ffn.experts.expert_3.fc1.bias"},
            {"schema-key-unexpected", "model.encoder.layers.3.ffn.experts.expert_3.fc1.weight"},
            {"schema-key-unexpected", "model.encoder.layers.3.ffn.experts.expert_3.fc2.bias"},
            {"schema-key-unexpected", "model.encoder.layers.3.ffn.experts.expert_3.fc2.weight"}});
}

TEST_CASE("hf schema: an expert count or embedding rows that no config field explains are not compared", "[hf]") {
  // ERNIE-4.5-VL-MoE saves its text and vision experts in one list (experts 0..7 for
  // moe_num_experts 4, as transformers' own save_pretrained writes them): the config's count is no
  // measure of the numbering where the schema holds per-expert keys that no field counts (or counts
  // them itself: 2*text_config.moe_num_experts).
  json ernie = {{"model_type", "ernie4_5_vl_moe"}, {"text_config", {{"moe_num_experts", 4}}}};
  std::vector<HfTensor> experts;
  for (int j = 0; j < 8; ++j)
    experts.push_back({"model.layers.1.mlp.experts." + std::to_string(j) + ".up_proj.weight", "float32", {2, 2}});
  CHECK(schema_expert_count_unexplained(ernie) != schema_expert_count(ernie).has_value());
  CHECK(!has(config_check(ernie, experts).problems, "expert-count-mismatch"));
  // A type whose numbering the config counts is still held to it.
  json qwen = {{"model_type", "qwen2_moe"}, {"num_experts", 4}};
  CHECK(!schema_expert_count_unexplained(qwen));
  CHECK(has(config_check(qwen, experts).problems, "expert-count-mismatch"));
  // Kyutai's embedding has vocab_size + num_codebooks * codebook_vocab_size + 1 rows (8,453 for the
  // tiny model transformers saves): the schema derives its width (hidden_size), not its rows.
  json ky = {{"model_type", "kyutai_speech_to_text"}, {"vocab_size", 256}, {"hidden_size", 64}};
  CHECK(schema_dim_unexplained(ky, "model.embed_tokens.embed_tokens.weight", 0));
  CHECK(!schema_dim_unexplained(ky, "model.embed_tokens.embed_tokens.weight", 1));
  std::vector<HfTensor> emb = {{"model.embed_tokens.embed_tokens.weight", "float32", {8453, 64}}};
  CHECK(!has(config_check(ky, emb).problems, "vocab-size-mismatch"));
  // Rows the schema derives from vocab_size are still compared.
  json llama = {{"model_type", "llama"}, {"vocab_size", 256}};
  CHECK(!schema_dim_unexplained(llama, "model.embed_tokens.weight", 0));
  std::vector<HfTensor> le = {{"model.embed_tokens.weight", "float32", {300, 64}}};
  CHECK(has(config_check(llama, le).problems, "vocab-size-mismatch"));
}

// The user's --keep-dtype globs an export records in each file's __metadata__ (meta/keep_dtype_entry.h):
// read back under caps, a hostile entry refused whole; a key they match is a warning, not a mismatch.
TEST_CASE("hf schema: formulas hold for every configuration, products of fields, dense first layers", "[hf]") {
  // Qwen3-30B-A3B's shape: 4 heads x head_dim 32 = 128 wide attention on a 64 wide model. The
  // schema of one tiny build took o_proj's input for hidden_size (its default head_dim is derived).
  json q = {{"model_type", "qwen3_moe"},
            {"hidden_size", 64},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 32},
            {"intermediate_size", 96},
            {"moe_intermediate_size", 40},
            {"num_experts", 4},
            {"num_hidden_layers", 2},
            {"vocab_size", 100}};
  REQUIRE(schema_dim(q, "model.layers.1.self_attn.o_proj.weight", 1));
  CHECK(schema_dim(q, "model.layers.1.self_attn.o_proj.weight", 1)->first == 128);
  CHECK(schema_dim(q, "model.layers.1.self_attn.o_proj.weight", 0)->first == 64);
  CHECK(schema_dim(q, "model.layers.1.self_attn.k_proj.weight", 0)->first == 64);  // 2 kv heads x 32
  CHECK(schema_dim(q, "model.layers.1.self_attn.q_norm.weight", 0)->first == 32);
  std::vector<HfTensor> attn = {{"model.layers.0.self_attn.o_proj.weight", "bfloat16", {64, 128}}};
  CHECK(!has(schema_problems(q, attn), "schema-shape-mismatch"));
  attn[0].shape = {64, 64};  // what the old rule wanted: now a mismatch naming the product
  Findings f = schema_problems(q, attn);
  REQUIRE(has(f, "schema-shape-mismatch"));
  // A config.json without head_dim (its release predates the field): the width is not checked,
  // never refused.
  json no_hd = q;
  no_hd.erase("head_dim");
  CHECK(!schema_dim(no_hd, "model.layers.1.self_attn.o_proj.weight", 1));
  CHECK(!has(schema_problems(no_hd, attn), "schema-shape-mismatch"));
  // Products are capped: a hostile config.json gives no value, not an overflow.
  json huge = q;
  huge["head_dim"] = int64_t(1) << 40;
  CHECK(!schema_dim(huge, "model.layers.1.self_attn.o_proj.weight", 1));
  CHECK(!hf_schema_impl::evaluate_dims(huge, "head_dim*num_attention_heads", "qwen3_moe"));
  CHECK(*hf_schema_impl::evaluate_dims(q, "head_dim*num_attention_heads+2*hidden_size", "qwen3_moe") == 256);
  CHECK(!hf_schema_impl::evaluate_dims(q, "head_dim**hidden_size", "qwen3_moe"));
  CHECK(!hf_schema_impl::evaluate_dims(q, "head_dim*", "qwen3_moe"));
  // DeepSeek-V2 with first_k_dense_replace 1: layer 0's dense MLP is the model's, the MoE layers'
  // router and experts are not required of it.
  json ds = {{"model_type", "deepseek_v2"}, {"first_k_dense_replace", 1}, {"num_hidden_layers", 2}};
  const ModelSchema* s = schema_for_config(ds);
  REQUIRE(s);
  for (const char* k : {"model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.gate_proj.weight",
                        "model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.3.up_proj.weight"})
    CHECK(schema_defines(*s, ds, k));
  const SchemaKey* gate = s->find("model.layers.#.mlp.gate.weight");
  REQUIRE(gate);
  CHECK(!gate->required);
}

TEST_CASE("hf keep_dtype entry: read under caps, user-kept keys a warning", "[hf]") {
  const std::vector<std::string> globs = {"*.bias", "model.norm.*"};
  const std::string text = keep_dtype_entry(globs);
  CHECK(text == R"(["*.bias","model.norm.*"])");
  KeepDtypeEntry e = read_keep_dtype_entry({{"format", "pt"}, {kKeepDtypeEntry, text}});
  CHECK((e.present && e.error.empty() && e.globs == globs));
  CHECK(!read_keep_dtype_entry({{"format", "pt"}}).present);
  // The audit hands the header's metadata on.
  const std::string header = std::string(R"({"__metadata__":{"dcpctl.keep_dtype":"[\"*.bias\"]","format":"pt"},)") +
                             R"("a.bias":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  CHECK(read_keep_dtype_entry(audit_safetensors_header(header, 8 + header.size(), 4, "t").metadata).globs ==
        std::vector<std::string>{"*.bias"});
  for (const std::string& bad :
       {std::string("*.bias"), std::string("{}"), std::string("[]"), std::string("[1]"), std::string(R"(["a", 2])"),
        std::string(R"([""])"), std::string(R"(["a")"), std::string(R"(["a\u0000b"])"),
        "[\"" + std::string(kMaxKeepDtypeGlob + 1, 'a') + "\"]", std::string(kMaxKeepDtypeEntry + 1, ' ')}) {
    KeepDtypeEntry b = read_keep_dtype_entry({{kKeepDtypeEntry, bad}});
    CHECK((b.present && !b.error.empty() && b.globs.empty()));
  }
  // Nested 30,000 deep inside the byte cap: refused, no recursion to overflow.
  KeepDtypeEntry deep = read_keep_dtype_entry({{kKeepDtypeEntry, std::string(30000, '[') + std::string(30000, ']')}});
  CHECK((deep.present && !deep.error.empty()));
  json many = json::array();
  for (size_t i = 0; i <= kMaxKeepDtypeGlobs; ++i) many.push_back("g");
  CHECK(!read_keep_dtype_entry({{kKeepDtypeEntry, many.dump()}}).error.empty());
  // fnmatch, as --keep-dtype: `*` crosses dots.
  CHECK(*keep_dtype_glob_of(globs, "model.layers.0.attn.q.bias") == "*.bias");
  CHECK(*keep_dtype_glob_of(globs, "model.norm.weight") == "model.norm.*");
  CHECK(keep_dtype_glob_of(globs, "model.embed_tokens.weight") == nullptr);

  // A float32 tensor beside a bfloat16 config: a mismatch, unless a recorded glob kept it (a warning
  // naming the key and the glob); what nothing kept stays a mismatch.
  json c = {{"num_hidden_layers", 2}, {"dtype", "bfloat16"}, {"tie_word_embeddings", false}};
  std::vector<HfTensor> t = llama(2);
  t[2].dtype = "float32";  // model.norm.weight
  auto same = [](const std::string&, const std::string&) { return std::optional<bool>(true); };
  CHECK(codes(check_hf_config(c, "config.json", t, same, false).problems) ==
        std::vector<std::string>{"dtype-mismatch"});
  ConfigCheckResult r =
      check_hf_config(c, "config.json", t, same, false, nullptr, {}, {{"model.norm.weight", "model.norm.*"}});
  CHECK(r.problems.empty());
  REQUIRE(codes(r.warnings) == std::vector<std::string>{"dtype-kept-by-user"});
  CHECK(r.warnings[0].where.key == "model.norm.weight");
  CHECK(r.warnings[0].message.find("--keep-dtype 'model.norm.*'") != std::string::npos);
  CHECK(r.warnings[0].message.find("model.norm.weight") != std::string::npos);
  t[0].dtype = "float32";  // the embedding: no glob names it
  r = check_hf_config(c, "config.json", t, same, false, nullptr, {}, {{"model.norm.weight", "model.norm.*"}});
  CHECK(codes(r.problems) == std::vector<std::string>{"dtype-mismatch"});
  CHECK(r.problems[0].where.key == "model.embed_tokens.weight");
  CHECK(codes(r.warnings) == std::vector<std::string>{"dtype-kept-by-user"});
  // Kept by the policy at export (kept_dtype) or in the config's dtype: no warning.
  t[0].dtype = "bfloat16";
  CHECK(check_hf_config(c, "config.json", t, same, false, nullptr, {"model.norm.weight"},
                        {{"model.norm.weight", "model.norm.*"}})
            .warnings.empty());
  t[2].dtype = "bfloat16";
  CHECK(check_hf_config(c, "config.json", t, same, false, nullptr, {}, {{"model.norm.weight", "model.norm.*"}})
            .warnings.empty());
}

TEST_CASE("the model schema's index: every type parses at its first use, as the whole text did", "[hf_schema]") {
  // hf_schema() indexes the compiled-in JSON by a scan of its structure and parses a type when it is
  // asked for: each indexed type's object must parse, hold its indexed class, and be found again.
  const HfSchema& s = hf_schema();
  REQUIRE(s.index.size() > 300);
  REQUIRE(std::is_sorted(s.index.begin(), s.index.end(),
                         [](const SchemaEntry& a, const SchemaEntry& b) { return a.type < b.type; }));
  size_t keys = 0;
  for (const auto& e : s.index) {
    const ModelSchema* m = s.of(e.type);
    REQUIRE(m);
    CHECK(m->type == e.type);
    CHECK(m->cls == e.cls);
    CHECK(m->class_type == e.class_type);
    CHECK(s.of(e.type) == m);  // parsed once
    keys += m->keys.size();
  }
  CHECK(keys > 10000);
  CHECK(!s.transformers.empty());
  CHECK(s.of("no_such_type") == nullptr);
  CHECK(s.of_class("LlamaForCausalLM")->type == "llama");
}
