#include "util/crc32.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dcpctl {
namespace {

#if defined(__x86_64__)
// Carry-less multiplication folding (Gopal et al., "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ Instruction", Intel 2009), in the bit-reflected domain of zip's polynomial: four
// 128-bit lanes folded 64 bytes at a time, then into one lane, then Barrett-reduced to 32 bits.
// Works on the pre-inverted register; n >= 64 and a multiple of 16.
#define DCPCTL_CLMUL __attribute__((target("pclmul,sse4.1")))

// acc * x^(128+32) (k's low half) + acc * x^(128-32) (high half), plus the next 16 bytes.
DCPCTL_CLMUL inline __m128i fold(__m128i acc, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(acc, k, 0x00), _mm_clmulepi64_si128(acc, k, 0x11)), next);
}

DCPCTL_CLMUL inline __m128i load(const uint8_t* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

// The last step of both carry-less paths: four 128-bit lanes x1..x4 holding the fold of
// everything before `p`, then n more bytes (a multiple of 16) folded in 64 at a time, the lanes
// folded into one, the last 16-byte blocks, and the reduction to 32 bits. Inlined into each path,
// so that the 256-bit one runs it in VEX encodings and leaves through its own vzeroupper (see
// crc32_vclmul).
DCPCTL_CLMUL __attribute__((always_inline)) inline uint32_t clmul_finish(__m128i x1, __m128i x2, __m128i x3, __m128i x4,
                                                                         const uint8_t* p, size_t n) {
  const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);  // x^(4*128-32), x^(4*128+32) mod P
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);  // x^(128-32), x^(128+32) mod P
  const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);               // x^64 mod P
  const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);  // mu, P (Barrett)
  const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
  for (; n >= 64; p += 64, n -= 64) {
    x1 = fold(x1, k1k2, load(p));
    x2 = fold(x2, k1k2, load(p + 16));
    x3 = fold(x3, k1k2, load(p + 32));
    x4 = fold(x4, k1k2, load(p + 48));
  }
  x1 = fold(x1, k3k4, x2);
  x1 = fold(x1, k3k4, x3);
  x1 = fold(x1, k3k4, x4);
  for (; n >= 16; p += 16, n -= 16) x1 = fold(x1, k3k4, load(p));
  // 128 -> 64 bits.
  __m128i x2b = _mm_clmulepi64_si128(x1, k3k4, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2b);
  // 64 -> 32 bits.
  x2b = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00), x2b);
  // Barrett reduction.
  x2b = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
  x2b = _mm_clmulepi64_si128(_mm_and_si128(x2b, mask32), poly, 0x00);
  x1 = _mm_xor_si128(x1, x2b);
  return static_cast<uint32_t>(_mm_extract_epi32(x1, 1));
}

DCPCTL_CLMUL uint32_t crc32_clmul(uint32_t c, const uint8_t* p, size_t n) {
  __m128i x1 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(c)));
  return clmul_finish(x1, load(p + 16), load(p + 32), load(p + 48), p + 64, n - 64);
}

// The same folding on 256-bit registers (VPCLMULQDQ on AVX2's): each holds two 128-bit lanes,
// and four of them take 128 bytes a step (folded by 1024 bits), so twice the bytes per carry-less
// multiply's latency (25-29 GB/s from memory here, against the 128-bit path's 16);
// then pairs are folded by 512 bits into the four lanes above, which finish as there.
// It must leave no 256-bit register dirty: a thread that runs legacy-SSE code with the upper
// halves dirty pays for it on every instruction, and OpenSSL's SHA-256 (SHA-NI, which has no VEX
// form) ran 17% slower on such a thread for as long as it lived. A first version whose tail called
// the SSE-encoded finish after GCC's vzeroupper had reloaded a ymm register did exactly that: so
// the finish is inlined here (VEX-encoded) and the function leaves through GCC's own vzeroupper.
// n >= 128 and a multiple of 16.
#define DCPCTL_VCLMUL __attribute__((target("avx2,vpclmulqdq,pclmul,sse4.1")))

DCPCTL_VCLMUL inline __m256i fold256(__m256i acc, __m256i k, __m256i next) {
  return _mm256_xor_si256(
      _mm256_xor_si256(_mm256_clmulepi64_epi128(acc, k, 0x00), _mm256_clmulepi64_epi128(acc, k, 0x11)), next);
}

DCPCTL_VCLMUL inline __m256i load256(const uint8_t* q) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
}

DCPCTL_VCLMUL uint32_t crc32_vclmul(uint32_t c, const uint8_t* p, size_t n) {
  const __m256i k8 =
      _mm256_set_epi64x(0x014a7fe880, 0x01e88ef372, 0x014a7fe880, 0x01e88ef372);  // x^(1024-32), x^(1024+32) mod P
  const __m256i k4 =
      _mm256_set_epi64x(0x01c6e41596, 0x0154442bd4, 0x01c6e41596, 0x0154442bd4);  // x^(512-32), x^(512+32) mod P
  __m256i y0 = _mm256_xor_si256(load256(p), _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, static_cast<int>(c)));
  __m256i y1 = load256(p + 32), y2 = load256(p + 64), y3 = load256(p + 96);
  for (p += 128, n -= 128; n >= 128; p += 128, n -= 128) {
    y0 = fold256(y0, k8, load256(p));
    y1 = fold256(y1, k8, load256(p + 32));
    y2 = fold256(y2, k8, load256(p + 64));
    y3 = fold256(y3, k8, load256(p + 96));
  }
  y2 = fold256(y0, k4, y2);
  y3 = fold256(y1, k4, y3);
  return clmul_finish(_mm256_castsi256_si128(y2), _mm256_extracti128_si256(y2, 1), _mm256_castsi256_si128(y3),
                      _mm256_extracti128_si256(y3, 1), p, n);
}

#endif

Crc32Path detect() {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("pclmul") || !__builtin_cpu_supports("sse4.1")) return Crc32Path::Zlib;
  // GCC's avx2 test includes the OS saving the 256-bit registers (XCR0).
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq")) return Crc32Path::Vclmul;
  return Crc32Path::Clmul;
#else
  return Crc32Path::Zlib;
#endif
}

}  // namespace

Crc32Path crc32_best_path() {
  static const Crc32Path best = detect();
  return best;
}

uint32_t crc32_update_via(Crc32Path path, uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  path = std::min(path, crc32_best_path());
#if defined(__x86_64__)
  if (path >= Crc32Path::Clmul && n >= 64) {
    const size_t bulk = n & ~static_cast<size_t>(15);
    const uint32_t c = ~crc;  // the folds work on the pre-inverted register
    crc = ~(path == Crc32Path::Vclmul && bulk >= 128 ? crc32_vclmul(c, p, bulk) : crc32_clmul(c, p, bulk));
    p += bulk;
    n -= bulk;
  }
#endif
  return static_cast<uint32_t>(crc32_z(crc, p, n));
}

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  return crc32_update_via(crc32_best_path(), crc, data, n);
}

}  // namespace dcpctl
