// LoRA adapters (meta/lora_keys.h): finding them in the keys PEFT writes, the shape checks, and the
// merge arithmetic (view/kernels.h add_lora_delta) against a plain element-by-element reference.
// The oracle for whole checkpoints is PEFT itself (tests/interop/lora_test.py); these pin the parts.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "util/numeric.h"
#include "view/kernels.h"
#include "view/lora/lora_config.h"
#include "view/lora/lora_torchtune.h"

using namespace dcpctl;

namespace {

TensorMeta tensor(const std::string& fqn, std::vector<int64_t> shape, DType dt = DType::Float32) {
  TensorMeta t;
  t.fqn = fqn;
  t.dtype = dt;
  t.dtype_name = torch_name(dt);
  t.shape = shape;
  // One chunk, the whole tensor.
  t.chunk_dims.assign(shape.size(), 0);
  t.chunk_dims.insert(t.chunk_dims.end(), shape.begin(), shape.end());
  t.storage.resize(1);
  return t;
}

Metadata model(const std::vector<TensorMeta>& ts) {
  Metadata md;
  md.source = "test/.metadata";
  md.tensors = ts;
  for (uint32_t i = 0; i < ts.size(); ++i) md.order.push_back({true, i});
  return md;
}

const std::string P = "model.base_model.model.model.layers.0.self_attn.";

}  // namespace

TEST_CASE("find_lora reads PEFT's keys: named, unnamed, embeddings, DoRA, modules to save", "[lora]") {
  Metadata md = model({
      tensor(P + "q_proj.base_layer.weight", {32, 16}),
      tensor(P + "q_proj.lora_A.default.weight", {4, 16}),
      tensor(P + "q_proj.lora_B.default.weight", {32, 4}),
      tensor(P + "q_proj.lora_A.other.weight", {2, 16}),
      tensor(P + "q_proj.lora_B.other.weight", {32, 2}),
      tensor(P + "v_proj.lora_magnitude_vector.default.weight", {32}),
      tensor(P + "v_proj.lora_A.default.weight", {4, 16}),
      tensor(P + "v_proj.lora_B.default.weight", {32, 4}),
      tensor("model.base_model.model.model.embed_tokens.base_layer.weight", {100, 16}),
      tensor("model.base_model.model.model.embed_tokens.lora_embedding_A.default", {4, 100}),
      tensor("model.base_model.model.model.embed_tokens.lora_embedding_B.default", {16, 4}),
      tensor("model.base_model.model.lm_head.modules_to_save.default.weight", {100, 16}),
      tensor("model.base_model.model.lm_head.original_module.weight", {100, 16}),
      // An optimizer's state of those is no adapter.
      tensor("optim.state.base_model.model.lm_head.modules_to_save.default.weight.exp_avg", {100, 16}),
      tensor("optim.state." + P.substr(6) + "q_proj.lora_A.default.weight.exp_avg", {4, 16}),
  });
  LoraModel m = find_lora(md);
  REQUIRE(m.layers.size() == 4);
  CHECK(m.adapters == std::vector<std::string>{"default", "other"});
  CHECK(m.layers[0].module == P + "q_proj");
  CHECK(m.layers[0].base == 0);
  CHECK((m.layers[0].a == 1 && m.layers[0].b == 2));
  CHECK((m.layers[1].adapter == "other" && m.layers[1].a == 3));
  CHECK((m.layers[2].magnitude == 5 && m.layers[2].base == -1));
  CHECK((m.layers[3].embedding && m.layers[3].a == 9 && m.layers[3].b == 10 && m.layers[3].base == 8));
  REQUIRE(m.saved.size() == 1);
  CHECK((m.saved[0].module == "model.base_model.model.lm_head" && m.saved[0].tensors == std::vector<int>{11}));
  CHECK(m.originals == std::vector<int>{12});
  CHECK(m.targets("default") == std::vector<std::string>{"embed_tokens", "q_proj", "v_proj"});
  CHECK(check_lora(md, m).empty());

  // Saved by PEFT alone: no adapter name in the keys.
  Metadata alone = model({tensor("base_model.model.q_proj.lora_A.weight", {4, 16}),
                          tensor("base_model.model.q_proj.lora_B.weight", {32, 4}),
                          tensor("base_model.model.e.lora_embedding_A", {4, 100}),
                          tensor("base_model.model.e.lora_embedding_B", {16, 4}),
                          tensor("base_model.model.q_proj.lora_magnitude_vector", {32})});
  LoraModel a = find_lora(alone);
  REQUIRE(a.layers.size() == 2);
  CHECK(a.adapters == std::vector<std::string>{""});
  CHECK((a.layers[0].a == 0 && a.layers[0].b == 1 && a.layers[0].magnitude == 4));
  CHECK(a.layers[1].embedding);
}

