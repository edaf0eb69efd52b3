// Placing chunks into a full tensor. A chunk (offsets o, sizes s) is a dense C-order box of the
// global tensor; its rows land at strided positions unless the chunk spans every trailing
// dimension, in which case it is one contiguous run (FSDP's dim-0 shards) and can be read in place.
#pragma once

#include <cstddef>
#include <cstdint>

#include "meta/metadata.h"
#include "plan/pieces.h"

namespace dcpctl {

class ItemReader;

// Copies a dense chunk into its place in a dense full tensor (both C order, `item` bytes each).
void place_chunk(const TensorMeta& t, size_t chunk, size_t item, const uint8_t* src, uint8_t* full);

// Reads every chunk of `t` into `full` (t.nbytes() bytes); chunks that are runs are read in
// place, others through a scratch buffer. `threads` readers work on different chunks.
void read_full_tensor(const ItemReader& reader, const TensorMeta& t, uint8_t* full, unsigned threads = 1);

}  // namespace dcpctl
