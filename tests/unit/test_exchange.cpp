// The chunk exchange of distributed consolidate (dist/exchange.h), with several ranks as threads
// of one process over an in-memory Group whose send waits until the receiver has taken the
// message, as Gloo's does. Tiny windows make every chunk travel in many messages; writers on
// several ranks and lanes receive chunks read by other ranks, and every byte must match what
// the reader gives locally. A plan whose order were inconsistent would deadlock: the fake's
// receive gives up after a few seconds and fails the test.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "dist/exchange.h"
#include "dist/group.h"
#include "meta/checkpoint.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/memory_gate.h"

using namespace dcpctl;

namespace {

struct Wire {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> kv;
  struct Msg {
    std::vector<uint8_t> bytes;
    bool taken = false;
  };
  std::map<std::tuple<int, int, uint32_t>, std::deque<std::shared_ptr<Msg>>> queues;  // (src, dst, tag)
};

// How long a fake transfer waits for its peer thread before it calls the run a deadlock: far above
// any scheduling delay (the peer needs microseconds of CPU), so a loaded machine cannot trip it.
constexpr std::chrono::seconds kDeadlock{120};

class FakeGroup final : public Group {
 public:
  FakeGroup(Wire& w, int rank, int size) : w_(w), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void agree(const std::string&, const std::string&) override {}
  void publish(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(w_.mu);
    w_.kv[key] = value;
    w_.cv.notify_all();
  }
  std::string fetch(const std::string& key) override {
    std::unique_lock<std::mutex> lock(w_.mu);
    if (!w_.cv.wait_for(lock, kDeadlock, [&] { return w_.kv.count(key) > 0; }))
      throw IoError(Where(), "fake: no " + key);
    return w_.kv[key];
  }
  void report(const std::string&, const std::string&, ExitCode) override {}
  void collect(const std::string&) override {}
  void announce(const std::string&, const std::string&, ExitCode) override {}
  void await(const std::string&) override {}
  void connect_transport() override {}
  void send(int dst, uint32_t tag, const void* data, uint64_t n) override {
    auto m = std::make_shared<Wire::Msg>();
    m->bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
    std::unique_lock<std::mutex> lock(w_.mu);
    w_.queues[{rank_, dst, tag}].push_back(m);
    w_.cv.notify_all();
    if (!w_.cv.wait_for(lock, kDeadlock, [&] { return m->taken; }))
      throw IoError(Where(), "fake: send to " + std::to_string(dst) + " never received (deadlock?)");
  }
  void recv(int src, uint32_t tag, void* data, uint64_t n) override {
    std::unique_lock<std::mutex> lock(w_.mu);
    auto& q = w_.queues[{src, rank_, tag}];
    if (!w_.cv.wait_for(lock, kDeadlock, [&] { return !q.empty(); }))
      throw IoError(Where(), "fake: nothing from " + std::to_string(src) + " (deadlock?)");
    auto m = q.front();
    q.pop_front();
    if (m->bytes.size() != n)
      throw IoError(Where(), "fake: size mismatch " + std::to_string(m->bytes.size()) + " != " + std::to_string(n));
    std::memcpy(data, m->bytes.data(), n);
    m->taken = true;
    w_.cv.notify_all();
  }
  std::string backend_name() const override { return "fake"; }
  bool tagged() override { return true; }
  void abort_transfers() override {}

