// Dequantizing block-scaled float8 weights (meta/quantized.h has the format): the arithmetic of
// torch's QuantizedHuggingFaceStorageReader._dequantize_tensor, element for element:
// float32(q) * scale_inv[row / b0, col / b1], one float32 multiply (no fused or wider arithmetic),
// the product left in float32 for --dtype's cast.
#pragma once

#include <cstdint>

#include "meta/geometry.h"
#include "util/dtype.h"

namespace dcpctl {

// `q`: the dense elements (dtype `q_dtype`, a float8) of box `box` of a 2-D weight; `scale`: the
// whole scale, `scale_cols` columns; `out`: box.numel() float32s.
void dequantize_fp8_blocks(DType q_dtype, const uint8_t* q, const Box& box, const float* scale, int64_t scale_cols, const int64_t block[2],
                           float* out);

}  // namespace dcpctl
