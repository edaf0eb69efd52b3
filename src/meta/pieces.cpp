#include "meta/pieces.h"

#include <algorithm>
#include <cstring>

#include "util/dtype.h"

namespace dcpctl {

Box chunk_box(const TensorMeta& t, size_t chunk) {
  return {std::vector<int64_t>(t.chunk_offsets(chunk), t.chunk_offsets(chunk) + t.ndim()),
          std::vector<int64_t>(t.chunk_sizes(chunk), t.chunk_sizes(chunk) + t.ndim())};
}

Box whole_box(const TensorMeta& t) {
  return {std::vector<int64_t>(t.ndim(), 0), t.shape};
}

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
  for (size_t d = 0; d < shape.size(); ++d)
    at = at * static_cast<uint64_t>(shape[d]) + static_cast<uint64_t>(b.offsets[d]);
  return at;
}

void copy_box(const uint8_t* src, const Box& sb, uint8_t* dst, const Box& db, const Box& in, size_t item) {
  size_t nd = in.offsets.size();
  if (in.numel() == 0) return;
  // The run: trailing dims all three boxes span alike, plus the first dim before them.
  uint64_t run = item;
  size_t d = nd;
  while (d > 0 && in.sizes[d - 1] == sb.sizes[d - 1] && in.sizes[d - 1] == db.sizes[d - 1])
    run *= static_cast<uint64_t>(in.sizes[--d]);
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

namespace {

template <size_t N>
void transpose_rows(const uint8_t* src, uint64_t s_row, uint8_t* dst, uint64_t d_col, int64_t rows, int64_t cols) {
  // Element (a, b) of the source's last two dims lands at (b, a): the source walks a row, the
  // destination a column.
  for (int64_t a = 0; a < rows; ++a) {
    const uint8_t* sp = src + static_cast<uint64_t>(a) * s_row;
    uint8_t* dp = dst + static_cast<uint64_t>(a) * N;
    for (int64_t b = 0; b < cols; ++b)
      std::memcpy(dp + static_cast<uint64_t>(b) * d_col, sp + static_cast<uint64_t>(b) * N, N);
  }
}

}  // namespace

void copy_box_transposed(const uint8_t* src, const Box& sb, uint8_t* dst, const Box& db, const Box& in, size_t item) {
  const size_t nd = in.offsets.size();
  if (in.numel() == 0 || nd < 2) return;
  std::vector<uint64_t> ss(nd, item);
  for (size_t k = nd; k-- > 1;) ss[k - 1] = ss[k] * static_cast<uint64_t>(sb.sizes[k]);
  // The destination's C-order strides over db's sizes with the last two exchanged, then given
  // back to the source frame's dims (the last two exchanged again).
  std::vector<int64_t> os = db.sizes;
  std::swap(os[nd - 2], os[nd - 1]);
  std::vector<uint64_t> ds(nd, item);
  for (size_t k = nd; k-- > 1;) ds[k - 1] = ds[k] * static_cast<uint64_t>(os[k]);
  std::swap(ds[nd - 2], ds[nd - 1]);
  uint64_t s0 = 0, d0 = 0;
  for (size_t k = 0; k < nd; ++k) {
    s0 += static_cast<uint64_t>(in.offsets[k] - sb.offsets[k]) * ss[k];
    d0 += static_cast<uint64_t>(in.offsets[k] - db.offsets[k]) * ds[k];
  }
  const size_t outer = nd - 2;
  std::vector<int64_t> idx(outer, 0);
  const int64_t rows = in.sizes[nd - 2], cols = in.sizes[nd - 1];
  while (true) {
    uint64_t so = s0, dof = d0;
    for (size_t k = 0; k < outer; ++k) {
      so += static_cast<uint64_t>(idx[k]) * ss[k];
      dof += static_cast<uint64_t>(idx[k]) * ds[k];
    }
    switch (item) {
      case 1: transpose_rows<1>(src + so, ss[nd - 2], dst + dof, ds[nd - 1], rows, cols); break;
      case 2: transpose_rows<2>(src + so, ss[nd - 2], dst + dof, ds[nd - 1], rows, cols); break;
      case 4: transpose_rows<4>(src + so, ss[nd - 2], dst + dof, ds[nd - 1], rows, cols); break;
      case 8: transpose_rows<8>(src + so, ss[nd - 2], dst + dof, ds[nd - 1], rows, cols); break;
      default:
        for (int64_t a = 0; a < rows; ++a)
          for (int64_t b = 0; b < cols; ++b)
            std::memcpy(dst + dof + static_cast<uint64_t>(a) * ds[nd - 2] + static_cast<uint64_t>(b) * ds[nd - 1],
                        src + so + static_cast<uint64_t>(a) * ss[nd - 2] + static_cast<uint64_t>(b) * ss[nd - 1], item);
    }
    size_t k = outer;
    while (k-- > 0) {
      if (++idx[k] < in.sizes[k]) break;
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) break;
  }
}

void place_piece(const Piece& p, const uint8_t* src, const Box& from, uint8_t* dst, const Box& box, size_t item) {
  if (p.frames && p.frames->transpose)
    copy_box_transposed(src, from, dst, p.frames->box, p.frames->in, item);
  else if (p.frames)
    copy_box(src, from, dst, p.frames->box, p.frames->in, item);
  else
    copy_box(src, from, dst, box, p.in, item);
}

Box row_slab(const Box& in, const Box& chunk) {
  Box slab = chunk;
  size_t d = 0;
  while (d < chunk.sizes.size() && chunk.sizes[d] == 1) ++d;
  if (d < chunk.sizes.size()) {
    slab.offsets[d] = in.offsets[d];
    slab.sizes[d] = in.sizes[d];
  }
  return slab;
}

std::vector<Box> run_boxes(const std::vector<int64_t>& shape, uint64_t first, uint64_t count) {
  std::vector<Box> out;
  if (count == 0) return out;
  const size_t nd = shape.size();
  if (nd == 0) return {Box{}};
  std::vector<uint64_t> stride(nd, 1);  // elements in one index of dim d
  for (size_t d = nd - 1; d-- > 0;) stride[d] = stride[d + 1] * static_cast<uint64_t>(shape[d + 1]);
  const uint64_t end = first + count;
  for (uint64_t at = first; at < end;) {
    // The outermost dimension whose whole slices start here and fit before the end.
    size_t d = 0;
    while (d + 1 < nd && !(at % stride[d] == 0 && at + stride[d] <= end)) ++d;
    Box b{std::vector<int64_t>(nd, 0), std::vector<int64_t>(nd, 1)};
    for (size_t k = 0, rest = at; k < nd; ++k) {
      b.offsets[k] = static_cast<int64_t>(rest / stride[k]);
      rest %= stride[k];
    }
    const uint64_t rows = std::min((end - at) / stride[d], static_cast<uint64_t>(shape[d] - b.offsets[d]));
    b.sizes[d] = static_cast<int64_t>(rows);
    for (size_t k = d + 1; k < nd; ++k) b.sizes[k] = shape[k];
    at += rows * stride[d];
    out.push_back(std::move(b));
  }
  return out;
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
    p.source = &t;
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
  if (all_runs)
    std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.to < b.to; });
  return pieces;
}

