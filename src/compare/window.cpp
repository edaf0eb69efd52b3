#include "compare/window.h"

#include <algorithm>
#include <cstring>

namespace dcpctl {

namespace {

// Product of shape[from..], saturating (shapes come from files).
uint64_t block(const std::vector<int64_t>& shape, size_t from) {
  uint64_t n = 1;
  for (size_t d = from; d < shape.size(); ++d)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(shape[d]), &n)) return UINT64_MAX;
  return n;
}

}  // namespace

uint64_t window_budget(const Metadata& md, uint64_t max_memory) {
  for (const auto& t : md.tensors)
    for (const auto& ref : t.storage)
      if (ref.transforms != 0) return max_memory / 2;
  return max_memory;
}

std::vector<Window> plan_windows(const std::vector<int64_t>& shape, uint64_t max_elems) {
  std::vector<Window> out;
  max_elems = std::max<uint64_t>(max_elems, 1);
  uint64_t total = block(shape, 0);
  if (total == 0) return out;
  if (shape.empty()) return {Window{0, 1}};
  size_t k = 0;
  while (k + 1 < shape.size() && block(shape, k + 1) > max_elems) ++k;
  uint64_t inner = block(shape, k + 1);
  uint64_t rows = std::max<uint64_t>(1, max_elems / inner);
  uint64_t extent = static_cast<uint64_t>(shape[k]);
  uint64_t outer = block(std::vector<int64_t>(shape.begin(), shape.begin() + static_cast<long>(k)), 0);
  for (uint64_t o = 0; o < outer; ++o)
    for (uint64_t r = 0; r < extent; r += rows)
      out.push_back(Window{(o * extent + r) * inner, (std::min(r + rows, extent) - r) * inner});
  return out;
}

std::vector<int64_t> unravel(const std::vector<int64_t>& shape, uint64_t i) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    uint64_t s = static_cast<uint64_t>(std::max<int64_t>(shape[d], 1));
    idx[d] = static_cast<int64_t>(i % s);
    i /= s;
  }
  return idx;
}

// One chunk's part of a window: chunk elements [from, from + n), rows [lo, hi) of the split
// dimension k of a window box of rows [r0, r1) starting at multi-index `first`.
struct WindowFiller::Part {
  size_t chunk;
  uint64_t from, n;
  int64_t lo, hi;
  bool spans;  // the chunk spans every trailing dimension: its part lands in one piece
};

// The box geometry of fill(): f(part, k, r0, r1) for each chunk holding part of window w.
template <class F>
void WindowFiller::each_part(const Window& w, F&& f) const {
  const size_t nd = t_.ndim();
  const std::vector<int64_t>& shape = t_.shape;
  // Recover the window's box: the split dimension k is the first whose trailing block is at most
  // the window (windows either cover whole rows of k or are single rows of it).
  size_t k = 0;
  while (k + 1 < nd && block(shape, k + 1) > w.numel) ++k;
  uint64_t inner = block(shape, k + 1);
  std::vector<int64_t> first = unravel(shape, w.start);
  int64_t r0 = first[k], r1 = r0 + static_cast<int64_t>(w.numel / inner);
  for (size_t c = 0; c < t_.num_chunks(); ++c) {
    const int64_t* off = t_.chunk_offsets(c);
    const int64_t* sz = t_.chunk_sizes(c);
    if (t_.chunk_numel(c) == 0) continue;
    bool inside = true;
    for (size_t d = 0; d < k && inside; ++d) inside = off[d] <= first[d] && first[d] < off[d] + sz[d];
    int64_t lo = std::max(r0, off[k]), hi = std::min(r1, off[k] + sz[k]);
    if (!inside || lo >= hi) continue;
    // The chunk's part: its local index (first[d] - off[d] before k, lo - off[k] at k, 0 after)
    // and every trailing element of the chunk, one run of its dense bytes.
    uint64_t local = 0, chunk_inner = 1;
    for (size_t d = nd; d-- > 0;) {
      int64_t li = d < k ? first[d] - off[d] : d == k ? lo - off[k] : 0;
      local += static_cast<uint64_t>(li) * chunk_inner;
      chunk_inner *= static_cast<uint64_t>(sz[d]);
    }
    uint64_t trailing = 1;
    bool spans = true;
    for (size_t d = k + 1; d < nd; ++d) {
      trailing *= static_cast<uint64_t>(sz[d]);
      spans = spans && sz[d] == shape[d];
    }
    f(Part{c, local, static_cast<uint64_t>(hi - lo) * trailing, lo, hi, spans}, k, r0, r1, inner);
  }
}

