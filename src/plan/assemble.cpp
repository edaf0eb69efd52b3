#include "plan/assemble.h"

#include <vector>

#include "item/item_reader.h"
#include "util/parallel.h"

namespace dcpctl {

void place_chunk(const TensorMeta& t, size_t chunk, size_t item, const uint8_t* src, uint8_t* full) {
  Box b = chunk_box(t, chunk);
  copy_box(src, b, full, whole_box(t), b, item);
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
