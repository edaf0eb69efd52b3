// The arithmetic of the derived tensors views compute (src/view/), element for element.
//
// Dequantizing block-scaled float8 weights (meta/codecs/fp8_block.cpp describes the format): the arithmetic of
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

// E8M0 scales (float8_e8m0fnu) as float32, as torch's .to(torch.float32): 2^(byte - 127), byte
// 0 the subnormal 2^-127, 255 NaN.
void e8m0_to_float(const uint8_t* e8m0, size_t n, float* out);

// MXFP4 (meta/codecs/mxfp4.cpp): `packed` holds the dense bytes of box `box` of blocks [..., G, B] (the
// box spans B); `scales` the whole uint8 scales of shape `scale_shape` ([..., G]); `out`: the
// box's 2 * box.numel() float32 values, [..., g, 2B] of each group in order, the low nibble first:
// ldexp(E2M1(nibble), scale - 127) rounded once to float32, as torch's _dequantize_tensor_mxfp4
// (scale 255, E8M0's NaN, is 2^128 there too: finite or inf, never NaN).
void dequantize_mxfp4(const uint8_t* packed, const Box& box, const uint8_t* scales,
                      const std::vector<int64_t>& scale_shape, float* out);

// A LoRA merge (lora/lora.h) of box `box` of a base weight: `w`, the box's base values as float32,
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

// The dtype PEFT's delta is in: lora_B's when it is bfloat16 or float16, else float32.
DType lora_delta_dtype(DType b_dtype);

// A 3-D ParamWrapper's merge (PEFT 0.21 target_parameters on fused MoE experts, meta/lora_keys.h): box
// `box` [e, o, i] of a base [E, out, in] (`transposed`: [E, in, out]) gets, for each expert e in it,
// add_lora_delta of A_e = rows e·rank … of A [rank·E, a_cols] and B_e[o][k] = B[o][k·E + e] of B
// [b_rows, rank·E]: PEFT's einsum("o r e, e r i -> e o i") · scaling, each expert's product summed
// over k = 0..rank-1 as add_lora_delta sums it (bit for bit with PEFT on the fixtures' CPU).
void add_lora_expert_deltas(float* w, const Box& box, const float* a, int64_t a_cols, const float* b, int64_t b_rows,
                            int64_t rank, int64_t experts, float scale, bool transposed, DType delta_dtype);

// DoRA's merge (PEFT 0.21 DoraLinearVariant.merge_unsafe): V = W + delta (add_lora_delta's values,
// rounded to the dtype torch adds them in), norm = torch.linalg.norm(V, dim=1) per output row,
// factor = magnitude / norm, W' = factor · V, each step one rounding in that dtype.
//
// The row norm follows torch's float32 CPU kernel for a reduction over the last dimension
// (ReduceOpsKernel.cpp, norm_two_reduce_step): 8 lanes, lane l summing x_j·x_j (a rounded product,
// then a rounded add) for j ≡ l (mod 8) in order over the row's first cols - cols % 8 columns, the
// lanes then added 0..7 in order, the last cols % 8 squares added one by one, the float32 square
// root. On the fixtures' CPU (torch 2.15, AVX512 build) that equals PEFT's norm bit for bit; a
// build that sums otherwise differs by a few ulps of the norm. A row may come in column pieces (a
// chunk split along dim 1): accumulate each piece, in increasing column order, into the row's
// DoraNorm, then finish it.
struct DoraNorm {
  static constexpr int kLanes = 8;
  float lanes[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  float tail[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};  // the squares of the last cols % 8 columns
  // Columns [col0, col0 + n) of a row of `row_len` columns: x.
  void add(const float* x, int64_t col0, int64_t n, int64_t row_len);
  float finish(int64_t row_len) const;
};

// W' = round(round(magnitude / norm) · v) for each element of `rows` rows of `cols` values, in
// `dtype` (float32, bfloat16 or float16: the rounding torch's ops in that dtype do).
void dora_scale_rows(float* v, int64_t rows, int64_t cols, const float* magnitude, const float* norm, DType dtype);

// Rounds n float32 values to `dtype` and back (nothing for float32).
void round_to(float* v, size_t n, DType dtype);

// A lora_bias merge (PEFT's `bias += lora_B.bias * scaling`): bias[i] += round_delta(b[off + i] ·
// scale) for the box [off, off + n) of the bias, float32 arithmetic; the caller rounds the sum to
// the bias's dtype.
void add_lora_bias(float* bias, int64_t off, int64_t n, const float* b, float scale, DType delta_dtype);

}  // namespace dcpctl

namespace dcpctl {

// FP8 block quantization, transformers 5.23's Fp8Quantize (integrations/finegrained_fp8.py) block
// by block: over `rows` x `cols` float32 values `x` (row-major; the rows start at a block
// boundary), each bm x bn block (a block at the right or bottom edge is smaller and scaled by its
// own amax, as DeepSeek's releases are) gets scale = (1 / amax(|x|)) * 448 in float32, as torch
// computes transformers' `448 / amax` (1 for a block of zeros or NaNs), written to `scale` [ceil(rows / bm), ceil(cols
// / bn)]; weight_scale_inv is 1 / scale in float32 (fp8_inverse_scales).
void fp8_block_scales(const float* x, int64_t rows, int64_t cols, int64_t bm, int64_t bn, float* scale);
void fp8_inverse_scales(const float* scale, size_t n, float* inv);
// The quantized bytes of box [r0, r1) x [c0, c1) of those values (within the rows given): e4m3fn of
// clamp(x * scale, -448, 448), the product in float32, rounded to nearest even (torch's .to()).
// `q`: (r1 - r0) * (c1 - c0) bytes, row-major.
void quantize_fp8_box(const float* x, int64_t cols, int64_t bm, int64_t bn, const float* scale, int64_t r0, int64_t r1,
                      int64_t c0, int64_t c1, uint8_t* q);

}  // namespace dcpctl

