// ggml's reference block quantizers (gguf/quants.h), transcribed from ggml-quants.c of
// llama-cpp-python 0.3.36's llama.cpp: the same float32 operations in the same order.
#include "gguf/quants.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "gguf/quants_avx2.h"
#include "util/numeric.h"

namespace dcpctl::gguf::quants {

namespace {

constexpr int kQK = 32, kQKK = 256;
constexpr float kGroupMaxEps = 1e-15f;

void put_half(uint8_t* o, float f) {
  const uint16_t h = f32_to_f16(f);
  std::memcpy(o, &h, 2);
}
float get_half(const uint8_t* o) {
  uint16_t h;
  std::memcpy(&h, o, 2);
  return f16_to_f32(h);
}

// ggml's nearest_int: round half to even through the float's mantissa (|fval| <= 4194303).
int nearest_int(float fval) {
  const float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

// make_qx_quants with qw NULL (Q6_K calls it with rmse_type 1).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      const int l = nearest_int(iscale * x[i]);
      L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  bool return_early = false;
  if (rmse_type < 0) {
    rmse_type = -rmse_type;
    return_early = true;
  }
  auto weight = [&](int i) {
    return rmse_type == 1   ? x[i] * x[i]
           : rmse_type == 2 ? 1.f
           : rmse_type == 3 ? std::fabs(x[i])
                            : std::sqrt(std::fabs(x[i]));
  };
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(i);
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  if (return_early) return suml2 > 0 ? 0.5f * (scale + 1 / iscale) : 1 / iscale;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(i);
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

}  // namespace

void k_fits(const float* x, int nmax, float rmin, int nstep, float* scales, float* mins, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32];
  for (int j = 0; j < kQKK / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
  }
}

namespace {

// The scales, mins and levels shared by Q4_K (nmax 15) and Q5_K (nmax 31): one super-block's
// d and dmin at o, its 12 scale bytes at sc, its levels into L; the sub-blocks' fits by k_fits,
// or by its AVX2 twin (quants_avx2.h), which gives the same floats.
void k_scales(const float* x, int nmax, float rmin, int nstep, uint8_t* o, uint8_t* sc, uint8_t* L, bool avx2) {
  float mins[kQKK / 32], scales[kQKK / 32];
  float max_scale = 0, max_min = 0;
  if (avx2)
    k_fits_avx2(x, nmax, rmin, nstep, scales, mins, L);
  else
    k_fits(x, nmax, rmin, nstep, scales, mins, L);
  for (int j = 0; j < kQKK / 32; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(sc, 0, 12);
  for (int j = 0; j < kQKK / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {
      sc[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      sc[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      sc[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  put_half(o, max_scale / 63.f);
  put_half(o + 2, max_min / 63.f);
  for (int j = 0; j < kQKK / 32; ++j) {
    uint8_t s, m;
    get_scale_min_k4(j, sc, &s, &m);
    const float d = get_half(o) * s;
    if (!d) continue;
    const float dm = get_half(o + 2) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

void q4_0(const float* x, size_t n, uint8_t* out) {
  for (size_t b = 0; b < n / kQK; ++b, x += kQK, out += 18) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    put_half(out, d);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id, x1 = x[kQK / 2 + j] * id;
      const uint8_t xi0 =
          static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(low_byte(x0 + 8.5f)))));
      const uint8_t xi1 =
          static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(low_byte(x1 + 8.5f)))));
      out[2 + j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void q5_0(const float* x, size_t n, uint8_t* out) {
  for (size_t b = 0; b < n / kQK; ++b, x += kQK, out += 22) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    put_half(out, d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id, x1 = x[kQK / 2 + j] * id;
      const uint8_t xi0 =
          static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(low_byte(x0 + 16.5f)))));
      const uint8_t xi1 =
          static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(low_byte(x1 + 16.5f)))));
      out[6 + j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(out + 2, &qh, 4);
  }
}

void q5_1(const float* x, size_t n, uint8_t* out) {
  for (size_t b = 0; b < n / kQK; ++b, x += kQK, out += 24) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    put_half(out, d);
    put_half(out + 2, min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id, x1 = (x[kQK / 2 + j] - min) * id;
      const uint8_t xi0 = low_byte(x0 + 0.5f), xi1 = low_byte(x1 + 0.5f);  // (uint8_t)(x0 + 0.5f), defined
      out[8 + j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(out + 4, &qh, 4);
  }
}

void q4_k(const float* x, size_t n, uint8_t* out, bool avx2) {
  uint8_t L[kQKK];
  for (size_t b = 0; b < n / kQKK; ++b, x += kQKK, out += 144) {
    k_scales(x, 15, -1.f, 20, out, out + 4, L, avx2);
    uint8_t* q = out + 16;
    for (int j = 0; j < kQKK; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void q5_k(const float* x, size_t n, uint8_t* out, bool avx2) {
  uint8_t L[kQKK];
  for (size_t b = 0; b < n / kQKK; ++b, x += kQKK, out += 176) {
    k_scales(x, 31, -0.5f, 15, out, out + 4, L, avx2);
    uint8_t* qh = out + 16;
    uint8_t* ql = out + 48;
    std::memset(qh, 0, kQKK / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n0 = 0; n0 < kQKK; n0 += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n0 + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n0 + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void q6_fits(const float* x, float* scales, int8_t* L) {
  for (int ib = 0; ib < kQKK / 16; ++ib) scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
}

void q6_k(const float* x, size_t n, uint8_t* out, bool avx2) {
  int8_t L[kQKK];
  float scales[kQKK / 16];
  for (size_t b = 0; b < n / kQKK; ++b, x += kQKK, out += 210) {
    uint8_t* ql = out;
    uint8_t* qh = out + 128;
    int8_t* sc = reinterpret_cast<int8_t*>(out + 192);
    uint8_t* dp = out + 208;
    float max_scale = 0, max_abs_scale = 0;
    if (avx2)
      q6_fits_avx2(x, scales, L);
    else
      q6_fits(x, scales, L);
    for (int ib = 0; ib < kQKK / 16; ++ib) {
      const float scale = scales[ib];
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(out, 0, 210);
      put_half(dp, 0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    put_half(dp, 1 / iscale);
    for (int ib = 0; ib < kQKK / 16; ++ib)
      sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQKK / 16; ++j) {
      const float d = get_half(dp) * sc[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    for (int j = 0; j < kQKK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF,
                      q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace dcpctl::gguf::quants
