// Opening a checkpoint directory: find and parse `.metadata`, look at the data files it names.
//
// Directory layout (shared/docs/dcp-format.md §0): `.metadata` (pickle) plus `__{rank}_{n}.distcp`
// data files. Newer torch saved with use_collectives=False writes `__{rank}.metadata` per rank
// instead; a DCP directory written by HuggingFaceStorageWriter holds safetensors files and no
// pickle. Those cases get a clear message rather than a generic "file not found".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meta/metadata.h"

namespace dcpctl {

struct DataFileInfo {
  std::string relative_path;
  std::optional<uint64_t> size;  // nullopt: missing or unreadable
  std::string error;             // why size is missing
};

struct Checkpoint {
  std::string dir;
  std::string metadata_path;
  uint64_t metadata_bytes = 0;
  Metadata md;
  std::vector<DataFileInfo> files;  // parallel to md.files
  uint64_t data_bytes() const;      // total size of the data files present
  std::string path_of(uint32_t file) const;
};

// Throws IoError (not a directory, unreadable), FormatError (no or bad `.metadata`),
// UnsupportedError (a format we recognise but do not read).
// With `metadata`, those bytes stand for the directory's .metadata (a distributed run whose
// node-local directory holds only data files got them from another rank).
Checkpoint open_checkpoint(const std::string& dir, const std::vector<uint8_t>* metadata = nullptr);

// The rank that wrote a data file, from its name `__{rank}_{n}.distcp` (nullopt if not that form).
std::optional<int> rank_of_file(const std::string& relative_path);

}  // namespace dcpctl
