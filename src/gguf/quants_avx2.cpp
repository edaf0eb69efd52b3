// gguf/quants_avx2.h: make_qkx2_quants over a K super-block's 8 sub-blocks at once, a lane each.
#include "gguf/quants_avx2.h"

#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dcpctl::gguf::quants {

#if defined(__x86_64__)

namespace {

#define DCPCTL_AVX2 __attribute__((target("avx2")))

constexpr int kSub = 8, kN = 32;        // 8 sub-blocks (lanes) of 32 elements
constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS

// ggml's nearest_int, lane by lane: the bits of fval + 1.5 * 2^23.
DCPCTL_AVX2 inline __m256i nearest_int(__m256 fval) {
  const __m256i i = _mm256_castps_si256(_mm256_add_ps(fval, _mm256_set1_ps(12582912.f)));
  return _mm256_sub_epi32(_mm256_and_si256(i, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}

// max(0, min(nmax, nearest_int(iscale * (x - min)))) as int32 lanes.
DCPCTL_AVX2 inline __m256i level(__m256 iscale, __m256 x, __m256 min, __m256i nmax) {
  const __m256i l = nearest_int(_mm256_mul_ps(iscale, _mm256_sub_ps(x, min)));
  return _mm256_max_epi32(_mm256_setzero_si256(), _mm256_min_epi32(nmax, l));
}

// sum over i of w[i] * d(i)^2 with d(i) = scale * L[i] + min - x[i], in i's order.
DCPCTL_AVX2 inline __m256 error(const __m256* x, const __m256* w, const __m256i* L, __m256 scale, __m256 min) {
  __m256 e = _mm256_setzero_ps();
  for (int i = 0; i < kN; ++i) {
    __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(L[i])), min), x[i]);
    diff = _mm256_mul_ps(diff, diff);
    e = _mm256_add_ps(e, _mm256_mul_ps(w[i], diff));
  }
  return e;
}

// The search of make_qkx2_quants (rdelta 0.1, use_mad false) over the lanes: x[i] and w[i] are
// element i of each sub-block; L its levels; the scale returned, min (before negation) in *min.
DCPCTL_AVX2 __m256 qkx2(const __m256* x, const __m256* w, int nmax, float rmin, int nstep, __m256i* L,
                        __m256* min_out) {
  __m256 min = x[0], max = x[0], sum_w = w[0];
  __m256 sum_x = _mm256_mul_ps(sum_w, x[0]);
  for (int i = 1; i < kN; ++i) {
    min = _mm256_min_ps(x[i], min);  // x < min ? x : min
    max = _mm256_max_ps(x[i], max);  // x > max ? x : max
    sum_w = _mm256_add_ps(sum_w, w[i]);
    sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(w[i], x[i]));
  }
  const __m256 zero = _mm256_setzero_ps();
  min = _mm256_blendv_ps(min, zero, _mm256_cmp_ps(min, zero, _CMP_GT_OQ));  // if (min > 0) min = 0
  const __m256 flat = _mm256_cmp_ps(max, min, _CMP_EQ_OQ), flat_min = min;
  const __m256i nm = _mm256_set1_epi32(nmax);
  __m256 iscale = _mm256_div_ps(_mm256_set1_ps(static_cast<float>(nmax)), _mm256_sub_ps(max, min));
  __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), iscale);
  for (int i = 0; i < kN; ++i) L[i] = level(iscale, x[i], min, nm);
  __m256 best_error = error(x, w, L, scale, min);
  __m256i aux[kN];
  for (int is = 0; nstep >= 1 && is <= nstep; ++is) {  // (ggml returns before the search when nstep < 1)
    // max - min with min as the search has left it: a better fit moves min, and the next steps' range with it.
    const float num = rmin + 0.1f * static_cast<float>(is) + static_cast<float>(nmax);
    iscale = _mm256_div_ps(_mm256_set1_ps(num), _mm256_sub_ps(max, min));
    __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
    for (int i = 0; i < kN; ++i) {
      aux[i] = level(iscale, x[i], min, nm);
      const __m256 fl = _mm256_cvtepi32_ps(aux[i]), wl = _mm256_mul_ps(w[i], fl);
      sum_l = _mm256_add_ps(sum_l, wl);
      sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, fl));
      sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, x[i]));
    }
    const __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
    const __m256 positive = _mm256_cmp_ps(D, zero, _CMP_GT_OQ);
    if (_mm256_movemask_ps(positive) == 0) continue;
    __m256 this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
    __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
    const __m256 above = _mm256_cmp_ps(this_min, zero, _CMP_GT_OQ);
    this_min = _mm256_blendv_ps(this_min, zero, above);
    this_scale = _mm256_blendv_ps(this_scale, _mm256_div_ps(sum_xl, sum_l2), above);
    const __m256 cur_error = error(x, w, aux, this_scale, this_min);
    const __m256 better = _mm256_and_ps(positive, _mm256_cmp_ps(cur_error, best_error, _CMP_LT_OQ));
    if (_mm256_movemask_ps(better) == 0) continue;
    const __m256i take = _mm256_castps_si256(better);
    for (int i = 0; i < kN; ++i) L[i] = _mm256_blendv_epi8(L[i], aux[i], take);
    best_error = _mm256_blendv_ps(best_error, cur_error, better);
    scale = _mm256_blendv_ps(scale, this_scale, better);
    min = _mm256_blendv_ps(min, this_min, better);
  }
  // A flat sub-block (max == min) returned at once in ggml: levels 0, scale 0, its min as it was.
  const __m256i flat_i = _mm256_castps_si256(flat);
  for (int i = 0; i < kN; ++i) L[i] = _mm256_andnot_si256(flat_i, L[i]);
  *min_out = _mm256_blendv_ps(min, flat_min, flat);
  return _mm256_blendv_ps(scale, zero, flat);
}

