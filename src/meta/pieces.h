// Pieces: what a written box of a tensor is made of.
//
// Every write dcpctl makes puts a box of a tensor somewhere: the whole tensor (a consolidated
// safetensors or .pt file) or one target chunk (a resharded DCP checkpoint). The box is assembled
// from pieces, each the part of one saved chunk that falls inside it. When the chunk and the box
// are both contiguous runs of the tensor's C-order elements (FSDP's dim-0 shards, a whole tensor,
// a chunk that spans every trailing dimension), a piece is one byte range of the chunk landing at
// one byte range of the box, which can be read in place and written without a buffer. Otherwise
// the piece is a region copied row by row out of the dense chunk (copy_box).
//
// This is the one place that decides "is this a contiguous run", "which bytes of which chunk go
// where" and "do the runs tile the box": consolidate, reshard and the torchrun exchange all plan
// from here (plan/plan.h), from .metadata alone, so every process and launcher decides alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meta/geometry.h"
#include "meta/metadata.h"

namespace dcpctl {

// Chunk `chunk` of `t` as a box, and the whole tensor as one.
Box chunk_box(const TensorMeta& t, size_t chunk);
Box whole_box(const TensorMeta& t);

// The region both boxes hold; false when they do not meet (an empty box meets nothing).
bool intersect(const Box& a, const Box& b, Box& out);

// Whether box `b` of a tensor of `shape` is one contiguous run of the tensor's C-order elements:
// leading dimensions of size 1, then one dimension of any size, then only full dimensions.
// A 0-d box is a run.
bool is_run(const Box& b, const std::vector<int64_t>& shape);

// Index (C order) of the box's first element in the tensor.
uint64_t first_element(const Box& b, const std::vector<int64_t>& shape);

// Copies region `in` (global coordinates, inside both boxes) from dense buffer `src`, which holds
// box `sb`, into dense buffer `dst`, which holds box `db`; elements are `item` bytes. Trailing
// dimensions that all three boxes span alike are copied as one run.
void copy_box(const uint8_t* src, const Box& sb, uint8_t* dst, const Box& db, const Box& in, size_t item);

// The same, with `dst` holding box `db` with its last two dimensions swapped (C order over
// db.sizes with the last two exchanged): `in` and `db` are in the source's frame, and each element
// lands at its transposed place. At least 2 dimensions.
void copy_box_transposed(const uint8_t* src, const Box& sb, uint8_t* dst, const Box& db, const Box& in, size_t item);

// A piece of a key map's output (view/maps/keymap.h) that is not a run: its region, its chunk's box and
// the target box, all in one frame (the saved tensor's, or the output's when it has a dimension
// more), for copy_box. `transpose`: the box's bytes hold its last two dims swapped (a key map's
// transposed part): the three boxes are in the saved tensor's frame, copy_box_transposed places it.
struct PieceFrames {
  Box in, chunk, box;
  bool transpose = false;
};

// Copies a piece out of a dense copy of box `from` (its chunk, or its region alone) into the dense
// bytes of the target box `box`, with its frames when it has them.
struct Piece;
void place_piece(const Piece& p, const uint8_t* src, const Box& from, uint8_t* dst, const Box& box, size_t item);

// The part of one source chunk inside a target box.
struct Piece {
  const TensorMeta* source = nullptr;  // the saved tensor the chunk is of
  uint32_t chunk = 0;                  // index of the source chunk in its tensor
  // The chunk and the box are both runs: bytes [from, from + bytes) of the dense chunk land at
  // bytes [to, to + bytes) of the box's dense bytes. Otherwise the region `in` is copied out of the
  // dense chunk (copy_box); from/to/bytes still give the region's size in bytes.
  bool run = false;
  uint64_t from = 0, bytes = 0, to = 0;
  Box in;  // the region, global coordinates (of the saved tensor)
  // Set for a mapped piece that is not a run: where copy_box takes it from and puts it.
  std::shared_ptr<const PieceFrames> frames;
};

// The pieces box `target` of `t` is made of: one per non-empty chunk that meets it, ordered by
// where they land when every piece is a run (else in chunk order). `t` must have a known dtype.
std::vector<Piece> plan_pieces(const TensorMeta& t, const Box& target);

// One part of an output tensor: box `from` of saved tensor `tensor`, placed at `to` in the output.
// `drop`: dimension of `from` (of size 1) that the output lacks (an expert taken out of a stack);
// `add`: dimension of the output (of size 1 in this part) that the saved tensor lacks (an expert
// stacked); `units` of them, consecutive from there (a part of a stack over two axes, Megatron's
// experts [L, E, ...]: two). `rows`: a dim-0 permutation: the part's output row i comes from its saved row rows[i]
// (relative to the box); null: in order. `transpose`: the part lands with its last two dims
// swapped (its output region is `to` + `from.sizes` with the last two swapped; no drop, add or rows).
struct MapPart {
  uint32_t tensor = 0;  // index into Metadata::tensors
  Box from;
  std::vector<int64_t> to;
  int drop = -1, add = -1;
  int units = 1;
  std::shared_ptr<const std::vector<int64_t>> rows;
  bool transpose = false;
};

// An output tensor of a mapped write: its key, and a synthetic TensorMeta (fqn = key, shape,
// dtype; no chunks: its bytes are the parts').
struct MappedTensor {
  TensorMeta meta;
  std::vector<MapPart> parts;
  size_t rule = 0;
  std::vector<std::string> inputs;  // the input keys it is made of
  // What the rule does to them, for --dry-run: "rename", "rope", "split", "join", "unstack",
  // "stack" (and "rope" beside the latter where a part's rows are reordered, "transpose" where
  // the last two dims are swapped; "copy" for a tied tensor made from another input).
  std::vector<std::string> transforms;
  // A rule's "zeros" output (no parts): all zeros, made from nothing the input holds. `place`: the
  // input tensor whose first chunk it is dealt with (the first part's tensor of its `beside` output).
  bool zeros = false;
  uint32_t place = 0;
  // Rows at the end of dim 0 that no part covers and are written as zeros: a vocabulary padded for
  // Megatron-LM (check/megatron_vocab.h), as Megatron-Bridge pads it. Such an output is read as a
  // derived tensor (view/maps/map_view.h), never planned from its parts alone.
  int64_t pad_rows = 0;
};

// The pieces box `target` of a key map's output `mt` is made of (view/maps/keymap.h): per part that
// meets the box, per row of a part whose rows are reordered, the pieces of the saved chunks
// there. A piece is a run when its region is contiguous both in its chunk and in the box (then
// from/to/bytes place it); otherwise it carries its frames. In part order, then chunk order.
std::vector<Piece> plan_mapped_pieces(const Metadata& md, const MappedTensor& mt, const Box& target);

// The byte offset of region `in` in the dense bytes of box `b` (which holds it), when the region
// is one contiguous run of them; nullopt otherwise.
std::optional<uint64_t> run_in(const Box& in, const Box& b, size_t item);

// The smallest run of box `chunk` (is_run over its sizes) that holds region `in` (inside it): the
// chunk cut along its first dimension of more than one index to the rows `in` spans there. What a
// piece that is not a run of its chunk is copied out of when its source reads byte ranges.
Box row_slab(const Box& in, const Box& chunk);

// The elements [first, first + count) of a tensor of `shape` (C order) as boxes that are each a
// run (is_run), in order: the partial rows up to the first whole block, whole blocks, partial rows
// after them; at most 2 * ndim boxes. How a byte range of a tensor made of parts is assembled box
// by box (view/maps/map_view.h). Empty when count is 0.
std::vector<Box> run_boxes(const std::vector<int64_t>& shape, uint64_t first, uint64_t count);

// Whether the pieces (as plan_pieces orders them) are all runs that tile [0, total) exactly,
// no gap and no overlap: the box can then be written front to back from its pieces alone.
bool runs_tile(const std::vector<Piece>& pieces, uint64_t total);

// Byte offset of chunk `chunk`'s first element in the dense tensor, and whether it is a run.
uint64_t chunk_start(const TensorMeta& t, size_t chunk);
bool chunk_is_run(const TensorMeta& t, size_t chunk);

}  // namespace dcpctl
