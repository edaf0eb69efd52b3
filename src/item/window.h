// Walking a full tensor in bounded windows, each read through the chunk engine that assembles
// every box dcpctl reads (item/chunk_source.h's assemble_box).
//
// A window is a run of consecutive elements of the full tensor (C order) that is also a box:
// one index fixed in every dimension before a split dimension k, a range of rows along k, and
// every trailing dimension whole. k is the first dimension whose trailing block fits the window
// budget, so windows stay within budget for any shape (down to single elements of the last
// dimension). The part of any chunk that falls in such a box (a piece, meta/pieces.h) is one
// contiguous run of the chunk's own dense bytes, so each chunk contributes with one read per
// window: straight into place when the chunk spans every trailing dimension (FSDP's dim-0 shards,
// whole tensors), through the caller's scratch otherwise. Two checkpoints sharded differently are
// thus walked in the same windows of the same full tensor, neither ever assembled whole. diff,
// stats and verify walk tensors so; how large their windows are is plan/memory.h's.
#pragma once

#include <cstdint>
#include <vector>

#include "item/chunk_source.h"
#include "item/decoded_chunks.h"
#include "item/item_reader.h"
#include "meta/geometry.h"
#include "util/memory_gate.h"

namespace dcpctl {

struct Window {
  uint64_t start = 0;  // first element (flat, C order)
  uint64_t numel = 0;
};

// Windows covering all of `shape` in order, each at most max_elems elements (at least 1).
std::vector<Window> plan_windows(const std::vector<int64_t>& shape, uint64_t max_elems);

// Window `w` of a tensor of `shape` (planned by plan_windows) as a box.
Box window_box(const std::vector<int64_t>& shape, const Window& w);

// The multi-index of flat element `i` of `shape`.
std::vector<int64_t> unravel(const std::vector<int64_t>& shape, uint64_t i);

// Reads windows of one input's tensors: LocalChunks over DecodedChunks, so that a chunk that
// cannot be read in place (a zstd item, a non-contiguous view), needed by several windows, is
// decoded once, when the first of them needs it, into memory taken from `gate` without waiting
// (the window buffers hold the rest of the budget, and a thread holding one must not wait on the
// gate a second time), and freed when the last of them is filled; when it does not fit, or with no
// gate, each window decodes it for itself. Safe to use from several threads.
class WindowReader {
 public:
  // A tensor the reader's table says has parts (a key map's output, meta/derived.h's
  // DerivedTable::parts; given as the table's or the map's TensorMeta) is filled from the pieces
  // of those parts, as the planner plans it.
  WindowReader(const ItemReader& reader, MemoryGate* gate);
  // The windows of `t` that will be filled, each once.
  void expect(const TensorMeta& t, const std::vector<Window>& windows);
  // Window w of `t` into dst (w.numel * itemsize bytes); `scratch`, as many bytes, holds the
  // pieces that do not land in one run. Throws FormatError if the chunks leave a gap.
  void fill(const TensorMeta& t, const Window& w, uint8_t* dst, uint8_t* scratch);
  // Whole decodes of chunks not read in place: those kept for several windows, plus reads decoded
  // for one window.
  uint64_t decodes() const { return decoded_.decodes(); }

 private:
  std::vector<Piece> pieces(const TensorMeta& t, const Box& box) const;
  const ItemReader& reader_;
  DecodedChunks decoded_;
  LocalChunks chunks_;
};

}  // namespace dcpctl
