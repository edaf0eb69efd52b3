// consolidate: one full-model file from a sharded checkpoint, streaming in bounded memory.
//
// Outputs:
//   Safetensors  one `.safetensors` file, `__metadata__ {"format": "pt"}`, flat keys;
//   HfDir        Hugging Face sharded safetensors: model-0000i-of-0000N.safetensors +
//                model.safetensors.index.json {"metadata": {"total_size"}, "weight_map"}; a
//                single shard is written as model.safetensors without an index;
//   Torch        a torch.save zip that torch.load(weights_only=True) opens, nested as
//                format_utils.dcp_to_torch_save nests it (from planner_data), or flat.
//
// Under torchrun (ConsolidateOptions::group), rank 0 writes the same bytes from chunks the ranks
// push to it; rank 0's memory stays within the same budget plus one 16 MiB window per lane.
//
// Memory: safetensors outputs are laid out first (all offsets known from .metadata), then each
// chunk that is one contiguous run of its tensor (FSDP's dim-0 shards) is copied from its item
// straight to its place in the output in windows (copy_file_range when no cast), so memory does
// not grow with tensor size; other tensors are assembled in a buffer of the tensor's size. Every
// buffer is taken from a budget (max_memory); a tensor that cannot fit is refused before
// anything is written. .pt records are whole tensors (one buffer each, written in order).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "meta/checkpoint.h"
#include "plan/select.h"
#include "util/dtype.h"

namespace dcpctl {

class Group;

enum class OutputFormat { Safetensors, HfDir, Torch };

struct ConsolidateOptions {
  std::string output;
  OutputFormat format = OutputFormat::Safetensors;
  uint64_t max_shard_size = 5'000'000'000;  // HfDir
  Selection selection;
  std::optional<DType> cast;
  bool flat = false;          // Torch: flat keys
  bool keep_unsafe_values = false;  // Torch: keep values torch.load(weights_only=True) refuses
  bool force = false;
  bool dry_run = false;
  unsigned threads = 4;
  uint64_t max_memory = 0;    // 0: automatic (the largest single need, at least 1 GiB)
  uint64_t window = 64ull << 20;
  std::function<void(uint64_t done, uint64_t total)> progress;  // called from worker threads
  std::function<void(const std::string&)> note;                 // one-line notices (stderr)
  // Several processes (torchrun): the ranks read their share of the chunks and push it to rank 0,
  // which writes the output (dist/exchange.h). nullptr: one process.
  Group* group = nullptr;
  // HfDir under torchrun: each rank writes whole shards itself (into rank 0's temporary
  // directory, so a shared filesystem); rank 0 writes the index and commits.
  bool parallel_write = false;
  // Under torchrun: each rank reads only the data files it sees in its own checkpoint directory
  // (node-local disks); every chunk must be visible to some rank.
  bool local_files = false;
};

// Returns the summary (schema in README: "consolidate --json"). Throws on refusal or failure,
// leaving no output behind.
nlohmann::json consolidate(const Checkpoint& ck, const ConsolidateOptions& opts);

}  // namespace dcpctl
