// Scalar conversions between float32 and the narrow float formats, bit-compatible with
// torch's conversions (ported from torch/headeronly/util/{Half,BFloat16,Float8_*}.h of the
// pinned torch, checked against Tensor.to() on the CPU): round to nearest even; NaNs as the CPU kernels
// write them (see store_nan in numeric.cpp); float8_e4m3fn saturates
// finite overflow and infinity to ±448 (0x7E), NaN to 0x7F; float8_e5m2 overflows to ±inf.
// float64 inputs go through float32 first, as torch's own double -> half/bfloat16/float8 does.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "util/dtype.h"

namespace dcpctl {

// A float32's bits, and the float32 of given bits.
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float e4m3fn_to_f32(uint8_t b);
uint8_t f32_to_e4m3fn(float f);
float e5m2_to_f32(uint8_t b);
uint8_t f32_to_e5m2(float f);

// One element rendered like torch prints it (roughly): "1.5", "-3", "True", "(1+2j)".
std::string format_element(DType d, const uint8_t* p);

}  // namespace dcpctl

namespace dcpctl {

// Whether --dtype applies to a tensor of this dtype (real floating point, not packed fp4).
bool castable(DType d);
// Converts n elements from `from` to `to` (both castable), as torch's Tensor.to(to) does.
void cast_elements(DType from, DType to, const uint8_t* src, uint8_t* dst, size_t n);

}  // namespace dcpctl
