// fp8-block's encode kernels (view/kernels.h: fp8_block_scales, quantize_fp8_box), vectorised and
// branch-free, against their plain definition written out here element by element: transformers
// 5.23's Fp8Quantize (a block's amax, NaN propagated, scale = (1 / amax) * 448 or 1, e4m3fn of
// clamp(x * scale, -448, 448) through util/numeric.h's f32_to_e4m3fn). The whole chain equals
// transformers' op byte for byte (bench/quantize.sh's check, tests/interop/quantize_test.py).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <vector>

#include "util/numeric.h"
#include "view/kernels.h"

namespace dcpctl {
namespace {

// Values that reach every branch of the e4m3fn rounding: spread bit patterns (subnormal, normal,
// ties, past 448, infinities, NaNs of both signs), in blocks that hold a NaN, zeros only, an
// infinity, and a partial block at the right and bottom edges.
std::vector<float> values(int64_t rows, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  uint32_t state = 4242;
  for (size_t i = 0; i < x.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    // exponents 2^-20 .. 2^12 mostly (around e4m3's range once scaled), any pattern sometimes
    const uint32_t bits = (state >> 28) == 0 ? state : ((state & 0x807FFFFFu) | ((107u + (state >> 27)) << 23));
    x[i] = bits_f32(bits);
  }
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t c = 16; c < 32; ++c) x[static_cast<size_t>(r * cols + c)] = (r + c) % 3 ? 0.0f : -0.0f;  // zeros
  x[static_cast<size_t>(20 * cols + 3)] = NAN;
  x[static_cast<size_t>(21 * cols + 40)] = INFINITY;
  return x;
}

TEST_CASE("fp8 quantize: block scales and e4m3 bytes equal the element-by-element definition", "[fp8]") {
  const int64_t rows = 37, cols = 70, bm = 16, bn = 16;  // 3 x 5 blocks, the last row and column partial
  const std::vector<float> x = values(rows, cols);
  const int64_t rb = (rows + bm - 1) / bm, cb = (cols + bn - 1) / bn;
  std::vector<float> want(static_cast<size_t>(rb * cb), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float a = std::fabs(x[static_cast<size_t>(r * cols + c)]);
      float& m = want[static_cast<size_t>((r / bm) * cb + c / bn)];
      if (a != a)
        m = a;
      else if (a > m)
        m = a;
    }
  for (float& m : want) m = m > 0.0f ? (1.0f / m) * 448.0f : 1.0f;
  std::vector<float> scale(want.size(), -1.0f);
  fp8_block_scales(x.data(), rows, cols, bm, bn, scale.data());
  CHECK(std::memcmp(scale.data(), want.data(), scale.size() * 4) == 0);
  CHECK(std::count(want.begin(), want.end(), 1.0f) == 2);  // the NaN block and the zeros
  CHECK(std::count(want.begin(), want.end(), 0.0f) == 1);  // the infinity's
  // The bytes of a box that starts and ends inside blocks, and of the whole.
  for (auto [r0, r1, c0, c1] : {std::array<int64_t, 4>{0, rows, 0, cols}, std::array<int64_t, 4>{5, 33, 7, 61}}) {
    std::vector<uint8_t> got(static_cast<size_t>((r1 - r0) * (c1 - c0)), 0xAA), expect(got.size());
    quantize_fp8_box(x.data(), cols, bm, bn, want.data(), r0, r1, c0, c1, got.data());
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const float v = x[static_cast<size_t>(r * cols + c)] * want[static_cast<size_t>((r / bm) * cb + c / bn)];
        expect[static_cast<size_t>((r - r0) * (c1 - c0) + c - c0)] =
            f32_to_e4m3fn(v < -448.0f ? -448.0f : (v > 448.0f ? 448.0f : v));
      }
    CHECK(got == expect);
    CHECK(std::set<uint8_t>(expect.begin(), expect.end()).size() > 120);  // most codes, both signs
  }
}

TEST_CASE("fp8 quantize: every float32 bit pattern's e4m3 byte at scale 1 is f32_to_e4m3fn's of it clamped", "[fp8]") {
  // 2^32 patterns in steps of 4093 (a prime: every mantissa residue, every exponent, both signs)
  // plus each pattern's neighbourhood around 448, the subnormal edge and the ties.
  std::vector<float> x;
  for (uint64_t b = 0; b < (1ull << 32); b += 4093) x.push_back(bits_f32(static_cast<uint32_t>(b)));
  for (uint32_t centre : {0x43E00000u, 0x43E80000u, 0x3C800000u, 0x3B000000u, 0x3F880000u, 0x7F800000u})
    for (uint32_t d = 0; d < 2048; ++d) {
      x.push_back(bits_f32(centre - 1024 + d));
      x.push_back(-bits_f32(centre - 1024 + d));
    }
  // Every tie (half a step of 1 to 6 kept mantissa bits: e4m3's subnormal and normal steps), at
  // each exponent around e4m3's range, odd and even, both signs.
  for (uint32_t e = 110; e <= 136; ++e)
    for (uint32_t sh = 18; sh <= 23; ++sh)
      for (uint32_t k = 0; k < (1u << (23 - sh)); ++k) {
        const uint32_t b = (e << 23) | (k << sh) | (1u << (sh - 1));
        x.push_back(bits_f32(b));
        x.push_back(bits_f32(b | 0x80000000u));
      }
  const int64_t cols = static_cast<int64_t>(x.size());
  const float one = 1.0f;
  std::vector<uint8_t> got(x.size());
  quantize_fp8_box(x.data(), cols, 1, cols, &one, 0, 1, 0, cols, got.data());
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i] * 1.0f;
    bad += got[i] != f32_to_e4m3fn(v < -448.0f ? -448.0f : (v > 448.0f ? 448.0f : v));
  }
  CHECK(bad == 0);
}

}  // namespace
}  // namespace dcpctl
