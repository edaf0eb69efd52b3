// verify's check of megatron-core's integrity manifest (`integrity.json`, meta/frameworks.h):
// every file it lists is hashed again (SHA-256, streamed in 1 MiB reads, a few files at once) and
// compared with the digest it records, as megatron's own load(..., verify_integrity=True) does.
//
// Findings (the codes verify reports):
//   integrity-mismatch  a listed file's SHA-256 differs from the manifest's (problem)
//   integrity-missing   a listed file is not there (problem)
//   integrity-invalid   the manifest is not megatron's format: not JSON, no "files" object, a
//                       digest that is not 64 hex digits, a name outside the directory, an
//                       algorithm other than sha256 (megatron refuses those too) (problem)
//   io-error            a listed file that exists could not be read (problem)
//   integrity-unlisted  a file of the directory the manifest does not list: written after the
//                       save, so nothing vouches for it (warning)
#pragma once

#include <cstdint>
#include <string>

#include "util/finding.h"

namespace dcpctl {

struct IntegrityReport {
  bool present = false;  // the directory has integrity.json
  std::string manifest;  // its path
  std::string algorithm;
  uint64_t files = 0;       // listed
  uint64_t bytes_read = 0;  // hashed
  Findings problems, warnings;
};

// Checks `dir`'s integrity.json when there is one (present = false otherwise, and nothing is read).
IntegrityReport check_integrity_manifest(const std::string& dir, unsigned threads);

}  // namespace dcpctl
