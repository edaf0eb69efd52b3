// Block-scaled float8 dequantization (view/kernels.h) of a box anywhere in the weight: what a
// DCP-sharded fp8 weight's chunks need (the fixtures' HF folders hold whole tensors only), against
// the definition element by element: float32(q[r, c]) * scale[r / b0, c / b1].
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "util/numeric.h"
#include "view/kernels.h"

namespace dcpctl {
namespace {

TEST_CASE("dequantize: any box of the weight, blocks cut at both edges, non-square blocks", "[dequantize]") {
  const int64_t rows = 37, cols = 300, block[2] = {16, 128};
  const int64_t srows = (rows + 15) / 16, scols = (cols + 127) / 128;
  std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  std::vector<float> scale(static_cast<size_t>(srows * scols));
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = 0.001f * static_cast<float>(i + 1) + 1e-7f;
  for (DType d : {DType::Float8_E4M3FN, DType::Float8_E5M2}) {
    for (auto [r0, c0, nr, nc] : {std::array<int64_t, 4>{0, 0, rows, cols},
                                  {5, 130, 20, 170},
                                  {16, 127, 1, 2},
                                  {36, 299, 1, 1},
                                  {3, 0, 0, 5}}) {
      Box box;
      box.offsets = {r0, c0};
      box.sizes = {nr, nc};
      std::vector<uint8_t> part(static_cast<size_t>(nr * nc));
      for (int64_t r = 0; r < nr; ++r)
        std::memcpy(&part[static_cast<size_t>(r * nc)], &q[static_cast<size_t>((r0 + r) * cols + c0)],
                    static_cast<size_t>(nc));
      std::vector<float> out(part.size() + 1, -1.0f);
      dequantize_fp8_blocks(d, part.data(), box, scale.data(), scols, block, out.data());
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t c = 0; c < nc; ++c) {
          float v;
          cast_elements(d, DType::Float32, &part[static_cast<size_t>(r * nc + c)], reinterpret_cast<uint8_t*>(&v), 1);
          float want = v * scale[static_cast<size_t>(((r0 + r) / block[0]) * scols + (c0 + c) / block[1])];
          float got = out[static_cast<size_t>(r * nc + c)];
          INFO("box at " << r0 << "," << c0 << " element " << r << "," << c);
          REQUIRE(std::memcmp(&got, &want, 4) == 0);
        }
      REQUIRE(out.back() == -1.0f);  // nothing written past the box
    }
  }
}

}  // namespace
}  // namespace dcpctl

namespace dcpctl {

TEST_CASE("dequantize: MXFP4 groups in a box of blocks, low nibble first, ldexp rounded once (edge scales)",
          "[dequantize]") {
  // Blocks [2, 3, 2 groups, 2 bytes]; the box is row 1..2 of expert 1 (4 groups of 2 bytes).
  const std::vector<int64_t> scale_shape = {2, 3, 2};
  std::vector<uint8_t> scales(12);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(120 + i);
  scales[8] = 0;    // 2^-127: subnormal results
  scales[9] = 255;  // E8M0's NaN, which torch takes as 2^128
  Box box{{1, 1, 0, 0}, {1, 2, 2, 2}};
  const std::vector<uint8_t> packed = {0x10, 0x72, 0x8F, 0x01, 0x21, 0x77, 0xF1, 0x13};
  std::vector<float> out(16, -7.0f);
  dequantize_mxfp4(packed.data(), box, scales.data(), scale_shape, out.data());
  const double e2m1[16] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};
  for (size_t g = 0; g < 4; ++g) {
    const int scale = scales[(1 * 3 + 1 + g / 2) * 2 + g % 2];
    for (size_t k = 0; k < 2; ++k) {
      uint8_t byte = packed[g * 2 + k];
      for (int nib = 0; nib < 2; ++nib) {
        float want = static_cast<float>(std::ldexp(e2m1[nib ? byte >> 4 : byte & 15], scale - 127));
        float got = out[g * 4 + k * 2 + static_cast<size_t>(nib)];
        INFO("group " << g << " byte " << k << " nibble " << nib);
        CHECK(std::memcmp(&got, &want, 4) == 0);
      }
    }
  }
  // The edges: group 0 (scale 0) gives subnormals, group 1 (scale 255): -6 * 2^128 = -inf,
  // 0.5 * 2^128 = 2^127 (finite), 0 stays 0 (no NaN).
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == static_cast<float>(std::ldexp(0.5, -127)));
  CHECK(out[1] > 0.0f);
  CHECK(std::isinf(out[4]));
  CHECK(out[4] < 0.0f);
  CHECK(out[6] == static_cast<float>(std::ldexp(1.0, 127)));
  CHECK(out[7] == 0.0f);
}

}  // namespace dcpctl
