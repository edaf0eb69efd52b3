// A torch.save file (`.pt`, `.pth`, `.bin`: torch.save(state_dict), dcp_to_torch_save, dcpctl
// consolidate -o model.pt) as a checkpoint view, for diff and stats.
//
// The file is a zip (torch.save's default since 1.6; the legacy pickle-only format is refused)
// holding `<archive>/data.pkl` (the object) and one STORED record `<archive>/data/<key>` per
// storage (torch_zip.h). data.pkl is decoded by the restricted VM; its nested dicts (and lists
// holding tensors) are flattened with "." exactly as DCP's traverse_state_dict flattens a
// state_dict: dict keys by str(key), list entries by index, a list holding no tensor (and any
// tuple) is one value, an empty dict vanishes. Each tensor becomes one chunk covering the whole
// tensor whose bytes are its storage record's bytes from the view's offset on (ItemFormat::Raw),
// which is exactly what a C-contiguous view is. Non-tensor leaves become BytesMeta entries
// without storage; their repr is returned beside the view.
//
// Refused with UnsupportedError (exit 5) naming the key: anything torch.load(weights_only=True)
// would refuse (a global outside its allow-list, e.g. io.BytesIO or a user class), and tensor
// views that are not C-contiguous (a transposed or expanded tensor saved as is), which one dense
// run of bytes cannot express.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "item/torch_zip.h"
#include "meta/checkpoint.h"
#include "pickle/tree.h"
#include "store/file.h"

namespace dcpctl {

struct TorchFileView {
  Checkpoint ck;
  std::map<std::string, std::string> values;  // flat key -> Python repr of a non-tensor leaf
  std::map<std::string, uint32_t> keys;       // flat key -> the file (ck.md.files) holding it
};

// Whether `path` names a torch.save file by its suffix (.pt, .pth, .bin).
bool is_torch_file_name(const std::string& path);

TorchFileView open_torch_file(const std::string& path);

// A Hugging Face directory of torch.save files, as transformers' save_pretrained(...,
// safe_serialization=False) writes it: `pytorch_model.bin.index.json` (its weight_map names each
// key's file) + `pytorch_model-0000i-of-0000N.bin`, or one `pytorch_model.bin`. Every file is read
// as open_torch_file() reads one (same refusals), into one view (layout torch-save), each tensor
// one chunk in its own file. A file the index names that is missing, or a key the index names
// that its file does not hold, makes the view incomplete (exit 3); a key in two files is
// invalid; a key the index does not name is reported as a problem and still read.
// The torch-save row of the readers' table (meta/readers.h) detects such a directory: one without
// .metadata and without any .safetensors file (those are read as DCP / Hugging Face safetensors,
// as transformers prefers them) holding either file.
TorchFileView open_hf_torch_dir(const std::string& dir);

// One torch.save archive opened: its zip index (LibTorch's reader, through the plugin) and its
// data.pkl decoded by the restricted VM (never executed). Refuses legacy (non-zip) files and
// big-endian archives.
struct TorchArchive {
  std::shared_ptr<ReadFile> file;
  std::unique_ptr<TorchZip> zip;
  std::unique_ptr<pickle::Tree> tree;
  uint64_t pickle_bytes = 0;
};
TorchArchive open_torch_archive(const std::string& path);

// A tensor rebuild call (_rebuild_tensor_v2/v3, or a Parameter around one).
bool is_tensor(const pickle::Value& v);
// A state_dict key as traverse_state_dict spells it: str(key).
std::string key_text(const pickle::Value& k);
// Module.state_dict() returns an OrderedDict carrying `_metadata` (each module's version) as an
// attribute; torch.save pickles it as the OrderedDict's BUILD state, which the VM merges into the
// dict's items. It is no entry of the state dict (torch.load gives it back as the attribute), so
// readers leave it out: the root OrderedDict's "_metadata" holding a dict.
bool is_module_metadata(const pickle::Value& root, const pickle::Value& key, const pickle::Value& value);

// Installs the openers of the readers' rows that read torch.save zips (meta/ cannot open one
// itself; meta/readers.h): torch-save (open_torch_file, open_hf_torch_dir) and torch-save-ranks
// (open_rank_torch_files). The CLI calls it first thing.
void install_item_readers();

// Directories of per-rank torch.save files of DTensor shards (verl's FSDP checkpoint:
// `model_world_size_W_rank_R.pt`), read as one sharded checkpoint (layout torch-save-ranks).
// item/rank_torch_files.cpp.
Checkpoint open_rank_torch_files(const std::string& dir, const std::vector<std::string>& names);

// The reader under both verl's files and torch_checkpointing's default layout: per-rank
// torch.save files, each of one item (`prefix`, "" for a file holding the whole state dict)
// of one rank, their DTensors placed as above, the items' keys `prefix.key`. Every rank
// 0..world-1 must have its file of every item (file_name names a missing one in the finding).
// With `values`, a non-tensor leaf (a step count, an optimizer's param_groups) is kept as its repr
// in Checkpoint::values (copies on other ranks must be equal) instead of being refused.
struct RankFileSet {
  struct File {
    int rank = 0;
    std::string name, prefix;
  };
  std::string dir, metadata_path, metadata_class, pattern;
  int world = 0;
  std::vector<File> files;
  CheckpointLayout layout = CheckpointLayout::TorchSaveRanks;
  std::vector<std::string> asset_dirs;
  bool values = false;
  std::function<std::string(int rank, const std::string& prefix)> file_name;
};
Checkpoint open_rank_file_set(RankFileSet set);

}  // namespace dcpctl
