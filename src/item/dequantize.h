// Dequantizing block-scaled float8 weights (meta/quantized.h has the format): the arithmetic of
// torch's QuantizedHuggingFaceStorageReader._dequantize_tensor, element for element:
// float32(q) * scale_inv[row / b0, col / b1], one float32 multiply (no fused or wider arithmetic),
// the product left in float32 for --dtype's cast.
#pragma once

#include <cstdint>
#include <vector>

#include "meta/geometry.h"
#include "util/dtype.h"

namespace dcpctl {

// `q`: the dense elements (dtype `q_dtype`, a float8) of box `box` of a 2-D weight; `scale`: the
// whole scale, `scale_cols` columns; `out`: box.numel() float32s.
void dequantize_fp8_blocks(DType q_dtype, const uint8_t* q, const Box& box, const float* scale, int64_t scale_cols, const int64_t block[2],
                           float* out);

// MXFP4 (meta/quantized.h): `packed` holds the dense bytes of box `box` of blocks [..., G, B] (the
// box spans B); `scales` the whole uint8 scales of shape `scale_shape` ([..., G]); `out`: the
// box's 2 * box.numel() float32 values, [..., g, 2B] of each group in order, the low nibble first:
// ldexp(E2M1(nibble), scale - 127) rounded once to float32, as torch's _dequantize_tensor_mxfp4
// (scale 255, E8M0's NaN, is 2^128 there too: finite or inf, never NaN).
void dequantize_mxfp4(const uint8_t* packed, const Box& box, const uint8_t* scales, const std::vector<int64_t>& scale_shape, float* out);

}  // namespace dcpctl
