// Where a writer gets the dense bytes of a saved chunk: this process's own reads (LocalChunks),
// or under torchrun the rank that can read it (dist/exchange.h's ChunkExchange). The executor
// (write/executor.h) carries out every plan over either, so a single-process run and a torchrun
// run write the same records the same way.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <vector>

#include "item/decoded_chunks.h"
#include "item/item_reader.h"
#include "meta/pieces.h"
#include "util/memory_gate.h"

namespace dcpctl {

class ChunkSource {
 public:
  using WindowFn = std::function<void(const uint8_t* data, uint64_t offset, uint64_t n)>;
  virtual ~ChunkSource() = default;

  // The chunk's bytes in place in a file this process reads (an untransformed item, a contiguous
  // view): copied or streamed without a buffer. nullopt: they come through read().
  virtual std::optional<DirectRun> in_place(const TensorMeta& t, size_t chunk) const = 0;
  // The chunk's dense bytes, window by window in order, on lane `lane`. A chunk this process
  // decodes whole (zstd, a view that is not contiguous) takes `charge` (plan/memory.h's
  // whole_chunk_need) while it is held; none when the caller's reservation counts it already.
  virtual void read(unsigned lane, const TensorMeta& t, size_t chunk, const WindowFn& fn, GateCharge charge) = 0;
  // The chunk's dense bytes into `dst` (t.chunk_numel(chunk) elements), for assembling a tensor.
  virtual void read_into(unsigned lane, const TensorMeta& t, size_t chunk, uint8_t* dst) = 0;
  // Bytes [from, from + n) of the chunk's dense bytes into `dst`, for assembling a box (a piece,
  // meta/pieces.h). By default the whole chunk through read_into (straight into `dst` when the
  // range is the whole chunk); LocalChunks reads only the range.
  virtual void read_range(unsigned lane, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst);
  // One more use of the chunk will come / one is over: a source that keeps a decoded chunk for
  // several uses (LocalChunks over DecodedChunks) frees it after the last. No-ops by default.
  virtual void expect(const TensorMeta&, size_t) {}
  virtual void done(const TensorMeta&, size_t) {}
  // True when read_range reads only the range asked for (not the whole chunk first): a piece
  // that is a contiguous run of its chunk's bytes is then read alone (assemble_box).
  virtual bool reads_ranges() const { return false; }
  // True when each lane must take its chunks in the planned order (the exchange serves them so);
  // false when any thread may read any chunk at any time.
  virtual bool ordered() const = 0;
  // The first failure of a run: cancel what is in flight so that nobody waits for a run that has
  // already failed.
  virtual void fail(std::exception_ptr) {}
};

// Fills `dst` (the dense bytes of `box` of `t`) from its pieces (plan_pieces(t, box)), on lane
// `lane`: a run piece straight into place, another through a dense copy of its chunk (the
// caller's reservation counts that copy), each piece's use of its chunk then done. From a source
// that reads ranges, a piece that is one contiguous run of its chunk's bytes (any part of a box
// whose trailing dimensions the box spans whole: a window, item/window.h) is read alone, into
// place when it is a run of the box too, else through a copy of its own size. An ordered
// source is read in chunk order, by one reader (its transfers are planned so); otherwise
// `threads` readers take different pieces. What consolidate assembles (a whole tensor) and
// reshard assembles (a target chunk) both come through here.
void assemble_box(ChunkSource& src, const TensorMeta& t, const Box& box, const std::vector<Piece>& pieces, uint8_t* dst,
                  unsigned threads = 1, unsigned lane = 0);
// The same, the copies of pieces read alone taken from `scratch` (box.numel() * itemsize bytes,
// one disjoint part per piece) rather than allocated per piece.
void assemble_box(ChunkSource& src, const TensorMeta& t, const Box& box, const std::vector<Piece>& pieces, uint8_t* dst,
                  uint8_t* scratch, unsigned threads = 1, unsigned lane = 0);

// assemble_box of the whole tensor into `full` (t.nbytes() bytes).
void read_full_tensor(ChunkSource& src, const TensorMeta& t, uint8_t* full, unsigned threads = 1, unsigned lane = 0);

// This process's reads, through an ItemReader; with `decoded`, a chunk read for several uses that
// cannot be read in place (zstd) is decoded once (item/decoded_chunks.h).
class LocalChunks final : public ChunkSource {
 public:
  explicit LocalChunks(const ItemReader& reader, uint64_t window = 16ull << 20, DecodedChunks* decoded = nullptr)
      : reader_(reader), window_(window), decoded_(decoded) {}
  std::optional<DirectRun> in_place(const TensorMeta& t, size_t chunk) const override {
    return reader_.direct_run(t, chunk);
  }
  void read(unsigned lane, const TensorMeta& t, size_t chunk, const WindowFn& fn, GateCharge charge) override;
  void read_into(unsigned, const TensorMeta& t, size_t chunk, uint8_t* dst) override;
  void read_range(unsigned, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst) override;
  void expect(const TensorMeta& t, size_t chunk) override;
  void done(const TensorMeta& t, size_t chunk) override;
  bool reads_ranges() const override { return true; }
  bool ordered() const override { return false; }

 private:
  const ItemReader& reader_;
  uint64_t window_;
  DecodedChunks* decoded_;
};

}  // namespace dcpctl
