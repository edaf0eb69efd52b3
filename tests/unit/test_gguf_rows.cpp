// A GGUF tensor converted in windows of whole units of its input's first dimension (gguf/rows.h)
// is the tensor converted whole: each transform of gguf/model.h (the q/k permutation, the
// kv_b split, GPT-OSS's fused experts and transformers' in-memory gate_up_proj, the MXFP4 repack)
// over every window size, the windows' outputs concatenated, equal to the whole-tensor function
// (permute_rows, kv_b_part, fused_part, mxfp4_repack, which tests/interop/gguf_test.py checks
// against the converter), and encoded whole rows equal to the tensor's encoding cut there.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gguf/rows.h"

using namespace dcpctl;
using namespace dcpctl::gguf;

namespace {

std::vector<float> ramp(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i) * 0.37f - static_cast<float>(i % 7);
  return x;
}

// The windows of `units` units of `in` converted one after the other, concatenated.
std::vector<float> windowed(const TensorPlan& p, const std::vector<float>& x, const std::vector<int64_t>& in,
                            int64_t units) {
  const int64_t dim0 = in[0], step = units * rows_unit(p, in);
  const size_t per_index = x.size() / static_cast<size_t>(dim0);
  std::vector<float> out;
  for (int64_t first = 0; first < dim0; first += step) {
    const int64_t rows = std::min(step, dim0 - first);
    std::vector<float> w(x.begin() + static_cast<long>(static_cast<size_t>(first) * per_index),
                         x.begin() + static_cast<long>(static_cast<size_t>(first + rows) * per_index));
    std::vector<float> got = convert_rows(p, std::move(w), in, rows);
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

}  // namespace

TEST_CASE("gguf_rows: a plain tensor's windows are its rows") {
  TensorPlan p;
  std::vector<float> x = ramp(10 * 6);
  for (int64_t units : {1, 3, 10, 11}) CHECK(windowed(p, x, {10, 6}, units) == x);
  CHECK(rows_unit(p, {10, 6}) == 1);
  CHECK(!moves_rows(p));
}

TEST_CASE("gguf_rows: the q/k permutation in windows of whole heads") {
  TensorPlan p;
  p.permute_heads = 4;
  const std::vector<int64_t> in{4 * 2 * 3, 5};  // 4 heads of 2 x 3 rows
  std::vector<float> x = ramp(24 * 5);
  std::vector<uint8_t> whole = permute_rows(reinterpret_cast<const uint8_t*>(x.data()), 24, 5, 4, 4);
  std::vector<float> want(x.size());
  std::memcpy(want.data(), whole.data(), whole.size());
  CHECK(rows_unit(p, in) == 6);
  for (int64_t units : {1, 2, 3, 4}) CHECK(windowed(p, x, in, units) == want);
  // a bias: one column
  std::vector<float> b = ramp(24);
  std::vector<uint8_t> wb = permute_rows(reinterpret_cast<const uint8_t*>(b.data()), 24, 1, 4, 4);
  std::vector<float> want_b(24);
  std::memcpy(want_b.data(), wb.data(), wb.size());
  CHECK(windowed(p, b, {24}, 1) == want_b);
  CHECK_THROWS(convert_rows(p, ramp(4 * 5), in, 4));  // not whole heads
}

TEST_CASE("gguf_rows: DeepSeek's kv_b split in windows of whole heads") {
  for (char part : {'k', 'v'}) {
    TensorPlan p;
    p.kv_b = part, p.kv_b_heads = 3, p.kv_b_nope = 4, p.kv_b_v = 2;
    const std::vector<int64_t> in{3 * 6, 5};
    std::vector<float> x = ramp(18 * 5);
    std::vector<float> want = kv_b_part(p, x.data(), 5);
    CHECK(rows_unit(p, in) == 6);
    for (int64_t units : {1, 2, 3}) CHECK(windowed(p, x, in, units) == want);
  }
}

TEST_CASE("gguf_rows: fused experts (GPT-OSS's, transformers' in-memory) in windows of whole experts") {
  const std::vector<int64_t> in{5, 6, 8};  // [experts, rows, cols]
  std::vector<float> x = ramp(5 * 6 * 8);
  for (char part : {'g', 'u', 'G', 'U', '\0'}) {
    TensorPlan p;
    p.gate_up = part;
    p.transpose = part != 'G' && part != 'U';
    std::vector<float> want = fused_part(p, x.data(), in);
    for (int64_t units : {1, 2, 4, 5}) CHECK(windowed(p, x, in, units) == want);
  }
  // the biases [experts, 2 x ffn]
  for (char part : {'g', 'u'}) {
    TensorPlan p;
    p.gate_up = part;
    std::vector<float> b = ramp(5 * 8);
    std::vector<float> want = fused_part(p, b.data(), {5, 8});
    for (int64_t units : {1, 3}) CHECK(windowed(p, b, {5, 8}, units) == want);
  }
}

TEST_CASE("gguf_rows: MXFP4 experts repacked an expert window at a time") {
  const std::vector<int64_t> bs{3, 4, 2, 16};  // [experts, rows, groups, 16]
  std::vector<uint8_t> blocks(3 * 4 * 2 * 16), scales(3 * 4 * 2);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(100 + i);
  for (char part : {'g', 'u', '\0'}) {
    TensorPlan p;
    p.mxfp4 = true, p.gate_up = part;
    std::vector<uint8_t> want = mxfp4_repack(p, blocks.data(), scales.data(), bs);
    for (int64_t units : {1, 2}) {
      std::vector<uint8_t> got;
      for (int64_t e = 0; e < 3; e += units) {
        const int64_t m = std::min<int64_t>(units, 3 - e);
        std::vector<uint8_t> w = mxfp4_rows(p, blocks.data() + e * 4 * 2 * 16, scales.data() + e * 4 * 2, bs, m);
        got.insert(got.end(), w.begin(), w.end());
      }
      CHECK(got == want);
    }
  }
}

TEST_CASE("gguf_rows: whole rows encode as the tensor's encoding cut at them") {
  std::vector<float> x = ramp(6 * 256);
  for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
                       TensorType::F16, TensorType::BF16}) {
    std::vector<uint8_t> whole(tensor_bytes(t, x.size(), 256));
    encode(t, x.data(), x.size(), whole.data());
    std::vector<uint8_t> cut;
    for (size_t r = 0; r < 6; r += 4) {
      const size_t n = std::min<size_t>(4, 6 - r) * 256;
      std::vector<uint8_t> w(tensor_bytes(t, n, 256));
      encode(t, x.data() + r * 256, n, w.data());
      cut.insert(cut.end(), w.begin(), w.end());
    }
    CHECK(cut == whole);
  }
}
