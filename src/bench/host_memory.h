// Host buffers for the staging benchmark, one class for every kind of destination a stager uses:
// pageable memory (malloc), CUDA page-locked memory (cudaHostAlloc), existing memory registered
// with CUDA (cudaHostRegister, as DCP's shared-memory stager does), and, on machines without a
// CUDA driver, mlock()ed memory as an honest stand-in for page-locked memory (it is locked in RAM
// the same way, but no DMA engine is involved).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/layout.h"
#include "util/error.h"

namespace dcpctl::bench {

// The kernel refused to lock memory (RLIMIT_MEMLOCK, or no memory): a measurement that needs it
// is skipped with this message rather than failing the run.
class LockError : public UnsupportedError {
 public:
  using UnsupportedError::UnsupportedError;
};

class HostBuffer {
 public:
  enum class Kind { none, pageable, cuda_pinned, mlocked };

  HostBuffer() = default;
  ~HostBuffer();
  HostBuffer(HostBuffer&& o) noexcept;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  // Page-aligned, not touched: the first write faults the pages in.
  static HostBuffer pageable(uint64_t bytes);
  static HostBuffer cuda_pinned(uint64_t bytes);  // throws Error
  static HostBuffer mlocked(uint64_t bytes);      // throws LockError

  // Pin existing pageable memory in place: cudaHostRegister, or mlock() for the stand-in.
  void register_cuda();  // throws Error
  void lock();           // throws LockError
  void unpin();          // undoes either; no-op when not pinned

  uint8_t* data() const { return p_; }
  uint64_t size() const { return n_; }
  Kind kind() const { return kind_; }
  void reset();

 private:
  uint8_t* p_ = nullptr;
  uint64_t n_ = 0;
  Kind kind_ = Kind::none;
  bool registered_ = false, locked_ = false;
};

// memcpy of each segment from src to dst (same offsets), `threads` workers taking segments.
// Returns seconds on the host clock.
double host_copy(uint8_t* dst, const uint8_t* src, const std::vector<Segment>& segments, unsigned threads);

struct HostInfo {
  unsigned cpu_threads = 0;
  uint64_t page_size = 0;
  uint64_t memory_bytes = 0;              // physical RAM
  std::optional<uint64_t> memlock_limit;  // RLIMIT_MEMLOCK soft limit; nullopt = unlimited
  bool memlock_exempt = false;            // CAP_IPC_LOCK (root): the limit does not apply
};
HostInfo host_info();

// Creates, writes (one write() loop), optionally fsyncs and closes `path`; returns the seconds
// all of that took. Throws IoError; the file is removed on failure.
double timed_file_write(const std::string& path, const uint8_t* data, uint64_t bytes, bool fsync);

// Reads `path` back and returns the index of the first byte that differs from the pattern, or
// `bytes` when the file holds exactly the pattern's first `bytes` bytes. Throws IoError.
uint64_t file_pattern_mismatch(const std::string& path, uint64_t bytes);

}  // namespace dcpctl::bench
