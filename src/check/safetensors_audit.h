// Auditing a `.safetensors` file: every problem of its header at once, where the reader
// (meta/safetensors_header.h) stops at the first. What `verify` reports for a Hugging Face folder
// or a single `.safetensors` file, and what `check_hf_folder` (check/hf_checks.h) runs on each file.
//
// The format is the one safetensors_header.h describes. What the `safetensors` package itself
// (safetensors 0.4-0.8, `validate` and `deserialize` in its Rust core) refuses, and so what is a
// problem here, each under its code (docs/integrity.md lists them):
//   header-invalid      the length field runs past the file or over the 100 MB cap, the text is
//                       not JSON, or not an object of {"dtype", "shape", "data_offsets"} entries
//                       and string-valued `__metadata__` (nothing else is read from that file);
//   duplicate-key       a key written twice in one header: JSON parsers keep one of the two (the
//                       last, for nlohmann's and serde's maps), so a tensor is silently lost;
//   size-mismatch       data_offsets span a byte count other than dtype x shape. Sizes are in
//                       bits per element, as the package counts them: `F4` is 4 bits (two
//                       elements a byte, the shape counts elements), `F6_E2M3`/`F6_E3M2` 6,
//                       `F8_*` (E8M0 included) 8; a shape whose bits are not whole bytes is one too;
//   window-out-of-file  data_offsets reach past the data section, or end before they begin;
//   window-overlap      two tensors' bytes overlap (the package has no shared tensors);
//   offsets-gap         bytes of the data section no tensor covers (between two tensors, or after
//                       the last): the package requires the tensors to tile the data section.
// A dtype name the package does not know is not judged here (its size is unknown); the opened
// checkpoint reports it as `unknown-dtype`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "meta/safetensors_header.h"
#include "util/finding.h"

namespace dcpctl {

// An entry as the header writes it (the reader's parser, in its lenient mode).
using AuditedTensor = SafetensorsTensorInfo;

struct SafetensorsAudit {
  Findings problems;
  bool decoded = false;  // the header's JSON could be read: `tensors` is what it holds
  uint64_t header_bytes = 0, data_start = 0, data_bytes = 0;
  std::vector<AuditedTensor> tensors;           // in header order, duplicates included
  std::map<std::string, std::string> metadata;  // __metadata__ (when decoded)
};

// Bits per element of a safetensors dtype name ("BF16" -> 16, "F4" -> 4); 0 when unknown.
unsigned safetensors_dtype_bits(const std::string& name);

// Audits header text `json` whose data section starts at `data_start` and holds `data_bytes`.
SafetensorsAudit audit_safetensors_header(std::string_view json, uint64_t data_start, uint64_t data_bytes,
                                          const std::string& source);

// Audits the file at `path` (a local path or an object URL). Throws IoError only when it cannot
// be read.
SafetensorsAudit audit_safetensors_file(const std::string& path);

}  // namespace dcpctl
