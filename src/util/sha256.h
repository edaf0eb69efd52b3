// SHA-256 (FIPS 180-4), incremental. Used for per-tensor checksums (verify --checksum) that
// match Python's hashlib over the tensor's C-contiguous little-endian bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dcpctl {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::array<uint8_t, 32> finish();
  std::string hex();  // finish() as lower-case hex
  static std::string of(const std::string& data) {
    Sha256 h;
    h.update(data.data(), data.size());
    return h.hex();
  }

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

}  // namespace dcpctl
