// Two tables of one fact: what the writer plans for an architecture (gguf/model.h's
// plan_tensors, llama.cpp's converter's names and shapes) and what verify expects of it
// (expected_tensors, llama.cpp's loader's). For each architecture dcpctl writes, a tiny model's
// Hugging Face tensors are planned, the header the writer would write (its keys from
// add_model_keys, the tokens' count, each planned tensor) laid out into a file, and that file read
// back (gguf/reader.cpp) and checked as verify checks it (gguf/arch_check.h): no problem, and
// the architecture is one the table knows. A tensor dropped from the file is then missing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/arch_check.h"
#include "gguf/model.h"
#include "meta/checkpoint.h"

using namespace dcpctl;
using namespace dcpctl::gguf;
using nlohmann::json;

namespace {

constexpr int64_t H = 64, I = 96, V = 40, L = 2, NH = 4, KV = 2, HD = 16, E = 2, FE = 32;

json base(const char* arch) {
  return {{"architectures", {arch}}, {"hidden_size", H},          {"intermediate_size", I},
          {"num_hidden_layers", L},  {"num_attention_heads", NH}, {"num_key_value_heads", KV},
          {"head_dim", HD},          {"vocab_size", V},           {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-6},    {"rope_theta", 10000.0},     {"tie_word_embeddings", false}};
}

struct Model {
  json config;
  std::vector<Input> tensors;
  void add(const std::string& key, std::vector<int64_t> shape) { tensors.push_back({key, std::move(shape)}); }
};

// The attention and norms of layer i as transformers names them.
void attention(Model& m, int64_t i, bool bias, bool qk_norm, bool post_norm_only = false) {
  const std::string p = "model.layers." + std::to_string(i) + ".";
  m.add(p + "input_layernorm.weight", {H});
  m.add(p + "post_attention_layernorm.weight", {H});
  (void)post_norm_only;
  m.add(p + "self_attn.q_proj.weight", {NH * HD, H});
  m.add(p + "self_attn.k_proj.weight", {KV * HD, H});
  m.add(p + "self_attn.v_proj.weight", {KV * HD, H});
  m.add(p + "self_attn.o_proj.weight", {H, NH * HD});
  if (bias) {
    m.add(p + "self_attn.q_proj.bias", {NH * HD});
    m.add(p + "self_attn.k_proj.bias", {KV * HD});
    m.add(p + "self_attn.v_proj.bias", {KV * HD});
  }
  if (qk_norm) {
    m.add(p + "self_attn.q_norm.weight", {HD});
    m.add(p + "self_attn.k_norm.weight", {HD});
  }
}

void dense(Model& m, int64_t i, int64_t ff = I) {
  const std::string p = "model.layers." + std::to_string(i) + ".mlp.";
  m.add(p + "gate_proj.weight", {ff, H});
  m.add(p + "up_proj.weight", {ff, H});
  m.add(p + "down_proj.weight", {H, ff});
}

void experts(Model& m, int64_t i, const std::string& under = "mlp.experts.") {
  const std::string p = "model.layers." + std::to_string(i) + ".";
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = p + under + std::to_string(e) + ".";
    m.add(x + "gate_proj.weight", {FE, H});
    m.add(x + "up_proj.weight", {FE, H});
    m.add(x + "down_proj.weight", {H, FE});
  }
  m.add(p + "mlp.gate.weight", {E, H});
}

void ends(Model& m) {
  m.add("model.embed_tokens.weight", {V, H});
  m.add("model.norm.weight", {H});
  m.add("lm_head.weight", {V, H});
}