std::optional<uint64_t> run_in(const Box& in, const Box& b, size_t item) {
  if (!is_run(in, b.sizes)) return std::nullopt;
  uint64_t at = 0;
  for (size_t d = 0; d < b.sizes.size(); ++d)
    at = at * static_cast<uint64_t>(b.sizes[d]) + static_cast<uint64_t>(in.offsets[d] - b.offsets[d]);
  return at * item;
}

namespace {

// `units` unit dimensions inserted at `dim` (offset `offset`), or taken out from there.
Box with_unit(const Box& b, int dim, int64_t offset, int units = 1) {
  Box o = b;
  o.offsets.insert(o.offsets.begin() + dim, static_cast<size_t>(units), offset);
  o.sizes.insert(o.sizes.begin() + dim, static_cast<size_t>(units), 1);
  return o;
}
Box without(const Box& b, int dim, int units = 1) {
  Box o = b;
  o.offsets.erase(o.offsets.begin() + dim, o.offsets.begin() + dim + units);
  o.sizes.erase(o.sizes.begin() + dim, o.sizes.begin() + dim + units);
  return o;
}
Box shifted(Box b, const std::vector<int64_t>& by, int sign) {
  for (size_t d = 0; d < b.offsets.size(); ++d) b.offsets[d] += sign * by[d];
  return b;
}

// Whether chunk `c` of `t` meets box `s` (what intersect of its chunk_box and `s` says), asked
// without making the chunk's box: a part of a stack of 384 experts is asked of every one of the
// stack's chunks (2,048 of them under EP x FSDP), for each of its 384 outputs.
bool chunk_meets(const TensorMeta& t, size_t c, const Box& s) {
  const int64_t *o = t.chunk_offsets(c), *z = t.chunk_sizes(c);
  const size_t nd = t.ndim();
  for (size_t d = 0; d < nd; ++d)
    if (z[d] == 0 || s.sizes[d] == 0) return false;
  for (size_t d = 0; d < nd; ++d)
    if (std::min(o[d] + z[d], s.offsets[d] + s.sizes[d]) <= std::max(o[d], s.offsets[d])) return false;
  return true;
}

// The pieces of region `s` of saved tensor `t` (its coordinates), which lands at `d` of the output
// (the output's coordinates; `s` and `d` hold the same elements in the same order, with a unit
// dimension `drop` of `s` or `add` of `d` the other lacks, `units` of them from there), inside
// target box `target`.
void region_pieces(const TensorMeta& t, const Box& s, const Box& d, int drop, int add, int units, const Box& target,
                   size_t item, std::vector<Piece>& out) {
  // The big frame: the one with a dimension more, else the saved tensor's. shift takes a box of
  // the saved tensor there (after its unit dimension is added) to the output's (likewise).
  const bool out_frame = add >= 0;
  Box s_big = out_frame ? with_unit(s, add, 0, units) : s;
  Box d_big = drop >= 0 ? with_unit(d, drop, 0, units) : d;
  std::vector<int64_t> shift(s_big.offsets.size());
  for (size_t k = 0; k < shift.size(); ++k) shift[k] = d_big.offsets[k] - s_big.offsets[k];
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    if (!chunk_meets(t, c, s)) continue;
    Box cb = chunk_box(t, c);
    Piece p;
    if (!intersect(cb, s, p.in)) continue;
    p.source = &t;
    p.chunk = static_cast<uint32_t>(c);
    p.bytes = p.in.numel() * item;
    // The region in the output's coordinates.
    Box r_big = shifted(out_frame ? with_unit(p.in, add, 0, units) : p.in, shift, 1);
    Box rd = drop >= 0 ? without(r_big, drop, units) : r_big;
    std::optional<uint64_t> from = run_in(p.in, cb, item), to = run_in(rd, target, item);
    if (from && to) {
      p.run = true;
      p.from = *from;
      p.to = *to;
    } else {
      auto f = std::make_shared<PieceFrames>();
      if (out_frame) {
        f->in = r_big;
        f->chunk = shifted(with_unit(cb, add, 0, units), shift, 1);
        f->box = target;
      } else {
        f->in = p.in;
        f->chunk = cb;
        f->box = shifted(drop >= 0 ? with_unit(target, drop, 0, units) : target, shift, -1);
      }
      p.frames = std::move(f);
    }
    out.push_back(std::move(p));
  }
}

