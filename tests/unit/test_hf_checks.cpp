// The HF checks' pure rules: the safetensors header audit (src/meta/safetensors_audit.h) and
// config.json against a key list (src/meta/hf_config_checks.h). The folders real writers wrote,
// damaged, are tests/interop/hf_verify_test.py's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "meta/hf_config_checks.h"
#include "meta/safetensors_audit.h"

using namespace dcpctl;
using nlohmann::json;

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
