// Stream transforms DCP applies to whole items (torch 2.7+, `_StorageInfo.transform_descriptors`).
//
// A descriptor is "name[@domain]/version". torch's loader undoes them in list order. Known:
//   stream.zstd/1   one zstd frame (or several concatenated) over the whole item
// Decoding streams: the encoded item is read from its source a block at a time and the output is
// grown block by block, so memory is the decoded size (plus a block), never the encoded + decoded
// + reallocation copies. Decoding is bounded: the output may not exceed `max_output` bytes (a zip
// bomb gets an error, not an allocation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "store/source.h"
#include "util/error.h"

namespace dcpctl {

// Throws UnsupportedError for unknown descriptors, FormatError for corrupt streams.
std::unique_ptr<MemorySource> undo_transforms(const ByteSource& encoded, const std::vector<std::string>& descriptors,
                                              uint64_t max_output, const Where& where);

}  // namespace dcpctl
