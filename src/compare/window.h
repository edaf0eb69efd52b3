// Walking a full tensor in bounded windows, filled from whichever chunks hold them.
//
// A window is a run of consecutive elements of the full tensor (C order) that is also a box:
// one index fixed in every dimension before a split dimension k, a range of rows along k, and
// every trailing dimension whole. k is the first dimension whose trailing block fits the window
// budget, so windows stay within budget for any shape (down to single elements of the last
// dimension). The part of any chunk that falls in such a box is one contiguous run of the
// chunk's own dense bytes, so each chunk contributes with one read per window, straight into
// place when the chunk spans every trailing dimension (FSDP's dim-0 shards, whole tensors),
// through a scratch buffer otherwise. Two checkpoints sharded differently are thus walked in the
// same windows of the same full tensor, neither ever assembled whole.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "item/decoded_chunks.h"
#include "item/item_reader.h"
#include "util/memory_gate.h"

namespace dcpctl {

struct Window {
  uint64_t start = 0;  // first element (flat, C order)
  uint64_t numel = 0;
};

// The part of a --max-memory budget window buffers may use: all of it, or half when some chunk of
// `md` is transformed (zstd), so that decoded chunks shared by several windows fit in the rest.
uint64_t window_budget(const Metadata& md, uint64_t max_memory);

// Windows covering all of `shape` in order, each at most max_elems elements (at least 1).
std::vector<Window> plan_windows(const std::vector<int64_t>& shape, uint64_t max_elems);

// The multi-index of flat element `i` of `shape`.
std::vector<int64_t> unravel(const std::vector<int64_t>& shape, uint64_t i);

// Fills windows of one tensor. Safe to use from several threads (the direct-run cache is locked).
//
// A chunk that cannot be read in place (a zstd item, a non-contiguous view) costs a decode of its
// whole item for every read. Given a gate and the windows that will be filled, the filler decodes
// such a chunk once, when the first of several windows needs it, into memory taken from the
// gate, and frees it when the last of those windows has been filled; windows of the chunk arriving
// meanwhile wait for that one decode. The memory is taken without waiting (the caller's window
// buffers hold the rest of the budget, and a thread holding a buffer must not wait on the gate):
// when it does not fit, that read decodes for its window only, as without a gate. The keeping is
// item/decoded_chunks.h, which reshard uses too; each window part is one expected use.
class WindowFiller {
 public:
  WindowFiller(const ItemReader& reader, const TensorMeta& t, MemoryGate* gate = nullptr,
               const std::vector<Window>& windows = {});
  ~WindowFiller();
  WindowFiller(const WindowFiller&) = delete;
  WindowFiller& operator=(const WindowFiller&) = delete;
  // The window's bytes (w.numel * itemsize), reading each chunk's part once. `scratch` is
  // w.numel * itemsize bytes the filler may use. Throws FormatError if the chunks leave a gap.
  void fill(const Window& w, uint8_t* dst, uint8_t* scratch);
  // Decodes of chunks that are not read in place: whole chunks kept for several windows, plus
  // single reads decoded for one window.
  uint64_t decodes() const { return decoded_.decodes(); }

 private:
  struct Part;
  template <class F>
  void each_part(const Window& w, F&& f) const;
  void read(size_t chunk, uint64_t from, uint64_t n, uint8_t* dst);

  const ItemReader& reader_;
  const TensorMeta& t_;
  size_t item_;
  std::mutex mu_;
  std::vector<std::optional<std::optional<DirectRun>>> runs_;  // per chunk, once looked up
  DecodedChunks decoded_;  // chunks not read in place, each window part one expected use
};

}  // namespace dcpctl
