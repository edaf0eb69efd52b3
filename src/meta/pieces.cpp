#include "meta/pieces.h"

#include <algorithm>
#include <cstring>

#include "util/dtype.h"

namespace dcpctl {

Box chunk_box(const TensorMeta& t, size_t chunk) {
  return {std::vector<int64_t>(t.chunk_offsets(chunk), t.chunk_offsets(chunk) + t.ndim()),
          std::vector<int64_t>(t.chunk_sizes(chunk), t.chunk_sizes(chunk) + t.ndim())};
}

Box whole_box(const TensorMeta& t) { return {std::vector<int64_t>(t.ndim(), 0), t.shape}; }

bool intersect(const Box& a, const Box& b, Box& out) {
  size_t nd = a.offsets.size();
  out.offsets.resize(nd);
  out.sizes.resize(nd);
  if (a.numel() == 0 || b.numel() == 0) return false;
  for (size_t d = 0; d < nd; ++d) {
    int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return false;
    out.offsets[d] = lo;
    out.sizes[d] = hi - lo;
  }
  return true;
}

bool is_run(const Box& b, const std::vector<int64_t>& shape) {
  size_t d = 0;
  while (d < shape.size() && b.sizes[d] == 1) ++d;  // leading unit dims
  for (size_t k = d + 1; k < shape.size(); ++k)
    if (b.sizes[k] != shape[k]) return false;
  return true;
}

uint64_t first_element(const Box& b, const std::vector<int64_t>& shape) {
  uint64_t at = 0;
  for (size_t d = 0; d < shape.size(); ++d) at = at * static_cast<uint64_t>(shape[d]) + static_cast<uint64_t>(b.offsets[d]);
  return at;
}

void copy_box(const uint8_t* src, const Box& sb, uint8_t* dst, const Box& db, const Box& in, size_t item) {
  size_t nd = in.offsets.size();
  if (in.numel() == 0) return;
  // The run: trailing dims all three boxes span alike, plus the first dim before them.
  uint64_t run = item;
  size_t d = nd;
  while (d > 0 && in.sizes[d - 1] == sb.sizes[d - 1] && in.sizes[d - 1] == db.sizes[d - 1]) run *= static_cast<uint64_t>(in.sizes[--d]);
  if (d > 0) run *= static_cast<uint64_t>(in.sizes[--d]);
  auto strides = [&](const Box& b) {
    std::vector<uint64_t> s(nd, item);
    for (size_t k = nd; k-- > 1;) s[k - 1] = s[k] * static_cast<uint64_t>(b.sizes[k]);
    return s;
  };
  std::vector<uint64_t> ss = strides(sb), ds = strides(db);
  uint64_t s0 = 0, d0 = 0;
  for (size_t k = 0; k < nd; ++k) {
    s0 += static_cast<uint64_t>(in.offsets[k] - sb.offsets[k]) * ss[k];
    d0 += static_cast<uint64_t>(in.offsets[k] - db.offsets[k]) * ds[k];
  }
  // Iterate over the outer dims [0, d) of the region.
  std::vector<int64_t> idx(d, 0);
  while (true) {
    uint64_t so = s0, dof = d0;
    for (size_t k = 0; k < d; ++k) {
      so += static_cast<uint64_t>(idx[k]) * ss[k];
      dof += static_cast<uint64_t>(idx[k]) * ds[k];
    }
    std::memcpy(dst + dof, src + so, run);
    size_t k = d;
    while (k-- > 0) {
      if (++idx[k] < in.sizes[k]) break;
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) break;
  }
}

std::vector<Piece> plan_pieces(const TensorMeta& t, const Box& target) {
  uint64_t item = itemsize(*t.dtype);
  bool target_run = is_run(target, t.shape);
  uint64_t target_first = first_element(target, t.shape);
  std::vector<Piece> pieces;
  bool all_runs = true;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    Box sb = chunk_box(t, c);
    Piece p;
    if (!intersect(sb, target, p.in)) continue;
    p.chunk = static_cast<uint32_t>(c);
    p.bytes = p.in.numel() * item;
    p.run = target_run && is_run(sb, t.shape);
    if (p.run) {
      // Both are ranges of the flat tensor, so their common elements are one range too.
      uint64_t lo = first_element(p.in, t.shape);
      p.from = (lo - first_element(sb, t.shape)) * item;
      p.to = (lo - target_first) * item;
    }
    all_runs = all_runs && p.run;
    pieces.push_back(std::move(p));
  }
  if (all_runs) std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.to < b.to; });
  return pieces;
}

bool runs_tile(const std::vector<Piece>& pieces, uint64_t total) {
  uint64_t at = 0;
  for (const Piece& p : pieces) {
    if (!p.run || p.to != at) return false;
    at += p.bytes;
  }
  return at == total;
}

uint64_t chunk_start(const TensorMeta& t, size_t chunk) {
  return first_element(chunk_box(t, chunk), t.shape) * itemsize(*t.dtype);
}

bool chunk_is_run(const TensorMeta& t, size_t chunk) { return is_run(chunk_box(t, chunk), t.shape); }

}  // namespace dcpctl
