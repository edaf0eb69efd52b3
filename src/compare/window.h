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

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "item/item_reader.h"

namespace dcpctl {

struct Window {
  uint64_t start = 0;  // first element (flat, C order)
  uint64_t numel = 0;
};

// Windows covering all of `shape` in order, each at most max_elems elements (at least 1).
std::vector<Window> plan_windows(const std::vector<int64_t>& shape, uint64_t max_elems);

// The multi-index of flat element `i` of `shape`.
std::vector<int64_t> unravel(const std::vector<int64_t>& shape, uint64_t i);

// Fills windows of one tensor. Safe to use from several threads (the direct-run cache is locked).
class WindowFiller {
 public:
  WindowFiller(const ItemReader& reader, const TensorMeta& t);
  // The window's bytes (w.numel * itemsize), reading each chunk's part once. `scratch` is
  // w.numel * itemsize bytes the filler may use. Throws FormatError if the chunks leave a gap.
  void fill(const Window& w, uint8_t* dst, uint8_t* scratch);

 private:
  void read(size_t chunk, uint64_t from, uint64_t n, uint8_t* dst);

  const ItemReader& reader_;
  const TensorMeta& t_;
  size_t item_;
  std::mutex mu_;
  std::vector<std::optional<std::optional<DirectRun>>> runs_;  // per chunk, once looked up
};

}  // namespace dcpctl
