// ggml's block quantizers, as llama.cpp's llama-quantize writes them without an importance matrix:
// ggml-quants.c's reference functions (quantize_row_q4_0_ref, q5_0, q5_1, q4_K, q5_K, q6_K; Q8_0 is
// gguf.cpp's), operation for operation, so that each block's bytes are ggml's bit for bit
// (docs/gguf.md, "Types"; checked against libggml itself by tools/gguf_quants_fixtures.py's vectors
// and tests/interop/gguf_llama_test.py).
//
// Block layouts (little-endian, `h` an IEEE half):
//   Q4_0  32 elements, 18 bytes: h d, 16 nibbles pairs (element j low, j + 16 high)
//   Q5_0  32 elements, 22 bytes: h d, u32 high bits, 16 bytes of low nibbles
//   Q5_1  32 elements, 24 bytes: h d, h m, u32 high bits, 16 bytes of low nibbles
//   Q4_K 256 elements, 144 bytes: h d, h dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
//   Q5_K 256 elements, 176 bytes: h d, h dmin, 12 bytes of scales and mins, 32 bytes of high bits, 128 of nibbles
//   Q6_K 256 elements, 210 bytes: 128 bytes low nibbles, 64 bytes high 2-bits, 16 int8 scales, h d
//
// The arithmetic is float32 throughout, in ggml's order of operations; this file is compiled with
// -ffp-contract=off (src/CMakeLists.txt) so that no multiply-add is fused: ggml-base, where
// ggml-quants.c lives, gets no FMA flags on x86-64 (the CPU flags go to ggml-cpu only), so its
// results are these. (A GCC build of ggml for a target with FMA in its baseline, such as aarch64,
// may contract a*b+c there and then differ in a rare last bit of a scale.)
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace dcpctl::gguf::quants {

// The byte of a float as x86-64's truncating conversion gives it (cvttss2si, then the low byte),
// which is what ggml's C casts (int8_t)(x) and static_cast do there: the value's own for an
// in-range value (Q8_0's -127..127, Q4_0's 0..16 before the clamp); a NaN or infinity (a block
// holding one, or one whose d is so small that 1 / d is infinite) gives INT32_MIN, whose low byte
// is 0. Written out because the C++ cast of those is undefined (UBSan stops there); the vector
// path (gguf/simd.h) gives the same.
inline uint8_t low_byte(float r) {
  const int32_t i = r == r && std::fabs(r) < 2147483648.0f ? static_cast<int32_t>(r) : INT32_MIN;
  return static_cast<uint8_t>(static_cast<uint32_t>(i) & 0xFFu);
}

void q4_0(const float* x, size_t n, uint8_t* out);  // n a multiple of 32
void q5_0(const float* x, size_t n, uint8_t* out);
void q5_1(const float* x, size_t n, uint8_t* out);
// avx2: the sub-blocks' fits by quants_avx2.h's k_fits_avx2 (the same bytes; the CPU must have AVX2).
void q4_k(const float* x, size_t n, uint8_t* out, bool avx2 = false);  // n a multiple of 256
void q5_k(const float* x, size_t n, uint8_t* out, bool avx2 = false);
void q6_k(const float* x, size_t n, uint8_t* out, bool avx2 = false);

// Q4_K's and Q5_K's fits of one super-block of 256 (k_scales' first half): each sub-block of 32's
// make_qkx2_quants with its weights (av_x + |x|), nmax, rmin, rdelta 0.1, nstep: its scale, its
// min (negated, as ggml keeps it) and its 32 levels into L.
void k_fits(const float* x, int nmax, float rmin, int nstep, float* scales, float* mins, uint8_t* L);
// Q6_K's fits of one super-block: each sub-block of 16's make_qx_quants (nmax 32, rmse_type 1):
// its scale and its 16 levels (0 to 63) into L.
void q6_fits(const float* x, float* scales, int8_t* L);

}  // namespace dcpctl::gguf::quants
