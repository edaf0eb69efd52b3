// SHA-256, incremental. Where the CPU has the SHA extensions (SHA-NI, x86-64), dcpctl's own
// kernel with their instructions: one stream at OpenSSL's speed (~1.36 GB/s a core here), and two
// streams at once (update_pair) interleaved on one core, ~1.25x that together (SHA256RNDS2 has
// throughput to spare behind one stream's chain of rounds; OpenSSL has no multi-stream SHA-256).
// Elsewhere OpenSSL's EVP interface (libcrypto: the ARMv8 crypto extensions, AVX2), and
// update_pair is two updates. Used for per-tensor checksums (verify --checksum, inspect --value)
// that match Python's hashlib over the tensor's C-contiguous little-endian bytes, and for the
// digests ranks agree on under torchrun.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dcpctl {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  // a.update(pa, n) and b.update(pb, n), two streams hashed together on this core.
  static void update_pair(Sha256& a, const void* pa, Sha256& b, const void* pb, size_t n);
  // Whether update_pair is faster than two updates (the SHA-NI kernel is in use).
  static bool pairs();
  // Tests: the SHA-NI kernel (where the CPU has it) or OpenSSL for the objects made after.
  static void use_native_for_testing(bool on);
  std::array<uint8_t, 32> finish();
  std::string hex();  // finish() as lower-case hex
  static std::string of(const std::string& data) {
    Sha256 h;
    h.update(data.data(), data.size());
    return h.hex();
  }

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace dcpctl
