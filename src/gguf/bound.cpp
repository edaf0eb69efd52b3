#include "gguf/bound.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "gguf/types.h"
#include "util/numeric.h"

namespace dcpctl::gguf {

namespace bound_impl {

enum : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42
};

uint16_t u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
float h(const uint8_t* p) {
  return f16_to_f32(u16(p));
}

// NVFP4's E2M1 codes doubled (ggml-common.h's kvalues_mxfp4) and its block scale as ggml decodes
// it (ggml-impl.h's ggml_ue4m3_to_fp32: unsigned E4M3, bias 7, the sign bit ignored, 0x7F read as
// 0, halved to go with the doubled codes).
constexpr int8_t kE2m1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
float ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int e = (x >> 3) & 0xF, m = x & 0x7;
  const float raw = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return raw * 0.5f;
}

// Half an ULP of a float with `bits` significand bits at |v| (at least `least`).
double half_ulp(double v, int bits, double least) {
  v = std::fabs(v);
  if (!(v > 0) || !std::isfinite(v)) return least;
  int e;
  std::frexp(v, &e);  // v = m 2^e, m in [0.5, 1): its leading bit is 2^(e-1)
  return std::max(std::ldexp(1.0, e - 1 - bits), least);
}
// Half an ULP of float16 at v: what rounding a float32 to it moves it by (2^-25 among the subnormals).
double h16(double v) {
  return half_ulp(v, 11, 0x1p-25);
}
double eps(double x, double dq, double more = 0) {
  return 0x1p-20 * (std::fabs(x) + std::fabs(dq) + more) + 0x1p-140;
}

// One element: dq within `limit` of x, or beyond (recorded).
inline void check(DiffAccumulator& acc, uint64_t index, double x, double dq, double limit) {
  if (x == dq || (std::isnan(x) && std::isnan(dq))) return;
  if (std::isfinite(x) && std::isfinite(dq) && std::fabs(x - dq) <= limit) {
    ++acc.inexact;
    return;
  }
  record_difference(acc, index, x, dq, DType::Float32, nullptr, nullptr, false);
}

// A K-quant's sub-block: `n` elements x with decoded values dq, their grid step and the codes of
// its ends (dq = step * q - offset, q in [qlo, qhi]); `fit` the room of an element the grid does not
// reach, computed from the source (make_qkx2_quants' or make_qx_quants' first candidate), `scales`
// what the stored scales move the fit by.
void check_sub_block(DiffAccumulator& acc, uint64_t start, const float* x, const float* dq, int n, double step,
                     double offset, int qlo, int qhi, bool qx, double scales) {
  double sum_w = 0, sum_x2 = 0, mx = x[0], mn = x[0], amax = 0;
  for (int i = 0; i < n; ++i) {
    sum_x2 += static_cast<double>(x[i]) * x[i];
    mx = std::max(mx, static_cast<double>(x[i]));
    mn = std::min(mn, static_cast<double>(x[i]));
    amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  }
  const double av_x = std::sqrt(sum_x2 / n);
  for (int i = 0; i < n; ++i)
    sum_w += qx ? static_cast<double>(x[i]) * x[i] : av_x + std::fabs(static_cast<double>(x[i]));
  // The first candidate's error per element: half a step of the block's range (Q4_K, Q5_K), or a
  // step of its extreme (Q6_K, whose opposite code saturates).
  const double first = qx ? amax / 32 : (mx - std::min(mn, 0.0)) / qhi / 2;
  for (int i = 0; i < n; ++i) {
    const double xi = x[i], di = dq[i];
    double t = step != 0 ? (xi + offset) / step : 0;
    const bool inside = step != 0 && t >= qlo - 0.5 && t <= qhi + 0.5;
    double limit = 0.5 * std::fabs(step) * (1 + 0x1p-20) + eps(xi, di, 2 * std::fabs(offset));
    if (!inside) {
      const double w = qx ? xi * xi : av_x + std::fabs(xi);
      const double fit = w > 0 ? first * std::sqrt(sum_w / w) : first;
      limit = std::max(limit, fit * (1 + 0x1p-10) + scales + eps(xi, di, 2 * std::fabs(offset)));
    }
    check(acc, start + i, xi, di, limit);
  }
}

