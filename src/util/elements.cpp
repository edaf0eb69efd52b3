#include "util/elements.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "util/numeric.h"

namespace dcpctl {
namespace {

template <class T>
void widen_as(const uint8_t* src, size_t n, double* dst) {
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    dst[i] = static_cast<double>(v);
  }
}

template <class F>
void widen_u16(const uint8_t* src, size_t n, double* dst, F f) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = static_cast<double>(f(h));
  }
}

template <class F>
void widen_u8(const uint8_t* src, size_t n, double* dst, F f) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<double>(f(src[i]));
}

// Every value of a 16- or 8-bit float format, decoded once (by the exact scalar decoders):
// widening is then one load per element instead of a call.
template <class F>
const std::vector<float>& table16(F f) {
  static const std::vector<float> t = [&] {
    std::vector<float> v(65536);
    for (uint32_t i = 0; i < 65536; ++i) v[i] = f(static_cast<uint16_t>(i));
    return v;
  }();
  return t;
}

void widen_bf16(const uint8_t* src, size_t n, double* dst) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    uint32_t u = static_cast<uint32_t>(h) << 16;  // bfloat16 is the top half of a float32
    float f;
    std::memcpy(&f, &u, 4);
    dst[i] = static_cast<double>(f);
  }
}

void widen_f16(const uint8_t* src, size_t n, double* dst) {
  const float* t = table16(f16_to_f32).data();
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = static_cast<double>(t[h]);
  }
}

template <class F>
void widen_u8_table(const uint8_t* src, size_t n, double* dst, F f) {
  double t[256];
  for (int i = 0; i < 256; ++i) t[i] = static_cast<double>(f(static_cast<uint8_t>(i)));
  for (size_t i = 0; i < n; ++i) dst[i] = t[src[i]];
}

// Sign-magnitude bits -> ordered integer (both zeros map to 0).
int64_t sign_magnitude(uint64_t bits, unsigned width) {
  uint64_t sign = 1ull << (width - 1);
  int64_t mag = static_cast<int64_t>(bits & (sign - 1));
  return (bits & sign) ? -mag : mag;
}

}  // namespace

double e4m3fnuz_to_f64(uint8_t b) {
  if (b == 0x80) return std::numeric_limits<double>::quiet_NaN();
  int e = (b >> 3) & 0xF, m = b & 7;
  double v = e == 0 ? std::ldexp(m / 8.0, 1 - 8) : std::ldexp(1.0 + m / 8.0, e - 8);
  return (b & 0x80) ? -v : v;
}

double e5m2fnuz_to_f64(uint8_t b) {
  if (b == 0x80) return std::numeric_limits<double>::quiet_NaN();
  int e = (b >> 2) & 0x1F, m = b & 3;
  double v = e == 0 ? std::ldexp(m / 4.0, 1 - 16) : std::ldexp(1.0 + m / 4.0, e - 16);
  return (b & 0x80) ? -v : v;
}

double e8m0fnu_to_f64(uint8_t b) {
  return b == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, static_cast<int>(b) - 127);
}

bool decodable(DType d) {
  return d != DType::Float4_E2M1FN_X2;
}

bool is_real_float(DType d) {
  return info(d).floating;
}

void widen(DType d, const uint8_t* src, size_t n, double* dst) {
  switch (d) {
    case DType::Float32: return widen_as<float>(src, n, dst);
    case DType::Float64: std::memcpy(dst, src, n * 8); return;
    case DType::Float16: return widen_f16(src, n, dst);
    case DType::BFloat16: return widen_bf16(src, n, dst);
    case DType::Float8_E4M3FN: return widen_u8_table(src, n, dst, e4m3fn_to_f32);
    case DType::Float8_E5M2: return widen_u8_table(src, n, dst, e5m2_to_f32);
    case DType::Float8_E4M3FNUZ: return widen_u8_table(src, n, dst, e4m3fnuz_to_f64);
    case DType::Float8_E5M2FNUZ: return widen_u8_table(src, n, dst, e5m2fnuz_to_f64);
    case DType::Float8_E8M0FNU: return widen_u8_table(src, n, dst, e8m0fnu_to_f64);
    case DType::Int8: return widen_as<int8_t>(src, n, dst);
    case DType::Int16: return widen_as<int16_t>(src, n, dst);
    case DType::Int32: return widen_as<int32_t>(src, n, dst);
    case DType::Int64: return widen_as<int64_t>(src, n, dst);
    case DType::UInt8: return widen_as<uint8_t>(src, n, dst);
    case DType::UInt16: return widen_as<uint16_t>(src, n, dst);
    case DType::UInt32: return widen_as<uint32_t>(src, n, dst);
    case DType::UInt64: return widen_as<uint64_t>(src, n, dst);
    case DType::Bool:
      for (size_t i = 0; i < n; ++i) dst[i] = src[i] ? 1.0 : 0.0;
      return;
    case DType::Complex32: return widen_u16(src, 2 * n, dst, f16_to_f32);
    case DType::Complex64: return widen_as<float>(src, 2 * n, dst);
    case DType::Complex128: std::memcpy(dst, src, n * 16); return;
    case DType::Float4_E2M1FN_X2: break;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = std::numeric_limits<double>::quiet_NaN();
}

int64_t float_ordinal(DType d, const uint8_t* p) {
  switch (d) {
    case DType::Float64: {
      uint64_t u;
      std::memcpy(&u, p, 8);
      return sign_magnitude(u, 64);
    }
    case DType::Float32: {
      uint32_t u;
      std::memcpy(&u, p, 4);
      return sign_magnitude(u, 32);
    }
    case DType::Float16:
    case DType::BFloat16: {
      uint16_t u;
      std::memcpy(&u, p, 2);
      return sign_magnitude(u, 16);
    }
    case DType::Float8_E8M0FNU: return *p;  // unsigned: exponent only
    default: return sign_magnitude(*p, 8);  // float8 (fnuz: 0x80 is NaN, never measured)
  }
}

uint64_t ulp_distance(DType d, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return UINT64_MAX;
  uint8_t ra[8] = {}, rb[8] = {};
  if (d == DType::Float64) {
    std::memcpy(ra, &a, 8);
    std::memcpy(rb, &b, 8);
  } else if (castable(d)) {
    cast_elements(DType::Float64, d, reinterpret_cast<const uint8_t*>(&a), ra, 1);
    cast_elements(DType::Float64, d, reinterpret_cast<const uint8_t*>(&b), rb, 1);
  } else {
    return UINT64_MAX;
  }
  int64_t oa = float_ordinal(d, ra), ob = float_ordinal(d, rb);
  // Float64 ordinals span nearly all of int64: take the difference without overflow.
  return oa > ob ? static_cast<uint64_t>(oa) - static_cast<uint64_t>(ob)
                 : static_cast<uint64_t>(ob) - static_cast<uint64_t>(oa);
}

}  // namespace dcpctl