Model model(const std::string& arch) {
  Model m;
  if (arch == "llama" || arch == "qwen2" || arch == "qwen3") {
    m.config = base(arch == "llama" ? "LlamaForCausalLM" : arch == "qwen2" ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM");
    if (arch == "qwen2") m.config["head_dim"] = H / NH;
    for (int64_t i = 0; i < L; ++i) attention(m, i, arch == "qwen2", arch == "qwen3"), dense(m, i);
  } else if (arch == "qwen3moe") {
    m.config = base("Qwen3MoeForCausalLM");
    m.config.update({{"num_experts", E}, {"num_experts_per_tok", 1}, {"moe_intermediate_size", FE}});
    for (int64_t i = 0; i < L; ++i) attention(m, i, false, true), experts(m, i);
  } else if (arch == "mixtral") {
    m.config = base("MixtralForCausalLM");
    m.config.update({{"num_local_experts", E}, {"num_experts_per_tok", 1}, {"intermediate_size", FE}});
    for (int64_t i = 0; i < L; ++i) {
      attention(m, i, false, false);
      const std::string p = "model.layers." + std::to_string(i) + ".block_sparse_moe.";
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + "experts." + std::to_string(e) + ".";
        m.add(x + "w1.weight", {FE, H});
        m.add(x + "w2.weight", {H, FE});
        m.add(x + "w3.weight", {FE, H});
      }
      m.add(p + "gate.weight", {E, H});
    }
  } else if (arch == "deepseek2") {
    const int64_t qr = 32, kvr = 32, nope = 16, rope = 8, vd = 16;
    m.config = base("DeepseekV3ForCausalLM");
    m.config.update({{"num_key_value_heads", NH},
                     {"n_routed_experts", E},
                     {"num_experts_per_tok", 1},
                     {"moe_intermediate_size", FE},
                     {"q_lora_rank", qr},
                     {"kv_lora_rank", kvr},
                     {"qk_nope_head_dim", nope},
                     {"qk_rope_head_dim", rope},
                     {"v_head_dim", vd},
                     {"first_k_dense_replace", 1},
                     {"n_group", 1},
                     {"topk_group", 1},
                     {"n_shared_experts", 1},
                     {"scoring_func", "sigmoid"},
                     {"routed_scaling_factor", 1.0},
                     {"norm_topk_prob", true}});
    m.config.erase("head_dim");
    for (int64_t i = 0; i < L; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      m.add(p + "input_layernorm.weight", {H});
      m.add(p + "post_attention_layernorm.weight", {H});
      m.add(p + "self_attn.q_a_proj.weight", {qr, H});
      m.add(p + "self_attn.q_a_layernorm.weight", {qr});
      m.add(p + "self_attn.q_b_proj.weight", {NH * (nope + rope), qr});
      m.add(p + "self_attn.kv_a_proj_with_mqa.weight", {kvr + rope, H});
      m.add(p + "self_attn.kv_a_layernorm.weight", {kvr});
      m.add(p + "self_attn.kv_b_proj.weight", {NH * (nope + vd), kvr});
      m.add(p + "self_attn.o_proj.weight", {H, NH * vd});
      if (i == 0) {
        dense(m, i);
      } else {
        experts(m, i);
        m.add(p + "mlp.gate.e_score_correction_bias", {E});
        m.add(p + "mlp.shared_experts.gate_proj.weight", {FE, H});
        m.add(p + "mlp.shared_experts.up_proj.weight", {FE, H});
        m.add(p + "mlp.shared_experts.down_proj.weight", {H, FE});
      }
    }
  } else if (arch == "glm4moe") {
    m.config = base("Glm4MoeForCausalLM");
    m.config.update({{"n_routed_experts", E},
                     {"num_experts_per_tok", 1},
                     {"moe_intermediate_size", FE},
                     {"n_shared_experts", 1},
                     {"first_k_dense_replace", 1},
                     {"n_group", 1},
                     {"topk_group", 1},
                     {"routed_scaling_factor", 1.0},
                     {"use_qk_norm", true},
                     {"attention_bias", true},
                     {"partial_rotary_factor", 0.5},
                     {"norm_topk_prob", true},
                     {"num_nextn_predict_layers", 1}});
    for (int64_t i = 0; i < L; ++i) {
      attention(m, i, true, true);
      if (i == 0) {
        dense(m, i);
      } else {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        experts(m, i);
        m.add(p + "mlp.gate.e_score_correction_bias", {E});
        m.add(p + "mlp.shared_experts.gate_proj.weight", {FE, H});
        m.add(p + "mlp.shared_experts.up_proj.weight", {FE, H});
        m.add(p + "mlp.shared_experts.down_proj.weight", {H, FE});
      }
    }
  } else if (arch == "gpt-oss") {
    m.config = base("GptOssForCausalLM");
    m.config.update({{"num_local_experts", E},
                     {"num_experts_per_tok", 1},
                     {"intermediate_size", FE},
                     {"sliding_window", 16},
                     {"rope_scaling",
                      {{"rope_type", "yarn"},
                       {"factor", 2.0},
                       {"original_max_position_embeddings", 64},
                       {"beta_fast", 32.0},
                       {"beta_slow", 1.0}}}});
    for (int64_t i = 0; i < L; ++i) {
      attention(m, i, true, false);
      const std::string p = "model.layers." + std::to_string(i) + ".";
      m.add(p + "self_attn.o_proj.bias", {H});
      m.add(p + "self_attn.sinks", {NH});
      m.add(p + "mlp.router.weight", {E, H});
      m.add(p + "mlp.router.bias", {E});
      m.add(p + "mlp.experts.gate_up_proj", {E, H, 2 * FE});
      m.add(p + "mlp.experts.gate_up_proj_bias", {E, 2 * FE});
      m.add(p + "mlp.experts.down_proj", {E, FE, H});
      m.add(p + "mlp.experts.down_proj_bias", {E, H});
    }
  }
  ends(m);
  return m;
}

