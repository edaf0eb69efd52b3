// Block-scaled float8 dequantization (item/dequantize.h) of a box anywhere in the weight: what a
// DCP-sharded fp8 weight's chunks need (the fixtures' HF folders hold whole tensors only), against
// the definition element by element: float32(q[r, c]) * scale[r / b0, c / b1].
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "item/dequantize.h"
#include "util/numeric.h"

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
    for (auto [r0, c0, nr, nc] : {std::array<int64_t, 4>{0, 0, rows, cols}, {5, 130, 20, 170}, {16, 127, 1, 2}, {36, 299, 1, 1}, {3, 0, 0, 5}}) {
      Box box;
      box.offsets = {r0, c0};
      box.sizes = {nr, nc};
      std::vector<uint8_t> part(static_cast<size_t>(nr * nc));
      for (int64_t r = 0; r < nr; ++r) std::memcpy(&part[static_cast<size_t>(r * nc)], &q[static_cast<size_t>((r0 + r) * cols + c0)], static_cast<size_t>(nc));
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
