// Streaming a record's bytes from where they lie in .distcp files into an output, a stream
// window at a time (cast on the way), with the CRC-32 a zip record needs: what lets reshard and
// the .pt writer handle chunks of any size without holding them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/file.h"
#include "util/dtype.h"
#include "write/output.h"
#include "write/run.h"

namespace dcpctl {

// Source bytes read in place: [offset, offset + bytes) of `file` (`key`: what errors name).
struct FileRun {
  const ReadFile* file;
  uint64_t offset, bytes;
  std::string key = {};
};

// Appends the runs, in order, to `out` through `win`, cast from `src` to `dst` on the way, and
// returns `crc` (the CRC-32 of what came before in the record) updated with what it appended.
uint32_t stream_runs(OutputFile& out, const std::vector<FileRun>& runs, DType src, DType dst, StreamWindow& win,
                     uint32_t crc = 0);

}  // namespace dcpctl