// The file the writer's header describes (tensor data left zero), read back and checked as verify
// checks it; `drop`: a planned tensor left out of the file.
GgufArchReport check_plan(const Model& m, const std::string& drop = "") {
  Arch a = arch_of(m.config, "cfg");
  std::vector<Input> in = m.tensors;
  std::sort(in.begin(), in.end(),
            [&](const Input& x, const Input& y) { return sort_key(a, x.key) < sort_key(a, y.key); });
  std::vector<TensorPlan> plans = plan_tensors(a, m.config, in, out_type("f32"), "cfg");
  Header h;
  add_model_keys(h, a, m.config, "Tiny", size_label(plans), out_type("f32"), "cfg");
  std::vector<std::string> tokens;
  for (int64_t t = 0; t < V; ++t) tokens.push_back("t" + std::to_string(t));
  h.add_strings("tokenizer.ggml.tokens", tokens);
  for (const TensorPlan& p : plans)
    if (p.name != drop) h.add_tensor(p.name, p.shape, p.type);
  std::vector<uint8_t> bytes = h.bytes();
  bytes.resize(bytes.size() + h.data_bytes());
  const std::string path = "/tmp/dcpctl-arch-plan-" + std::to_string(::getpid()) + ".gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  Checkpoint ck = open_checkpoint(path);
  GgufArchReport r = check_gguf_arch(ck);
  std::remove(path.c_str());
  return r;
}

std::string codes(const Findings& fs) {
  std::string s;
  for (const auto& f : fs) s += f.code + " " + f.text() + "\n";
  return s;
}

}  // namespace

TEST_CASE("gguf_arch_plan: what the writer plans is what verify expects, for each architecture written") {
  for (const char* arch : {"llama", "qwen2", "qwen3", "qwen3moe", "mixtral", "deepseek2", "glm4moe", "gpt-oss"}) {
    CAPTURE(arch);
    Model m = model(arch);
    GgufArchReport r = check_plan(m);
    INFO(codes(r.problems) + codes(r.notes));
    CHECK(r.problems.empty());
    CHECK(codes(r.notes).find("gguf-arch-not-checked") == std::string::npos);
    // A tensor the loader needs, left out: verify names it.
    GgufArchReport cut = check_plan(m, "blk.1.attn_output.weight");
    CHECK(codes(cut.problems).find("blk.1.attn_output.weight") != std::string::npos);
  }
}
