#include "util/numeric.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace dcpctl {
namespace {

std::string fmt_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(b, sizeof b, "%.*g", p, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

// Shortest text that reads back as the same float (what Python prints for float32 values).
std::string fmt_float(float v) {
  if (std::isnan(v) || std::isinf(v)) return fmt_double(v);
  char b[40];
  for (int p = 1; p <= 9; ++p) {
    std::snprintf(b, sizeof b, "%.*g", p, static_cast<double>(v));
    if (std::strtof(b, nullptr) == v) break;
  }
  return b;
}

}  // namespace

float bf16_to_f32(uint16_t h) {
  return bits_f32(static_cast<uint32_t>(h) << 16);
}

uint16_t f32_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;  // c10::BFloat16; casts pick torch's kernel NaNs (store_nan)
  uint32_t u = f32_bits(f);
  uint32_t bias = ((u >> 16) & 1) + 0x7FFF;
  return static_cast<uint16_t>((u + bias) >> 16);
}

float f16_to_f32(uint16_t h) {
  // fp16_ieee_to_fp32_value (FP16 library): exact for every half value.
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = bits_f32(0x7800000u);
  const float normalized = bits_f32((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = bits_f32((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result = sign | (two_w < denormalized_cutoff ? f32_bits(denormalized) : f32_bits(normalized));
  return bits_f32(result);
}

uint16_t f32_to_f16(float f) {
  const float scale_to_inf = bits_f32(239u << 23);
  const float scale_to_zero = bits_f32(17u << 23);
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = bits_f32((bias >> 1) + 0x07800000u) + base;
  const uint32_t b = f32_bits(base);
  const uint32_t exp_bits = (b >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = b & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float e4m3fn_to_f32(uint8_t x) {
  // fp8e4m3fn_to_fp32_value
  const uint32_t w = static_cast<uint32_t>(x) << 24;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t nonsign = w & 0x7FFFFFFFu;
  uint32_t renorm_shift = static_cast<uint32_t>(nonsign ? __builtin_clz(nonsign) : 32);
  renorm_shift = renorm_shift > 4 ? renorm_shift - 4 : 0;
  const int32_t inf_nan_mask = (static_cast<int32_t>(nonsign + 0x01000000) >> 8) & 0x7F800000;
  const int32_t zero_mask = static_cast<int32_t>(nonsign - 1) >> 31;
  uint32_t result =
      sign | ((((nonsign << renorm_shift >> 4) + ((0x78 - renorm_shift) << 23)) | static_cast<uint32_t>(inf_nan_mask)) &
              ~static_cast<uint32_t>(zero_mask));
  return bits_f32(result);
}

uint8_t f32_to_e4m3fn(float f) {
  constexpr uint32_t fp8_max = 1087u << 20;
  constexpr uint32_t denorm_mask = 141u << 23;
  uint32_t f_bits = f32_bits(f);
  uint8_t result = 0;
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  if (f_bits >= fp8_max) {
    result = f_bits > 0x7F800000u ? 0x7f : 0x7e;
  } else if (f_bits < (121u << 23)) {
    f_bits = f32_bits(bits_f32(f_bits) + bits_f32(denorm_mask));
    result = static_cast<uint8_t>(f_bits - denorm_mask);
  } else {
    uint8_t mant_odd = (f_bits >> 20) & 1;
    f_bits += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFF;
    f_bits += mant_odd;
    result = static_cast<uint8_t>(f_bits >> 20);
    if (result == 0x7f) result = 0x7e;
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}

float e5m2_to_f32(uint8_t x) {
  return f16_to_f32(static_cast<uint16_t>(x) << 8);
}

uint8_t f32_to_e5m2(float f) {
  constexpr uint32_t fp32_inf = 255u << 23;
  constexpr uint32_t fp8_max = 143u << 23;
  constexpr uint32_t denorm_mask = 134u << 23;
  uint32_t f_bits = f32_bits(f);
  uint8_t result = 0;
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  if (f_bits >= fp8_max) {
    result = f_bits > fp32_inf ? 0x7F : 0x7C;
  } else if (f_bits < (113u << 23)) {
    f_bits = f32_bits(bits_f32(f_bits) + bits_f32(denorm_mask));
    result = static_cast<uint8_t>(f_bits - denorm_mask);
  } else {
    uint32_t mant_odd = (f_bits >> 21) & 1;
    f_bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFFF;
    f_bits += mant_odd;
    result = static_cast<uint8_t>(f_bits >> 21);
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}

std::string format_element(DType d, const uint8_t* p) {
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (d) {
    case DType::Float32: return fmt_float(load(float{}));
    case DType::Float64: return fmt_double(load(double{}));
    case DType::Float16: return fmt_float(f16_to_f32(load(uint16_t{})));
    case DType::BFloat16: return fmt_float(bf16_to_f32(load(uint16_t{})));
    case DType::Float8_E4M3FN: return fmt_float(e4m3fn_to_f32(*p));
    case DType::Float8_E5M2: return fmt_float(e5m2_to_f32(*p));
    case DType::Float8_E8M0FNU: return *p == 0xFF ? "nan" : fmt_double(std::ldexp(1.0, static_cast<int>(*p) - 127));
    case DType::Int8: return std::to_string(load(int8_t{}));
    case DType::Int16: return std::to_string(load(int16_t{}));
    case DType::Int32: return std::to_string(load(int32_t{}));
    case DType::Int64: return std::to_string(load(int64_t{}));
    case DType::UInt8: return std::to_string(load(uint8_t{}));
    case DType::UInt16: return std::to_string(load(uint16_t{}));
    case DType::UInt32: return std::to_string(load(uint32_t{}));
    case DType::UInt64: return std::to_string(load(uint64_t{}));
    case DType::Bool: return *p ? "True" : "False";
    case DType::Complex64: {
      float re = load(float{}), im;
      std::memcpy(&im, p + 4, 4);
      return "(" + fmt_float(re) + (im < 0 ? "" : "+") + fmt_float(im) + "j)";
    }
    case DType::Complex128: {
      double re = load(double{}), im;
      std::memcpy(&im, p + 8, 8);
      return "(" + fmt_double(re) + (im < 0 ? "" : "+") + fmt_double(im) + "j)";
    }
    default: {
      std::string s = "0x";
      char b[4];
      for (size_t i = itemsize(d); i-- > 0;) {
        std::snprintf(b, sizeof b, "%02x", p[i]);
        s += b;
      }
      return s;
    }
  }
}

}  // namespace dcpctl

namespace dcpctl {

bool castable(DType d) {
  return info(d).floating && d != DType::Float8_E8M0FNU && d != DType::Float8_E4M3FNUZ && d != DType::Float8_E5M2FNUZ;
}

namespace {

// Loads element i as float (or double for float64 sources, to keep f64 -> f64 exact).
inline double load_elem(DType d, const uint8_t* p, size_t i) {
  switch (d) {
    case DType::Float32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::Float64: {
      double f;
      std::memcpy(&f, p + 8 * i, 8);
      return f;
    }
    case DType::Float16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return f16_to_f32(h);
    }
    case DType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case DType::Float8_E4M3FN: return e4m3fn_to_f32(p[i]);
    case DType::Float8_E5M2: return e5m2_to_f32(p[i]);
    default: return 0;
  }
}

inline void store_elem(DType d, uint8_t* p, size_t i, double v) {
  // torch converts double to the narrow types through float (c10's constructors take float).
  float f = static_cast<float>(v);
  switch (d) {
    case DType::Float32: std::memcpy(p + 4 * i, &f, 4); break;
    case DType::Float64: std::memcpy(p + 8 * i, &v, 8); break;
    case DType::Float16: {
      uint16_t h = f32_to_f16(f);
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case DType::BFloat16: {
      uint16_t h = f32_to_bf16(f);
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case DType::Float8_E4M3FN: p[i] = f32_to_e4m3fn(f); break;
    case DType::Float8_E5M2: p[i] = f32_to_e5m2(f); break;
    default: break;
  }
}

}  // namespace

// NaNs as torch's CPU kernels write them (checked against Tensor.to() on x86-64, AVX2/F16C):
// to bfloat16, float32 sources take the vectorized path (0xFFFF), the others the scalar one
// (0x7FC0); to float16, F16C keeps sign and the top payload bits. float64 -> bfloat16 differs by
// position inside torch itself (vector blocks 0xFFFF, tails and small tensors 0x7FC0); we write 0x7FC0.
inline bool store_nan(DType from, DType to, uint8_t* p, size_t i, double v) {
  if (!std::isnan(v)) return false;
  float f = static_cast<float>(v);
  uint32_t b = f32_bits(f);
  if (to == DType::BFloat16) {
    uint16_t h = from == DType::Float32 ? 0xFFFF : 0x7FC0;
    std::memcpy(p + 2 * i, &h, 2);
    return true;
  }
  if (to == DType::Float16) {
    uint16_t h = static_cast<uint16_t>(((b >> 16) & 0x8000u) | 0x7E00u | ((b & 0x7FFFFFu) >> 13));
    std::memcpy(p + 2 * i, &h, 2);
    return true;
  }
  return false;
}

namespace {

// The two casts every bfloat16 model's export makes, element for element what the general loop
// below writes, in blocks of 16 with no aliasing between source and destination so that -O2's
// vectoriser takes them (the general loop goes through double and a switch per element: a
// w4a16 export of a bfloat16 model spent 44% of its CPU there).
void bf16_to_f32_run(const uint8_t* __restrict src, uint8_t* __restrict dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint16_t h[16];
    uint32_t w[16];
    std::memcpy(h, src + 2 * i, sizeof h);
    for (int k = 0; k < 16; ++k) w[k] = static_cast<uint32_t>(h[k]) << 16;  // bf16_to_f32
    std::memcpy(dst + 4 * i, w, sizeof w);
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const float f = bf16_to_f32(h);
    std::memcpy(dst + 4 * i, &f, 4);
  }
}

// f32_to_bf16 (round to nearest even), a NaN 0xFFFF (store_nan: torch's vectorised kernel's).
inline uint16_t f32_bits_to_bf16(uint32_t u) {
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? 0xFFFFu : rounded);
}

void f32_to_bf16_run(const uint8_t* __restrict src, uint8_t* __restrict dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32_t u[16];
    uint16_t h[16];
    std::memcpy(u, src + 4 * i, sizeof u);
    for (int k = 0; k < 16; ++k) h[k] = f32_bits_to_bf16(u[k]);
    std::memcpy(dst + 2 * i, h, sizeof h);
  }
  for (; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + 4 * i, 4);
    const uint16_t h = f32_bits_to_bf16(u);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

}  // namespace

void cast_elements(DType from, DType to, const uint8_t* src, uint8_t* dst, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * itemsize(from));
    return;
  }
  if (from == DType::BFloat16 && to == DType::Float32) return bf16_to_f32_run(src, dst, n);
  if (from == DType::Float32 && to == DType::BFloat16) return f32_to_bf16_run(src, dst, n);
  if (to == DType::Float32 && from != DType::Float64) {
    // Widening to float32 is exact; going through double would quiet signalling NaNs.
    for (size_t i = 0; i < n; ++i) {
      float f = static_cast<float>(load_elem(from, src, i));
      if (from == DType::BFloat16) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        f = bf16_to_f32(h);
      }
      std::memcpy(dst + 4 * i, &f, 4);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    double v = load_elem(from, src, i);
    if (!store_nan(from, to, dst, i, v)) store_elem(to, dst, i, v);
  }
}

}  // namespace dcpctl
