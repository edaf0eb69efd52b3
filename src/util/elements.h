// Reading tensor elements of any dtype as float64, and the ordering of float bit patterns that
// ULP distances are measured in.
//
// Every real dtype widens to float64 exactly: float16/bfloat16/float8 (e4m3fn, e5m2, e4m3fnuz,
// e5m2fnuz, e8m0fnu) are decoded bit-exactly (util/numeric.h and the fnuz rules below), integers
// up to 2^53 are exact (int64/uint64 beyond that round to nearest, as torch's .double() does),
// bool is 0/1. Complex dtypes are read as pairs (real, imaginary), as torch.view_as_real shows
// them. float4_e2m1fn_x2 packs two values per byte and is not decoded (decodable() is false).
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/dtype.h"

namespace dcpctl {

// Whether widen() handles `d`.
bool decodable(DType d);
// Real floating point (can hold NaN/Inf): float16/32/64, bfloat16, every float8.
bool is_real_float(DType d);
// Values per element widen() writes: 2 for complex, else 1.
inline size_t lanes(DType d) {
  return info(d).complex ? 2 : 1;
}

// Widens n elements at src (little-endian, itemsize(d) each) into n * lanes(d) doubles.
void widen(DType d, const uint8_t* src, size_t n, double* dst);

// Decoders for the float8 formats numeric.h does not cover (torch's c10 Float8_e4m3fnuz,
// Float8_e5m2fnuz, Float8_e8m0fnu: no infinities, 0x80 / 0xFF is the only NaN).
double e4m3fnuz_to_f64(uint8_t b);
double e5m2fnuz_to_f64(uint8_t b);
double e8m0fnu_to_f64(uint8_t b);

// A float element's bits mapped to a signed integer whose order is the order of the values
// (-0 and +0 both map to 0), so |ordinal(a) - ordinal(b)| counts the representable values
// between them: the distance in ULPs. For real floating dtypes only.
int64_t float_ordinal(DType d, const uint8_t* p);
// The ULP distance between two float64 values in dtype d, after rounding both to d as
// Tensor.to(d) does; UINT64_MAX when either is NaN.
uint64_t ulp_distance(DType d, double a, double b);

}  // namespace dcpctl
