// The AVX2 + F16C encodings of gguf/simd.h, each equal to its scalar twin in gguf.cpp byte for byte.
#include "gguf/simd.h"

#include <cstring>
#include <limits>
#include <stdexcept>

#include "util/numeric.h"
#include "util/scalar.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace dcpctl::gguf {

namespace {

#if defined(__x86_64__)
#define DCPCTL_AVX2_F16C __attribute__((target("avx2,f16c")))

// 8 floats to 8 halves; false (nothing stored) when one is a NaN (the scalar path's 0x7E00).
DCPCTL_AVX2_F16C bool f16_8(const float* x, uint8_t* out) {
  const __m256 v = _mm256_loadu_ps(x);
  if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) return false;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return true;
}

DCPCTL_AVX2_F16C void f16_avx2(const float* x, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    if (!f16_8(x + i, out + 2 * i))
      for (size_t k = i; k < i + 8; ++k) {
        const uint16_t h = f32_to_f16(x[k]);
        std::memcpy(out + 2 * k, &h, 2);
      }
  for (; i < n; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

// gguf-py's BF16 of 8 floats, as 8 int32 holding the halves.
DCPCTL_AVX2_F16C __m256i bf16_8(const float* x) {
  __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(n, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_and_si256(n, _mm256_set1_epi32(static_cast<int>(0xffff0000u))),
                                        _mm256_set1_epi32(64 << 16));
  n = _mm256_blendv_epi8(n, quiet, nan);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(n, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(0x7fff)), lsb), 16);
}

DCPCTL_AVX2_F16C void bf16_16(const float* x, uint8_t* out) {
  // packus keeps each 128-bit half's order: the quadwords come out 0 2 1 3.
  const __m256i h = _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_8(x), bf16_8(x + 8)), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
}

DCPCTL_AVX2_F16C void bf16_avx2(const float* x, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) bf16_16(x + i, out + 2 * i);
  if (i < n) {  // the tail through a padded copy
    float in[16] = {};
    uint8_t enc[32];
    std::memcpy(in, x + i, (n - i) * 4);
    bf16_16(in, enc);
    std::memcpy(out + 2 * i, enc, (n - i) * 2);
  }
}

// np_roundf(v * id) of 8 lanes, truncated to int32 and kept to its low byte (in an int32).
DCPCTL_AVX2_F16C __m256i q8_lanes(const float* x, __m256 id) {
  const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), id);
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  const __m256 floored = _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m256 frac2 = _mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_sub_ps(a, floored));
  const __m256 b = _mm256_add_ps(floored, _mm256_round_ps(frac2, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
  // x < 0 ? -b : b (a NaN compares false: b, as the scalar's)
  const __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 r = _mm256_blendv_ps(b, _mm256_xor_ps(b, _mm256_set1_ps(-0.0f)), neg);
  return _mm256_and_si256(_mm256_cvttps_epi32(r), _mm256_set1_epi32(0xff));
}

DCPCTL_AVX2_F16C void q8_0_avx2(const float* x, size_t n, uint8_t* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    // max_ps(a, m) returns m when a is a NaN: fmax's skip; a NaN anywhere makes the maximum a
    // NaN (gguf-py's abs(blocks).max(), as the scalar path).
    __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + 8 * k);
      m = _mm256_max_ps(_mm256_andnot_ps(sign, v), m);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float amax = _mm256_movemask_ps(nan) ? std::numeric_limits<float>::quiet_NaN() : _mm_cvtss_f32(h);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t hd = f32_to_f16(d);
    std::memcpy(out, &hd, 2);
    const __m256 idv = _mm256_set1_ps(id);
    const __m256i ab = _mm256_packus_epi32(q8_lanes(x, idv), q8_lanes(x + 8, idv));
    const __m256i cd = _mm256_packus_epi32(q8_lanes(x + 16, idv), q8_lanes(x + 24, idv));
    const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2), q);
  }
}

bool cpu_has_avx2_f16c() {
  __builtin_cpu_init();
  // GCC's and clang's avx2 test includes the OS saving the 256-bit registers (XCR0). Clang 14's
  // __builtin_cpu_supports knows no "f16c": CPUID leaf 1, ECX bit 29.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
#else
bool cpu_has_avx2_f16c() {
  return false;
}
#endif

}  // namespace

bool encode_isa_available(EncodeIsa isa) {
  static const bool avx2 = cpu_has_avx2_f16c();
  return isa == EncodeIsa::Scalar || avx2;
}

EncodeIsa best_encode_isa() {
  static const EncodeIsa best =
      !scalar_forced() && encode_isa_available(EncodeIsa::Avx2) ? EncodeIsa::Avx2 : EncodeIsa::Scalar;
  return best;
}

bool encode_avx2(TensorType t, const float* x, size_t n, uint8_t* out) {
#if defined(__x86_64__)
  switch (t) {
    case TensorType::F16: f16_avx2(x, n, out); return true;
    case TensorType::BF16: bf16_avx2(x, n, out); return true;
    case TensorType::Q8_0: q8_0_avx2(x, n, out); return true;
    default: return false;
  }
#else
  (void)t, (void)x, (void)n, (void)out;
  throw std::logic_error("gguf: no AVX2 encoding on this architecture");
#endif
}

}  // namespace dcpctl::gguf
