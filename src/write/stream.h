// Streaming a tensor's bytes from where they lie in .distcp files into an output, a small window
// at a time (cast on the way), with the CRC-32 a zip record needs: what lets reshard and the .pt
// writer handle chunks of any size without holding them.
#pragma once

#include <cstdint>
#include <vector>

#include "util/dtype.h"
#include "util/file.h"
#include "write/output.h"

namespace dcpctl {

// A run of source bytes, read in place.
struct Piece {
  const ReadFile* file;
  uint64_t offset, bytes, to;  // `to`: where it lands in the target chunk
};

// Sorts pieces by where they land; true if they then tile [0, total) exactly (no gap, no overlap).
bool order_pieces(std::vector<Piece>& pieces, uint64_t total);

// Appends the pieces to `out` a window of `window_elems` source elements at a time, cast from
// `src` to `dst` on the way (`win_in` holds window_elems source elements, `win_out` their cast),
// and returns `crc` (the CRC-32 of what came before in the record) updated with what it appended.
uint32_t stream_pieces(OutputFile& out, const std::vector<Piece>& pieces, DType src, DType dst, uint8_t* win_in,
                       uint8_t* win_out, uint64_t window_elems, uint32_t crc = 0);

}  // namespace dcpctl
