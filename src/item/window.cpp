#include "item/window.h"

#include <algorithm>

#include "meta/derived.h"
#include "meta/pieces.h"

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

Box window_box(const std::vector<int64_t>& shape, const Window& w) {
  const size_t nd = shape.size();
  if (nd == 0) return {};
  // The split dimension k is the first whose trailing block is at most the window (windows either
  // cover whole rows of k or are single rows of it), as plan_windows chose it.
  size_t k = 0;
  while (k + 1 < nd && block(shape, k + 1) > w.numel) ++k;
  Box b{unravel(shape, w.start), std::vector<int64_t>(nd, 1)};
  b.sizes[k] = static_cast<int64_t>(w.numel / block(shape, k + 1));
  for (size_t d = k + 1; d < nd; ++d) b.sizes[d] = shape[d];
  return b;
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

WindowReader::WindowReader(const ItemReader& reader, MemoryGate* gate)
    : reader_(reader), decoded_(reader, gate), chunks_(reader, 16ull << 20, &decoded_) {}

std::vector<Piece> WindowReader::pieces(const TensorMeta& t, const Box& box) const {
  const Checkpoint& ck = reader_.checkpoint();
  const MappedTensor* mt = ck.derived ? ck.derived->parts_of(t.fqn) : nullptr;
  return mt ? plan_mapped_pieces(ck.md, *mt, box) : plan_pieces(t, box);
}

void WindowReader::expect(const TensorMeta& t, const std::vector<Window>& windows) {
  for (const Window& w : windows)
    for (const Piece& p : pieces(t, window_box(t.shape, w))) chunks_.expect(*p.source, p.chunk);
}

void WindowReader::fill(const TensorMeta& t, const Window& w, uint8_t* dst, uint8_t* scratch) {
  Box box = window_box(t.shape, w);
  std::vector<Piece> ps = pieces(t, box);
  uint64_t filled = 0;
  for (const Piece& p : ps) filled += p.bytes;
  const uint64_t bytes = w.numel * itemsize(*t.dtype);
  if (filled != bytes)  // checked before reading: a gap would leave bytes of dst unwritten
    throw FormatError(Where(reader_.checkpoint().metadata_path, std::nullopt, t.fqn),
                      "the chunks hold " + std::to_string(filled) + " of the " + std::to_string(bytes) +
                          " bytes of the window from flat index " + std::to_string(w.start));
  assemble_box(chunks_, t, box, ps, dst, scratch);
}

}  // namespace dcpctl
