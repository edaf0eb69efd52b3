// Opening a checkpoint: every layout a trainer leaves behind, as one typed view (Metadata).
//
// Every layout is a row of the readers' table (readers.h), which open_checkpoint() asks in order.
// Layouts (shared/docs/dcp-format.md §0, §5, §9):
// - DCP: `.metadata` (pickle) plus `__{rank}_{n}.distcp` data files of torch.save items.
// - DCP, safetensors items: the same, saved with SerializationFormat.SAFETENSORS: each .distcp
//   holds its non-tensor items, then ONE safetensors blob with the file's tensors; every tensor's
//   _StorageInfo points at the blob's start. Resolved here to each tensor's own bytes (Raw items)
//   through the blob's header (safetensors_items.cpp).
// - DCP, rank-local metadata (use_collectives=False): no `.metadata`, one `__{rank}.metadata`
//   per rank describing that rank's items; merged into one view (rank_local.cpp).
// - HF-mode DCP (HuggingFaceStorageWriter): `*.safetensors` files whose `__metadata__` carries
//   DCP_SHARDING_INFO (per-rank `shard-R-model-i-of-N` files, possibly under `sharded/`), or
//   plain Hugging Face safetensors (`model-i-of-N.safetensors` + `model.safetensors.index.json`,
//   or one `.safetensors` file): tensors are Raw items (hf_layout.cpp).
// - Per-rank torch.save files of DTensor shards (verl's FSDP checkpoint,
//   `model_world_size_W_rank_R.pt`): each rank's local tensors are Raw items inside its zip,
//   placed by the DTensor's pickled spec (item/rank_torch_files.cpp; opened through the hook
//   below, since reading a torch.save zip takes the item layer's LibTorch plugin).
// A run folder (a directory of checkpoints, run_folder.h) is refused with a usage error that
// names the checkpoints inside and the newest complete one.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meta/metadata.h"
#include "meta/readers.h"

namespace dcpctl {

struct DerivedTable;  // meta/derived.h

// The layout's row's stable name for scripts ("dcp", "hf-safetensors", ...) and phrase for people.
const char* layout_name(CheckpointLayout l);
const char* layout_description(CheckpointLayout l);

struct DataFileInfo {
  std::string relative_path;
  std::optional<uint64_t> size;  // nullopt: missing or unreadable
  std::string error;             // why size is missing
  bool missing = false;          // the file does not exist (the checkpoint is incomplete)
};

struct Checkpoint {
  std::string dir;
  // When the path given was a trainer's step folder holding the model in a subfolder
  // (meta/run_folder.h: step_folder): that folder, its trainer, and where its config and
  // tokenizer are (nearest first; write/assets.h looks there after dir). Empty otherwise.
  std::string step_dir, trainer;
  std::vector<std::string> asset_dirs;
  std::string metadata_path;                  // .metadata, __0.metadata, the index, or the directory itself
  std::vector<std::string> metadata_sources;  // every file the view was built from
  uint64_t metadata_bytes = 0;
  CheckpointLayout layout = CheckpointLayout::Dcp;
  Metadata md;
  std::vector<DataFileInfo> files;  // parallel to md.files
  // What makes the checkpoint incomplete beyond chunk tiling (a key the index promises that no
  // file holds, a rank whose metadata is missing): verify reports them, writers refuse.
  Findings incomplete;
  // The zip records whose bytes tensors point into directly (ItemFormat::Raw refs into a
  // torch.save file: item/torch_file.h), with the CRC-32 each carries: the item reader watches
  // them (util/crc_ledger.h) when it opens their file. Empty for DCP, whose items it opens itself.
  struct RecordCrc {
    uint32_t file;
    uint64_t offset, size;
    uint32_t crc;
    std::string key, record;
  };
  std::vector<RecordCrc> record_crcs;
  // Non-tensor leaves a reader decoded as it opened (a torch.save file's): key -> Python repr.
  std::map<std::string, std::string> values;
  // The tensors views derived (meta/derived.h: dequantized, merged): how each is read, and what
  // the views said. Null for a checkpoint as opened: every tensor is saved.
  std::shared_ptr<const DerivedTable> derived;
  uint64_t data_bytes() const;  // total size of the data files present
  std::string path_of(uint32_t file) const;
};

// Throws IoError (not readable), FormatError (no or bad metadata), UnsupportedError (a format
// we recognise but do not read), UsageError (a run folder, or the .metadata file itself).
// `path` is a checkpoint directory or a single `.safetensors` file.
// With `metadata`, those bytes stand for the directory's .metadata (a distributed run whose
// node-local directory holds only data files got them from another rank).
Checkpoint open_checkpoint(const std::string& path, const std::vector<uint8_t>* metadata = nullptr);
struct OpenOptions {
  const std::vector<uint8_t>* metadata = nullptr;  // as above
  bool compare = false;  // diff and stats: a torch.save file or directory of them too (readers.h)
};
Checkpoint open_checkpoint(const std::string& path, const OpenOptions& options);

// Throws FormatError naming every finding in ck.incomplete (writers call it before writing).
void require_complete(const Checkpoint& ck);

// A tensor of a type its reader knows but dcpctl does not decode (a GGUF block type: Q8_0, Q4_K,
// ...; gguf/reader.cpp): laid out and checked like any tensor, its one chunk stored whole
// (its bytes, stored_bytes), never "unknown"; a command that reads its values refuses it.
bool opaque_type(const Checkpoint& ck, const TensorMeta& t);

// A per-rank torch.save file of a sharded state dict, from its name: verl's
// `model_world_size_{W}_rank_{R}.pt` gives {W, R}; nullopt for any other name.
struct RankTorchFile {
  int world_size = 0, rank = 0;
};
std::optional<RankTorchFile> rank_torch_file(const std::string& name);

// The rank that wrote a data file, from its name `__{rank}_{n}.distcp` (nullopt if not that form).
std::optional<int> rank_of_file(const std::string& relative_path);

}  // namespace dcpctl
