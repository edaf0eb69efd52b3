#include "meta/geometry.h"

#include <algorithm>
#include <map>

namespace dcpctl {

std::string dims_text(const int64_t* d, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

std::string Box::text() const {
  std::string s = "[";
  for (size_t d = 0; d < offsets.size(); ++d)
    s += (d ? ", " : "") + std::to_string(offsets[d]) + ":" + std::to_string(offsets[d] + sizes[d]);
  return s + "]";
}

namespace {

bool chunk_empty(const TensorMeta& t, size_t i) {
  const int64_t* s = t.chunk_sizes(i);
  for (size_t d = 0; d < t.ndim(); ++d)
    if (s[d] == 0) return true;
  return false;
}

bool in_bounds(const TensorMeta& t, size_t i) {
  const int64_t* o = t.chunk_offsets(i);
  const int64_t* s = t.chunk_sizes(i);
  for (size_t d = 0; d < t.ndim(); ++d)
    if (o[d] < 0 || s[d] < 0 || o[d] > t.shape[d] || s[d] > t.shape[d] - o[d]) return false;
  return true;
}

uint64_t volume(const std::vector<int64_t>& sizes) {
  uint64_t v = 1;
  for (int64_t s : sizes) v *= static_cast<uint64_t>(s);
  return v;
}

constexpr uint64_t kMaxCells = 1ull << 24;

// The chunks that cover something: non-empty and in bounds. The others are counted in c (empty)
// or listed (out of bounds).
std::vector<size_t> live_chunks(const TensorMeta& t, Coverage& c) {
  std::vector<size_t> live;
  for (size_t i = 0; i < t.num_chunks(); ++i) {
    bool empty = chunk_empty(t, i);
    if (!in_bounds(t, i)) {
      // A zero-size shard may sit at offset == shape (DCP's convention); in_bounds allows that.
      c.out_of_bounds.push_back(i);
      c.exact = false;
      continue;
    }
    if (empty) {
      ++c.empty_chunks;
      continue;
    }
    live.push_back(i);
  }
  return live;
}

// The common layout: the live chunks, in order, stack along dim 0 and each spans every other dim
// (DCP's Shard(0)/FSDP chunks). They tile the tensor exactly.
bool stacked_slabs(const TensorMeta& t, const std::vector<size_t>& live) {
  const size_t nd = t.ndim();
  int64_t next = 0;
  bool slabs = true;
  for (size_t k = 0; k < live.size() && slabs; ++k) {
    const int64_t* o = t.chunk_offsets(live[k]);
    const int64_t* s = t.chunk_sizes(live[k]);
    slabs = o[0] == next;
    for (size_t d = 1; d < nd && slabs; ++d) slabs = o[d] == 0 && s[d] == t.shape[d];
    next += s[0];  // in bounds (checked above), so no overflow
  }
  return slabs && next == t.shape[0];
}

using Cuts = std::vector<std::vector<int64_t>>;

// Coordinate compression: breakpoints per dimension.
Cuts cut_points(const TensorMeta& t, const std::vector<size_t>& live) {
  const size_t nd = t.ndim();
  Cuts cuts(nd);
  for (size_t d = 0; d < nd; ++d) {
    cuts[d] = {0, t.shape[d]};
    for (size_t i : live) {
      cuts[d].push_back(t.chunk_offsets(i)[d]);
      cuts[d].push_back(t.chunk_offsets(i)[d] + t.chunk_sizes(i)[d]);
    }
    std::sort(cuts[d].begin(), cuts[d].end());
    cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
  }
  return cuts;
}

// How many live chunks cover each cell of the grid the cuts make (up to 255).
std::vector<uint8_t> count_cells(const TensorMeta& t, const std::vector<size_t>& live, const Cuts& cuts,
                                 uint64_t cells) {
  const size_t nd = t.ndim();
  std::vector<uint8_t> count(static_cast<size_t>(cells), 0);
  std::vector<size_t> lo(nd), hi(nd), idx(nd);
  for (size_t i : live) {
    for (size_t d = 0; d < nd; ++d) {
      lo[d] = static_cast<size_t>(std::lower_bound(cuts[d].begin(), cuts[d].end(), t.chunk_offsets(i)[d]) -
                                  cuts[d].begin());
      hi[d] = static_cast<size_t>(
          std::lower_bound(cuts[d].begin(), cuts[d].end(), t.chunk_offsets(i)[d] + t.chunk_sizes(i)[d]) -
          cuts[d].begin());
      idx[d] = lo[d];
    }
    while (true) {
      size_t flat = 0;
      for (size_t d = 0; d < nd; ++d) flat = flat * (cuts[d].size() - 1) + idx[d];
      if (count[flat] < 255) ++count[flat];
      size_t d = nd;
      while (d-- > 0) {
        if (++idx[d] < hi[d]) break;
        idx[d] = lo[d];
      }
      if (d == static_cast<size_t>(-1)) break;
    }
  }
  return count;
}

// Walk the cells: report holes and overlaps.
void report_cells(const Cuts& cuts, const std::vector<uint8_t>& count, size_t max_report, Coverage& c) {
  const size_t nd = cuts.size();
  for (uint64_t flat = 0; flat < count.size(); ++flat) {
    if (count[flat] != 1) {
      Box b;
      uint64_t rem = flat;
      b.offsets.assign(nd, 0);
      b.sizes.assign(nd, 0);
      for (size_t d = nd; d-- > 0;) {
        size_t k = static_cast<size_t>(rem % (cuts[d].size() - 1));
        rem /= cuts[d].size() - 1;
        b.offsets[d] = cuts[d][k];
        b.sizes[d] = cuts[d][k + 1] - cuts[d][k];
      }
      uint64_t v = volume(b.sizes);
      c.exact = false;
      if (count[flat] == 0) {
        c.missing_elements += v;
        if (c.holes.size() < max_report) c.holes.push_back(std::move(b));
      } else {
        c.overlap_elements += v;
      }
    }
  }
}

// Rare fallback, where the grid has too many cells: volumes and a sweep over dim 0 for
// overlapping pairs.
void sweep_dim0(const TensorMeta& t, const std::vector<size_t>& live, size_t max_report, Coverage& c) {
  const size_t nd = t.ndim();
  uint64_t covered = 0;
  for (size_t i : live) covered += t.chunk_numel(i);
  std::vector<size_t> order = live;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return t.chunk_offsets(a)[0] < t.chunk_offsets(b)[0]; });
  for (size_t x = 0; x < order.size(); ++x) {
    size_t a = order[x];
    for (size_t y = x + 1; y < order.size(); ++y) {
      size_t b = order[y];
      if (t.chunk_offsets(b)[0] >= t.chunk_offsets(a)[0] + t.chunk_sizes(a)[0]) break;
      uint64_t ov = 1;
      for (size_t d = 0; d < nd && ov; ++d) {
        int64_t l = std::max(t.chunk_offsets(a)[d], t.chunk_offsets(b)[d]);
        int64_t h = std::min(t.chunk_offsets(a)[d] + t.chunk_sizes(a)[d], t.chunk_offsets(b)[d] + t.chunk_sizes(b)[d]);
        ov = h > l ? ov * static_cast<uint64_t>(h - l) : 0;
      }
      if (ov) {
        c.exact = false;
        c.overlap_elements += ov;
        if (c.overlaps.size() < max_report) c.overlaps.emplace_back(a, b);
      }
    }
  }
  if (covered - c.overlap_elements < t.numel()) {
    c.exact = false;
    c.missing_elements = t.numel() - (covered - c.overlap_elements);
  }
}

// Overlapping chunk pairs named for the grid path too (bounded).
void name_overlaps(const TensorMeta& t, const std::vector<size_t>& live, size_t max_report, Coverage& c) {
  const size_t nd = t.ndim();
  for (size_t x = 0; x < live.size() && c.overlaps.size() < max_report; ++x)
    for (size_t y = x + 1; y < live.size() && c.overlaps.size() < max_report; ++y) {
      bool ov = true;
      for (size_t d = 0; d < nd && ov; ++d) {
        int64_t l = std::max(t.chunk_offsets(live[x])[d], t.chunk_offsets(live[y])[d]);
        int64_t h = std::min(t.chunk_offsets(live[x])[d] + t.chunk_sizes(live[x])[d],
                             t.chunk_offsets(live[y])[d] + t.chunk_sizes(live[y])[d]);
        ov = h > l;
      }
      if (ov) c.overlaps.emplace_back(live[x], live[y]);
    }
}

}  // namespace