TEST_CASE("check_lora names an adapter saved as one rank's slice", "[lora]") {
  // accelerate #4206: rank 0's half of lora_A's rows.
  Metadata md =
      model({tensor(P + "q_proj.base_layer.weight", {32, 16}), tensor(P + "q_proj.lora_A.default.weight", {2, 16}),
             tensor(P + "q_proj.lora_B.default.weight", {32, 4})});
  Findings f = check_lora(md, find_lora(md));
  REQUIRE(f.size() == 1);
  CHECK(f[0].code == "lora-shape");
  CHECK(f[0].where.key == P + "q_proj.lora_B.default.weight");
  // Half of B's rows, A whole: the base layer tells.
  Metadata half =
      model({tensor(P + "q_proj.base_layer.weight", {32, 16}), tensor(P + "q_proj.lora_A.default.weight", {4, 16}),
             tensor(P + "q_proj.lora_B.default.weight", {16, 4})});
  Findings g = check_lora(half, find_lora(half));
  REQUIRE(g.size() == 1);
  CHECK(g[0].message.find("slice") != std::string::npos);
  // A without B; a magnitude vector of the wrong size.
  Metadata lone =
      model({tensor(P + "q_proj.lora_A.default.weight", {4, 16}), tensor(P + "k_proj.lora_A.default.weight", {4, 16}),
             tensor(P + "k_proj.lora_B.default.weight", {32, 4}),
             tensor(P + "k_proj.lora_magnitude_vector.default.weight", {16})});
  CHECK(check_lora(lone, find_lora(lone)).size() == 2);
  // GPT-2's Conv1D keeps [in, out]: accepted.
  Metadata conv =
      model({tensor("m.c_attn.base_layer.weight", {16, 32}), tensor("m.c_attn.lora_A.default.weight", {4, 16}),
             tensor("m.c_attn.lora_B.default.weight", {32, 4})});
  CHECK(check_lora(conv, find_lora(conv)).empty());
}

TEST_CASE("add_lora_delta: W + s·B·A (and its transpose) in boxes, as an element-by-element fma", "[lora]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 0.1f);
  const int64_t out = 12, in = 10, r = 3;
  std::vector<float> a(r * in), b(out * r), w(out * in);
  for (auto* v : {&a, &b, &w})
    for (float& x : *v) x = n(rng);
  const float s = 2.5f;
  for (bool transposed : {false, true}) {
    // Transposed: the base is [in, out] (an Embedding's [num, dim]); delta[i][j] = (B·A)[j][i].
    const int64_t rows = transposed ? in : out, cols = transposed ? out : in;
    for (Box box : {Box{{0, 0}, {rows, cols}}, Box{{3, 2}, {4, 5}}}) {
      std::vector<float> got(static_cast<size_t>(box.sizes[0] * box.sizes[1]));
      for (int64_t i = 0; i < box.sizes[0]; ++i)
        for (int64_t j = 0; j < box.sizes[1]; ++j)
          got[static_cast<size_t>(i * box.sizes[1] + j)] =
              w[static_cast<size_t>((box.offsets[0] + i) * cols + box.offsets[1] + j)];
      std::vector<float> want = got;
      add_lora_delta(got.data(), box, a.data(), in, b.data(), r, s, transposed, DType::Float32);
      for (int64_t i = 0; i < box.sizes[0]; ++i)
        for (int64_t j = 0; j < box.sizes[1]; ++j) {
          int64_t p = transposed ? box.offsets[1] + j : box.offsets[0] + i,
                  q = transposed ? box.offsets[0] + i : box.offsets[1] + j;
          float acc = 0;
          for (int64_t k = 0; k < r; ++k)
            acc = std::fmaf(b[static_cast<size_t>(p * r + k)], a[static_cast<size_t>(k * in + q)], acc);
          want[static_cast<size_t>(i * box.sizes[1] + j)] += acc * s;
        }
      CHECK(got == want);
    }
  }
  // A bfloat16 adapter: the delta is rounded to bfloat16 before it is added, as PEFT's .to(dtype).
  std::vector<float> one{1.0f};
  std::vector<float> aa{1.0f}, bb{1.0f + 1.0f / 1024};  // 1 + 2^-10 is not a bfloat16
  add_lora_delta(one.data(), Box{{0, 0}, {1, 1}}, aa.data(), 1, bb.data(), 1, 1.0f, false, DType::BFloat16);
  CHECK(one[0] == 2.0f);
  std::vector<float> two{1.0f};
  add_lora_delta(two.data(), Box{{0, 0}, {1, 1}}, aa.data(), 1, bb.data(), 1, 1.0f, false, DType::Float32);
  CHECK(two[0] == 2.0f + 1.0f / 1024);
}