// One pass of make_qx_quants (nmax 32, weights x^2) over 16 elements: the levels l (clamped to
// [-32, 31]) at `iscale`, sum w x l and sum w l^2 in element order.
DCPCTL_AVX2 inline void qx_levels(const __m256* x, __m256 iscale, __m256i* l, __m256& sumlx, __m256& suml2) {
  const __m256i lo = _mm256_set1_epi32(-32), hi = _mm256_set1_epi32(31);
  sumlx = suml2 = _mm256_setzero_ps();
  for (int i = 0; i < 16; ++i) {
    l[i] = _mm256_max_epi32(lo, _mm256_min_epi32(hi, nearest_int(_mm256_mul_ps(iscale, x[i]))));
    const __m256 w = _mm256_mul_ps(x[i], x[i]), fl = _mm256_cvtepi32_ps(l[i]);
    sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, x[i]), fl));
    suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, fl), fl));
  }
}

// make_qx_quants(16, nmax 32, x, L, rmse_type 1) over 8 sub-blocks of 16 (x[i]: element i of
// each): the scale returned, the levels (0 to 63) into L.
DCPCTL_AVX2 __m256 qx(const __m256* x, __m256i* L) {
  constexpr int n = 16, nmax = 32;
  const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
  __m256 max = zero, amax = zero;
  for (int i = 0; i < n; ++i) {
    const __m256 ax = _mm256_andnot_ps(sign, x[i]), more = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
    amax = _mm256_blendv_ps(amax, ax, more);
    max = _mm256_blendv_ps(max, x[i], more);
  }
  const __m256 small = _mm256_cmp_ps(amax, _mm256_set1_ps(kGroupMaxEps), _CMP_LT_OQ);  // levels 0, scale 0
  const __m256i off = _mm256_set1_epi32(nmax);
  __m256i l[n];
  __m256 sumlx, suml2;
  qx_levels(x, _mm256_div_ps(_mm256_set1_ps(static_cast<float>(-nmax)), max), l, sumlx, suml2);
  for (int i = 0; i < n; ++i) L[i] = _mm256_add_epi32(l[i], off);
  __m256 scale = _mm256_blendv_ps(_mm256_div_ps(sumlx, suml2), zero, _mm256_cmp_ps(suml2, zero, _CMP_EQ_OQ));
  __m256 best = _mm256_mul_ps(scale, sumlx);
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float num = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is));
    qx_levels(x, _mm256_div_ps(_mm256_set1_ps(num), max), l, sumlx, suml2);
    const __m256 better =
        _mm256_and_ps(_mm256_cmp_ps(suml2, zero, _CMP_GT_OQ),
                      _mm256_cmp_ps(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2), _CMP_GT_OQ));
    if (_mm256_movemask_ps(better) == 0) continue;
    const __m256i take = _mm256_castps_si256(better);
    for (int i = 0; i < n; ++i) L[i] = _mm256_blendv_epi8(L[i], _mm256_add_epi32(l[i], off), take);
    scale = _mm256_blendv_ps(scale, _mm256_div_ps(sumlx, suml2), better);
    best = _mm256_blendv_ps(best, _mm256_mul_ps(scale, sumlx), better);
  }
  for (int i = 0; i < n; ++i) L[i] = _mm256_andnot_si256(_mm256_castps_si256(small), L[i]);
  return _mm256_blendv_ps(scale, zero, small);
}

}  // namespace

