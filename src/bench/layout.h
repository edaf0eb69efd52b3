// What one benchmark iteration copies: a list of byte ranges (segments) at the same offsets in the
// source and the destination buffer. A size sweep is one range, split in --chunk pieces; a
// checkpoint's rank is one range per tensor chunk, laid out as the caching allocator would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dcpctl::bench {

struct Segment {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct Layout {
  std::vector<Segment> segments;
  uint64_t payload = 0;  // sum of the segments' bytes
  uint64_t span = 0;     // buffer bytes the layout needs (payload plus alignment gaps)
};

// [0, bytes) in pieces of at most `chunk` bytes (0: one piece).
Layout contiguous(uint64_t bytes, uint64_t chunk);

// One segment per size, each starting at a multiple of `align` (a power of two); zero sizes are
// kept as empty segments so that counts match the checkpoint.
Layout packed(const std::vector<uint64_t>& sizes, uint64_t align);

// The tensor chunks one rank of a DCP checkpoint wrote, in `.metadata` order: what that rank's
// `async_save` staged, one device -> host copy each. Sizes are in-memory bytes (elements times
// item size), not the (possibly compressed) stored length.
struct RankTensors {
  std::string checkpoint;
  int rank = 0;
  std::vector<uint64_t> sizes;
  uint64_t bytes = 0;
  uint64_t tensors = 0;               // distinct tensors (keys) with a chunk on this rank
  std::vector<int> ranks;             // ranks that wrote tensor data
  uint64_t unknown_dtype_chunks = 0;  // sized by their stored length instead
};

// Throws IoError/FormatError/UnsupportedError from opening the checkpoint, UsageError when the
// rank wrote no tensor data (the message lists the ranks that did).
RankTensors rank_tensors(const std::string& checkpoint_dir, int rank);

}  // namespace dcpctl::bench
