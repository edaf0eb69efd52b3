// Window buffers reused from task to task: a fresh 32 MiB buffer per window costs a page fault and
// a zero page per 4 KiB (about 2.4 million of each diffing 4.8 GB against its export). One slot per
// worker; a slot's WorkerBuffers holds its gate reservation for exactly what it keeps, so idle
// buffers still count against --max-memory.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "util/memory_gate.h"

namespace dcpctl {

class BufferSlots {
 public:
  BufferSlots(MemoryGate& g, unsigned n) {
    for (unsigned i = 0; i < n; ++i) free_.push_back(std::make_unique<WorkerBuffers>(g));
  }
  // A slot for one task (at most n tasks at once: parallel_for runs at most n workers).
  class Lease {
   public:
    Lease(BufferSlots& s) : s_(s) {
      std::lock_guard<std::mutex> lock(s_.mu_);
      w_ = std::move(s_.free_.back());
      s_.free_.pop_back();
    }
    ~Lease() {
      std::lock_guard<std::mutex> lock(s_.mu_);
      s_.free_.push_back(std::move(w_));
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    WorkerBuffers& operator*() { return *w_; }
    WorkerBuffers* operator->() { return w_.get(); }

   private:
    BufferSlots& s_;
    std::unique_ptr<WorkerBuffers> w_;
  };

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<WorkerBuffers>> free_;
};

}  // namespace dcpctl
