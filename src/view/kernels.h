// The arithmetic of the derived tensors views compute (src/view/), element for element.
//
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
void dequantize_fp8_blocks(DType q_dtype, const uint8_t* q, const Box& box, const float* scale, int64_t scale_cols,
                           const int64_t block[2], float* out);

// MXFP4 (meta/quantized.h): `packed` holds the dense bytes of box `box` of blocks [..., G, B] (the
// box spans B); `scales` the whole uint8 scales of shape `scale_shape` ([..., G]); `out`: the
// box's 2 * box.numel() float32 values, [..., g, 2B] of each group in order, the low nibble first:
// ldexp(E2M1(nibble), scale - 127) rounded once to float32, as torch's _dequantize_tensor_mxfp4
// (scale 255, E8M0's NaN, is 2^128 there too: finite or inf, never NaN).
void dequantize_mxfp4(const uint8_t* packed, const Box& box, const uint8_t* scales,
                      const std::vector<int64_t>& scale_shape, float* out);

// A LoRA merge (view/lora.h) of box `box` of a base weight: `w`, the box's base values as float32,
// gets scale·(B·A) added (with `transposed`, (B·A)ᵀ: an Embedding's or fan_in_fan_out's), as PEFT's
// merge_and_unload computes it: B·A in float32, each element a fused multiply-add over k = 0..r-1
// from 0 (what torch's CPU sgemm does for these shapes, measured bit for bit on the fixtures'
// BLAS; another BLAS may sum in another order, a few ulps of the sum of |products| apart), times
// the scale in float32, rounded to `delta_dtype` (PEFT's delta is in lora_B's dtype), then added
// in float32. The caller rounds `w` to the base dtype (torch's
// in-place add into a bfloat16 or float16 weight rounds the float32 sum the same way).
// `a`: A [rank, a_cols], float32; `b`: B [.., rank], float32.
void add_lora_delta(float* w, const Box& box, const float* a, int64_t a_cols, const float* b, int64_t rank, float scale,
                    bool transposed, DType delta_dtype);

}  // namespace dcpctl