 private:
  Wire& w_;
  int rank_, size_;
};

// Every rank writes some tensors; each writer lane receives whole tensors chunk by chunk.
void run_exchange(const std::string& fixture, int world, unsigned lanes, uint64_t window, bool local_files) {
  Checkpoint ck = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/" + fixture + "/ckpt");
  Wire wire;
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      try {
        FakeGroup g(wire, r, world);
        Checkpoint mine = ck;
        if (local_files)  // rank r sees the files whose index is r modulo the world
          for (size_t f = 0; f < mine.files.size(); ++f)
            if (static_cast<int>(f % static_cast<size_t>(world)) != r) mine.files[f].size.reset();
        ItemReader reader(mine);
        Visibility vis = local_files ? gather_visibility(g, mine) : Visibility::everything(world, mine.files.size());
        std::vector<uint64_t> load(static_cast<size_t>(world), 0);
        std::vector<Transfer> plan;
        std::vector<unsigned> next(static_cast<size_t>(world), 0);
        for (size_t t = 0; t < mine.md.tensors.size(); ++t) {
          const TensorMeta& tm = mine.md.tensors[t];
          if (!tm.dtype) continue;
          int writer = static_cast<int>(t % static_cast<size_t>(world));
          unsigned lane = next[static_cast<size_t>(writer)]++ % lanes;
          for (size_t c = 0; c < tm.num_chunks(); ++c)
            if (tm.chunk_numel(c) > 0)
              plan.push_back(
                  {static_cast<uint32_t>(t), static_cast<uint32_t>(c),
                   least_loaded(load, tm.chunk_numel(c), [&](int o) { return vis.can_read(o, tm.storage[c].file); }),
                   writer, lane});
        }
        std::vector<Transfer> mine_plan = plan;
        MemoryGate gate(1ull << 30);
        ChunkExchange ex(g, reader, std::move(plan), lanes, window, gate);
        ex.start_pushing();
        std::vector<std::thread> lane_threads;
        std::mutex mu;
        std::string lane_error;
        for (unsigned l = 0; l < lanes; ++l) {
          lane_threads.emplace_back([&, l] {
            try {
              ItemReader local(ck);  // every file, to check what arrived
              for (const Transfer& tr : mine_plan) {
                if (tr.writer != r || tr.lane != l) continue;
                const TensorMeta& tm = ck.md.tensors[tr.tensor];
                std::vector<uint8_t> got(tm.chunk_numel(tr.chunk) * itemsize(*tm.dtype), 0xAB), want(got.size());
                uint64_t seen = 0;
                ex.receive(l, tr.tensor, tr.chunk, [&](const uint8_t* p, uint64_t off, uint64_t n) {
                  if (off != seen || n > window) throw Error(Where(), "window out of order");
                  std::memcpy(got.data() + off, p, n);
                  seen += n;
                });
                local.read_chunk(tm, tr.chunk, want.data());
                if (seen != got.size() || got != want) throw Error(Where("", std::nullopt, tm.fqn), "bytes differ");
              }
            } catch (const std::exception& e) {
              std::lock_guard<std::mutex> lock(mu);
              lane_error = e.what();
            }
          });
        }
        for (auto& t : lane_threads) t.join();
        ex.finish_pushing();
        errors[static_cast<size_t>(r)] = lane_error;
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<size_t>(r)]);
    CHECK(errors[static_cast<size_t>(r)].empty());
  }
}

}  // namespace

TEST_CASE("exchange: every chunk arrives intact, window by window, 3 ranks x 3 lanes", "[exchange]") {
  run_exchange("dtensor_2d_mesh", 3, 3, 24, false);
  run_exchange("sample", 3, 2, 40, false);
}

TEST_CASE("exchange: --local-files ownership, zstd items decoded by their owner", "[exchange]") {
  run_exchange("dtensor_2d_mesh", 2, 2, 16, true);
  run_exchange("zstd", 3, 2, 32, true);
}

TEST_CASE("exchange: an owner's read error reaches the writer with its exit code", "[exchange]") {
  Checkpoint ck = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/sample/ckpt");
  Wire wire;
  // Rank 1 owns every chunk but its metadata says the items are twice as long: reading fails.
  Checkpoint broken = ck;
  for (auto& t : broken.md.tensors)
    for (auto& s : t.storage) s.length += 1ull << 40;
  const TensorMeta* tm = nullptr;
  uint32_t ti = 0;
  for (uint32_t t = 0; t < ck.md.tensors.size() && !tm; ++t)
    if (ck.md.tensors[t].dtype && ck.md.tensors[t].chunk_numel(0) > 0) tm = &ck.md.tensors[ti = t];
  REQUIRE(tm);
  std::vector<Transfer> plan{{ti, 0, 1, 0, 0}};
  std::string writer_error;
  int writer_code = 0;
  std::thread owner([&] {
    FakeGroup g(wire, 1, 2);
    ItemReader reader(broken);
    MemoryGate gate(1ull << 30);
    ChunkExchange ex(g, reader, plan, 1, 64, gate);
    ex.start_pushing();
    CHECK_THROWS_AS(ex.finish_pushing(), FormatError);
  });
  {
    FakeGroup g(wire, 0, 2);
    ItemReader reader(ck);
    MemoryGate gate(1ull << 30);
    ChunkExchange ex(g, reader, plan, 1, 64, gate);
    try {
      ex.receive(0, ti, 0, [](const uint8_t*, uint64_t, uint64_t) {});
    } catch (const Error& e) {
      writer_error = e.what();
      writer_code = static_cast<int>(e.exit_code());
    }
  }
  owner.join();
  CHECK(writer_error.find("rank 1 could not read its share") != std::string::npos);
  CHECK(writer_error.find("runs past the end of the file") != std::string::npos);
  CHECK(writer_code == static_cast<int>(ExitCode::invalid));
}
