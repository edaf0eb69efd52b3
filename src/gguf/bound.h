// How far a GGUF tensor's values may be from its source's and still be what a correct writer made
// of them (diff SOURCE model.gguf, gguf/diff.h; docs/gguf.md, "Diff against the source").
// Each type is decoded as ggml's dequantize_row_* decodes it (ggml-quants.c of llama.cpp as in the
// sdist of docs/gguf.md), in float32, and each element x of the source (float32, as the writer
// quantizes it) held to a bound derived from the type's reference arithmetic (quantize_row_*_ref,
// gguf-py's quants.py), dq the decoded value, h16(v) half an ULP of float16 at v (2^-25 for the
// subnormals: what rounding a float32 scale to the stored fp16 moves it by), eps = 2^-18 (|x| +
// |dq|) for float32's own rounding:
//
//   F32        bit for bit (NaN equal to NaN)
//   F16, BF16  |x - dq| <= half an ULP of the type at max(|x|, |dq|): any round to nearest;
//              beyond the largest finite, an infinity of x's sign
//   Q8_0       |x - dq| <= (|d| + h16(d)) / 2 + |q| h16(d) + eps: q = round(x / d') with d' =
//              amax / 127 unrounded, the block's stored scale d = fp16(d')
//   Q4_0, Q5_0 the same with (|d| + h16(d)) in place of half of it for the top code (q 15, 31): the
//              reference maps the signed extreme to -8 (-16), and its opposite saturates a step off
//   Q5_1       (|d| + h16(d)) / 2 + 31 h16(d) + h16(m) + eps (q = round((x - min) / d), min stored
//              as m = fp16(min))
//   Q4_K, Q5_K, Q6_K: the reference rounds each element to the NEAREST point of its sub-block's
//              grid as stored (d * sc * q - dmin * m; Q6_K d * sc * q), clamped to the grid's ends.
//              So an x whose nearest grid point is inside the grid is held to half a step (+ eps);
//              an x beyond an end (or in a sub-block whose stored step is 0) to what the
//              reference's fit can leave there: the fit (make_qkx2_quants, make_qx_quants) never
//              has a larger weighted squared error than its first candidate, whose elements are
//              within half a step D0 = (max(x) - min(min(x), 0)) / nmax of the block (Q6_K: a step,
//              amax / 32, its one saturating code), so element i is within D0 sqrt(sum w / w_i) of
//              the fit (w the reference's weights: av_x + |x| for Q4_K/Q5_K, x^2 for Q6_K), and
//              the stored 6-bit (8-bit) scales move the fit's points by at most nmax (|d| / 2 +
//              63 h16(d)) + |dmin| / 2 + 63 h16(dmin) (Q6_K: 32 (|d| + 128 h16(d)): its scales
//              saturate at 127 of 128).
//
//   Q2_0       as Q8_0 (q = round(x / amax) in [-1, 1], d = fp16(amax))
//   Q1_0       ||x| - m| + h16(d) + eps, m the block's mean of |x| summed in float32 as ggml sums
//              it (d = fp16(m), each element +d or -d by its sign): a flipped sign or a moved d is
//              beyond
//   NVFP4      each 16 values at s = ue4m3(amax / 6): half the larger gap of the E2M1 grid beside
//              dq / s (0.25, 0.5, 1 times s); at the top code, what rounding amax / 6 to s leaves
//              (within s for a normal scale, 6 2^-9 for a subnormal one, none past a saturated 448)
//
// A block whose scale changed, a code moved, a value of another tensor: beyond. The types llama.cpp
// has besides these (Q2_K, Q3_K, IQ*, TQ*, MXFP4, ...) are not decoded here (exit 5, naming the
// tensor). Q1_0 and Q2_0 are ggml's (ggml-quants.c of llama-cpp-python 0.3.36), which gguf-py
// 0.19.0 does not decode; NVFP4's decode is also gguf-py's quants.NVFP4.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "compare/diff_core.h"
#include "util/dtype.h"

namespace dcpctl::gguf {

// The ggml type of a GGUF tensor as the reader names it (its dtype name: "float32", "float16",
// "bfloat16", or ggml's "Q8_0", ...) when diff decodes it; nullopt otherwise.
std::optional<uint32_t> decoded_type(const std::string& dtype_name);
// ggml's name of the type ("Q8_0") and the bound's rule in words, for diff's output.
const char* bound_name(uint32_t type);
const char* bound_rule(uint32_t type);
// Elements per block of a decoded type (1 for F32, F16, BF16), and the bytes of `n` elements of it.
uint64_t bound_block(uint32_t type);
uint64_t tensor_bytes_of(uint32_t type, uint64_t n);

// Compares n source values `x` (float32; n a multiple of the block) with `data`, the same elements
// of type `type` as the file holds them, flat index `start` the first: an element beyond its bound
// is recorded in `acc` (record_difference), one within it but not equal counted in acc.inexact.
void compare_gguf(uint32_t type, const uint8_t* data, const float* x, uint64_t n, uint64_t start, DiffAccumulator& acc);

// The n float32 values `data` of `type` decodes to (ggml's dequantize_row_*).
void decode_gguf(uint32_t type, const uint8_t* data, uint64_t n, float* out);

}  // namespace dcpctl::gguf
