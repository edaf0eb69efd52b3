// Vectorised GGUF encodings (issue 82 item 5): F16, BF16 and Q8_0 with AVX2 and F16C (and the
// K-quants' fits, gguf/quants_avx2.h, with AVX2), chosen once
// at runtime, each the bytes of its scalar encoding (gguf/gguf.h's encode) for every input,
// NaN, infinity and subnormal included:
//   F16   _mm256_cvtps_ph rounds to nearest even, as the scalar f32_to_f16 (the FP16 library's
//         fp16_ieee_from_fp32_value) does, subnormals and overflow to infinity alike; a NaN keeps
//         part of its payload there but is 0x7E00 with its sign in the scalar path, so a group of 8
//         holding a NaN is encoded by the scalar path.
//   BF16  gguf-py's: a NaN made quiet in its top half, then + 0x7FFF + the kept lowest bit, the
//         same integer operations lane by lane.
//   Q8_0  the block's absolute maximum (max is exact and order-free; a NaN in the block makes it
//         NaN, as gguf-py's abs(blocks).max()), d and 1 / d in scalar float32 as before, then x * (1 / d) and
//         np_roundf's floor arithmetic lane by lane, truncated to int32 and its low byte kept, as the scalar
//         static_cast does on x86-64 (a NaN or infinity gives 0x80000000 there too).
// No multiply-add anywhere (this file has no FMA target and is compiled -ffp-contract=off).
//
// DCPCTL_SCALAR=1 in the environment (util/scalar.h) forces the scalar encodings: the tests run
// both paths and compare their bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/gguf.h"
#include "util/dtype.h"

namespace dcpctl::gguf {

enum class EncodeIsa { Scalar, Avx2 };

// Avx2 when the CPU has AVX2 and F16C (and the OS saves the registers) and DCPCTL_SCALAR is not set.
EncodeIsa best_encode_isa();
// Whether `isa` can run here (Scalar always).
bool encode_isa_available(EncodeIsa isa);

// encode(t, x, n, out) through `isa` (one best_encode_isa() cannot run is a logic error).
void encode_via(EncodeIsa isa, TensorType t, const float* x, size_t n, uint8_t* out);

// encode(t, x, n, out) cut at rows of `row` elements into parts of at least about 256 Ki
// elements, on `threads` workers (util/parallel.h): the same bytes, the parts in their places.
// The AVX2 + F16C encoding of F16, BF16 and Q8_0 (n whole blocks; the CPU has them); false, with
// nothing written, for the other types (encode_via then takes the scalar path).
bool encode_avx2(TensorType t, const float* x, size_t n, uint8_t* out);

void encode_parallel(TensorType t, const float* x, size_t n, uint64_t row, uint8_t* out, unsigned threads);

// encode_parallel of `n` elements of type `from`, each cast to float32 as util/numeric.h's
// cast_elements casts it: a few rows at a time into a buffer of the worker's own, small enough to
// stay in its cache, then encoded from there. The same bytes as casting the whole to float32 and
// encoding that, without the float32 copy of the window (twice the bytes of a 16-bit source,
// written and read back through memory).
void cast_encode_parallel(TensorType t, DType from, const uint8_t* src, size_t n, uint64_t row, uint8_t* out,
                          unsigned threads);

}  // namespace dcpctl::gguf
