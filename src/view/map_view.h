// The key map as a view: --map's output tensors as a table a later view reads (--quantize).
//
// meta/keymap.h's apply_key_map says what each output tensor is made of (parts: boxes of the
// tensors of the table below, where they land); this view makes those outputs a table. A whole
// tensor under a new name (renames_whole) is that tensor renamed: a saved one keeps its chunks
// and storage, so it is read and streamed as before; a derived one keeps its DerivedTensor under
// the new name. Every other output is a DerivedTensor of one chunk, the whole tensor (a mapped
// tensor has no saved layout of its own to follow): a read of any byte range of it is cut into
// boxes that are runs (meta/pieces.h's run_boxes), each assembled from the pieces of the table
// below that plan_mapped_pieces finds there (item/chunk_source.h's assemble_box), so a reader of
// rows (the quantize view's block rows) reads those rows' parts only; a part that is not a run of
// its chunk is copied out of the chunk's rows it spans (assemble_box's row_slab). Its follows() is
// its first part's tensor (what messages name); its chunk is its own, so describing it gives the
// computed chunk (ItemReader::describe_chunk). Its inputs() are every part's tensor: what reading
// them holds in the table below adds to its working_bytes (DerivedTable::working_bytes).
//
// The table's view "map" is the map's --json object (MappedModel::describe), so the summary
// says it as the planner-side map did.
#pragma once

#include "meta/checkpoint.h"
#include "meta/keymap.h"

namespace dcpctl {

// `ck` (a table, saved or derived) seen through `map` (applied to it): the outputs, in the map's
// order, the only items. The selection was applied by apply_key_map.
Checkpoint mapped_view(const Checkpoint& ck, const MappedModel& map);

}  // namespace dcpctl