std::vector<int64_t> swap_last(std::vector<int64_t> v) {
  std::swap(v[v.size() - 2], v[v.size() - 1]);
  return v;
}

// The pieces of a transposed part (MapPart::transpose) inside `target`: the part lands at
// to + its sizes with the last two swapped. Each is copied with the target box in the saved
// tensor's frame (the box's bytes hold it transposed). A part taken out of a stack (`drop`) or put
// into one (`add`) is placed in the frame with the stack's dims: the saved tensor's, or the saved
// tensor's with the output's stack dims inserted where the part lands on them (the target may span
// several entries of the stack; they are not among the last two dims, so the swap is the same).
void transposed_pieces(const TensorMeta& t, const MapPart& part, const Box& target, size_t item,
                       std::vector<Piece>& out) {
  const int units = part.units;
  std::vector<int64_t> from_at = part.from.offsets, from_size = part.from.sizes, to_big = part.to;
  if (part.add >= 0)
    for (int u = 0; u < units; ++u) {
      from_at.insert(from_at.begin() + part.add + u, part.to[static_cast<size_t>(part.add + u)]);
      from_size.insert(from_size.begin() + part.add + u, 1);
    }
  if (part.drop >= 0) to_big.insert(to_big.begin() + part.drop, static_cast<size_t>(units), 0);
  std::vector<int64_t> land = swap_last(from_size);  // its sizes in the output's frame
  if (part.drop >= 0) land.erase(land.begin() + part.drop, land.begin() + part.drop + units);
  Box d{part.to, land}, in;
  if (!intersect(d, target, in)) return;
  const std::vector<int64_t> to_sw = swap_last(to_big);
  auto to_saved = [&](const Box& b) {  // an output box in the big frame, its last two swapped back
    Box o = part.drop >= 0 ? with_unit(b, part.drop, 0, units) : b;
    o = Box{swap_last(o.offsets), swap_last(o.sizes)};
    for (size_t k = 0; k < o.offsets.size(); ++k) o.offsets[k] += from_at[k] - to_sw[k];
    return o;
  };
  const Box s_big = to_saved(in);
  const Box box = to_saved(target);
  const Box s = part.add >= 0 ? without(s_big, part.add, units) : s_big;
  auto big =
      [&](const Box& b) {  // a box of the saved tensor in the big frame (the part's place on the output's stack dims)
        if (part.add < 0) return b;
        Box o = b;
        for (int u = 0; u < units; ++u) {
          o.offsets.insert(o.offsets.begin() + part.add + u, s_big.offsets[static_cast<size_t>(part.add + u)]);
          o.sizes.insert(o.sizes.begin() + part.add + u, 1);
        }
        return o;
      };
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    if (!chunk_meets(t, c, s)) continue;
    Box cb = chunk_box(t, c);
    Piece p;
    if (!intersect(cb, s, p.in)) continue;
    p.source = &t;
    p.chunk = static_cast<uint32_t>(c);
    p.bytes = p.in.numel() * item;
    auto f = std::make_shared<PieceFrames>();
    f->in = big(p.in);
    f->chunk = big(cb);
    f->box = box;
    f->transpose = true;
    p.frames = std::move(f);
    out.push_back(std::move(p));
  }
}

}  // namespace

