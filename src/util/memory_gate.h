// A byte budget for buffers: a worker waits until its buffer fits, so the sum of live buffers
// stays under the cap however many threads run. Callers check beforehand that no single buffer
// exceeds the cap (a lone oversized buffer is admitted when nothing else is live, never deadlocks).
#pragma once

#include <sys/resource.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "util/io_buffer.h"
#include "util/parallel.h"

namespace dcpctl {

class MemoryGate {
 public:
  explicit MemoryGate(uint64_t cap) : cap_(cap) {}
  uint64_t cap() const { return cap_; }
  void acquire(uint64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return used_ + n <= cap_ || used_ == 0; });
    used_ += n;
  }
  // Takes n bytes only if they fit now; never waits (for holders of other memory: see
  // item/decoded_chunks.h).
  bool try_acquire(uint64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (used_ + n > cap_) return false;
    used_ += n;
    return true;
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

// What a read takes from a gate while it holds something it allocates itself (a chunk decoded
// whole): `bytes` of `gate`, none when `gate` is null. The bytes come from the memory model
// (plan/memory.h).
struct GateCharge {
  MemoryGate* gate = nullptr;
  uint64_t bytes = 0;
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

// A worker's two scratch buffers, reused from one task to the next: a fresh buffer per chunk costs
// a page fault and a zero fill per 4 KiB (about 1.2 million of each resharding 4.8 GB). The
// worker's reservation always covers what it holds. It never waits while holding anything: to grow
// it first gives everything back. It also gives back and starts over when a task needs less than
// half of what it holds, so an idle surplus does not starve the other workers for long.
class WorkerBuffers {
 public:
  explicit WorkerBuffers(MemoryGate& g) : g_(g) {}
  ~WorkerBuffers() { drop(); }
  WorkerBuffers(const WorkerBuffers&) = delete;
  WorkerBuffers& operator=(const WorkerBuffers&) = delete;

  // Room for buffers of `a` and `b` bytes (uninitialised) plus `extra` bytes the caller allocates
  // itself while the task runs.
  void prepare(uint64_t a, uint64_t b, uint64_t extra) {
    uint64_t need = a + b + extra;
    if (a <= cap_[0] && b <= cap_[1] && need <= held_ && need >= held_ / 2) return;
    drop();
    g_.acquire(need);
    held_ = need;
    try {
      buf_[0] = make_io_buffer(a);
      buf_[1] = make_io_buffer(b);
    } catch (...) {
      drop();
      throw;
    }
    cap_[0] = a;
    cap_[1] = b;
  }
  uint8_t* a() { return buf_[0].get(); }
  uint8_t* b() { return buf_[1].get(); }
  // Gives everything back: before a task takes a reservation of its own.
  void release() { drop(); }

 private:
  void drop() {
    buf_[0].reset();
    buf_[1].reset();
    cap_[0] = cap_[1] = 0;
    if (held_) g_.release(held_);
    held_ = 0;
  }

  MemoryGate& g_;
  IoBuffer buf_[2];
  uint64_t cap_[2] = {0, 0};
  uint64_t held_ = 0;
};

// body(i, buffers) for i in [0, n), on `threads` workers (util/parallel.h) that keep their buffers
// from one task to the next: a fresh 32 MiB buffer per task costs a page fault and a zero page per
// 4 KiB (about 2.4 million of each diffing 4.8 GB against its export). Each worker owns one
// WorkerBuffers for its whole life and drops it when it runs out of tasks. A worker only ever waits
// on the gate holding nothing, and every reservation belongs to a worker that is running a task or
// about to drop it, so a waiter always gets its turn: no deadlock, and idle buffers are still
// counted against the budget. The first exception stops the others from taking new tasks and is
// rethrown.
template <class F>
void run_tasks(size_t n, unsigned threads, MemoryGate& gate, F&& body) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  threads = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(threads, n)));
  parallel_for(threads, threads, [&](size_t) {
    WorkerBuffers buffers(gate);
    try {
      for (size_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < n;) body(i, buffers);
    } catch (...) {
      failed = true;
      throw;
    }
  });
}

inline uint64_t peak_rss_bytes() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace dcpctl
