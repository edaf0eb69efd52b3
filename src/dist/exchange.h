// Moving tensor chunks from the ranks that can read them to the ranks that write the output, for
// consolidate under torchrun (rank 0 gathers; with --parallel-write every rank writes shards).
// It is protocol between ranks, not writing: the deal (plan/deal.h) says what each rank reads and
// writes, and execute (write/execute.h) runs this to move the bytes.
//
// Every rank holds the same plan: the deal's ordered list of transfers (plan/deal.h), each one
// chunk that a writer lane consumes next. The owner of a chunk (a rank that sees its .distcp file,
// dealt there by deal_work) pushes it to the writer in windows; the writer's lane receives them in plan order. Per
// lane, owners send and writers receive in the one global order, so the first unfinished
// transfer can always move: no cycle can form, and each side holds one window per lane.
//
// Wire: one message per window on tag tag::kChunkLanes + lane (dist/tags.h): a 16-byte header
// (status, tensor, chunk, window index) followed by the window's bytes. An owner that cannot read
// a chunk publishes its error in the store ("exchange-error/<rank>") and sends the header with
// status 1, so the writer fails at once with the owner's message (file, offset, key) instead of
// waiting for a timeout.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "item/chunk_source.h"
#include "item/item_reader.h"
#include "plan/deal.h"
#include "util/memory_gate.h"

namespace dcpctl {

class Group;

// Which data files each rank can read: every rank publishes which of the checkpoint's data files
// its directory holds (--local-files), and learns everyone's. Collective.
Visibility gather_visibility(Group& group, const Checkpoint& ck);

// Non-tensor items rank `to` must read but cannot see (--local-files): the lowest rank that sees
// each item's file sends its raw bytes, and `reader` on rank `to` serves them as if read there.
// Collective: every rank calls it with the same `refs`.
void gather_raw_items(Group& group, const Visibility& vis, ItemReader& reader, const std::vector<BytesMeta>& items,
                      int to);

// The writer side is a ChunkSource (item/chunk_source.h): the executor (write/executor.h) reads through
// it as it reads local chunks, lane by lane in plan order.
class ChunkExchange final : public ChunkSource {
 public:
  // `gate`: this rank's memory budget, which pushers take a whole-chunk decode from when a view
  // turns out not to be contiguous. The decodes of transformed (zstd) chunks this rank pushes are
  // not taken from it: the caller sets them aside up front (plan/memory.h's whole_chunk_need per pushing lane),
  // because lanes waiting on one gate for chunks that other ranks' lanes consume in their own
  // order could wait on each other in a cycle.
  ChunkExchange(Group& group, const ItemReader& reader, std::vector<Transfer> plan, unsigned lanes, uint64_t window,
                MemoryGate& gate);
  ~ChunkExchange();  // stops and joins the pushers
  ChunkExchange(const ChunkExchange&) = delete;
  ChunkExchange& operator=(const ChunkExchange&) = delete;

  // Owner side: starts one thread per lane pushing this rank's chunks to other writers.
  void start_pushing();
  // Waits for the pushers; rethrows the first error.
  void finish_pushing();
  // Records the first failure on this rank and cancels every transfer in flight, so that no
  // thread waits out the timeout for a run that has already failed.
  void fail(std::exception_ptr e) override;
  // The first failure recorded, if any (the others are its consequences).
  std::exception_ptr first_error() const;

  // Writer side, lane `lane`: the dense bytes of chunk `chunk` of tensor `tensor` (the lane's next
  // transfer), window by window in order, read here or received from the owner.
  // A chunk read on this rank that must be decoded whole takes `charge` while it is held; none
  // when the caller's own reservation already counts it.
  void receive(unsigned lane, size_t tensor, size_t chunk, const WindowFn& fn, GateCharge charge = {});

  // As a ChunkSource: every chunk comes through receive(), in each lane's planned order.
  std::optional<DirectRun> in_place(const TensorMeta&, size_t) const override { return std::nullopt; }
  void read(unsigned lane, const TensorMeta& t, size_t chunk, const WindowFn& fn, GateCharge charge) override {
    receive(lane, index_of(t), chunk, fn, charge);
  }
  void read_into(unsigned lane, const TensorMeta& t, size_t chunk, uint8_t* dst) override {
    receive(lane, index_of(t), chunk,
            [dst](const uint8_t* p, uint64_t off, uint64_t n) { std::memcpy(dst + off, p, n); });
  }
  bool ordered() const override { return true; }

  // Bytes of buffers the exchange holds on this rank at most (receive windows per lane, push
  // windows per lane, and a decoded chunk per lane for transformed items).
  uint64_t window() const { return window_; }

 private:
  struct Header {
    uint32_t status, tensor, chunk, index;
  };
  void push_lane(unsigned lane);
  // Reads the chunk here, a window at a time, into `buf` (window bytes) after `skip` bytes.
  // Untransformed contiguous chunks are read in place; others are decoded whole once, taking
  // `charge` while it is held.
  void read_local(size_t tensor, size_t chunk, uint8_t* buf, size_t skip, const WindowFn& fn, GateCharge charge);
  [[noreturn]] void owner_failed(int owner);
  size_t index_of(const TensorMeta& t) const { return static_cast<size_t>(&t - md_.tensors.data()); }

  Group& group_;
  const ItemReader& reader_;
  MemoryGate& gate_;
  const Metadata& md_;
  std::vector<Transfer> plan_;
  unsigned lanes_;
  uint64_t window_;
  std::vector<size_t> next_;                         // per lane: position in plan_ of the writer's next transfer
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;  // per lane: the receive window
  std::vector<std::thread> pushers_;
  mutable std::mutex mu_;
  std::exception_ptr first_error_;
  std::atomic<bool> stop_{false};
};

}  // namespace dcpctl
