#include "item/chunk_source.h"

#include <algorithm>
#include <memory>

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

}  // namespace dcpctl