TEST_CASE("DoraNorm: torch's 8-lane float32 row norm, the same from column pieces in order", "[lora]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.f, 0.3f);
  for (int64_t len : {5, 8, 37, 64, 203}) {
    std::vector<float> x(static_cast<size_t>(len));
    for (float& v : x) v = n(rng);
    DoraNorm whole;
    whole.add(x.data(), 0, len, len);
    // torch's loop, written out: lanes of rounded square-and-add, the lanes added 0..7, the tail.
    const int64_t main = len - len % 8;
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < main; ++j) {
      float sq = x[static_cast<size_t>(j)] * x[static_cast<size_t>(j)];
      lanes[j % 8] = lanes[j % 8] + sq;
    }
    float sum = lanes[0];
    for (int l = 1; l < 8; ++l) sum = sum + lanes[l];
    for (int64_t j = main; j < len; ++j) sum = sum + x[static_cast<size_t>(j)] * x[static_cast<size_t>(j)];
    CHECK(whole.finish(len) == std::sqrt(sum));
    double exact = 0;
    for (float v : x) exact += static_cast<double>(v) * v;
    CHECK(std::abs(whole.finish(len) - std::sqrt(exact)) <= 1e-6 * std::sqrt(exact));
    // Column pieces (a chunk split along dim 1), in order: the same bits.
    DoraNorm pieces;
    for (int64_t c0 = 0, step = 3; c0 < len; c0 += step, step += 4)
      pieces.add(x.data() + c0, c0, std::min(step, len - c0), len);
    CHECK(pieces.finish(len) == whole.finish(len));
  }
}

TEST_CASE("dora_scale_rows and add_lora_bias round as torch's ops in the dtype", "[lora]") {
  std::vector<float> v{1.0f, 2.0f, -3.0f, 0.5f};
  const float mag[2] = {3.0f, 1.0f}, norm[2] = {2.0f, 3.0f};
  dora_scale_rows(v.data(), 2, 2, mag, norm, DType::Float32);
  CHECK(v == std::vector<float>{1.5f, 3.0f, -3.0f * (1.0f / 3.0f), 0.5f * (1.0f / 3.0f)});
  // bfloat16: 1/3 rounds to 0.333984375 before it multiplies.
  std::vector<float> h{3.0f};
  dora_scale_rows(h.data(), 1, 1, mag + 1, norm + 1, DType::BFloat16);
  CHECK(h[0] == 1.0f);  // round_bf16(3 · 0.333984375 = 1 + 2^-9) = 1 (float32 would give 1.0000001)
  // bias += round(b · s): in float32, and with a bfloat16 lora_B the product rounded first.
  std::vector<float> bias{1.0f, 1.0f, 1.0f}, b{0.0f, 1.0f + 1.0f / 1024, 0.25f};
  add_lora_bias(bias.data(), 1, 2, b.data(), 2.0f, DType::Float32);
  CHECK(bias == std::vector<float>{3.0f + 2.0f / 1024, 1.5f, 1.0f});
  std::vector<float> bias16{1.0f};
  add_lora_bias(bias16.data(), 1, 1, b.data(), 1.0f, DType::BFloat16);
  CHECK(bias16[0] == 2.0f);
}

