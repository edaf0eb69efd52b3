#include "item/chunk_source.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "meta/pieces.h"
#include "util/parallel.h"

namespace dcpctl {

// The chunk is decoded (or gathered) whole once, and its windows handed out of that copy.
void LocalChunks::read(unsigned, const TensorMeta& t, size_t chunk, const WindowFn& fn, GateCharge charge) {
  uint64_t total = t.chunk_numel(chunk) * itemsize(*t.dtype);
  std::optional<GateReservation> hold;
  if (charge.gate) hold.emplace(*charge.gate, charge.bytes);
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

void ChunkSource::read_range(unsigned lane, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n,
                             uint8_t* dst) {
  uint64_t total = t.chunk_numel(chunk) * itemsize(*t.dtype);
  if (from == 0 && n == total) return read_into(lane, t, chunk, dst);
  std::vector<uint8_t> whole(total);
  read_into(lane, t, chunk, whole.data());
  std::memcpy(dst, whole.data() + from, n);
}

void assemble_box(ChunkSource& src, const TensorMeta& t, const Box& box, const std::vector<Piece>& pieces, uint8_t* dst,
                  unsigned threads, unsigned lane) {
  assemble_box(src, t, box, pieces, dst, nullptr, threads, lane);
}

void assemble_box(ChunkSource& src, const TensorMeta& t, const Box& box, const std::vector<Piece>& pieces, uint8_t* dst,
                  uint8_t* scratch, unsigned threads, unsigned lane) {
  size_t item = itemsize(*t.dtype);
  std::vector<size_t> order(pieces.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto chunk_less = [&](size_t a, size_t b) {
    const Piece &x = pieces[a], &y = pieces[b];
    return x.source != y.source ? std::less<const TensorMeta*>()(x.source, y.source) : x.chunk < y.chunk;
  };
  std::stable_sort(order.begin(), order.end(), chunk_less);
  // The pieces one chunk gives (more than one only for a key map's output: a row each, say) come
  // from one whole copy of it (the plan counts it in the record's need): one read, not one per
  // row, the chunk sent once by an ordered source, decoded once when zstd.
  std::vector<std::pair<size_t, size_t>> groups;  // [begin, end) in order
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && !chunk_less(order[i], order[j])) ++j;
    groups.push_back({i, j});
    i = j;
  }
  const unsigned readers = src.ordered() ? 1 : threads;
  // Each piece's part of `scratch`: all of it, one piece after another, for one reader; for
  // several, parts as disjoint as the pieces are (then within the box's bytes).
  std::vector<uint64_t> at(pieces.size() + 1, 0);
  for (size_t i = 0; readers > 1 && i < pieces.size(); ++i) at[i + 1] = at[i] + pieces[i].bytes;
  if (at.back() > box.numel() * item) scratch = nullptr;
  // Piece `p` out of a dense copy of its whole chunk.
  auto place = [&](const Piece& p, const uint8_t* chunk) {
    if (p.run)
      std::memcpy(dst + p.to, chunk + p.from, p.bytes);
    else
      place_piece(p, chunk, p.frames ? p.frames->chunk : chunk_box(*p.source, p.chunk), dst, box, item);
  };
  parallel_for(groups.size(), readers, [&](size_t g) {
    auto [begin, end] = groups[g];
    const Piece& first = pieces[order[begin]];
    const TensorMeta& st = *first.source;
    if (end - begin > 1) {
      std::vector<uint8_t> tmp(st.chunk_numel(first.chunk) * item);  // counted in the caller's reservation
      src.read_range(lane, st, first.chunk, 0, tmp.size(), tmp.data());
      for (size_t i = begin; i < end; ++i) {
        place(pieces[order[i]], tmp.data());
        src.done(st, first.chunk);
      }
      return;
    }
    const Piece& p = first;
    const Box& in = p.frames ? p.frames->in : p.in;
    const Box& cb = p.frames ? p.frames->chunk : chunk_box(st, p.chunk);
    const Box& tb = p.frames ? p.frames->box : box;
    std::optional<uint64_t> from;
    if (p.run) {
      src.read_range(lane, st, p.chunk, p.from, p.bytes, dst + p.to);
    } else if (src.reads_ranges() && (from = run_in(in, cb, item))) {
      std::optional<uint64_t> to;
      if (!(p.frames && p.frames->transpose)) to = run_in(in, tb, item);
      if (to) {
        src.read_range(lane, st, p.chunk, *from, p.bytes, dst + *to);
      } else {
        std::vector<uint8_t> own(scratch ? 0 : p.bytes);
        uint8_t* tmp = scratch ? scratch + at[order[begin]] : own.data();
        src.read_range(lane, st, p.chunk, *from, p.bytes, tmp);
        place_piece(p, tmp, in, dst, box, item);
      }
    } else if (src.reads_ranges()) {
      // The chunk's slab the region lies in (meta/pieces.h's row_slab: one run of its bytes, often
      // far less than the chunk), not the whole chunk the caller's reservation counts.
      const Box slab = row_slab(in, cb);
      std::vector<uint8_t> tmp(slab.numel() * item);
      src.read_range(lane, st, p.chunk, *run_in(slab, cb, item), tmp.size(), tmp.data());
      place_piece(p, tmp.data(), slab, dst, box, item);
    } else {
      std::vector<uint8_t> tmp(st.chunk_numel(p.chunk) * item);  // counted in the caller's reservation
      src.read_range(lane, st, p.chunk, 0, tmp.size(), tmp.data());
      place(p, tmp.data());
    }
    src.done(st, p.chunk);
  });
}

void read_full_tensor(ChunkSource& src, const TensorMeta& t, uint8_t* full, unsigned threads, unsigned lane) {
  // A tensor a key map builds from parts of others has no chunks of its own: read as one it would be
  // zeros, silently (the GGUF writer did that once); its record's pieces are what to assemble.
  if (t.num_chunks() == 0 && t.numel() > 0)
    throw std::logic_error("read_full_tensor: '" + t.fqn + "' has no stored chunks (a tensor a map builds)");
  Box whole = whole_box(t);
  assemble_box(src, t, whole, plan_pieces(t, whole), full, threads, lane);
}

}  // namespace dcpctl