std::vector<Piece> plan_mapped_pieces(const Metadata& md, const MappedTensor& mt, const Box& target) {
  std::vector<Piece> out;
  size_t item = itemsize(*mt.meta.dtype);
  for (const MapPart& part : mt.parts) {
    const TensorMeta& t = md.tensors[part.tensor];
    if (part.transpose) {
      transposed_pieces(t, part, target, item, out);
      continue;
    }
    // Where the part lands in the output.
    Box d;
    d.offsets = part.to;
    d.sizes = part.from.sizes;
    const int units = part.units;
    if (part.drop >= 0) d.sizes.erase(d.sizes.begin() + part.drop, d.sizes.begin() + part.drop + units);
    if (part.add >= 0) d.sizes.insert(d.sizes.begin() + part.add, static_cast<size_t>(units), 1);
    Box in;
    if (!intersect(d, target, in)) continue;
    // The same elements in the saved tensor.
    auto to_saved = [&](const Box& b) {
      Box o = part.add >= 0 ? without(b, part.add, units) : b;
      std::vector<int64_t> to = part.to;
      if (part.add >= 0) to.erase(to.begin() + part.add, to.begin() + part.add + units);
      if (part.drop >= 0) {
        o = with_unit(o, part.drop, 0, units);
        to.insert(to.begin() + part.drop, static_cast<size_t>(units), 0);
      }
      for (size_t k = 0; k < o.offsets.size(); ++k) o.offsets[k] += part.from.offsets[k] - to[k];
      return o;
    };
    if (!part.rows) {
      region_pieces(t, to_saved(in), in, part.drop, part.add, units, target, item, out);
      continue;
    }
    // Reordered rows: each output row from its saved row.
    for (int64_t r = in.offsets[0]; r < in.offsets[0] + in.sizes[0]; ++r) {
      Box row = in;
      row.offsets[0] = r;
      row.sizes[0] = 1;
      Box s = to_saved(row);
      s.offsets[0] = part.from.offsets[0] + (*part.rows)[static_cast<size_t>(r - part.to[0])];
      region_pieces(t, s, row, part.drop, part.add, units, target, item, out);
    }
  }
  return out;
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

bool chunk_is_run(const TensorMeta& t, size_t chunk) {
  return is_run(chunk_box(t, chunk), t.shape);
}

}  // namespace dcpctl
