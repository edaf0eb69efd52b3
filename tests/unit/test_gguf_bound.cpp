// diff's GGUF bounds (gguf/bound.h): ggml's own bytes for tests/fixtures/gguf/quants/'s
// rows (libggml-base's quantize_row_*_ref, recorded by tests/fixtures/gguf/make_quants.py) are
// within each type's bound of their input, and so are many rows more that dcpctl's encoder (ggml's
// bytes bit for bit, unit:gguf_quants) quantizes; a code moved by one, a block scale changed, or
// another row's values are beyond it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gguf/bound.h"
#include "gguf/gguf.h"
#include "util/numeric.h"

using namespace dcpctl;
using namespace dcpctl::gguf;

namespace {

std::vector<uint8_t> fixture(const std::string& name) {
  std::ifstream f(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/gguf/quants/" + name, std::ios::binary);
  REQUIRE(f);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

const TensorType kTypes[] = {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                             TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

DiffAccumulator compare(TensorType t, const std::vector<uint8_t>& bytes, const std::vector<float>& x) {
  DiffAccumulator acc;
  compare_gguf(static_cast<uint32_t>(t), bytes.data(), x.data(), x.size(), 0, acc);
  return acc;
}

// Rows a writer meets: normals of several scales, heavy tails, outliers, one-signed rows, zeros.
std::vector<float> rows(size_t n_rows, size_t row) {
  std::mt19937 rng(71);
  std::normal_distribution<float> normal(0, 1);
  std::student_t_distribution<float> heavy(2);
  std::vector<float> x(n_rows * row);
  for (size_t r = 0; r < n_rows; ++r) {
    const float scale = std::ldexp(1.0f, static_cast<int>(r % 24) - 16);
    for (size_t i = 0; i < row; ++i) {
      float v = r % 3 == 0 ? heavy(rng) : normal(rng);
      if (r % 5 == 1 && i % 97 == 0) v *= 40;  // outliers
      if (r % 7 == 2) v = std::fabs(v);        // one-signed
      if (r % 11 == 3 && i % 3) v = 0;         // mostly zeros
      x[r * row + i] = v * scale;
    }
  }
  return x;
}

}  // namespace

TEST_CASE("gguf_bound: ggml's own bytes are within each type's bound of their input") {
  std::vector<uint8_t> in = fixture("input.f32");
  std::vector<float> x(in.size() / 4);
  std::memcpy(x.data(), in.data(), in.size());
  // Row by row: a row whose fp16 scales overflow (make_quants.py's) decodes to infinities or NaN,
  // which no bound admits; every other row is within it.
  const size_t row = 512;
  for (TensorType t : kTypes) {
    CAPTURE(type_name(t));
    const std::vector<uint8_t> b = fixture(std::string(type_name(t)) + ".bin");
    const uint64_t rb = tensor_bytes(t, row, row);
    size_t overflowing = 0;
    for (size_t r = 0; r < x.size() / row; ++r) {
      CAPTURE(r);
      // Rows holding NaNs or infinities (make_quants.py's last two: the quantizers' bytes of them,
      // for unit:gguf_quants) have no bound to be within.
      if (!std::all_of(x.begin() + static_cast<long>(r * row), x.begin() + static_cast<long>((r + 1) * row),
                       [](float v) { return std::isfinite(v); }))
        continue;
      std::vector<float> dq(row);
      decode_gguf(static_cast<uint32_t>(t), b.data() + r * rb, row, dq.data());
      bool finite = true;
      for (float v : dq) finite = finite && std::isfinite(v);
      DiffAccumulator acc;
      compare_gguf(static_cast<uint32_t>(t), b.data() + r * rb, x.data() + r * row, row, 0, acc);
      if (finite) {
        CHECK(acc.differ == 0);
      } else {
        ++overflowing;
        CHECK(acc.differ > 0);
      }
    }
    CHECK(overflowing <= 1);
  }
}

TEST_CASE("gguf_bound: the reference quantizers' rows are within the bound; damage is beyond it") {
  const size_t row = 512;
  const std::vector<float> x = rows(96, row);
  for (TensorType t : kTypes) {
    CAPTURE(type_name(t));
    std::vector<uint8_t> b(tensor_bytes(t, x.size(), row));
    encode(t, x.data(), x.size(), b.data());
    DiffAccumulator acc = compare(t, b, x);
    CHECK(acc.differ == 0);
    CHECK(decoded_type(type_name(t)) == static_cast<uint32_t>(t));

    // The first block's scale (its fp16 d) doubled, for a row of unit normals (row 1).
    const uint64_t bs = block_size(t), bb = tensor_bytes(t, bs, bs), at = tensor_bytes(t, row, row);
    std::vector<uint8_t> d = b;
    const size_t scale_at = t == TensorType::Q6_K ? bb - 2 : 0;
    uint16_t h;
    std::memcpy(&h, d.data() + at + scale_at, 2);
    h = f32_to_f16(2 * f16_to_f32(h));
    std::memcpy(d.data() + at + scale_at, &h, 2);
    acc = compare(t, d, x);
    CHECK(acc.differ > 0);
    CHECK(acc.first >= row);
    CHECK(acc.first < row + bs);

    // Another row's bytes in place of row 1's.
    d = b;
    std::memcpy(d.data() + at, b.data() + 4 * at, at);
    CHECK(compare(t, d, x).differ > 0);

    // One code moved by one step (the last byte of row 1's first block: codes or, for Q6_K, its d).
    d = b;
    const size_t code_at = t == TensorType::Q6_K ? 10 : bb - 1;
    d[at + code_at] ^= 0x10;
    CHECK(compare(t, d, x).differ > 0);
  }
}

TEST_CASE("gguf_bound: F32 is bit for bit, F16 and BF16 half an ULP") {
  const std::vector<float> x = {1.0f, -3.14159f, 1e-7f, 65519.0f, 70000.0f, 0.0f, std::nanf(""), 3.0e38f};
  std::vector<uint8_t> f32(x.size() * 4), f16(x.size() * 2), bf16(x.size() * 2);
  encode(TensorType::F32, x.data(), x.size(), f32.data());
  encode(TensorType::F16, x.data(), x.size(), f16.data());
  encode(TensorType::BF16, x.data(), x.size(), bf16.data());
  DiffAccumulator acc;
  compare_gguf(0, f32.data(), x.data(), x.size(), 0, acc);
  CHECK(acc.differ == 0);
  CHECK(acc.inexact == 0);
  compare_gguf(1, f16.data(), x.data(), x.size(), 0, acc);
  CHECK(acc.differ == 0);
  compare_gguf(30, bf16.data(), x.data(), x.size(), 0, acc);
  CHECK(acc.differ == 0);
  CHECK(acc.inexact > 0);
  // One ULP off (the last bit of -3.14159's half): beyond.
  f16[2] ^= 1;
  DiffAccumulator off;
  compare_gguf(1, f16.data(), x.data(), x.size(), 0, off);
  CHECK(off.differ == 1);
  CHECK(off.first == 1);
  f32[0] ^= 1;
  DiffAccumulator off32;
  compare_gguf(0, f32.data(), x.data(), x.size(), 0, off32);
  CHECK(off32.differ == 1);
}