// Q1_0 (quantize_row_q1_0_ref): d = fp16(sum |x| / 128, summed in float32 in order), each element
// +d where x >= 0, else -d. So |x - dq| is ||x| - m| for the mean m of the block, within fp16's
// rounding of it: a sign flipped costs 2 min(|x|, m) more, a scale moved by D costs D on the side of
// m the element is not on.
void check_q1_0(DiffAccumulator& acc, uint64_t at, const uint8_t* p, const float* x, const float* y) {
  float sum = 0;
  for (int j = 0; j < 128; ++j) sum += std::fabs(x[j]);
  const double m = sum / 128.0f, hd = h16(h(p));
  for (int j = 0; j < 128; ++j)
    check(acc, at + j, x[j], y[j], std::fabs(std::fabs(static_cast<double>(x[j])) - m) + hd + eps(x[j], y[j], m));
}

// Q2_0 (quantize_row_q2_0_ref): d' = amax, q = round(x / d') in [-1, 1] (2 is never reached), d =
// fp16(d'): half a step, and |q| times d's rounding, as Q8_0.
void check_q2_0(DiffAccumulator& acc, uint64_t at, const uint8_t* p, const float* x, const float* y) {
  const double d = h(p), hd = h16(d);
  for (int j = 0; j < 64; ++j) {
    const int q = ((p[2 + j / 4] >> (2 * (j % 4))) & 3) - 1;
    check(acc, at + j, x[j], y[j], 0.5 * (std::fabs(d) + hd) + std::abs(q) * hd + eps(x[j], y[j]));
  }
}

// NVFP4 (quantize_row_nvfp4_ref): each 16 values' scale s = ue4m3(amax / 6) and every element the
// nearest point of the E2M1 grid times s (best_index_mxfp4): within half the larger gap beside its
// point (e2m1's 0.25, 0.5, 1 times s). At the top code (6 s) an element may lie past the grid by
// what rounding amax / 6 to the scale left: 2^-4 relative for a normal scale (0.375 s), 2^-9 for a
// subnormal one (6 2^-9), unbounded where amax / 6 saturated at 448; a zero scale (amax / 6 below
// 2^-10) leaves every element within 6 2^-10.
void check_nvfp4(DiffAccumulator& acc, uint64_t at, const uint8_t* p, const float* x, const float* y) {
  for (int sb = 0; sb < 4; ++sb) {
    const double scale = 2.0 * ue4m3_half(p[sb]);
    for (int j = 0; j < 16; ++j) {
      const int i = 16 * sb + j;
      const double xi = x[i], di = y[i], v = scale > 0 ? std::fabs(di) / scale : 0;
      const double gap = v < 1.75 ? 0.25 : v < 3.5 ? 0.5 : 1.0;
      double limit = std::max(scale * gap, v == 6 || scale == 0 ? 6 * 0x1p-9 : 0.0);
      if (v == 6 && scale == 448 && (xi < 0) == (di < 0) && std::fabs(xi) >= std::fabs(di))
        limit = std::numeric_limits<double>::infinity();
      check(acc, at + i, xi, di, limit + eps(xi, di));
    }
  }
}

// The signed code of element i (0..31) of a Q8_0, Q4_0 or Q5_0 block at p.
int code(uint32_t type, const uint8_t* p, int i) {
  if (type == Q8_0) return static_cast<int8_t>(p[2 + i]);
  const int j = i % 16;
  if (type == Q4_0) return (i < 16 ? p[2 + j] & 0x0F : p[2 + j] >> 4) - 8;
  const uint32_t qh = u32(p + 2);
  const int xh = i < 16 ? ((qh >> j) << 4) & 0x10 : (qh >> (j + 12)) & 0x10;
  return ((i < 16 ? p[6 + j] & 0x0F : p[6 + j] >> 4) | xh) - 16;
}

