// Reading one box of one saved tensor (a slice a caller asked for: the Python module's `get` and
// `get_slice`, python/) into the caller's buffer, from the chunks that meet it and no others.
//
// The box is read in bands along its first dimension, each at most half the read's `budget` (what
// it may hold beyond the caller's buffer: the Python module's max_memory) and at most `max_band`
// (at least one row of the box), through the chunk engine that assembles every box dcpctl reads
// (item/chunk_source.h's assemble_box): a piece that is a run of both its chunk and the band lands
// in place; another goes through a copy of its own size (or of its chunk's rows). What a read
// holds beyond the caller's buffer is thus about one band, however large the tensor. A
// transformed (zstd) item is still decoded whole, as every reader decodes it (its zip's records
// are found from the directory at its end): a box that meets one whose decoded bytes and the band
// exceed the budget is refused before anything is read, naming the budget that holds them.
//
// The CRC-32 of a zip record is over all of its bytes, and the ledger (util/crc_ledger.h) checks a
// record only when every byte of it has been read. A slice that reads part of a chunk would leave
// its record unchecked, so with `complete_records` the rest of each such chunk is read too (in
// windows of at most a band, then dropped): every record a slice touches is checked, at the
// cost of reading its chunks whole. Without it, only the bytes of the box are read.
#pragma once

#include <cstdint>

#include "item/item_reader.h"
#include "meta/geometry.h"

namespace dcpctl {

struct BoxReadOptions {
  uint64_t budget = 1ull << 30;
  uint64_t max_band = 64ull << 20;
  unsigned threads = 4;  // readers of a band's pieces
  bool complete_records = true;
};

struct BoxReadStats {
  uint64_t chunks = 0;            // chunks that met the box
  uint64_t completed_chunks = 0;  // of those, read whole afterwards for their records' CRC-32
  uint64_t bands = 0;
};

// Fills `dst` (box.numel() * itemsize bytes, C order) with box `box` of `t`, a tensor of the
// reader's checkpoint as saved, its dtype known and its chunks tiling it (compare/input.h's
// require_tiled). Throws what the reader throws (CorruptError on a record's CRC-32); UsageError,
// naming the chunk and the budget it needs, when a zstd chunk it meets does not fit in the budget.
BoxReadStats read_box(const ItemReader& reader, const TensorMeta& t, const Box& box, uint8_t* dst,
                      const BoxReadOptions& o);

// `box` checked against `t`'s shape: UsageError naming the key and the dimension when it does not fit.
void check_box(const TensorMeta& t, const Box& box);

}  // namespace dcpctl
