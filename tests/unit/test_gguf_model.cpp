// What the converter writes beside the tensor bytes (gguf/model.h): the Llama Q/K row
// permutation (LlamaModel.permute), gguf-py's size label and title, the tensor table and types.
// The values were computed with numpy and gguf-py 0.19.0 (utility.size_label, Metadata.id_to_title);
// tests/interop/gguf_test.py checks whole files against the converter itself.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "gguf/model.h"
#include "util/error.h"

using namespace dcpctl;
using namespace dcpctl::gguf;

TEST_CASE("gguf_model: LlamaModel.permute of 8 rows, 2 heads") {
  // numpy: np.arange(8).reshape(2, 2, 2, 1).swapaxes(1, 2).reshape(8) == [0, 2, 1, 3, 4, 6, 5, 7]
  std::vector<float> x{0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<uint8_t> out = permute_rows(reinterpret_cast<const uint8_t*>(x.data()), 8, 1, 4, 2);
  std::vector<float> y(8);
  std::memcpy(y.data(), out.data(), 32);
  CHECK(y == std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7});
}

TEST_CASE("gguf_model: size label and title as gguf-py writes them") {
  CHECK(size_label(16'783'000) == "17M");
  CHECK(size_label(19'474'432) == "19M");
  CHECK(size_label(1'500'000) == "1.5M");
  CHECK(size_label(7'241'732'096) == "7.2B");
  CHECK(size_label(999'000) == "999K");
  CHECK(id_to_title("tiny") == "Tiny");
  CHECK(id_to_title("tiny-llama v2 8B") == "Tiny Llama v2 8B");
}

TEST_CASE("gguf_model: names and types as the converter picks them") {
  nlohmann::json config{
      {"architectures", {"LlamaForCausalLM"}}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  Arch a = arch_of(config, "cfg");
  CHECK(a.name == "llama");
  OutType q8 = out_type("q8_0");
  TensorPlan q = tensor_plan(a, config, "model.layers.3.self_attn.q_proj.weight", {64, 64}, q8, "cfg");
  CHECK(q.name == "blk.3.attn_q.weight");
  CHECK(q.type == TensorType::Q8_0);
  CHECK(q.permute_heads == 4);
  CHECK(tensor_plan(a, config, "model.layers.3.self_attn.k_proj.weight", {32, 64}, q8, "cfg").permute_heads == 2);
  CHECK(tensor_plan(a, config, "model.layers.0.input_layernorm.weight", {64}, q8, "cfg").type == TensorType::F32);
  CHECK(tensor_plan(a, config, "model.layers.0.mlp.down_proj.weight", {64, 48}, q8, "cfg").type == TensorType::F16);
  CHECK(tensor_plan(a, config, "lm_head.weight", {100, 64}, out_type("bf16"), "cfg").name == "output.weight");
  CHECK_THROWS_AS(tensor_plan(a, config, "model.layers.0.self_attn.q_norm.weight", {16}, q8, "cfg"), UnsupportedError);
  CHECK_THROWS_AS(arch_of(nlohmann::json{{"architectures", {"MptForCausalLM"}}}, "cfg"), UnsupportedError);
  CHECK(arch_of(nlohmann::json{{"architectures", {"MixtralForCausalLM"}}}, "cfg").name == "llama");
  CHECK_THROWS_AS(out_type("q4_k_m"), UsageError);
  CHECK_THROWS_AS(out_type("Q4_0"), UsageError);
  CHECK(out_type("q4_k").file_type == 15);
  // llama-quantize's fallbacks: rows of 64 take Q5_0 for Q4_K; norms stay F32.
  CHECK(tensor_plan(a, config, "model.layers.0.mlp.down_proj.weight", {64, 64}, out_type("q4_k"), "cfg").type ==
        TensorType::Q5_0);
  CHECK(tensor_plan(a, config, "model.layers.0.mlp.down_proj.weight", {64, 512}, out_type("q6_k"), "cfg").type ==
        TensorType::Q6_K);
  CHECK(tensor_plan(a, config, "model.layers.0.input_layernorm.weight", {512}, out_type("q4_0"), "cfg").type ==
        TensorType::F32);
}

TEST_CASE("gguf_model: a vision-language model read as the converter's TextModel reads it (Kimi K2.5)") {
  // TextModel.__init__: text_config's keys over the root's; get_model_architecture: text_config's
  // architectures first (none here: the root's, which the converter registers).
  nlohmann::json config{{"architectures", {"KimiK25ForConditionalGeneration"}},
                        {"tie_word_embeddings", true},
                        {"text_config", {{"tie_word_embeddings", false}, {"num_hidden_layers", 2}}}};
  nlohmann::json h = converter_hparams(config);
  CHECK(h["tie_word_embeddings"] == false);
  CHECK(h["num_hidden_layers"] == 2);
  CHECK(arch_of(h, "cfg").name == "deepseek2");
  config["text_config"]["architectures"] = {"MptForCausalLM"};
  CHECK_THROWS_AS(arch_of(converter_hparams(config), "cfg"), UnsupportedError);
  CHECK(converter_hparams(nlohmann::json{{"hidden_size", 8}}) == nlohmann::json{{"hidden_size", 8}});
  // transformers' own class name is not the converter's
  CHECK_THROWS_AS(arch_of(nlohmann::json{{"architectures", {"Kimi_K25ForConditionalGeneration"}}}, "cfg"),
                  UnsupportedError);
  // ModelBase.filter_tensors takes language_model. out; TextModel.filter_tensors leaves the tower out.
  CHECK(converter_key("language_model.model.layers.3.mlp.gate.weight") == "model.layers.3.mlp.gate.weight");
  CHECK(converter_key("model.language_model.layers.3.mlp.experts.gate_up_proj") ==
        "model.layers.3.mlp.experts.gate_up_proj");
  CHECK(converter_key("language_model.lm_head.weight") == "lm_head.weight");
  CHECK(converter_key("model.layers.0.self_attn.q_proj.weight") == "model.layers.0.self_attn.q_proj.weight");
  for (const char* tower : {"vision_tower.encoder.blocks.0.wqkv.weight", "model.vision_tower.layers.0.attn.proj.bias",
                            "mm_projector.proj.0.weight", "model.mm_projector.pre_norm.weight",
                            "vision_tower.patch_embed.pos_emb.weight", "model.visual.blocks.0.attn.qkv.weight",
                            "multi_modal_projector.linear_1.weight", "pre_mm_projector_norm.weight"})
    CHECK(converter_key(tower).empty());
}

TEST_CASE("gguf_model: Llama 3's rope_freqs as the converter's torch arithmetic gives them") {
  // LlamaModel.generate_extra_tensors under torch 2 (float32), printed with float.hex().
  nlohmann::json config{{"head_dim", 16},
                        {"rope_parameters",
                         {{"rope_type", "llama3"},
                          {"rope_theta", 10000.0},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 64}}}};
  std::vector<float> want{1.0f, 0x1.4b42p+0f, 0x1.eab67p+2f, 8.0f, 8.0f, 8.0f, 8.0f, 8.0f};
  CHECK(llama3_rope_factors(config) == want);
}

TEST_CASE("gguf_model: experts stacked where the converter emits them, kv_b split, size label") {
  nlohmann::json config{{"architectures", {"Qwen3MoeForCausalLM"}}, {"num_attention_heads", 4}, {"num_experts", 2}};
  Arch a = arch_of(config, "cfg");
  std::vector<Input> in;
  for (const char* k :
       {"model.layers.0.mlp.experts.0.down_proj.weight", "model.layers.0.mlp.experts.0.gate_proj.weight",
        "model.layers.0.mlp.experts.0.up_proj.weight", "model.layers.0.mlp.experts.1.down_proj.weight",
        "model.layers.0.mlp.experts.1.gate_proj.weight", "model.layers.0.mlp.experts.1.up_proj.weight",
        "model.layers.0.mlp.gate.weight"})
    in.push_back({k, {32, 64}});
  std::vector<TensorPlan> p = plan_tensors(a, config, in, out_type("q8_0"), "cfg");
  REQUIRE(p.size() == 4);
  CHECK(p[0].name == "blk.0.ffn_down_exps.weight");
  CHECK(p[1].name == "blk.0.ffn_gate_exps.weight");
  CHECK(p[1].inputs == std::vector<size_t>{1, 4});
  CHECK(p[1].shape == std::vector<int64_t>{2, 32, 64});
  CHECK(p[2].inputs == std::vector<size_t>{2, 5});
  CHECK(p[3].name == "blk.0.ffn_gate_inp.weight");
  CHECK(p[3].type == TensorType::F32);
  in.pop_back();
  in.erase(in.begin() + 4);  // expert 1's gate_proj missing
  CHECK_THROWS_AS(plan_tensors(a, config, in, out_type("q8_0"), "cfg"), UnsupportedError);

  TensorPlan kb;
  kb.kv_b = 'k', kb.kv_b_heads = 2, kb.kv_b_nope = 2, kb.kv_b_v = 1;
  std::vector<float> x(18);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  CHECK(kv_b_part(kb, x.data(), 3) == std::vector<float>{0, 3, 1, 4, 2, 5, 9, 12, 10, 13, 11, 14});
  kb.kv_b = 'v';
  CHECK(kv_b_part(kb, x.data(), 3) == std::vector<float>{6, 7, 8, 15, 16, 17});

  // gguf-py 0.19.0: size_label(total, 1000 shared, 6144 expert, 4 experts) == "4x7.1K".
  std::vector<TensorPlan> t(4);
  t[0].name = "token_embd.weight", t[0].shape = {1000};
  for (int i = 1; i < 4; ++i) t[i].name = "blk.0.ffn_up_exps.weight", t[i].shape = {4, 32, 64};
  CHECK(size_label(t) == "4x7.1K");
}

TEST_CASE("gguf_model: GLM-4.5's table as Glm4MoeModel maps it") {
  // Glm4MoeModel: GLM4_MOE's table (post_attention_norm, q/k norms, shared experts, exp_probs_b),
  // DeepSeek's MLA names refused, a layer past num_hidden_layers (MTP) refused.
  nlohmann::json glm{{"architectures", {"Glm4MoeForCausalLM"}},
                     {"num_attention_heads", 4},
                     {"n_routed_experts", 2},
                     {"num_hidden_layers", 1}};
  Arch g = arch_of(glm, "cfg");
  CHECK(tensor_plan(g, glm, "model.layers.0.post_attention_layernorm.weight", {8}, out_type("f16"), "cfg").name ==
        "blk.0.post_attention_norm.weight");
  CHECK(tensor_plan(g, glm, "model.layers.0.self_attn.k_norm.weight", {8}, out_type("f16"), "cfg").name ==
        "blk.0.attn_k_norm.weight");
  CHECK(tensor_plan(g, glm, "model.layers.0.mlp.shared_experts.up_proj.weight", {8, 8}, out_type("f16"), "cfg").name ==
        "blk.0.ffn_up_shexp.weight");
  CHECK(tensor_plan(g, glm, "model.layers.0.mlp.gate.e_score_correction_bias", {2}, out_type("f16"), "cfg").name ==
        "blk.0.exp_probs_b.bias");
  CHECK_THROWS_AS(tensor_plan(g, glm, "model.layers.0.self_attn.q_a_proj.weight", {8, 8}, out_type("f16"), "cfg"),
                  UnsupportedError);
  CHECK_THROWS_AS(plan_tensors(g, glm, {{"model.layers.1.eh_proj.weight", {8, 16}}}, out_type("f16"), "cfg"),
                  UnsupportedError);
  // With num_nextn_predict_layers 1, layer 1 is the MTP block: blk.1.nextn.*; layer 2 is still refused.
  glm["num_nextn_predict_layers"] = 1;
  CHECK(plan_tensors(g, glm, {{"model.layers.1.eh_proj.weight", {8, 16}}}, out_type("f16"), "cfg").at(0).name ==
        "blk.1.nextn.eh_proj.weight");
  CHECK(plan_tensors(g, glm, {{"model.layers.1.shared_head.head.weight", {8, 8}}}, out_type("f16"), "cfg").at(0).name ==
        "blk.1.nextn.shared_head_head.weight");
  CHECK_THROWS_AS(plan_tensors(g, glm, {{"model.layers.2.eh_proj.weight", {8, 16}}}, out_type("f16"), "cfg"),
                  UnsupportedError);
}

TEST_CASE("gguf_model: GPT-OSS's fused experts split as GptOssModel splits them") {
  nlohmann::json config{{"architectures", {"GptOssForCausalLM"}}, {"num_attention_heads", 4}, {"num_local_experts", 2}};
  Arch a = arch_of(config, "cfg");
  std::vector<Input> in{{"model.layers.0.mlp.experts.down_proj", {2, 4, 3}},
                        {"model.layers.0.mlp.experts.down_proj_bias", {2, 3}},
                        {"model.layers.0.mlp.experts.gate_up_proj", {2, 3, 4}},
                        {"model.layers.0.mlp.experts.gate_up_proj_bias", {2, 4}},
                        {"model.layers.0.mlp.router.bias", {2}},
                        {"model.layers.0.mlp.router.weight", {2, 3}},
                        {"model.layers.0.post_attention_layernorm.weight", {3}},
                        {"model.layers.0.self_attn.sinks", {4}}};
  std::vector<TensorPlan> p = plan_tensors(a, config, in, out_type("f16"), "cfg");
  std::vector<std::string> names;
  for (const TensorPlan& t : p) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"blk.0.ffn_down_exps.weight", "blk.0.ffn_down_exps.bias",
                                          "blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight",
                                          "blk.0.ffn_gate_exps.bias", "blk.0.ffn_up_exps.bias",
                                          "blk.0.ffn_gate_inp.bias", "blk.0.ffn_gate_inp.weight",
                                          "blk.0.post_attention_norm.weight", "blk.0.attn_sinks.weight"});
  CHECK(p[0].shape == std::vector<int64_t>{2, 3, 4});
  CHECK(p[2].shape == std::vector<int64_t>{2, 2, 3});
  CHECK(p[4].shape == std::vector<int64_t>{2, 2});
  CHECK(p[2].type == TensorType::F16);
  CHECK(p[4].type == TensorType::F32);
  // torch: x = arange(24).reshape(2, 3, 4); x.transpose(-1, -2)[:, ::2, :] (gate), [:, 1::2, :] (up);
  // arange(24).reshape(2, 4, 3).transpose(-1, -2) (down); arange(8).reshape(2, 4)[..., ::2] (bias).
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  CHECK(fused_part(p[2], x.data(), {2, 3, 4}) == std::vector<float>{0, 4, 8, 2, 6, 10, 12, 16, 20, 14, 18, 22});
  CHECK(fused_part(p[3], x.data(), {2, 3, 4}) == std::vector<float>{1, 5, 9, 3, 7, 11, 13, 17, 21, 15, 19, 23});
  CHECK(fused_part(p[0], x.data(), {2, 4, 3}) ==
        std::vector<float>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, 12, 15, 18, 21, 13, 16, 19, 22, 14, 17, 20, 23});
  CHECK(fused_part(p[4], x.data(), {2, 4}) == std::vector<float>{0, 2, 4, 6});
  CHECK(fused_part(p[5], x.data(), {2, 4}) == std::vector<float>{1, 3, 5, 7});
  // MXFP4 blocks and 3 experts where config.json says 2: refused.
  CHECK_THROWS_AS(
      plan_tensors(a, config, {{"model.layers.0.mlp.experts.down_proj_blocks", {2, 3, 1, 16}}}, out_type("f16"), "cfg"),
      UnsupportedError);
  CHECK_THROWS_AS(
      plan_tensors(a, config, {{"model.layers.0.mlp.experts.down_proj", {3, 4, 3}}}, out_type("f16"), "cfg"),
      UnsupportedError);
}

TEST_CASE("gguf_model: transformers' in-memory experts written as the same model saved per expert") {
  // Qwen3-MoE: gate_up_proj [2 experts, 2 x 2 ffn, 3 hidden], down_proj [2, 3, 2]: emitted down, gate,
  // up at the later of the two, before the router, as Qwen2MoeModel emits the per-expert tensors.
  nlohmann::json config{{"architectures", {"Qwen3MoeForCausalLM"}}, {"num_attention_heads", 4}, {"num_experts", 2}};
  Arch a = arch_of(config, "cfg");
  std::vector<Input> in{{"model.layers.0.mlp.experts.down_proj", {2, 3, 2}},
                        {"model.layers.0.mlp.experts.gate_up_proj", {2, 4, 3}},
                        {"model.layers.0.mlp.gate.weight", {2, 3}}};
  std::vector<TensorPlan> p = plan_tensors(a, config, in, out_type("f16"), "cfg");
  REQUIRE(p.size() == 4);
  CHECK(p[0].name == "blk.0.ffn_down_exps.weight");
  CHECK(p[0].inputs == std::vector<size_t>{0});
  CHECK(p[0].gate_up == 0);
  CHECK(p[0].shape == std::vector<int64_t>{2, 3, 2});
  CHECK(p[1].name == "blk.0.ffn_gate_exps.weight");
  CHECK(p[1].gate_up == 'G');
  CHECK(p[1].shape == std::vector<int64_t>{2, 2, 3});
  CHECK(p[2].name == "blk.0.ffn_up_exps.weight");
  CHECK(p[2].gate_up == 'U');
  CHECK(p[3].name == "blk.0.ffn_gate_inp.weight");
  // torch: arange(24).reshape(2, 4, 3).chunk(2, dim=1): gate, up.
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  CHECK(fused_part(p[1], x.data(), {2, 4, 3}) == std::vector<float>{0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17});
  CHECK(fused_part(p[2], x.data(), {2, 4, 3}) == std::vector<float>{6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23});
  // Transposed ([experts, hidden, 2 x ffn]) or alone: refused.
  CHECK_THROWS_AS(plan_tensors(a, config,
                               {{"model.layers.0.mlp.experts.down_proj", {2, 2, 3}},
                                {"model.layers.0.mlp.experts.gate_up_proj", {2, 3, 4}}},
                               out_type("f16"), "cfg"),
                  UnsupportedError);
  CHECK_THROWS_AS(
      plan_tensors(a, config, {{"model.layers.0.mlp.experts.gate_up_proj", {2, 4, 3}}}, out_type("f16"), "cfg"),
      UnsupportedError);

  // Mixtral: sorted as its safetensors keys (block_sparse_moe. before input_layernorm), emitted
  // gate, down, up as LlamaModel emits w1, w2, w3.
  nlohmann::json mixtral{
      {"architectures", {"MixtralForCausalLM"}}, {"num_attention_heads", 4}, {"num_local_experts", 2}};
  Arch mx = arch_of(mixtral, "cfg");
  CHECK(sort_key(mx, "model.layers.0.mlp.experts.gate_up_proj") ==
        "model.layers.0.block_sparse_moe.experts.gate_up_proj");
  CHECK(sort_key(mx, "model.layers.0.mlp.gate.weight") == "model.layers.0.block_sparse_moe.gate.weight");
  CHECK(sort_key(mx, "model.layers.0.input_layernorm.weight") == "model.layers.0.input_layernorm.weight");
  CHECK(sort_key(a, "model.layers.0.mlp.gate.weight") == "model.layers.0.mlp.gate.weight");
  p = plan_tensors(mx, mixtral, in, out_type("f16"), "cfg");
  REQUIRE(p.size() == 4);
  CHECK(p[0].name == "blk.0.ffn_gate_exps.weight");
  CHECK(p[0].gate_up == 'G');
  CHECK(p[1].name == "blk.0.ffn_down_exps.weight");
  CHECK(p[2].name == "blk.0.ffn_up_exps.weight");
  CHECK(p[3].name == "blk.0.ffn_gate_inp.weight");
}

TEST_CASE("gguf_model: the families' rows (Gemma's shifted norms, Phi-3's fused names, Falcon's regrouped qkv)") {
  OutType f16 = out_type("f16");
  nlohmann::json gemma{{"architectures", {"Gemma2ForCausalLM"}}, {"num_attention_heads", 4}};
  Arch g = arch_of(gemma, "cfg");
  CHECK(g.name == "gemma2");
  CHECK(tensor_plan(g, gemma, "model.layers.1.pre_feedforward_layernorm.weight", {64}, f16, "cfg").name ==
        "blk.1.ffn_norm.weight");
  CHECK(tensor_plan(g, gemma, "model.layers.1.pre_feedforward_layernorm.weight", {64}, f16, "cfg").shift == 1.0f);
  CHECK(tensor_plan(g, gemma, "model.layers.1.post_attention_layernorm.weight", {64}, f16, "cfg").name ==
        "blk.1.post_attention_norm.weight");
  CHECK(tensor_plan(g, gemma, "model.layers.1.self_attn.q_proj.weight", {128, 64}, f16, "cfg").shift == 0.0f);
  CHECK(tensor_plan(g, gemma, "model.layers.1.self_attn.q_proj.weight", {128, 64}, f16, "cfg").permute_heads == 0);
  // Gemma2Model.filter_tensors: the head is left out, tied or not.
  std::vector<TensorPlan> p =
      plan_tensors(g, gemma, {{"lm_head.weight", {100, 64}}, {"model.norm.weight", {64}}}, f16, "cfg");
  REQUIRE(p.size() == 1);
  CHECK(p[0].name == "output_norm.weight");

  nlohmann::json phi{{"architectures", {"Phi3ForCausalLM"}}, {"num_attention_heads", 4}};
  Arch ph = arch_of(phi, "cfg");
  CHECK(tensor_plan(ph, phi, "model.layers.0.self_attn.qkv_proj.weight", {128, 64}, f16, "cfg").name ==
        "blk.0.attn_qkv.weight");
  CHECK(tensor_plan(ph, phi, "model.layers.0.mlp.gate_up_proj.weight", {256, 64}, f16, "cfg").name ==
        "blk.0.ffn_up.weight");

  // Falcon: 4 heads in 2 groups of head_dim 2 (hidden 8): rows q0 q1 k0 v0 | q2 q3 k1 v1 become
  // q0 q1 q2 q3 k0 k1 v0 v1 (torch: view(2, 4, 2, 8)[:, :-2], [:, [-2]], [:, [-1]] concatenated).
  nlohmann::json falcon{
      {"architectures", {"FalconForCausalLM"}}, {"num_attention_heads", 4}, {"num_kv_heads", 2}, {"hidden_size", 8}};
  Arch f = arch_of(falcon, "cfg");
  TensorPlan qkv = tensor_plan(f, falcon, "transformer.h.0.self_attention.query_key_value.weight", {16, 8}, f16, "cfg");
  CHECK(qkv.name == "blk.0.attn_qkv.weight");
  REQUIRE(qkv.qkv_groups == 2);
  std::vector<float> x(16 * 8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i / 8);  // each row its index
  std::vector<float> y = falcon_qkv_part(qkv, x.data(), 16, 8);
  std::vector<float> rows;
  for (size_t r = 0; r < 16; ++r) rows.push_back(y[r * 8]);
  CHECK(rows == std::vector<float>{0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15});
  CHECK(tensor_plan(f, falcon, "transformer.ln_f.bias", {8}, f16, "cfg").name == "output_norm.bias");
  CHECK(tensor_plan(f, falcon, "transformer.h.1.ln_attn.weight", {8}, f16, "cfg").name == "blk.1.attn_norm_2.weight");
  // Falcon-7B's layout saved by transformers 5 (num_kv_heads = heads): the converter's view fails.
  nlohmann::json seven = falcon;
  seven["num_kv_heads"] = 4;
  CHECK_THROWS_AS(tensor_plan(f, seven, "transformer.h.0.self_attention.query_key_value.weight", {12, 8}, f16, "cfg"),
                  UnsupportedError);

  // Command-R has no output tensor: an untied head is refused.
  nlohmann::json cohere{{"architectures", {"CohereForCausalLM"}}, {"num_attention_heads", 4}};
  CHECK_THROWS_AS(tensor_plan(arch_of(cohere, "cfg"), cohere, "lm_head.weight", {100, 64}, f16, "cfg"),
                  UnsupportedError);
}

TEST_CASE("gguf_model: verify's table of a family (gemma2) from a file's keys") {
  std::map<std::string, int64_t> keys{
      {"gemma2.block_count", 1},          {"gemma2.embedding_length", 64},       {"gemma2.feed_forward_length", 128},
      {"gemma2.attention.head_count", 4}, {"gemma2.attention.head_count_kv", 2}, {"gemma2.attention.key_length", 32},
      {"tokenizer.ggml.tokens", 1000}};
  auto t = expected_tensors("gemma2", [&](const std::string& k) -> std::optional<int64_t> {
    auto it = keys.find(k);
    return it == keys.end() ? std::nullopt : std::optional<int64_t>(it->second);
  });
  REQUIRE(t);
  std::map<std::string, std::vector<int64_t>> shape;
  for (const ExpectedTensor& e : *t) shape[e.name] = e.shape;
  CHECK(shape.at("token_embd.weight") == std::vector<int64_t>{1000, 64});
  CHECK(shape.at("blk.0.attn_q.weight") == std::vector<int64_t>{128, 64});
  CHECK(shape.at("blk.0.attn_k.weight") == std::vector<int64_t>{64, 64});
  CHECK(shape.at("blk.0.attn_output.weight") == std::vector<int64_t>{64, 128});
  CHECK(shape.at("blk.0.post_ffw_norm.weight") == std::vector<int64_t>{64});
  CHECK(shape.count("output.weight") == 0);  // gemma2.cpp: the embeddings, duplicated
}
