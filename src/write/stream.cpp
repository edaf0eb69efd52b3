#include "write/stream.h"

#include <algorithm>

#include "util/crc32.h"
#include "util/numeric.h"

namespace dcpctl {

// The window stays in cache: resharding 4.8 GB through whole-chunk buffers spent most of its
// time copying into and out of cold memory.
uint32_t stream_runs(OutputFile& out, const std::vector<FileRun>& runs, DType src, DType dst, StreamWindow& win, uint32_t crc) {
  size_t si = itemsize(src), di = itemsize(dst);
  uint64_t window_elems = StreamWindow::elems(src);
  for (const FileRun& r : runs) {
    for (uint64_t done = 0; done < r.bytes;) {
      uint64_t k = std::min(window_elems, (r.bytes - done) / si);
      r.file->read_at(r.offset + done, win.in.get(), k * si);
      const uint8_t* data = win.in.get();
      if (src != dst) {
        cast_elements(src, dst, win.in.get(), win.out.get(), k);
        data = win.out.get();
      }
      crc = crc32_update(crc, data, k * di);
      out.append(data, k * di);
      done += k * si;
    }
  }
  return crc;
}

}  // namespace dcpctl
