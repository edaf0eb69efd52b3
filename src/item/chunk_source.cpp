#include "item/chunk_source.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "meta/pieces.h"
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

void LocalChunks::read_into(unsigned, const TensorMeta& t, size_t chunk, uint8_t* dst) {
  if (decoded_)
    decoded_->read(t, chunk, 0, t.chunk_numel(chunk) * itemsize(*t.dtype), dst);
  else
    reader_.read_chunk(t, chunk, dst);
}

void LocalChunks::read_range(unsigned, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst) {
  if (decoded_)
    decoded_->read(t, chunk, from, n, dst);
  else
    reader_.read_chunk_bytes(t, chunk, from, n, dst);
}

void LocalChunks::expect(const TensorMeta& t, size_t chunk) {
  if (decoded_) decoded_->expect(t, chunk);
}

void LocalChunks::done(const TensorMeta& t, size_t chunk) {
  if (decoded_) decoded_->done(t, chunk);
}

void ChunkSource::read_range(unsigned lane, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst) {
  uint64_t total = t.chunk_numel(chunk) * itemsize(*t.dtype);
  if (from == 0 && n == total) return read_into(lane, t, chunk, dst);
  std::vector<uint8_t> whole(total);
  read_into(lane, t, chunk, whole.data());
  std::memcpy(dst, whole.data() + from, n);
}

namespace {

// The byte offset of region `in` in the dense bytes of box `b` (which holds it), when the region is
// one contiguous run of them; nullopt otherwise.
std::optional<uint64_t> run_in(const Box& in, const Box& b, size_t item) {
  if (!is_run(in, b.sizes)) return std::nullopt;
  uint64_t at = 0;
  for (size_t d = 0; d < b.sizes.size(); ++d)
    at = at * static_cast<uint64_t>(b.sizes[d]) + static_cast<uint64_t>(in.offsets[d] - b.offsets[d]);
  return at * item;
}

}  // namespace

void assemble_box(ChunkSource& src, const TensorMeta& t, const Box& box, const std::vector<Piece>& pieces, uint8_t* dst,
                  unsigned threads, unsigned lane) {
  assemble_box(src, t, box, pieces, dst, nullptr, threads, lane);
}

void assemble_box(ChunkSource& src, const TensorMeta& t, const Box& box, const std::vector<Piece>& pieces, uint8_t* dst,
                  uint8_t* scratch, unsigned threads, unsigned lane) {
  size_t item = itemsize(*t.dtype);
  std::vector<size_t> order(pieces.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (src.ordered())
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pieces[a].chunk < pieces[b].chunk; });
  const unsigned readers = src.ordered() ? 1 : threads;
  // Each piece's part of `scratch`: all of it, one piece after another, for one reader; for
  // several, parts as disjoint as the pieces are (then within the box's bytes).
  std::vector<uint64_t> at(pieces.size() + 1, 0);
  for (size_t i = 0; readers > 1 && i < pieces.size(); ++i) at[i + 1] = at[i] + pieces[i].bytes;
  if (at.back() > box.numel() * item) scratch = nullptr;
  parallel_for(order.size(), readers, [&](size_t i) {
    const Piece& p = pieces[order[i]];
    std::optional<uint64_t> from;
    if (p.run) {
      src.read_range(lane, t, p.chunk, p.from, p.bytes, dst + p.to);
    } else if (src.reads_ranges() && (from = run_in(p.in, chunk_box(t, p.chunk), item))) {
      if (std::optional<uint64_t> to = run_in(p.in, box, item)) {
        src.read_range(lane, t, p.chunk, *from, p.bytes, dst + *to);
      } else {
        std::vector<uint8_t> own(scratch ? 0 : p.bytes);
        uint8_t* tmp = scratch ? scratch + at[order[i]] : own.data();
        src.read_range(lane, t, p.chunk, *from, p.bytes, tmp);
        copy_box(tmp, p.in, dst, box, p.in, item);
      }
    } else {
      std::vector<uint8_t> tmp(t.chunk_numel(p.chunk) * item);  // counted in the caller's reservation
      src.read_range(lane, t, p.chunk, 0, tmp.size(), tmp.data());
      copy_box(tmp.data(), chunk_box(t, p.chunk), dst, box, p.in, item);
    }
    src.done(t, p.chunk);
  });
}

void read_full_tensor(ChunkSource& src, const TensorMeta& t, uint8_t* full, unsigned threads, unsigned lane) {
  Box whole = whole_box(t);
  assemble_box(src, t, whole, plan_pieces(t, whole), full, threads, lane);
}

}  // namespace dcpctl
