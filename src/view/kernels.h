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

namespace dcpctl {

// FP8 block quantization, transformers 5.23's Fp8Quantize (integrations/finegrained_fp8.py) block
// by block: over `rows` x `cols` float32 values `x` (row-major; the rows start at a block
// boundary), each bm x bn block (a block at the right or bottom edge is smaller and scaled by its
// own amax, as DeepSeek's releases are) gets scale = (1 / amax(|x|)) * 448 in float32, as torch
// computes transformers' `448 / amax` (1 for a block of zeros or NaNs), written to `scale` [ceil(rows / bm), ceil(cols / bn)]; weight_scale_inv is 1 / scale in
// float32 (fp8_inverse_scales).
void fp8_block_scales(const float* x, int64_t rows, int64_t cols, int64_t bm, int64_t bn, float* scale);
void fp8_inverse_scales(const float* scale, size_t n, float* inv);
// The quantized bytes of box [r0, r1) x [c0, c1) of those values (within the rows given): e4m3fn of
// clamp(x * scale, -448, 448), the product in float32, rounded to nearest even (torch's .to()).
// `q`: (r1 - r0) * (c1 - c0) bytes, row-major.
void quantize_fp8_box(const float* x, int64_t cols, int64_t bm, int64_t bn, const float* scale, int64_t r0, int64_t r1, int64_t c0,
                      int64_t c1, uint8_t* q);

}  // namespace dcpctl