namespace dcpctl {

// MXFP4 quantization, OCP Microscaling Formats (MX) v1.0 with E2M1 elements and an E8M0 scale per
// 32 values, bit for bit torchao's to_mx (ScaleCalculationMode.FLOOR, the spec's rule):
//   - the shared exponent is the float32 exponent field of the block's amax, unbiased, less
//     E2M1's emax (2), clamped to [-127, 128] and biased by 127: `scales[g]` (a block of zeros or
//     of subnormals gets 0, 2^-127);
//   - each value is divided by that power of two (in float32, the power at least 2^-126 as torchao
//     clamps it: a group whose amax is below 2^-124 gets byte 0, 2^-127, but is divided by 2^-126,
//     so it reads back at half or flushes to zero, as torchao's does), rounded to E2M1 to nearest
//     even and saturated at +-6 (a sign kept on zero; NaN becomes zero, infinity saturates);
//   - two values a byte, the first in the low nibble (GPT-OSS's `_blocks`, torchao's pack_uint4).
// `x`: `groups` groups of 32 float32 values, one after another; `packed`: 16 bytes a group.
void quantize_mxfp4(const float* x, size_t groups, uint8_t* packed, uint8_t* scales);
// One float32 value (already divided by its scale) as an E2M1 nibble: sign bit 3, the magnitude
// rounded to nearest even among 0, 0.5, 1, 1.5, 2, 3, 4, 6, saturating at 6.
uint8_t e2m1_nibble(float v);
// A group's E8M0 scale byte from its amax (the first rule above): what quantize_mxfp4 writes in
// `scales`, for a reader that needs the scales alone.
uint8_t mxfp4_scale_byte(float amax);
// quantize_mxfp4 of the transpose of `x` [rows, cols] (rows a multiple of 32), without transposing
// it: `packed` [cols, rows / 32, 16], `scales` [cols, rows / 32], column c's group g over rows
// 32g..32g+31, byte for byte what quantize_mxfp4 writes for the transposed values (the loops run
// along the columns, vectorised).
void quantize_mxfp4_columns(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales);
// The scales quantize_mxfp4 writes for the transpose of `x` [rows, cols] (rows a multiple of 32),
// without transposing or rounding: [cols, rows / 32], column c's group g over rows 32g..32g+31.
// GPT-OSS's expert stacks are [E, in, out] and quantized along `in`.
void mxfp4_column_scales(const float* x, int64_t rows, int64_t cols, uint8_t* scales);

}  // namespace dcpctl

namespace dcpctl {

// The row kernels of the encoders that quantize Linear weights row by row in groups
// (view/codecs/ct_fp8_dynamic.cpp, ct_nvfp4.cpp, ct_mx.cpp, mo_nvfp4.cpp): each a plain loop,
// branch-free, that the vectoriser takes (kernels.cpp is built with -ftree-vectorize). Each gives
// byte for byte what the element-by-element code they replace gave (tests/unit/test_ct_kernels.cpp
// checks them against it written out).
//
// The largest |x| of each group of `group` values of x[0, n) (n a multiple of group) into
// amax[n / group], as `amax = std::max(amax, std::fabs(v))` from 0 takes it: a NaN is skipped, -0
// counts as +0, an infinity wins. Computed on the bits of |x| (non-negative floats order as their
// bits; a NaN's bits, above infinity's, count as 0).
void group_abs_max(const float* x, int64_t n, int64_t group, float* amax);
// The same over all of x[0, n): one value (0 for n = 0).
float abs_max(const float* x, size_t n);
// q[k] = x[k] / scale[k / group] for k < n (n a multiple of group): one float32 division each,
// rounded once (no reciprocal: the scales need not be powers of two).
void divide_by_groups(const float* x, int64_t n, int64_t group, const float* scale, float* q);
// out[k] = f32_to_e4m3fn(std::clamp(q[k], -448, 448)) (util/numeric.h; NaN kept, as 0x7F with its
// sign): torch's clamp then .to(float8_e4m3fn).
void e4m3fn_saturated(const float* q, size_t n, uint8_t* out);
// The E2M1 code of one value as compressed-tensors' cast_to_fp4 and ModelOpt's _cast_fp4 give it:
// the magnitude to nearest even among 0, 0.5, 1, 1.5, 2, 3, 4, 6 (the bounds 0.25, 1.25, 2.5, 5
// round down, 0.75, 1.75, 3.5 up), 7 (6) beyond 5 and for NaN; the sign bit 8 where v < 0 (-0.0
// and NaN get none). Clamping v to +-6 first changes nothing.
uint8_t fp4_code(float v);
// out[k] = fp4_code(q[2k]) | fp4_code(q[2k + 1]) << 4 for k < n / 2 (n even): pack_fp4_to_uint8's
// pairs, the first value in the low nibble.
void fp4_pairs(const float* q, size_t n, uint8_t* out);
// compressed-tensors' symmetric INT4 (pack-quantized, view/codecs/ct_w4a16.cpp): out[k] = c(q[2k]) |
// c(q[2k + 1]) << 4 for k < n / 2 (n even), c(v) = round-half-even(clamp(v, -8, 7)) + 8 (torch's
// clamp, torch.round, then pack_to_int32's offset; NaN gives 8, the code of 0, as torch's cast of a
// NaN to int8 does on x86). pack_to_int32 puts element i at bits [4i, 4i + 4) of little-endian int32
// words, so its bytes are these pairs, the first value in the low nibble, on any host.
void int4_pairs(const float* q, size_t n, uint8_t* out);

}  // namespace dcpctl
