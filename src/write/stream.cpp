#include "write/stream.h"

#include <algorithm>

#include "util/crc32.h"
#include "util/numeric.h"

namespace dcpctl {

bool order_pieces(std::vector<Piece>& pieces, uint64_t total) {
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.to < b.to; });
  uint64_t at = 0;
  for (const Piece& p : pieces) {
    if (p.to != at) return false;
    at += p.bytes;
  }
  return at == total;
}

// The windows stay in cache: resharding 4.8 GB through whole-chunk buffers spent most of its time
// copying into and out of cold memory.
uint32_t stream_pieces(OutputFile& out, const std::vector<Piece>& pieces, DType src, DType dst, uint8_t* win_in,
                       uint8_t* win_out, uint64_t window_elems, uint32_t crc) {
  size_t si = itemsize(src), di = itemsize(dst);
  for (const Piece& p : pieces) {
    for (uint64_t done = 0; done < p.bytes;) {
      uint64_t k = std::min(window_elems, (p.bytes - done) / si);
      p.file->read_at(p.offset + done, win_in, k * si);
      const uint8_t* data = win_in;
      if (src != dst) {
        cast_elements(src, dst, win_in, win_out, k);
        data = win_out;
      }
      crc = crc32_update(crc, data, k * di);
      out.append(data, k * di);
      done += k * si;
    }
  }
  return crc;
}

}  // namespace dcpctl
