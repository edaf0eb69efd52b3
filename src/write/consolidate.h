// consolidate: one full-model file from a sharded checkpoint, streaming in bounded memory.
//
// The output is one of the formats whose rows make a consolidate writer (plan/format.h):
// a .safetensors file, a Hugging Face folder, a torch.save .pt. This translates the options into
// a write request (the target, the key map, a dequantized view) and hands it, with the format's
// writer, to execute() (write/execute.h), which plans, deals, writes and commits.
//
// Under torchrun (ConsolidateOptions::group), rank 0 writes the same bytes from chunks the ranks
// push to it; rank 0's memory stays within the same budget plus one 16 MiB window per lane.
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
#include "plan/format.h"
#include "view/codecs/quantize.h"
#include "view/lora/lora_config.h"
#include "write/run.h"

namespace dcpctl {

struct ConsolidateOptions : WriteOptions {
  const Format* format = &formats::safetensors;  // a row with a consolidate_writer
  uint64_t max_shard_size = 5'000'000'000;       // a sharded format (the HF folder)
  // --lora: the checkpoint's LoRA adapter written as it is (Keep), as a PEFT adapter folder
  // (Adapter: formats::peft_adapter) or merged into its base model (Merge), through the view of
  // meta/lora_keys.h; the selection picks what the view is made of.
  LoraRequest lora;
  bool flat = false;  // Torch: flat keys
  // The values of the format's own options (plan/format.h FormatOption: a GGUF's --outtype,
  // --split-max-size, --split-max-tensors), checked by its row's check_options.
  FormatOptionValues format_options;
  bool keep_unsafe_values = false;  // Torch: keep values torch.load(weights_only=True) refuses
  // The HF folder: the files a Hugging Face folder needs beside its weights (config.json, the tokenizer;
  // write/assets.h), copied from beside the checkpoint, or from `assets_from` when not empty;
  // none without `copy_assets`. Rank 0 copies them at commit, after the shards and before the index.
  bool copy_assets = true;
  std::string assets_from;
  bool lightning_meta = true;     // Torch: merge a Lightning checkpoint's meta.pt (write/lightning_meta.h)
  uint64_t window = 64ull << 20;  // the copy window (write/run.h)
  // Under torchrun (group): the ranks read their share of the chunks and push it to rank 0, which
  // writes the output (dist/exchange.h).
  // The HF folder under torchrun: each rank writes whole shards itself (into rank 0's temporary
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
