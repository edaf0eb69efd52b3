// Scalar conversions between float32 and the narrow float formats, bit-compatible with
// torch's scalar conversions (ported from torch/headeronly/util/{Half,BFloat16,Float8_*}.h of the
// pinned torch): round to nearest even; bfloat16 NaN becomes 0x7FC0; float8_e4m3fn saturates
// finite overflow and infinity to ±448 (0x7E), NaN to 0x7F; float8_e5m2 overflows to ±inf.
// float64 inputs go through float32 first, as torch's own double -> half/bfloat16/float8 does.
#pragma once

#include <cstdint>
#include <string>

#include "util/dtype.h"

namespace dcpctl {

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
