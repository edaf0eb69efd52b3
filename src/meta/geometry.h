// Chunk geometry: does a tensor's set of chunks tile its global shape exactly?
//
// DCP records each saved chunk as (offsets, sizes) in global coordinates. A complete tensor's
// chunks cover every element exactly once, stay inside the global shape, and may include
// zero-size shards, which DCP writes with offset[d] == shape[d] (out of bounds by one, empty):
// those are skipped. The check compresses coordinates per dimension into a grid of cells and
// counts how often each cell is covered, which is linear in the number of chunks for the
// grid-shaped layouts FSDP/TP produce; pathological layouts fall back to a sweep.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meta/metadata.h"

namespace dcpctl {

// A shape or any list of dims for messages: "[4, 5]".
std::string dims_text(const int64_t* d, size_t n);
inline std::string dims_text(const std::vector<int64_t>& d) {
  return dims_text(d.data(), d.size());
}

struct Box {
  std::vector<int64_t> offsets, sizes;
  std::string text() const;  // "[0:4, 2:5]"
  uint64_t numel() const {
    uint64_t n = 1;
    for (int64_t s : sizes) n *= static_cast<uint64_t>(s);
    return n;
  }
};

struct Coverage {
  bool exact = true;                                // no hole, no overlap, nothing out of bounds
  uint64_t missing_elements = 0;                    // elements no chunk covers
  uint64_t overlap_elements = 0;                    // elements covered more than once (counted once each)
  std::vector<Box> holes;                           // up to max_report regions nobody covers
  std::vector<size_t> out_of_bounds;                // chunk indices reaching outside the shape
  std::vector<std::pair<size_t, size_t>> overlaps;  // up to max_report overlapping chunk pairs
  size_t empty_chunks = 0;                          // zero-size shards (DCP convention), ignored
};

Coverage check_coverage(const TensorMeta& t, size_t max_report = 16);

// How a tensor is split, for people: "whole", "Shard(0) over 4", "Shard(0) over 4 (1 empty)",
// "2×2 grid", "irregular (7 chunks)".
std::string describe_sharding(const TensorMeta& t);
// The same, given check_coverage(t) (only its `exact` is read).
std::string describe_sharding(const TensorMeta& t, const Coverage& c);

}  // namespace dcpctl
