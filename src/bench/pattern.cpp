#include "bench/pattern.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "util/parallel.h"

namespace dcpctl::bench {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the pattern's word path assumes a little-endian host");

constexpr uint64_t kPiece = uint64_t(64) << 20;  // work unit for the threaded fill and check

void fill_serial(uint8_t* p, uint64_t offset, uint64_t n) {
  uint64_t i = 0;
  while (i < n && ((offset + i) & 7)) {
    p[i] = pattern_byte(offset + i);
    ++i;
  }
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = pattern_word((offset + i) >> 3);
    std::memcpy(p + i, &w, 8);
  }
  for (; i < n; ++i) p[i] = pattern_byte(offset + i);
}

uint64_t mismatch_serial(const uint8_t* p, uint64_t offset, uint64_t n) {
  uint64_t i = 0;
  while (i < n && ((offset + i) & 7)) {
    if (p[i] != pattern_byte(offset + i)) return i;
    ++i;
  }
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != pattern_word((offset + i) >> 3)) break;  // the byte loop below finds which byte
  }
  for (; i < n; ++i)
    if (p[i] != pattern_byte(offset + i)) return i;
  return n;
}

}  // namespace

void fill_pattern(uint8_t* p, uint64_t offset, uint64_t n, unsigned threads) {
  const uint64_t pieces = (n + kPiece - 1) / kPiece;
  parallel_for(pieces, threads, [&](size_t k) {
    const uint64_t b = k * kPiece;
    fill_serial(p + b, offset + b, std::min(kPiece, n - b));
  });
}

uint64_t find_mismatch(const uint8_t* p, uint64_t offset, uint64_t n, unsigned threads) {
  const uint64_t pieces = (n + kPiece - 1) / kPiece;
  std::atomic<uint64_t> first{n};
  parallel_for(pieces, threads, [&](size_t k) {
    const uint64_t b = k * kPiece;
    if (b >= first.load()) return;
    const uint64_t len = std::min(kPiece, n - b);
    const uint64_t m = mismatch_serial(p + b, offset + b, len);
    if (m == len) return;
    uint64_t cur = first.load();
    while (b + m < cur && !first.compare_exchange_weak(cur, b + m)) {
    }
  });
  return first.load();
}

}  // namespace dcpctl::bench
