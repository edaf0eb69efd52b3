#include "plan/assemble.h"

#include <cstring>
#include <vector>

#include "item/item_reader.h"
#include "util/parallel.h"

namespace dcpctl {

uint64_t chunk_start(const TensorMeta& t, size_t chunk) {
  uint64_t off = 0;
  const int64_t* o = t.chunk_offsets(chunk);
  for (size_t d = 0; d < t.ndim(); ++d) off = off * static_cast<uint64_t>(t.shape[d]) + static_cast<uint64_t>(o[d]);
  return off * itemsize(*t.dtype);
}

bool chunk_is_run(const TensorMeta& t, size_t chunk) {
  const int64_t* s = t.chunk_sizes(chunk);
  size_t d = 0;
  while (d < t.ndim() && s[d] == 1) ++d;  // leading unit dims
  for (size_t k = d + 1; k < t.ndim(); ++k)
    if (s[k] != t.shape[k]) return false;
  return true;
}

void place_chunk(const TensorMeta& t, size_t chunk, size_t item, const uint8_t* src, uint8_t* full) {
  size_t nd = t.ndim();
  const int64_t* o = t.chunk_offsets(chunk);
  const int64_t* s = t.chunk_sizes(chunk);
  if (t.chunk_numel(chunk) == 0) return;
  // Innermost run: trailing dims the chunk spans fully, plus the first partial one.
  uint64_t run = item;
  size_t d = nd;
  while (d > 0 && s[d - 1] == t.shape[d - 1]) run *= static_cast<uint64_t>(t.shape[--d]);
  if (d > 0) run *= static_cast<uint64_t>(s[--d]);
  // Iterate over the outer dims [0, d) of the chunk.
  std::vector<int64_t> idx(d, 0);
  std::vector<uint64_t> stride(nd, item);  // byte strides of the full tensor
  for (size_t k = nd; k-- > 1;) stride[k - 1] = stride[k] * static_cast<uint64_t>(t.shape[k]);
  uint64_t base = 0;
  for (size_t k = 0; k < nd; ++k) base += static_cast<uint64_t>(o[k]) * stride[k];
  while (true) {
    uint64_t at = base;
    for (size_t k = 0; k < d; ++k) at += static_cast<uint64_t>(idx[k]) * stride[k];
    std::memcpy(full + at, src, run);
    src += run;
    size_t k = d;
    while (k-- > 0) {
      if (++idx[k] < s[k]) break;
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) break;
  }
}

void read_full_tensor(const ItemReader& reader, const TensorMeta& t, uint8_t* full, unsigned threads) {
  size_t item = itemsize(*t.dtype);
  parallel_for(t.num_chunks(), threads, [&](size_t c) {
    if (t.chunk_numel(c) == 0) return;
    if (chunk_is_run(t, c)) {
      reader.read_chunk(t, c, full + chunk_start(t, c));
    } else {
      std::vector<uint8_t> tmp(t.chunk_numel(c) * item);
      reader.read_chunk(t, c, tmp.data());
      place_chunk(t, c, item, tmp.data(), full);
    }
  });
}

}  // namespace dcpctl
