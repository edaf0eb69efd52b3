// Reading a safetensors header: the table of contents of a `.safetensors` file, or of the
// safetensors blob DCP appends to a `.distcp` file saved with SerializationFormat.SAFETENSORS.
//
// Byte layout (safetensors spec; what the `safetensors` package writes and torch's DCP writers
// use through `safetensors.torch.save`):
//   [0, 8)          u64 little-endian N, the header's length
//   [8, 8 + N)      UTF-8 JSON object, padded with spaces (the package pads to 8 bytes; others
//                   may not): {"__metadata__": {str: str}?, "<key>": {"dtype": "F32",
//                   "shape": [..], "data_offsets": [begin, end]}, ...}
//   [8 + N, end)    the data section; data_offsets are relative to its start, little-endian,
//                   C order, no gaps in files the package writes (not required here).
// Versions seen: safetensors 0.4-0.8; torch's DCP adds to __metadata__ "DCP_SHARDING_INFO"
// (JSON text {key: {"saved_offsets": [..]}}), "DCP_VERSION" ("1.0") and "format" ("pt").
// What is tolerated: keys in any order, a header not padded, unknown dtype names (kept, dtype
// nullopt). What is refused (FormatError): N over 100 MB (the package's own cap) or past the
// end of the input, JSON that is not an object of such entries, offsets past the data section,
// a byte count that disagrees with dtype and shape, negative or overflowing shapes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/file.h"
#include "util/dtype.h"
#include "util/error.h"

namespace dcpctl {

struct SafetensorsTensorInfo {
  std::string key;
  std::string dtype_name;      // as written ("BF16")
  std::optional<DType> dtype;  // nullopt: a name dcpctl does not know
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;                    // N
  uint64_t data_start = 0;                      // absolute offset of the data section in the file
  uint64_t data_bytes = 0;                      // what the input holds after the header
  std::vector<SafetensorsTensorInfo> tensors;   // in header order
  std::map<std::string, std::string> metadata;  // __metadata__ (string values only)
  const SafetensorsTensorInfo* find(const std::string& key) const;
};

constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// The header's JSON decoded as written: the one parser of the reader (below) and the audit
// (check/safetensors_audit.h), which then judge the entries each its own way.
struct SafetensorsEntries {
  std::vector<SafetensorsTensorInfo> tensors;   // in header order; `dtype` not resolved
  std::map<std::string, std::string> metadata;  // __metadata__ (string values only)
  std::vector<std::string> duplicates;          // lenient: keys written more than once (each repeat)
  std::string error;  // the text is not JSON, or not the format's shape: why (then nothing else is kept)
};
// Strict (lenient = false, the reader): a key written twice is the error, parsing stops at the
// first problem. Lenient (the audit): a key written twice is recorded in `duplicates` and parsing
// goes on, so every problem of the header can be reported.
SafetensorsEntries decode_safetensors_json(std::string_view text, bool lenient);

// The header text at `base` of `file`, its length checked against the 100 MB cap and the input
// (`limit`: what the data may run to from `base`, clipped here to the file). FormatError naming
// the file and offset otherwise.
std::string read_safetensors_header_text(const ReadFile& file, uint64_t base, uint64_t& limit);

// Reads the header that starts at `base` of `file`; the data section may run to `base + limit`.
// Errors name the file and offset.
SafetensorsHeader read_safetensors_header(const ReadFile& file, uint64_t base, uint64_t limit);

// Parses a header from memory (the fuzz target's entry): `bytes` is the whole blob or file.
SafetensorsHeader parse_safetensors_header(ByteSpan bytes, const std::string& source);

// The torch dtype for a safetensors dtype name ("BF16" -> bfloat16).
std::optional<DType> dtype_from_safetensors_name(const std::string& name);

// DCP_SHARDING_INFO from __metadata__: key -> saved_offsets; empty when absent. Throws
// FormatError (naming `source`) when present but malformed.
std::map<std::string, std::vector<int64_t>> dcp_sharding_info(const SafetensorsHeader& h, const std::string& source);

}  // namespace dcpctl
