// The memory budget (util/memory_gate.h): a request waits while it does not fit, every release
// is accounted for, and a lone request larger than the cap is admitted (never a deadlock).
// "Blocked" is observed as "has not returned after a pause": a correct gate cannot make these
// checks fail, however slow the machine.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "util/memory_gate.h"

using dcpctl::GatedBuffer;
using dcpctl::GateReservation;
using dcpctl::MemoryGate;
using dcpctl::WorkerBuffers;

namespace {

// Starts acquire(n) on another thread; `done` turns true once it returned.
struct Waiter {
  std::atomic<bool> done{false};
  std::thread th;
  Waiter(MemoryGate& g, uint64_t n)
      : th([&g, n, this] {
          g.acquire(n);
          done = true;
        }) {}
  ~Waiter() {
    if (th.joinable()) th.join();
  }
};

void pause() {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

}  // namespace

TEST_CASE("memory gate: what fits is admitted at once, what does not waits for a release") {
  MemoryGate g(100);
  g.acquire(60);
  g.acquire(40);  // exactly the cap: admitted
  Waiter w(g, 1);
  pause();
  CHECK_FALSE(w.done);
  g.release(40);
  w.th.join();
  CHECK(w.done);
  // 60 + 1 held: 39 more fit, 40 do not.
  g.acquire(39);
  Waiter w2(g, 1);
  pause();
  CHECK_FALSE(w2.done);
  g.release(61);
  w2.th.join();
  g.release(39);
  g.release(1);
}

TEST_CASE("memory gate: a request larger than the cap is admitted alone, and only alone") {
  MemoryGate g(10);
  g.acquire(3);
  Waiter big(g, 1000);
  pause();
  CHECK_FALSE(big.done);  // something else is live: it waits
  g.release(3);
  big.th.join();
  CHECK(big.done);
  Waiter small(g, 1);  // while the oversized one is held, nothing else gets in
  pause();
  CHECK_FALSE(small.done);
  g.release(1000);
  small.th.join();
  g.release(1);
}

TEST_CASE("memory gate: buffers and reservations give back exactly what they took") {
  MemoryGate g(100);
  {
    auto b = std::make_unique<GatedBuffer>(g, 70);
    CHECK(b->size() == 70u);
    b->data()[69] = 1;
    auto r = std::make_unique<GateReservation>(g, 30);
    Waiter w(g, 1);
    pause();
    CHECK_FALSE(w.done);
    b.reset();
    r.reset();  // both released: the waiter gets in
    w.th.join();
    CHECK(w.done);
  }
  g.acquire(99);  // the waiter holds 1: 99 fit exactly
  g.release(100);
  {
    WorkerBuffers wb(g);
    wb.prepare(40, 20, 10);  // holds 70
    REQUIRE(wb.a() != nullptr);
    REQUIRE(wb.b() != nullptr);
    wb.prepare(30, 10, 0);  // 40 >= 70 / 2: keeps what it holds
    Waiter w(g, 31);
    pause();
    CHECK_FALSE(w.done);  // 70 + 31 > 100
    wb.prepare(5, 0, 0);  // less than half: gives back, holds 5
    w.th.join();
    CHECK(w.done);
    g.release(31);
  }
  g.acquire(100);  // everything was given back
  g.release(100);
}