WindowFiller::WindowFiller(const ItemReader& reader, const TensorMeta& t, MemoryGate* gate, const std::vector<Window>& windows)
    : reader_(reader), t_(t), item_(itemsize(*t.dtype)), runs_(t.num_chunks()), decoded_(reader, gate) {
  if (t_.ndim() == 0) return;
  for (const Window& w : windows)
    each_part(w, [&](const Part& p, size_t, int64_t, int64_t, uint64_t) { decoded_.expect(t_, p.chunk); });
}

WindowFiller::~WindowFiller() = default;

void WindowFiller::read(size_t chunk, uint64_t from, uint64_t n, uint8_t* dst) {
  std::optional<DirectRun> run;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (runs_[chunk]) {
      known = true;
      run = *runs_[chunk];
    }
  }
  if (!known) {
    run = reader_.direct_run(t_, chunk);
    std::lock_guard<std::mutex> lock(mu_);
    runs_[chunk] = run;
  }
  if (run)
    run->file->read_at(run->offset + from, dst, n, t_.fqn);
  else
    decoded_.read(t_, chunk, from, n, dst);
}

void WindowFiller::fill(const Window& w, uint8_t* dst, uint8_t* scratch) {
  const size_t nd = t_.ndim();
  if (nd == 0) {
    for (size_t c = 0; c < t_.num_chunks(); ++c) {
      read(c, 0, item_, dst);
      return;
    }
    throw FormatError(Where(reader_.checkpoint().metadata_path, std::nullopt, t_.fqn), "no chunk holds this 0-d tensor");
  }
  const std::vector<int64_t>& shape = t_.shape;
  uint64_t filled = 0;
  each_part(w, [&](const Part& p, size_t k, int64_t r0, int64_t r1, uint64_t inner) {
    const int64_t* off = t_.chunk_offsets(p.chunk);
    const int64_t* sz = t_.chunk_sizes(p.chunk);
    if (p.spans) {
      read(p.chunk, p.from * item_, p.n * item_, dst + static_cast<uint64_t>(p.lo - r0) * inner * item_);
    } else {
      read(p.chunk, p.from * item_, p.n * item_, scratch);
      // Scatter rows of the last dimension: the part is a box [lo, hi) x sz[k+1..] placed at
      // (lo - r0, off[k+1..]) of the window, which is a box [r1 - r0] x shape[k+1..].
      size_t last = nd - 1;
      uint64_t row = static_cast<uint64_t>(sz[last]) * item_;
      uint64_t rows = p.n / static_cast<uint64_t>(sz[last]);
      std::vector<int64_t> idx(nd, 0);  // position within the part, dims k..last-1
      for (uint64_t r = 0; r < rows; ++r) {
        uint64_t pos = 0;
        for (size_t d = k; d < nd; ++d) {
          int64_t g = d == k ? p.lo - r0 + idx[d] : off[d] + (d == last ? 0 : idx[d]);
          pos = pos * static_cast<uint64_t>(d == k ? r1 - r0 : shape[d]) + static_cast<uint64_t>(g);
        }
        std::memcpy(dst + pos * item_, scratch + r * row, row);
        for (size_t d = last; d-- > k;) {
          int64_t ext = d == k ? p.hi - p.lo : sz[d];
          if (++idx[d] < ext) break;
          idx[d] = 0;
        }
      }
    }
    decoded_.done(t_, p.chunk);
    filled += p.n;
  });
  if (filled != w.numel)
    throw FormatError(Where(reader_.checkpoint().metadata_path, std::nullopt, t_.fqn),
                      "the chunks hold " + std::to_string(filled) + " of the " + std::to_string(w.numel) +
                          " elements from flat index " + std::to_string(w.start));
}

}  // namespace dcpctl
