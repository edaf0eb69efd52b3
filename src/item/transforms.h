// Stream transforms DCP applies to whole items (torch 2.7+, `_StorageInfo.transform_descriptors`).
//
// A descriptor is "name[@domain]/version". torch's loader undoes them in list order. Known:
//   stream.zstd/1   one zstd frame (or several concatenated) over the whole item
// Decoding is bounded: the output may not exceed `max_output` bytes (a zip bomb gets an error,
// not an allocation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace dcpctl {

// Throws UnsupportedError for unknown descriptors, FormatError for corrupt streams.
std::vector<uint8_t> undo_transforms(std::vector<uint8_t> data, const std::vector<std::string>& descriptors,
                                     uint64_t max_output, const Where& where);

}  // namespace dcpctl
