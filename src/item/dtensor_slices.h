// Where a DTensor's local shard sits in the global tensor, computed from its global shape, its
// mesh and its placements alone: what a checkpoint needs when it stores each rank's local tensor
// without offsets (torch_checkpointing's SafetensorsSerialization layout, placed by metadata.pkl).
//
// The rule is DTensor's own (torch.distributed.tensor._utils._compute_local_shape_and_global_offset
// with every offset materialised, torch 2.4 to 2.15): the mesh dimensions are applied left to
// right; each Shard or _StridedShard placement on tensor dim d re-cuts the list of global indices
// the rank holds on d so far (initially 0..n-1):
// - Shard(d) over a mesh dim of size m, coordinate c: torch.chunk's piece c of the list (pieces of
//   ceil(len / m), the last ones shorter or empty): 33 rows over 2 ranks = 17 + 16;
// - _StridedShard(d, split_factor=f) over m, c (right-to-left sharding, FSDP2 over tensor
//   parallel): torch.chunk the list into f pieces, each piece into m pieces, and take piece c of
//   every one of the f, concatenated: 33 rows, f = 2, m = 2 gives coordinate 0 rows 0-8 and 17-24;
// - Replicate: nothing.
// A dim's indices are then a list of runs of consecutive global indices (one run for plain
// Shard; up to the product of split factors with _StridedShard), kept as runs, never as one
// index per row, so a hostile shape costs nothing. The local tensor is the runs of every dim,
// concatenated in order: its box (run_i of dim 0, run_j of dim 1, ...) sits at the runs' starts.
// The library's own resharding load keeps only the first offset of a dim (a box), which equals
// this whenever the runs of a dim are one; a strided shard whose runs are not adjacent it cannot
// place, this can.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace dcpctl {

struct MeshPlacement {
  enum Kind { Replicate, Shard, StridedShard };
  Kind kind = Replicate;
  int64_t dim = 0;
  int64_t split_factor = 1;  // StridedShard only
  std::string text() const;  // "Shard(0)", "StridedShard(0, split_factor=2)", "Replicate"
};

// Runs of consecutive global indices, in the order the local tensor holds them.
struct IndexRun {
  int64_t start = 0, length = 0;
};
using IndexRuns = std::vector<IndexRun>;

// The runs a rank holds on each tensor dim, at `coordinate` of a mesh of `mesh_shape`. Throws
// FormatError (naming `where`) for placements that do not fit the shape (a dim out of range, a
// split factor < 1, more runs than dcpctl follows).
std::vector<IndexRuns> local_index_runs(const std::vector<int64_t>& global_shape,
                                        const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& coordinate,
                                        const std::vector<MeshPlacement>& placements, const Where& where);

// The local shape those runs make (each dim: the sum of its runs' lengths).
std::vector<int64_t> local_shape(const std::vector<IndexRuns>& runs);

}  // namespace dcpctl
