// ggml's K-quant fits with AVX2 (gguf/quants.h's k_fits and q6_fits, bit for bit): a
// super-block's sub-blocks (8 of 32; Q6_K's 16 of 16, in two halves) are independent, so each is
// a lane of an 8-float vector, and every lane carries out make_qkx2_quants' (make_qx_quants')
// float32 operations in its order: its sums element after element (no reassociation: the lanes
// are the sub-blocks, never elements of one sum), min and max by compare-and-select as its
// branches do (_mm256_min_ps(a, b) is a < b ? a : b), nearest_int through the same magic-number
// addition, the branches taken per lane as masks (D > 0, this_min > 0, cur_error < best_error,
// max == min; ax > amax, suml2 > 0 && sumlx^2 > best * suml2), divisions and square roots IEEE's,
// as `/` and sqrtf are. No FMA (compiled -ffp-contract=off, no fma target). Checked against the
// scalar fits by unit:gguf_simd and against libggml's fixtures by unit:gguf_quants.
#pragma once

#include <cstdint>

namespace dcpctl::gguf::quants {

// k_fits with AVX2; the CPU must have it (gguf/simd.h's encode_isa_available).
void k_fits_avx2(const float* x, int nmax, float rmin, int nstep, float* scales, float* mins, uint8_t* L);
// q6_fits with AVX2 (make_qx_quants over the 16 sub-blocks of 16, 8 lanes at a time); likewise.
void q6_fits_avx2(const float* x, float* scales, int8_t* L);

}  // namespace dcpctl::gguf::quants
