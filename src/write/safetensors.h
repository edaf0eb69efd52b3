// The safetensors header (https://github.com/huggingface/safetensors, format section):
//   u64 little-endian N | N bytes of UTF-8 JSON, padded with spaces to a multiple of 8 |
//   data section. JSON: {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
//   "data_offsets": [begin, end]}, ...}; offsets are relative to the data section, which the
//   tensors must cover exactly, without gaps or overlaps. Readers refuse headers over 100 MB.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/dtype.h"

namespace dcpctl {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// Header bytes (length prefix + padded JSON). Throws UnsupportedError for a dtype safetensors
// cannot hold or a header over 100 MB.
std::string safetensors_header(const std::vector<SafetensorsEntry>& entries,
                               const std::map<std::string, std::string>& metadata);

}  // namespace dcpctl
