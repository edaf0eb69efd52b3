// Where a writer gets the dense bytes of a saved chunk: this process's own reads (LocalChunks),
// or under torchrun the rank that can read it (dist/exchange.h's ChunkExchange). The consolidate
// executor (write/consolidate.cpp) carries out one plan over either, so a single-process run and
// a torchrun run write the same records the same way.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>

#include "item/item_reader.h"
#include "util/memory_gate.h"

namespace dcpctl {

// Memory a chunk read whole holds: the decoded item (or a non-contiguous view's storage) and the
// dense chunk, at once.
inline uint64_t whole_chunk_need(const TensorMeta& t, size_t chunk) { return 2 * t.chunk_numel(chunk) * itemsize(*t.dtype); }

class ChunkSource {
 public:
  using WindowFn = std::function<void(const uint8_t* data, uint64_t offset, uint64_t n)>;
  virtual ~ChunkSource() = default;

  // The chunk's bytes in place in a file this process reads (an untransformed item, a contiguous
  // view): copied or streamed without a buffer. nullopt: they come through read().
  virtual std::optional<DirectRun> in_place(const TensorMeta& t, size_t chunk) const = 0;
  // The chunk's dense bytes, window by window in order, on lane `lane`. A chunk this process
  // decodes whole (zstd, a view that is not contiguous) takes whole_chunk_need from
  // `reserve_from` while it is held; null when the caller's reservation counts it already.
  virtual void read(unsigned lane, const TensorMeta& t, size_t chunk, const WindowFn& fn, MemoryGate* reserve_from) = 0;
  // The chunk's dense bytes into `dst` (t.chunk_numel(chunk) elements), for assembling a tensor.
  virtual void read_into(unsigned lane, const TensorMeta& t, size_t chunk, uint8_t* dst) = 0;
  // True when each lane must take its chunks in the planned order (the exchange serves them so);
  // false when any thread may read any chunk at any time.
  virtual bool ordered() const = 0;
  // The first failure of a run: cancel what is in flight so that nobody waits for a run that has
  // already failed.
  virtual void fail(std::exception_ptr) {}
};

// Reads every non-empty chunk of `t` into `full` (t.nbytes() bytes), in chunk order, on lane
// `lane`: a chunk that is a run straight into place, another through a dense copy. `threads`
// readers take different chunks when the source is not ordered (one reader when it is).
void read_full_tensor(ChunkSource& src, const TensorMeta& t, uint8_t* full, unsigned threads = 1, unsigned lane = 0);

// This process's reads, through an ItemReader.
class LocalChunks final : public ChunkSource {
 public:
  explicit LocalChunks(const ItemReader& reader, uint64_t window = 16ull << 20) : reader_(reader), window_(window) {}
  std::optional<DirectRun> in_place(const TensorMeta& t, size_t chunk) const override { return reader_.direct_run(t, chunk); }
  void read(unsigned lane, const TensorMeta& t, size_t chunk, const WindowFn& fn, MemoryGate* reserve_from) override;
  void read_into(unsigned, const TensorMeta& t, size_t chunk, uint8_t* dst) override { reader_.read_chunk(t, chunk, dst); }
  bool ordered() const override { return false; }

 private:
  const ItemReader& reader_;
  uint64_t window_;
};

}  // namespace dcpctl
