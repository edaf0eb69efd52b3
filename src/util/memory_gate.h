// A byte budget for buffers: a worker waits until its buffer fits, so the sum of live buffers
// stays under the cap however many threads run. Callers check beforehand that no single buffer
// exceeds the cap (a lone oversized buffer is admitted when nothing else is live, never deadlocks).
#pragma once

#include <sys/resource.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

namespace dcpctl {

class MemoryGate {
 public:
  explicit MemoryGate(uint64_t cap) : cap_(cap) {}
  void acquire(uint64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return used_ + n <= cap_ || used_ == 0; });
    used_ += n;
  }
  void release(uint64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      used_ -= n;
    }
    cv_.notify_all();
  }

 private:
  uint64_t cap_, used_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

// A byte buffer whose memory is counted against a MemoryGate for its lifetime.
class GatedBuffer {
 public:
  GatedBuffer(MemoryGate& g, uint64_t n) : g_(g), n_(n) {
    g_.acquire(n_);
    try {
      data_.resize(n_);
    } catch (...) {
      g_.release(n_);
      throw;
    }
  }
  ~GatedBuffer() { g_.release(n_); }
  GatedBuffer(const GatedBuffer&) = delete;
  GatedBuffer& operator=(const GatedBuffer&) = delete;
  uint8_t* data() { return data_.data(); }
  uint64_t size() const { return n_; }

 private:
  MemoryGate& g_;
  uint64_t n_;
  std::vector<uint8_t> data_;
};

// Holds `n` bytes of a gate's budget for its lifetime. A task takes everything it will need in
// one reservation: taking a second piece while holding a first can deadlock two tasks that each
// hold one piece and wait for another.
class GateReservation {
 public:
  GateReservation(MemoryGate& g, uint64_t n) : g_(g), n_(n) { g_.acquire(n_); }
  ~GateReservation() { g_.release(n_); }
  GateReservation(const GateReservation&) = delete;
  GateReservation& operator=(const GateReservation&) = delete;

 private:
  MemoryGate& g_;
  uint64_t n_;
};

inline uint64_t peak_rss_bytes() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace dcpctl
