// reshard and cast: write a new DCP checkpoint for another world size or dtype.
//
// Layouts:
//   Fsdp  every tensor is chunked the way FSDP2 / DTensor Shard(0) shards it over M ranks:
//         dim 0 split with torch.chunk semantics (ceil(N/M) rows per rank, the last smaller);
//         ranks past the end hold an empty shard, recorded once as DCP does (offset[0] == N,
//         size[0] == 0); 0-d tensors and tensors with no rows are written once, on the rank
//         with the fewest bytes so far (as DCP places replicated tensors).
//   Keep  the source's chunks, each written by the rank whose file held it (cast only).
// One `__{r}_0.distcp` per target rank holds exactly rank r's chunks (each a torch.save of a
// contiguous CPU tensor, as torch writes them); non-tensor items are copied byte for byte (with
// their transforms) into rank 0's file; `.metadata` (dcp_metadata.h) is written last, and the
// whole directory appears only when complete (written under a temporary name, then renamed).
// The targets and their pieces are planned by plan/plan.h and written by the executor
// (write/executor.h) into the `dcp` format's files (write/formats/dcp_checkpoint.cpp: the
// directory, the .metadata, the commit); this translates the options.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "meta/checkpoint.h"
#include "write/run.h"

namespace dcpctl {

struct Format;

enum class Layout { Fsdp, Keep };

// Under torchrun (WriteOptions::group): target rank files are dealt out round-robin; each process
// writes its files into rank 0's temporary directory, rank 0 writes .metadata last and renames
// the directory.
struct ReshardOptions : WriteOptions {
  int world_size = 0;  // Fsdp: target ranks
  Layout layout = Layout::Fsdp;
  const Format* format = nullptr;    // dcp (nullptr) or megatron (plan/format.h)
  std::optional<int64_t> iteration;  // megatron: Megatron-LM's iter_NNNNNNN/ and its tracker file
};

nlohmann::json reshard(const Checkpoint& ck, const ReshardOptions& opts);

}  // namespace dcpctl