Coverage check_coverage(const TensorMeta& t, size_t max_report) {
  Coverage c;
  const size_t nd = t.ndim();
  std::vector<size_t> live = live_chunks(t, c);  // non-empty, in-bounds chunks
  if (t.numel() == 0) return c;                  // nothing to cover
  // The common layout first: the grid below would find no hole and no overlap, so the answer is
  // what live_chunks found.
  if (nd > 0 && stacked_slabs(t, live)) return c;
  Cuts cuts = cut_points(t, live);
  uint64_t cells = 1;
  for (size_t d = 0; d < nd && cells <= kMaxCells; ++d) cells *= cuts[d].size() - 1;
  if (cells <= kMaxCells)
    report_cells(cuts, count_cells(t, live, cuts, cells), max_report, c);
  else
    sweep_dim0(t, live, max_report, c);
  if (c.overlap_elements && c.overlaps.empty()) name_overlaps(t, live, max_report, c);
  return c;
}

std::string describe_sharding(const TensorMeta& t) {
  return describe_sharding(t, check_coverage(t, 1));
}

std::string describe_sharding(const TensorMeta& t, const Coverage& c) {
  size_t n = t.num_chunks();
  if (n == 0) return "no chunks";
  size_t nd = t.ndim();
  std::vector<size_t> live;
  for (size_t i = 0; i < n; ++i)
    if (!chunk_empty(t, i) || t.numel() == 0) live.push_back(i);
  size_t empty = n - live.size();
  if (live.size() == 1 && t.numel() > 0) {
    const int64_t* s = t.chunk_sizes(live[0]);
    if (std::equal(s, s + nd, t.shape.begin())) return empty ? "whole (+" + std::to_string(empty) + " empty)" : "whole";
  }
  if (n == 1) return "whole";
  // Distinct offsets per dimension among non-empty chunks.
  std::vector<size_t> split_dims;
  uint64_t grid = 1;
  for (size_t d = 0; d < nd; ++d) {
    std::vector<int64_t> offs;
    for (size_t i : live) offs.push_back(t.chunk_offsets(i)[d]);
    if (!std::is_sorted(offs.begin(), offs.end())) std::sort(offs.begin(), offs.end());  // (Shard(0): in order)
    size_t k = static_cast<size_t>(std::unique(offs.begin(), offs.end()) - offs.begin());
    if (k > 1) {
      split_dims.push_back(d);
      grid *= k;
    }
  }
  if (!c.exact || grid != live.size()) return "irregular (" + std::to_string(n) + " chunks)";
  std::string suffix = empty ? " (" + std::to_string(empty) + " empty)" : "";
  if (split_dims.size() == 1) return "Shard(" + std::to_string(split_dims[0]) + ") over " + std::to_string(n) + suffix;
  std::string s;
  for (size_t d : split_dims) {
    std::vector<int64_t> offs;
    for (size_t i : live) offs.push_back(t.chunk_offsets(i)[d]);
    if (!std::is_sorted(offs.begin(), offs.end())) std::sort(offs.begin(), offs.end());
    s += (s.empty() ? "" : "x") + std::to_string(std::unique(offs.begin(), offs.end()) - offs.begin());
  }
  std::string dims;
  for (size_t d : split_dims) dims += (dims.empty() ? "" : ", ") + std::string("Shard(") + std::to_string(d) + ")";
  return s + " grid (" + dims + ")" + suffix;
}

}  // namespace dcpctl
