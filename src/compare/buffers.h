// Running window tasks on worker threads that keep their buffers from one task to the next: a
// fresh 32 MiB buffer per window costs a page fault and a zero page per 4 KiB (about 2.4 million
// of each diffing 4.8 GB against its export).
//
// Each worker owns one WorkerBuffers (util/memory_gate.h) for its whole life and drops it when it
// runs out of tasks. A worker only ever waits on the gate holding nothing, and every reservation
// belongs to a worker that is running a task or about to drop it, so a waiter always gets its turn:
// no deadlock, and idle buffers are still counted against the budget.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>

#include "util/memory_gate.h"
#include "util/parallel.h"

namespace dcpctl {

// body(i, buffers) for i in [0, n), on `threads` workers. The first exception stops the others
// from taking new tasks and is rethrown.
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

}  // namespace dcpctl
