// Readers as a table: every layout dcpctl opens is one row, and open_checkpoint() (checkpoint.h)
// is the one opener every command goes through.
//
// A row is a layout as a user meets it on disk: its stable name (what `inspect` prints and
// scripts match), a phrase for people, what makes a path this layout (`detect`, asked of a Probe:
// the path, whether it is a directory, and its listing, gathered once), how to open it into one
// typed view (`open`, returning a Checkpoint whose `layout` is this row's, or a row its opener
// reached: the DCP row opens `dcp-safetensors-items` when the blobs say so), and what the reader
// calls complete (`complete`: prose; the opener records what is missing in Checkpoint::incomplete,
// verify reports it, writers refuse through require_complete).
//
// The opener asks the rows in table order and the first whose `detect` says yes opens the path;
// nothing else decides. It guarantees:
// - one path, one reader: a row opens the whole path or throws (FormatError for a damaged
//   layout it recognised, UnsupportedError naming the layout for a part of it that dcpctl does
//   not read); it never hands the path on to a later row;
// - a row that detects nothing (`detect` null) is reached only through another row's opener;
//   it is in the table for its name, its phrase and its notion of complete;
// - a row marked `compare_only` is asked only when the caller reads for a comparison (diff and
//   stats read a lone torch.save file; every other command refuses one as before);
// - a row whose reader lives above meta/ (a torch.save zip needs the item layer's LibTorch
//   plugin) or in a module (a GGUF file: src/gguf/, which a build may leave out) has its `open`
//   installed by that layer or module (install_reader; item/torch_file.h's install_item_readers(),
//   gguf/register.h's register_gguf(), torch_checkpointing/register.h's
//   register_torch_checkpointing()); until then its paths are refused as unsupported, naming
//   the layout and what would read it (`installed_by`);
// - when no row takes a directory, what it is not is said in one place (open_checkpoint: a DCP
//   save that did not finish, an index without its files, a trainer's step folder read through
//   the model inside, a run folder, or "not a checkpoint directory").
// Adding a reader is one file holding its detect and open, one enum value and one row below.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "util/finding.h"

namespace dcpctl {

struct Checkpoint;

enum class CheckpointLayout {
  Dcp,                  // .metadata + torch.save items
  DcpSafetensorsItems,  // .metadata + one safetensors blob per .distcp
  DcpRankLocal,         // __R.metadata per rank, no .metadata
  HfDcpShards,          // safetensors files with DCP_SHARDING_INFO (HuggingFaceStorageWriter)
  HfSafetensors,        // plain Hugging Face safetensors (consolidated) or one .safetensors file
  TorchSave,            // one torch.save file of a state_dict (item/torch_file.h; diff and stats)
  TorchSaveRanks,       // model_world_size_W_rank_R.pt: one torch.save of DTensor shards per rank (verl)
  TorchCheckpointing,   // torch_checkpointing ("DCPv2"): <item>_<rank>.pt (+ metadata.pkl)
                        // (torch_checkpointing/: its module)
  Gguf,                 // one GGUF file, llama.cpp's (the GGUF module, src/gguf/)
};

// What detection looks at: the path as given, whether it is a directory, and for a directory
// its listing, taken on first use (a DCP directory is never listed: `.metadata` decides).
struct Probe {
  std::string path;
  bool directory = false;
  bool compare = false;                            // the caller reads for diff or stats (OpenOptions)
  const std::vector<uint8_t>* metadata = nullptr;  // `.metadata`'s bytes, received from another rank
  bool exists(const std::string& name) const;      // path/name exists
  const std::vector<std::string>& names() const;
  std::vector<std::string> ending(const std::string& suffix) const;  // the names ending so

 private:
  mutable std::optional<std::vector<std::string>> names_;
};

// What a layout's own check finds (LayoutReader::check): problems fail verify, notes do not.
struct LayoutFindings {
  Findings problems, notes;
};

struct LayoutReader {
  using Detect = bool (*)(const Probe&);
  using Open = Checkpoint (*)(const Probe&);
  CheckpointLayout layout;
  const char* name;         // stable, for scripts
  const char* description;  // for people
  const char* complete;     // what the reader calls complete
  Detect detect;            // null: reached through another row's opener
  Open open;                // null until installed (a reader above meta/ or in a module)
  bool compare_only = false;
  // What installs `open`, for the refusal of a path this row detects while it is not installed.
  const char* installed_by = "dcpctl's item layer, which this program did not install";
  // The reader lists tensors of types it knows but dcpctl does not decode (a GGUF block type:
  // checkpoint.h's opaque_type); the phrase that names such a type ("GGUF type"). Null: none.
  const char* opaque_types = nullptr;
  // The section `inspect --json` gives the checkpoint's non-tensor keys (Checkpoint::values) in,
  // with its header's format (report/inspect.h); null: the layout has none.
  const char* values_section = nullptr;
  // What verify checks of this layout beyond its structure (a GGUF file's tensors against its
  // architecture's table), installed with `open` by the module that reads it; null: nothing.
  LayoutFindings (*check)(const Checkpoint&) = nullptr;
  // --dtype over a checkpoint of this layout (view/codecs/dequantize.h): the checkpoint with each
  // tensor of an opaque type the module decodes (a GGUF block type: gguf/decoded.h) as a float32
  // tensor of the same name and shape, computed by a derived tensor; those it does not decode stay
  // opaque (their values refused, exit 5, naming the type). Installed with `open`; null: none.
  Checkpoint (*decode_opaque)(const Checkpoint&) = nullptr;
};

// The table, in the order the opener asks it.
const std::vector<LayoutReader>& layout_readers();
const LayoutReader& layout_reader(CheckpointLayout l);

// Installs the opener of a row whose reader lives above meta/ (the item layer calls it).
void install_reader(CheckpointLayout l, LayoutReader::Open open);
// Installs a module's reader whole: its opener and what verify checks of it (a module calls it
// from its register function).
void install_reader(CheckpointLayout l, LayoutReader::Open open, LayoutFindings (*check)(const Checkpoint&));
// Installs what decodes a module's opaque types (LayoutReader::decode_opaque).
void install_opaque_decoder(CheckpointLayout l, Checkpoint (*decode)(const Checkpoint&));

}  // namespace dcpctl
