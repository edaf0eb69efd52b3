#include "write/stream.h"

#include <algorithm>

#include "util/crc32.h"
#include "util/numeric.h"

namespace dcpctl {

// The window stays in cache: resharding 4.8 GB through whole-chunk buffers spent most of its
// time copying into and out of cold memory.
uint32_t stream_runs(OutputFile& out, const std::vector<FileRun>& runs, DType src, DType dst, StreamWindow& win,
                     uint32_t crc) {
  size_t si = itemsize(src), di = itemsize(dst);
  uint64_t window_elems = StreamWindow::elems(src);
  // `k` elements at `p`: cast a stream window at a time, CRC'd and appended.
  auto put = [&](const uint8_t* p, uint64_t k) {
    if (src == dst) {
      crc = crc32_update(crc, p, k * si);
      out.append(p, k * si);
      return;
    }
    for (uint64_t e = 0; e < k; e += window_elems) {
      uint64_t m = std::min(window_elems, k - e);
      cast_elements(src, dst, p + e * si, win.out.get(), m);
      crc = crc32_update(crc, win.out.get(), m * di);
      out.append(win.out.get(), m * di);
    }
  };
  for (const FileRun& r : runs) {
    if (win.direct_reads && r.file->worth_reading_direct(r.offset, r.bytes)) {
      uint64_t window = kStreamDirectWindow / si * si;
      for (uint64_t done = 0; done < r.bytes;) {
        uint64_t k = std::min(window, r.bytes - done);
        put(r.file->read_direct(r.offset + done, k, win.direct(), r.key), k / si);
        done += k;
      }
      continue;
    }
    for (uint64_t done = 0; done < r.bytes;) {
      uint64_t k = std::min(window_elems, (r.bytes - done) / si);
      r.file->read_at(r.offset + done, win.in.get(), k * si, r.key);
      put(win.in.get(), k);
      done += k * si;
    }
  }
  return crc;
}

}  // namespace dcpctl
