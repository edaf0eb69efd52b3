// consolidate: one full-model file from a sharded checkpoint, streaming in bounded memory.
//
// Outputs:
//   Safetensors  one `.safetensors` file, `__metadata__ {"format": "pt"}`, flat keys;
//   HfDir        Hugging Face sharded safetensors: model-0000i-of-0000N.safetensors +
//                model.safetensors.index.json {"metadata": {"total_size"}, "weight_map"}; a
//                single shard is written as model.safetensors without an index; beside them the
//                config, tokenizer and processor files (write/assets.h);
//   Torch        a torch.save zip that torch.load(weights_only=True) opens, nested as
//                format_utils.dcp_to_torch_save nests it (from planner_data), or flat; a
//                Lightning checkpoint's meta.pt merged in as Lightning's consolidation merges
//                it (write/lightning_meta.h).
//
// Under torchrun (ConsolidateOptions::group), rank 0 writes the same bytes from chunks the ranks
// push to it; rank 0's memory stays within the same budget plus one 16 MiB window per lane.
//
// The plan (plan/plan.h) decides everything before a byte moves: the records, their files and
// offsets, which stream, what each needs; the executor (write/executor.h) carries it out, for one
// process or torchrun; this file sets up the outputs (and the transfers) and commits them.
//
// Memory: safetensors outputs are laid out first (all offsets known from .metadata), then each
// chunk that is one contiguous run of its tensor (FSDP's dim-0 shards) is copied from its item
// straight to its place in the output in windows (copy_file_range when no cast), so memory does
// not grow with tensor size; other tensors are assembled in a buffer of the tensor's size. Every
// buffer is taken from a budget (max_memory); a tensor that cannot fit is refused before
// anything is written. .pt records are written in order: streamed from the chunks when the plan says
// so (every chunk an untransformed run), else assembled in one buffer.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "meta/checkpoint.h"
#include "write/run.h"

namespace dcpctl {

enum class OutputFormat { Safetensors, HfDir, Torch };

struct ConsolidateOptions : WriteOptions {
  OutputFormat format = OutputFormat::Safetensors;
  uint64_t max_shard_size = 5'000'000'000;  // HfDir
  bool flat = false;                // Torch: flat keys
  bool keep_unsafe_values = false;  // Torch: keep values torch.load(weights_only=True) refuses
  // HfDir: the files a Hugging Face folder needs beside its weights (config.json, the tokenizer;
  // write/assets.h), copied from beside the checkpoint, or from `assets_from` when not empty;
  // none without `copy_assets`. Rank 0 copies them at commit, after the shards and before the index.
  bool copy_assets = true;
  std::string assets_from;
  bool lightning_meta = true;       // Torch: merge a Lightning checkpoint's meta.pt (write/lightning_meta.h)
  uint64_t window = 64ull << 20;    // the copy window (write/run.h)
  // Under torchrun (group): the ranks read their share of the chunks and push it to rank 0, which
  // writes the output (dist/exchange.h).
  // HfDir under torchrun: each rank writes whole shards itself (into rank 0's temporary
  // directory, so a shared filesystem); rank 0 writes the index and commits.
  bool parallel_write = false;
  // Under torchrun: each rank reads only the data files it sees in its own checkpoint directory
  // (node-local disks); every chunk must be visible to some rank.
  bool local_files = false;
};

// Returns the summary (its JSON Schema: docs/schemas/consolidate.schema.json). Throws on refusal
// or failure, leaving no output behind.
nlohmann::json consolidate(const Checkpoint& ck, const ConsolidateOptions& opts);

}  // namespace dcpctl