DCPCTL_AVX2 void q6_fits_avx2(const float* xs, float* scales, int8_t* L) {
  constexpr int n = 16;
  const __m256i stride = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
  alignas(32) int32_t lanes[kSub];
  for (int half = 0; half < 2; ++half, xs += 8 * n, L += 8 * n, scales += 8) {  // sub-blocks 0-7, then 8-15
    __m256 x[n];
    __m256i lv[n];
    for (int i = 0; i < n; ++i) x[i] = _mm256_i32gather_ps(xs + i, stride, 4);
    _mm256_storeu_ps(scales, qx(x, lv));
    for (int i = 0; i < n; ++i) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), lv[i]);
      for (int j = 0; j < kSub; ++j) L[n * j + i] = static_cast<int8_t>(lanes[j]);
    }
  }
}

DCPCTL_AVX2 void k_fits_avx2(const float* xs, int nmax, float rmin, int nstep, float* scales, float* mins, uint8_t* L) {
  // Element i of every sub-block in one vector (a gather of stride 32).
  const __m256i stride = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);
  __m256 x[kN], w[kN];
  __m256 sum_x2 = _mm256_setzero_ps();
  for (int i = 0; i < kN; ++i) {
    x[i] = _mm256_i32gather_ps(xs + i, stride, 4);
    sum_x2 = _mm256_add_ps(sum_x2, _mm256_mul_ps(x[i], x[i]));
  }
  const __m256 av_x = _mm256_sqrt_ps(_mm256_div_ps(sum_x2, _mm256_set1_ps(32.0f)));
  for (int i = 0; i < kN; ++i) w[i] = _mm256_add_ps(av_x, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x[i]));
  __m256i lv[kN];
  __m256 min;
  const __m256 scale = qkx2(x, w, nmax, rmin, nstep, lv, &min);
  _mm256_storeu_ps(scales, scale);
  _mm256_storeu_ps(mins, _mm256_xor_ps(min, _mm256_set1_ps(-0.0f)));  // the_min = -min
  alignas(32) int32_t lanes[kSub];
  for (int i = 0; i < kN; ++i) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), lv[i]);
    for (int j = 0; j < kSub; ++j) L[kN * j + i] = static_cast<uint8_t>(lanes[j]);
  }
}

#else

void k_fits_avx2(const float*, int, float, int, float*, float*, uint8_t*) {
  throw std::logic_error("gguf: no AVX2 K-quant fits on this architecture");
}
void q6_fits_avx2(const float*, float*, int8_t*) {
  throw std::logic_error("gguf: no AVX2 K-quant fits on this architecture");
}

#endif

}  // namespace dcpctl::gguf::quants
