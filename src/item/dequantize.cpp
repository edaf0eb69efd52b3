#include "item/dequantize.h"

#include <algorithm>
#include <array>

#include "util/numeric.h"

namespace dcpctl {

void dequantize_fp8_blocks(DType q_dtype, const uint8_t* q, const Box& box, const float* scale, int64_t scale_cols, const int64_t block[2],
                           float* out) {
  // Every float8 value as float32 (torch's .to(torch.float32)): one table of 256.
  std::array<uint8_t, 256> bytes;
  std::array<float, 256> value;
  for (int i = 0; i < 256; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  cast_elements(q_dtype, DType::Float32, bytes.data(), reinterpret_cast<uint8_t*>(value.data()), 256);
  const int64_t rows = box.sizes[0], cols = box.sizes[1];
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = scale + ((box.offsets[0] + r) / block[0]) * scale_cols;
    const uint8_t* qr = q + r * cols;
    float* o = out + r * cols;
    // Column by column of blocks: one scale each (a product of two floats is rounded once,
    // whatever the compiler: there is nothing to fuse it with).
    for (int64_t c = 0; c < cols;) {
      const int64_t g = (box.offsets[1] + c) / block[1];
      const int64_t end = std::min(cols, (g + 1) * block[1] - box.offsets[1]);
      const float s = srow[g];
      for (; c < end; ++c) o[c] = value[qr[c]] * s;
    }
  }
}

}  // namespace dcpctl