TEST_CASE("find_lora: PEFT's target_parameters wrappers find their parameter bases, rank r not r·E", "[lora]") {
  const std::string E = "model.base_model.model.model.layers.0.mlp.experts.";
  // The innermost wrapper adapts the parameter registered (saved) first: gate_up_proj [E=4, out 32, in 64].
  Metadata md = model({tensor(E + "base_layer.base_layer.gate_up_proj", {4, 32, 64}),
                       tensor(E + "base_layer.base_layer.down_proj", {4, 64, 16}),
                       tensor(E + "base_layer.lora_A.default.weight", {16, 64}),
                       tensor(E + "base_layer.lora_B.default.weight", {32, 16}),
                       tensor(E + "lora_A.default.weight", {16, 16}), tensor(E + "lora_B.default.weight", {64, 16})});
  LoraModel lora = find_lora(md);
  REQUIRE(lora.layers.size() == 2);
  for (const LoraLayer& l : lora.layers) {
    CHECK(l.wrapper);
    CHECK(l.experts == 4);
    CHECK(lora_rank(md, l) == 4);
    CHECK_FALSE(l.param_transposed);
    CHECK(l.base == (l.module == E + "base_layer" ? 0 : 1));
  }
  CHECK(lora.layers[0].target() == "model.base_model.model.model.layers.0.mlp.experts.gate_up_proj");
  CHECK(lora.targets("default").empty());
  CHECK(lora.target_parameters("default") == std::vector<std::string>{"experts.down_proj", "experts.gate_up_proj"});
  CHECK(check_lora(md, lora).empty());
  CHECK(lora.describe(md)["adapters"][0]["layout"] == "peft-parameter");
}

TEST_CASE("add_lora_expert_deltas: each expert's B_e·A_e, B's columns k·E + e", "[lora]") {
  const int64_t E = 3, r = 2, out = 4, in = 5;
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(static_cast<size_t>(r * E * in)), b(static_cast<size_t>(out * r * E));
  for (float& x : a) x = u(g);
  for (float& x : b) x = u(g);
  // Experts 1..2, rows 1..3, all columns: a box of a chunk.
  Box box{{1, 1, 0}, {2, 3, in}};
  std::vector<float> w(box.numel(), 0.5f);
  add_lora_expert_deltas(w.data(), box, a.data(), in, b.data(), out, r, E, 0.75f, false, DType::Float32);
  for (int64_t e = 1; e < 3; ++e)
    for (int64_t o = 1; o < 4; ++o)
      for (int64_t i = 0; i < in; ++i) {
        float d = 0;
        for (int64_t k = 0; k < r; ++k)
          d = std::fma(b[static_cast<size_t>(o * r * E + k * E + e)], a[static_cast<size_t>((e * r + k) * in + i)], d);
        CHECK(w[static_cast<size_t>(((e - 1) * 3 + (o - 1)) * in + i)] == 0.5f + d * 0.75f);
      }
}

TEST_CASE("torchtune: its keys found over M.weight, HF names, the RoPE rows of lora_B", "[lora]") {
  Metadata md = model({tensor("model.layers.0.attn.q_proj.weight", {8, 8}),
                       tensor("model.layers.0.attn.q_proj.lora_a.weight", {2, 8}),
                       tensor("model.layers.0.attn.q_proj.lora_b.weight", {8, 2}),
                       tensor("model.layers.0.attn.q_proj.magnitude", {8}), tensor("model.norm.magnitude", {8})});
  LoraModel lora = find_lora(md);
  REQUIRE(lora.layers.size() == 1);  // a magnitude with no lora_a beside it is none
  CHECK(lora.layers[0].torchtune);
  CHECK(lora.layers[0].base == 0);
  CHECK(lora.layers[0].magnitude == 3);
  CHECK(lora.describe(md)["adapters"][0]["layout"] == "torchtune");
  CHECK(torchtune_hf_module("layers.3.attn.output_proj") == "model.layers.3.self_attn.o_proj");
  CHECK(torchtune_hf_module("layers.0.mlp.w3") == "model.layers.0.mlp.up_proj");
  CHECK(torchtune_hf_module("output") == "lm_head");
  CHECK(torchtune_hf_module("layers.0.attn.w1").empty());
  // view(heads, head_dim / 2, 2, r).transpose(1, 2): head 0 of 4 rows -> rows 0, 2, 1, 3.
  CHECK(torchtune_rope_rows(2, 4) == std::vector<int64_t>{0, 2, 1, 3, 4, 6, 5, 7});
}
