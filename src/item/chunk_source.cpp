#include "item/chunk_source.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "plan/pieces.h"
#include "util/parallel.h"

namespace dcpctl {

// The chunk is decoded (or gathered) whole once, and its windows handed out of that copy.
void LocalChunks::read(unsigned, const TensorMeta& t, size_t chunk, const WindowFn& fn, MemoryGate* reserve_from) {
  uint64_t total = t.chunk_numel(chunk) * itemsize(*t.dtype);
  std::optional<GateReservation> hold;
  if (reserve_from) hold.emplace(*reserve_from, whole_chunk_need(t, chunk));
  std::unique_ptr<uint8_t[]> whole(new uint8_t[std::max<uint64_t>(total, 1)]);
  reader_.read_chunk(t, chunk, whole.get());
  for (uint64_t off = 0; off < total; off += window_) fn(whole.get() + off, off, std::min(window_, total - off));
}

void read_full_tensor(ChunkSource& src, const TensorMeta& t, uint8_t* full, unsigned threads, unsigned lane) {
  size_t item = itemsize(*t.dtype);
  parallel_for(t.num_chunks(), src.ordered() ? 1 : threads, [&](size_t c) {
    if (t.chunk_numel(c) == 0) return;
    if (chunk_is_run(t, c)) {
      src.read_into(lane, t, c, full + chunk_start(t, c));
    } else {
      std::vector<uint8_t> tmp(t.chunk_numel(c) * item);  // counted in the caller's reservation
      src.read_into(lane, t, c, tmp.data());
      place_chunk(t, c, item, tmp.data(), full);
    }
  });
}

}  // namespace dcpctl
