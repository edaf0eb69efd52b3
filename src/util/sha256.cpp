#include "util/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace dcpctl {

namespace {

constexpr uint32_t kInit[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

#if defined(__x86_64__)
alignas(16) constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define DCPCTL_SHANI __attribute__((target("sha,sse4.1,ssse3")))

// `nb` 64-byte blocks of each of S streams, the streams' rounds interleaved: one stream's 32
// SHA256RNDS2 form a chain (each needs the last's state), so a second stream's fill the gaps.
// The state words are FIPS 180-4's H0..H7; the message schedule is the SHA extensions' usual
// one (Intel's white paper), W[4g..4g+3] in m[g % 4].
template <int S>
DCPCTL_SHANI void blocks_shani(uint32_t* const* state, const uint8_t* const* data, size_t nb) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i abef[S], cdgh[S];
  for (int j = 0; j < S; ++j) {
    const __m128i dcba = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state[j])), 0xB1);
    const __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state[j] + 4)), 0x1B);
    abef[j] = _mm_alignr_epi8(dcba, efgh, 8);
    cdgh[j] = _mm_blend_epi16(efgh, dcba, 0xF0);
  }
  for (size_t n = 0; n < nb; ++n) {
    __m128i abef0[S], cdgh0[S], m[S][4];
    for (int j = 0; j < S; ++j) abef0[j] = abef[j], cdgh0[j] = cdgh[j];
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
#pragma GCC unroll 4
      for (int j = 0; j < S; ++j) {
        if (g < 4)
          m[j][g] =
              _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data[j] + 64 * n + 16 * g)), bswap);
        const __m128i k = _mm_add_epi32(m[j][g % 4], _mm_load_si128(reinterpret_cast<const __m128i*>(kRound + 4 * g)));
        cdgh[j] = _mm_sha256rnds2_epu32(cdgh[j], abef[j], k);
        if (g >= 3 && g <= 14) {  // W[4g+4..4g+7]
          __m128i& w = m[j][(g + 1) % 4];
          w = _mm_add_epi32(w, _mm_alignr_epi8(m[j][g % 4], m[j][(g + 3) % 4], 4));
          w = _mm_sha256msg2_epu32(w, m[j][g % 4]);
        }
        abef[j] = _mm_sha256rnds2_epu32(abef[j], cdgh[j], _mm_shuffle_epi32(k, 0x0E));
        if (g >= 1 && g <= 12) m[j][(g + 3) % 4] = _mm_sha256msg1_epu32(m[j][(g + 3) % 4], m[j][g % 4]);
      }
    }
    for (int j = 0; j < S; ++j) abef[j] = _mm_add_epi32(abef[j], abef0[j]), cdgh[j] = _mm_add_epi32(cdgh[j], cdgh0[j]);
  }
  for (int j = 0; j < S; ++j) {
    const __m128i feba = _mm_shuffle_epi32(abef[j], 0x1B), dchg = _mm_shuffle_epi32(cdgh[j], 0xB1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(state[j]), _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(state[j] + 4), _mm_alignr_epi8(dchg, feba, 8));
  }
}

// CPUID: leaf 7's EBX bit 29 (SHA), leaf 1's ECX bits 19 (SSE4.1) and 9 (SSSE3). (clang 14's
// __builtin_cpu_supports knows no "sha".)
bool cpu_has_shani() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)) || !(c & (1u << 9))) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 29)) != 0;
}
#else
bool cpu_has_shani() {
  return false;
}
#endif

std::atomic<bool>& native_on() {
  static std::atomic<bool> on{cpu_has_shani()};
  return on;
}

// libcrypto fails here only when out of memory: not a condition of the input.
void check(int ok, const char* what) {
  if (ok != 1) throw std::runtime_error(std::string("OpenSSL SHA-256: ") + what + " failed");
}

}  // namespace

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;  // OpenSSL's, where the SHA-NI kernel is not in use
  uint32_t h[8];
  uint8_t buf[64];
  size_t buffered = 0;  // bytes in buf: a block's start, not yet hashed
  uint64_t total = 0;   // bytes fed
  ~Ctx() { EVP_MD_CTX_free(md); }

#if defined(__x86_64__)
  void blocks(const uint8_t* p, size_t nb) {
    uint32_t* s = h;
    blocks_shani<1>(&s, &p, nb);
  }
  void feed(const uint8_t* p, size_t n) {  // the native path's update
    total += n;
    if (buffered) {
      const size_t k = std::min(n, 64 - buffered);
      std::memcpy(buf + buffered, p, k);
      buffered += k, p += k, n -= k;
      if (buffered < 64) return;
      blocks(buf, 1);
      buffered = 0;
    }
    blocks(p, n / 64);
    std::memcpy(buf, p + n / 64 * 64, n % 64);
    buffered = n % 64;
  }
#else
  void feed(const uint8_t*, size_t) {}
#endif
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  std::memcpy(ctx_->h, kInit, sizeof kInit);
  if (native_on()) return;
  ctx_->md = EVP_MD_CTX_new();
  if (!ctx_->md) throw std::bad_alloc();
  check(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr), "init");
}

Sha256::~Sha256() = default;

bool Sha256::pairs() {
  return native_on();
}

void Sha256::use_native_for_testing(bool on) {
  native_on() = on && cpu_has_shani();
}

void Sha256::update(const void* data, size_t n) {
  if (!n) return;
  if (ctx_->md) return check(EVP_DigestUpdate(ctx_->md, data, n), "update");
  ctx_->feed(static_cast<const uint8_t*>(data), n);
}

void Sha256::update_pair(Sha256& a, const void* pa, Sha256& b, const void* pb, size_t n) {
#if defined(__x86_64__)
  Ctx& x = *a.ctx_;
  Ctx& y = *b.ctx_;
  if (!x.md && !y.md) {
    const uint8_t* p = static_cast<const uint8_t*>(pa);
    const uint8_t* q = static_cast<const uint8_t*>(pb);
    // Each to a block's start alone, the blocks both have together, the rest alone.
    const size_t hx = x.buffered ? std::min(n, 64 - x.buffered) : 0, hy = y.buffered ? std::min(n, 64 - y.buffered) : 0;
    x.feed(p, hx);
    y.feed(q, hy);
    const size_t nb = std::min(n - hx, n - hy) / 64;
    uint32_t* states[2] = {x.h, y.h};
    const uint8_t* data[2] = {p + hx, q + hy};
    blocks_shani<2>(states, data, nb);
    x.total += nb * 64, y.total += nb * 64;
    x.feed(p + hx + nb * 64, n - hx - nb * 64);
    y.feed(q + hy + nb * 64, n - hy - nb * 64);
    return;
  }
#endif
  a.update(pa, n);
  b.update(pb, n);
}

std::array<uint8_t, 32> Sha256::finish() {
  std::array<uint8_t, 32> out{};
  if (ctx_->md) {
    unsigned int len = 0;
    check(EVP_DigestFinal_ex(ctx_->md, out.data(), &len), "final");
    return out;
  }
  // FIPS 180-4's padding: 0x80, zeros to 56 bytes of a block, the length in bits big-endian.
  Ctx& c = *ctx_;
  const uint64_t bits = c.total * 8;
  uint8_t pad[72] = {0x80};
  const size_t k = (c.buffered < 56 ? 56 : 120) - c.buffered;
  for (int i = 0; i < 8; ++i) pad[k + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  c.feed(pad, k + 8);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(c.h[i] >> (24 - 8 * j));
  return out;
}

std::string Sha256::hex() {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : finish()) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

}  // namespace dcpctl
