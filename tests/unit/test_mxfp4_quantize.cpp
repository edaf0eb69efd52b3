// MXFP4 quantization (view/kernels.h: quantize_mxfp4, e2m1_nibble) against OCP MX v1.0's rule,
// value by value: the E2M1 rounding at every midpoint (ties to the even code), saturation, the
// sign of zero; the E8M0 exponent of a group's amax (normal, subnormal, zero); the packing order.
// The same rule, written in torch, equals torchao 0.18.0's to_mx byte for byte
// (tests/interop/quantize_test.py).
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <vector>

#include "view/kernels.h"

namespace dcpctl {
namespace {

TEST_CASE("mxfp4: E2M1 rounds to nearest, ties to the even code, saturating", "[mxfp4]") {
  // value -> code (0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6)
  const std::vector<std::pair<float, int>> cases = {{0.0f, 0},    {0.25f, 0}, {0.2501f, 1}, {0.5f, 1},  {0.75f, 2},
                                                    {0.7499f, 1}, {1.25f, 2}, {1.2501f, 3}, {1.75f, 4}, {2.5f, 4},
                                                    {2.5001f, 5}, {3.5f, 6},  {3.4999f, 5}, {5.0f, 6},  {5.0001f, 7},
                                                    {6.0f, 7},    {1e30f, 7}, {INFINITY, 7}};
  for (const auto& [v, code] : cases) {
    INFO(v);
    CHECK(e2m1_nibble(v) == code);
    CHECK(e2m1_nibble(-v) == (code | 8));
  }
  CHECK(e2m1_nibble(-0.0f) == 8);  // the sign kept, as torchao's
}

TEST_CASE("mxfp4: the shared exponent from the amax, the values divided by it, low nibble first", "[mxfp4]") {
  std::vector<float> x(32 * 4, 0.0f);
  // group 0: amax 5 -> floor(log2 5) - 2 = 0 -> scale byte 127; values as they are
  x[0] = 5.0f, x[1] = -0.75f, x[2] = 0.1f;
  // group 1: amax 1000 -> 9 - 2 = 7 -> 134; 1000 / 128 = 7.8 saturates at 6
  x[32] = 1000.0f, x[33] = 64.0f;
  // group 2: zeros -> exponent field 0 -> clamped to -127 -> byte 0
  // group 3: subnormal amax -> byte 0; values divided by 2^-126 round to 0
  x[96] = 1e-40f;
  std::vector<uint8_t> packed(16 * 4), scales(4);
  quantize_mxfp4(x.data(), 4, packed.data(), scales.data());
  CHECK(scales[0] == 127);
  CHECK(scales[1] == 134);
  CHECK(scales[2] == 0);
  CHECK(scales[3] == 0);
  CHECK(packed[0] == (6 | ((2 | 8) << 4)));  // 5 -> 4 (code 6), -0.75 -> -1 (code 2, sign) in the high nibble
  CHECK(packed[1] == 0);                     // 0.1 -> 0
  CHECK(packed[16] == (7 | (1 << 4)));       // 1000 / 128 -> 6 (code 7), 64 / 128 = 0.5 (code 1)
  CHECK(packed[32] == 0);
  CHECK(packed[48] == 0);
}

TEST_CASE("mxfp4: the scales alone, from the untransposed matrix, equal quantize_mxfp4's of its transpose", "[mxfp4]") {
  const int64_t rows = 96, cols = 37;
  std::vector<float> x(static_cast<size_t>(rows * cols)), xt(x.size());
  uint32_t state = 12345;
  for (size_t i = 0; i < x.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    const int e = static_cast<int>(i % static_cast<size_t>(cols)) - 18 + static_cast<int>(state >> 30);  // by column
    x[i] = std::ldexp(static_cast<float>((state >> 8) & 0xFFFF) / 65536.0f, e) * ((state & 1) ? -1.0f : 1.0f);
  }
  // A group's amax in its first row for some columns, in its last for others.
  for (int64_t g = 0; g < rows / 32; ++g)
    for (int64_t c = 0; c < cols; c += 2)
      x[static_cast<size_t>((g * 32 + (c % 4 ? 31 : 0)) * cols + c)] = std::ldexp(1.5f, static_cast<int>(c % 7));
  x[5] = 0.0f, x[cols + 3] = 1e-40f, x[2 * cols] = INFINITY, x[7 * cols + 1] = NAN;
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(32 * cols + c)] = 0.0f;  // one group of zeros: c's
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[static_cast<size_t>(c * rows + r)] = x[static_cast<size_t>(r * cols + c)];
  const size_t groups = static_cast<size_t>(cols * rows / 32);
  std::vector<uint8_t> packed(groups * 16), want(groups), got(groups, 0xAA);
  quantize_mxfp4(xt.data(), groups, packed.data(), want.data());
  mxfp4_column_scales(x.data(), rows, cols, got.data());
  CHECK(got == want);
  CHECK(std::set<uint8_t>(want.begin(), want.end()).size() > 30);  // the columns span many exponents
}

TEST_CASE("mxfp4: quantize_mxfp4_columns equals quantize_mxfp4 of the transpose, byte for byte", "[mxfp4]") {
  // Every E2M1 midpoint and its neighbours at several scales, NaN, infinities, zeros of both signs,
  // subnormals and a group of them (scale byte 0), in 3 groups of 45 columns (not a vector width).
  const int64_t rows = 96, cols = 45;
  const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 7.0f, 0.5f, 1.5f, 3.0f};
  std::vector<float> x(static_cast<size_t>(rows * cols)), xt(x.size());
  uint32_t state = 777;
  for (size_t i = 0; i < x.size(); ++i) {
    state = state * 1664525u + 1013904223u;
    const int e = static_cast<int>(i % 7) - 3;
    float v = std::ldexp(mids[(state >> 24) % 12], e);
    if ((state >> 20) & 1) v = std::nextafter(v, (state >> 19) & 1 ? 100.0f : 0.0f);
    if (((state >> 16) & 15) == 0) v = std::ldexp(static_cast<float>((state >> 4) & 0xFFF), -140);  // subnormal
    x[i] = (state & 1) ? -v : v;
  }
  x[3] = NAN, x[cols + 4] = -INFINITY, x[2 * cols + 5] = INFINITY, x[6] = -0.0f, x[cols] = 0.0f;
  for (int64_t r = 32; r < 64; ++r) x[static_cast<size_t>(r * cols + 7)] = 1e-39f;  // a group below 2^-124
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[static_cast<size_t>(c * rows + r)] = x[static_cast<size_t>(r * cols + c)];
  const size_t groups = static_cast<size_t>(cols * rows / 32);
  std::vector<uint8_t> want_packed(groups * 16), want_scales(groups), packed(groups * 16, 0xAA), scales(groups, 0xAA);
  quantize_mxfp4(xt.data(), groups, want_packed.data(), want_scales.data());
  quantize_mxfp4_columns(x.data(), rows, cols, packed.data(), scales.data());
  CHECK(scales == want_scales);
  CHECK(packed == want_packed);
  CHECK(std::set<uint8_t>(want_packed.begin(), want_packed.end()).size() > 60);  // many code pairs
}

}  // namespace
}  // namespace dcpctl
