// The bytes every benchmark copy moves, so that each copy can be checked afterwards.
//
// Byte b of a buffer holds byte (b % 8), little-endian, of pattern_word(b / 8): a splitmix64 of
// the word index. The pattern depends on the position, so a copy that lands at the wrong offset,
// drops or repeats a chunk, or stops short is caught, not only one that garbles bytes. The same
// inline functions run on the GPU (the fill kernel) and on the host (fill and check).
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define DCPCTL_HOST_DEVICE __host__ __device__
#else
#define DCPCTL_HOST_DEVICE
#endif

namespace dcpctl::bench {

DCPCTL_HOST_DEVICE inline uint64_t pattern_word(uint64_t index) {
  uint64_t z = index + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

DCPCTL_HOST_DEVICE inline uint8_t pattern_byte(uint64_t offset) {
  return static_cast<uint8_t>(pattern_word(offset >> 3) >> (8 * (offset & 7)));
}

// p[0, n) = the pattern's bytes [offset, offset + n). Uses `threads` workers for large n.
void fill_pattern(uint8_t* p, uint64_t offset, uint64_t n, unsigned threads = 1);

// Index of the first byte of p[0, n) that differs from the pattern's bytes [offset, offset + n),
// or n when all match.
uint64_t find_mismatch(const uint8_t* p, uint64_t offset, uint64_t n, unsigned threads = 1);

}  // namespace dcpctl::bench