void scale_min_k4(int j, const uint8_t* q, int& d, int& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q1_0, Q2_0 and NVFP4 blocks (ggml's dequantize_row_q1_0, _q2_0, _nvfp4).
void decode_low_bit(uint32_t type, const uint8_t* p, float* y) {
  switch (type) {
    case Q1_0: {  // 128 signs, bit j of byte j / 8: +d when set, else -d
      const float d = h(p);
      for (int j = 0; j < 128; ++j) y[j] = (p[2 + j / 8] >> (j % 8)) & 1 ? d : -d;
      return;
    }
    case Q2_0: {  // 64 codes of 2 bits, j at bits 2 (j % 4) of byte j / 4: (q - 1) d
      const float d = h(p);
      for (int j = 0; j < 64; ++j) y[j] = (((p[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
      return;
    }
    case NVFP4: {  // 4 block scales, then each 16 values' 8 bytes: byte j holds j (low) and j + 8
      for (int s = 0; s < 4; ++s) {
        const float d = ue4m3_half(p[s]);
        for (int j = 0; j < 8; ++j) {
          const uint8_t q = p[4 + 8 * s + j];
          y[16 * s + j] = kE2m1Doubled[q & 0x0F] * d;
          y[16 * s + j + 8] = kE2m1Doubled[q >> 4] * d;
        }
      }
      return;
    }
  }
}

// Decodes one block of `type` at p into y (ggml's dequantize_row_*). For the K-quants also each
// sub-block's step and offset (dq = step * q - offset).
void decode_block(uint32_t type, const uint8_t* p, float* y, double* step = nullptr, double* offset = nullptr) {
  switch (type) {
    case Q8_0: {
      const float d = h(p);
      for (int j = 0; j < 32; ++j) y[j] = static_cast<int8_t>(p[2 + j]) * d;
      return;
    }
    case Q1_0:
    case Q2_0:
    case NVFP4: return decode_low_bit(type, p, y);
    case Q4_0: {
      const float d = h(p);
      for (int j = 0; j < 16; ++j) {
        y[j] = ((p[2 + j] & 0x0F) - 8) * d;
        y[j + 16] = ((p[2 + j] >> 4) - 8) * d;
      }
      return;
    }
    case Q5_0: {
      const float d = h(p);
      const uint32_t qh = u32(p + 2);
      for (int j = 0; j < 16; ++j) {
        const int xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
        y[j] = (((p[6 + j] & 0x0F) | xh0) - 16) * d;
        y[j + 16] = (((p[6 + j] >> 4) | xh1) - 16) * d;
      }
      return;
    }
    case Q5_1: {
      const float d = h(p), m = h(p + 2);
      const uint32_t qh = u32(p + 4);
      for (int j = 0; j < 16; ++j) {
        const int xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
        y[j] = ((p[8 + j] & 0x0F) | xh0) * d + m;
        y[j + 16] = ((p[8 + j] >> 4) | xh1) * d + m;
      }
      return;
    }
    case Q4_K:
    case Q5_K: {
      const bool five = type == Q5_K;
      const float d = h(p), dmin = h(p + 2);
      const uint8_t* scales = p + 4;
      const uint8_t* qh = p + 16;
      const uint8_t* ql = p + (five ? 48 : 16);
      int sc, m;
      for (int j = 0; j < 4; ++j) {
        scale_min_k4(2 * j, scales, sc, m);
        const float d1 = d * sc, m1 = dmin * m;
        scale_min_k4(2 * j + 1, scales, sc, m);
        const float d2 = d * sc, m2 = dmin * m;
        const int u1 = 1 << (2 * j), u2 = 2 << (2 * j);
        for (int l = 0; l < 32; ++l)
          y[64 * j + l] = d1 * ((ql[32 * j + l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l)
          y[64 * j + 32 + l] = d2 * ((ql[32 * j + l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
        if (step) step[2 * j] = d1, step[2 * j + 1] = d2, offset[2 * j] = m1, offset[2 * j + 1] = m2;
      }
      return;
    }
    case Q6_K: {
      const float d = h(p + 208);
      const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
      for (int c = 0; c < 2; ++c) {
        const uint8_t* ql = p + 64 * c;
        const uint8_t* qh = p + 128 + 32 * c;
        const int8_t* s = sc + 8 * c;
        float* yc = y + 128 * c;
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          yc[l] = d * s[is + 0] * q1;
          yc[l + 32] = d * s[is + 2] * q2;
          yc[l + 64] = d * s[is + 4] * q3;
          yc[l + 96] = d * s[is + 6] * q4;
        }
      }
      if (step)
        for (int j = 0; j < 16; ++j) step[j] = d * sc[j], offset[j] = 0;
      return;
    }
  }
}

// The type table's (gguf/types.h): one place for each type's block and name.
uint64_t block_bytes(uint32_t type) {
  const GgmlType* t = ggml_type(type);
  return t ? t->block_bytes : 0;
}

}  // namespace bound_impl

std::optional<uint32_t> decoded_type(const std::string& n) {
  using namespace bound_impl;
  static const std::pair<const char*, uint32_t> names[] = {
      {"float32", F32}, {"float16", F16}, {"bfloat16", BF16}, {"Q8_0", Q8_0}, {"Q4_0", Q4_0},
      {"Q5_0", Q5_0},   {"Q5_1", Q5_1},   {"Q4_K", Q4_K},     {"Q5_K", Q5_K}, {"Q6_K", Q6_K},
      {"NVFP4", NVFP4}, {"Q1_0", Q1_0},   {"Q2_0", Q2_0}};
  for (const auto& [name, id] : names)
    if (n == name) return id;
  return std::nullopt;
}

const char* bound_name(uint32_t type) {
  const GgmlType* t = ggml_type(type);
  return t ? t->name : "?";
}

const char* bound_rule(uint32_t type) {
  using namespace bound_impl;
  switch (type) {
    case F32: return "bit for bit";
    case F16: return "half an ULP of float16 (any round to nearest)";
    case BF16: return "half an ULP of bfloat16 (any round to nearest)";
    case Q8_0: return "half a step of the block's fp16 scale, and its rounding per code";
    case Q4_0:
    case Q5_0:
      return "half a step of the block's fp16 scale (a step at the saturating top code), and its rounding per code";
    case Q5_1: return "half a step of the block's fp16 scale, and the rounding of its scale and min";
    case Q4_K:
    case Q5_K:
    case Q6_K: return "the nearest point of the sub-block's stored grid; beyond its ends, the reference fit's room";
    case NVFP4: return "the nearest E2M1 point at the sub-block's UE4M3 scale; at the top code, the scale's rounding";
    case Q1_0: return "the sign, at the block's fp16 mean of |x| (its rounding)";
    case Q2_0: return "half a step of the block's fp16 scale (amax), and its rounding per code";
  }
  return "?";
}

uint64_t bound_block(uint32_t type) {
  const GgmlType* t = ggml_type(type);
  return t ? t->block : 1;
}

uint64_t tensor_bytes_of(uint32_t type, uint64_t n) {
  using namespace bound_impl;
  return n / bound_block(type) * block_bytes(type);
}

void decode_gguf(uint32_t type, const uint8_t* data, uint64_t n, float* out) {
  using namespace bound_impl;
  if (type == F32) return std::memcpy(out, data, n * 4), void();
  if (type == F16 || type == BF16) {
    for (uint64_t i = 0; i < n; ++i)
      out[i] = type == F16 ? f16_to_f32(u16(data + 2 * i)) : bf16_to_f32(u16(data + 2 * i));
    return;
  }
  const uint64_t bs = bound_block(type), bb = block_bytes(type);
  for (uint64_t b = 0; b < n / bs; ++b) decode_block(type, data + b * bb, out + b * bs);
}

void compare_gguf(uint32_t type, const uint8_t* data, const float* x, uint64_t n, uint64_t start,
                  DiffAccumulator& acc) {
  using namespace bound_impl;
  if (type == F32) {
    for (uint64_t i = 0; i < n; ++i) {
      float dq;
      std::memcpy(&dq, data + 4 * i, 4);
      if (f32_bits(dq) == f32_bits(x[i]) || (std::isnan(dq) && std::isnan(x[i]))) continue;
      record_difference(acc, start + i, x[i], dq, DType::Float32, nullptr, nullptr, false);
    }
    return;
  }
  if (type == F16 || type == BF16) {
    const bool f16 = type == F16;
    const double top = f16 ? 65504.0 : 3.3895313892515355e38;
    for (uint64_t i = 0; i < n; ++i) {
      const double xi = x[i], dq = f16 ? f16_to_f32(u16(data + 2 * i)) : bf16_to_f32(u16(data + 2 * i));
      if (std::isinf(dq) && std::isfinite(xi) && std::fabs(xi) > top && (xi < 0) == (dq < 0)) {
        ++acc.inexact;
        continue;
      }
      const double a = std::max(std::fabs(xi), std::fabs(dq));
      check(acc, start + i, xi, dq, f16 ? half_ulp(a, 11, 0x1p-25) : half_ulp(a, 8, 0x1p-134));
    }
    return;
  }
  const uint64_t bs = bound_block(type), bb = block_bytes(type);
  float y[256];
  double step[16], offset[16];
  for (uint64_t b = 0; b < n / bs; ++b) {
    const uint8_t* p = data + b * bb;
    const float* xb = x + b * bs;
    const uint64_t at = start + b * bs;
    decode_block(type, p, y, step, offset);
    switch (type) {
      case Q8_0:
      case Q4_0:
      case Q5_0: {
        const double d = h(p), hd = h16(d);
        const int top = type == Q4_0 ? 15 : 31, mid = type == Q8_0 ? 0 : type == Q4_0 ? 8 : 16;
        for (uint64_t i = 0; i < bs; ++i) {
          const double q = code(type, p, static_cast<int>(i));  // as stored (dq is 0 whatever it is when d is)
          double limit = 0.5 * (std::fabs(d) + hd) + std::fabs(q) * hd;
          if (type != Q8_0 && q + mid == top) limit += 0.5 * (std::fabs(d) + hd);
          check(acc, at + i, xb[i], y[i], limit + eps(xb[i], y[i]));
        }
        break;
      }
      case Q5_1: {
        const double d = h(p), m = h(p + 2), hd = h16(d), hm = h16(m);
        for (uint64_t i = 0; i < bs; ++i)
          check(acc, at + i, xb[i], y[i], 0.5 * (std::fabs(d) + hd) + 31 * hd + hm + eps(xb[i], y[i], std::fabs(m)));
        break;
      }
      case Q4_K:
      case Q5_K: {
        const double d = h(p), dmin = h(p + 2), hd = h16(d), hm = h16(dmin);
        const int nmax = type == Q4_K ? 15 : 31;
        const double scales = nmax * (0.5 * (std::fabs(d) + hd) + 63 * hd) + 0.5 * (std::fabs(dmin) + hm) + 63 * hm;
        for (int j = 0; j < 8; ++j)
          check_sub_block(acc, at + 32 * j, xb + 32 * j, y + 32 * j, 32, step[j], offset[j], 0, nmax, false, scales);
        break;
      }
      case Q1_0: check_q1_0(acc, at, p, xb, y); break;
      case Q2_0: check_q2_0(acc, at, p, xb, y); break;
      case NVFP4: check_nvfp4(acc, at, p, xb, y); break;
      case Q6_K: {
        const double d = h(p + 208), hd = h16(d);
        const double scales = 32 * (std::fabs(d) + 128 * hd);
        for (int j = 0; j < 16; ++j)
          check_sub_block(acc, at + 16 * j, xb + 16 * j, y + 16 * j, 16, step[j], 0, -32, 31, true, scales);
        break;
      }
    }
  }
}

}  // namespace dcpctl::gguf
