// The key map as a table: --map's output tensors, the table every step after the map reads.
//
// view/maps/keymap.h's apply_key_map says what each output tensor is made of (parts: boxes of the
// tensors of the table below, where they land); this view makes those outputs a table, in the
// map's order, the only items (the selection was applied by apply_key_map). A whole tensor under
// a new name (renames_whole) is that tensor renamed: a saved one keeps its chunks and storage, so
// it is read and streamed as before; a derived one keeps its DerivedTensor under the new name.
// Every other output is a DerivedTensor of one chunk, the whole tensor (a mapped tensor has no
// saved layout of its own to follow): a read of any byte range of it is cut into boxes that are
// runs (meta/pieces.h's run_boxes), each assembled from the pieces of the table below that
// plan_mapped_pieces finds there (item/chunk_source.h's assemble_box), so a reader of rows (the
// quantize view's block rows) reads those rows' parts only; a part that is not a run of its chunk
// is copied out of the chunk's rows it spans (assemble_box's row_slab). Its follows() is its first
// part's tensor (what messages name); its chunk is its own, so describing it gives the computed
// chunk (ItemReader::describe_chunk). Its inputs() are every part's tensor: what reading them
// holds in the table below adds to its working_bytes (DerivedTable::working_bytes).
//
// The table that is written (MapTable::Written: no view follows the map) also holds the table
// below's tensors, unselected, at their indices there (their derived entries carried under their
// names; an input named as an output it is not is kept as "NAME (input of --map)"), and says each
// output's parts (DerivedTable::parts). The planner plans an output from its parts, as pieces of
// those tensors (plan/plan.h): a renamed whole tensor as that tensor, every other one assembled
// from the saved chunks, which the torchrun deal and --local-files send from a rank that reads
// their file, a .pt stores, and diff and stats read once for all their windows (item/window.h).
// A table a view reads (MapTable::Read: --quantize) holds the outputs alone, each read as a
// tensor. The view "map" of either is the map's --json object (MappedModel::describe), and
// DerivedTable::output.map the map itself (what diff's audit and the tied head ask).
#pragma once

#include <memory>

#include "meta/checkpoint.h"
#include "meta/derived.h"
#include "view/maps/keymap.h"

namespace dcpctl {

enum class MapTable {
  Written,  // no view follows: the outputs planned from their parts, the inputs held
  Read,     // a view reads the outputs (--quantize)
};

// `ck` (a table, saved or derived) seen through `map` (applied to it).
Checkpoint mapped_view(const Checkpoint& ck, MappedModel map, MapTable kind);

// `table`'s map becomes `map` (an output left out since, e.g. a tied head): its view "map", its
// output.map and, where it holds them (`parts`), the outputs' parts.
void set_map(DerivedTable& table, std::shared_ptr<const MappedModel> map, bool parts);

}  // namespace dcpctl
