// Little-endian integers read from bytes (zip headers, safetensors lengths), and written, whatever the host.
#pragma once

#include <cstdint>
#include <vector>

namespace dcpctl {

inline uint16_t le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
inline uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
inline uint64_t le64(const uint8_t* p) {
  return le32(p) | uint64_t{le32(p + 4)} << 32;
}

// The low N bytes of `v`, little-endian, appended to `b` (one insert: zip headers are built of
// dozens of these per record).
template <int N>
void put_le(std::vector<uint8_t>& b, uint64_t v) {
  uint8_t t[N];
  for (int i = 0; i < N; ++i) t[i] = static_cast<uint8_t>(v >> (8 * i));
  b.insert(b.end(), t, t + N);
}
inline void put_le16(std::vector<uint8_t>& b, uint64_t v) {
  put_le<2>(b, v);
}
inline void put_le32(std::vector<uint8_t>& b, uint64_t v) {
  put_le<4>(b, v);
}
inline void put_le64(std::vector<uint8_t>& b, uint64_t v) {
  put_le<8>(b, v);
}

}  // namespace dcpctl
