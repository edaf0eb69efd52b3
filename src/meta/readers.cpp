// The table of readers (readers.h). Each row's detect looks only at the Probe; its opener is
// the function of the file that reads the layout.
#include "meta/readers.h"

#include <algorithm>
#include <regex>
#include <set>

#include "meta/checkpoint.h"
#include "meta/layouts.h"
#include "store/file.h"
#include "util/error.h"

namespace dcpctl {

using meta_detail::ends_with;

bool Probe::exists(const std::string& name) const {
  return path_exists(join_path(path, name));
}

const std::vector<std::string>& Probe::names() const {
  if (!names_) names_ = list_dir(path);
  return *names_;
}

std::vector<std::string> Probe::ending(const std::string& suffix) const {
  std::vector<std::string> out;
  for (const auto& n : names())
    if (ends_with(n, suffix)) out.push_back(n);
  return out;
}

namespace {

bool is_rank_metadata(const std::string& n) {
  return std::regex_match(n, std::regex(R"(__\d+\.metadata)"));
}

// --- dcp: `.metadata` (or its bytes, received from another rank) -------------------------------
bool detect_dcp(const Probe& p) {
  return p.directory && (p.metadata || p.exists(".metadata"));
}
Checkpoint open_dcp_row(const Probe& p) {
  return meta_detail::open_dcp(p.path, p.metadata);
}

// --- torch-save: a torch.save file, or transformers' directory of them (diff and stats) --------
bool is_torch_file_name(const std::string& n) {
  return ends_with(n, ".pt") || ends_with(n, ".pth") || ends_with(n, ".bin");
}
bool detect_torch_save(const Probe& p) {
  if (!p.directory) return is_torch_file_name(p.path);
  // transformers prefers safetensors, as we do; a `.metadata` makes it DCP.
  if (p.exists(".metadata")) return false;
  if (!p.exists("pytorch_model.bin.index.json") && !p.exists("pytorch_model.bin")) return false;
  return p.ending(".safetensors").empty();
}

// --- dcp-rank-local: `__R.metadata` per rank ---------------------------------------------------
bool detect_rank_local(const Probe& p) {
  return p.directory && std::any_of(p.names().begin(), p.names().end(), is_rank_metadata);
}
Checkpoint open_rank_local_row(const Probe& p) {
  std::vector<std::string> rank_md;
  for (const auto& n : p.names())
    if (is_rank_metadata(n)) rank_md.push_back(n);
  return meta_detail::open_rank_local(p.path, rank_md);
}

// --- torch-save-ranks: verl's model_world_size_W_rank_R.pt -------------------------------------
bool detect_torch_save_ranks(const Probe& p) {
  return p.directory && std::any_of(p.names().begin(), p.names().end(),
                                    [](const std::string& n) { return rank_torch_file(n).has_value(); });
}

// --- torch-checkpointing: metadata.pkl, or <item>_<rank>.pt files with a rank 0 --------------
bool detect_torch_checkpointing(const Probe& p) {
  if (!p.directory) return false;
  if (p.exists("metadata.pkl")) return true;
  static const std::regex kRank0(R"(.+_0\.pt)");
  return std::any_of(p.names().begin(), p.names().end(),
                     [](const std::string& n) { return std::regex_match(n, kRank0) && !rank_torch_file(n); });
}

// --- hf-safetensors / hf-dcp: `.safetensors` files, or only HuggingFaceStorageWriter's sharded/ -
std::vector<std::string> sharded_files(const Probe& p) {
  std::vector<std::string> inner;
  std::string sharded = join_path(p.path, "sharded");
  if (!is_directory(sharded)) return inner;
  for (const auto& n : list_dir(sharded))
    if (ends_with(n, ".safetensors")) inner.push_back("sharded/" + n);
  return inner;
}
// A folder of `<item>_<R>.safetensors`, R = 0..N-1 (N >= 2), files repeating keys: each
// rank's local shard under the same keys (torch_checkpointing's SafetensorsSerialization layout,
// `<item>_{rank}.safetensors`), not a model. A model's shards never repeat a key; read as one, this
// would show each local shard's shape as the tensor's. The global shapes and each rank's slice are
// in torch_checkpointing's metadata.pkl, which only the first save of a CheckpointManager writes
// (with it, the torch-checkpointing row takes the folder and places each shard). Refused as
// unsupported: valid input whose geometry is not here.
void refuse_local_shards(const Probe& p, const std::vector<std::string>& names, const Checkpoint& ck) {
  static const std::regex kRankFile(R"((.+)_(\d{1,7})\.safetensors)");
  std::string stem;
  std::set<int> ranks;
  for (const auto& n : names) {
    std::smatch m;
    if (!std::regex_match(n, m, kRankFile) || (!stem.empty() && m[1].str() != stem)) return;
    stem = m[1].str();
    ranks.insert(std::stoi(m[2].str()));
  }
  const size_t n = names.size();
  if (ck.layout != CheckpointLayout::HfSafetensors || n < 2 || ranks.size() != n ||
      *ranks.rbegin() != static_cast<int>(n) - 1 || ck.md.tensors.empty())
    return;
  // A key in two files: a model's shards never repeat one (verify reports it); local shards do
  // (every rank writes every key; one a rank holds nothing of may be left out).
  size_t repeated = 0;
  for (const auto& t : ck.md.tensors) {
    std::set<uint32_t> files;
    for (const auto& s : t.storage) files.insert(s.file);
    if (files.size() >= 2) ++repeated;
  }
  if (repeated == 0) return;
  throw UnsupportedError(
      Where(p.path),
      "not a Hugging Face model: " + stem + "_0.safetensors .. " + stem + "_" + std::to_string(n - 1) +
          ".safetensors repeat " + std::to_string(repeated) + " of their " + std::to_string(ck.md.tensors.size()) +
          " keys, each rank's local shard without offsets (torch_checkpointing's SafetensorsSerialization "
          "layout writes <item>_{rank}.safetensors so); the global shapes and slices are in its metadata.pkl, " +
          (p.exists("metadata.pkl") ? std::string("which is beside them") : std::string("which is not here")) +
          ": without it the local shards cannot be placed (with it, dcpctl reads the folder as torch_checkpointing)");
}

bool detect_safetensors(const Probe& p) {
  if (!p.directory) return ends_with(p.path, ".safetensors");
  return !p.ending(".safetensors").empty() || !sharded_files(p).empty();
}
Checkpoint open_safetensors_row(const Probe& p) {
  if (!p.directory) {
    size_t slash = p.path.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : p.path.substr(0, slash == 0 ? 1 : slash);
    return meta_detail::open_safetensors_files(dir, {p.path.substr(slash + 1)}, "");
  }
  std::vector<std::string> safet = p.ending(".safetensors");
  std::string index = join_path(p.path, "model.safetensors.index.json");
  if (!safet.empty()) {
    Checkpoint ck = meta_detail::open_safetensors_files(p.path, safet, path_exists(index) ? index : "");
    if (!path_exists(index)) refuse_local_shards(p, safet, ck);
    return ck;
  }
  // HuggingFaceStorageWriter(enable_consolidation=True) writes the per-rank shards to sharded/
  // and the consolidated files beside it; with only the shards left, read those.
  return meta_detail::open_safetensors_files(p.path, sharded_files(p), "");
}

// --- gguf: one llama.cpp model file (the GGUF module installs its reader) ------------------
bool detect_gguf(const Probe& p) {
  return !p.directory && ends_with(p.path, ".gguf");
}

std::vector<LayoutReader>& table() {
  static std::vector<LayoutReader> rows = {
      {CheckpointLayout::Dcp, "dcp", "DCP (.metadata + torch.save items)",
       "every data file .metadata names is present and long enough for its items, and the chunks tile every tensor",
       detect_dcp, open_dcp_row},
      {CheckpointLayout::DcpSafetensorsItems, "dcp-safetensors-items",
       "DCP with safetensors items (SerializationFormat.SAFETENSORS)",
       "as dcp, and each file's safetensors blob holds every tensor .metadata puts in it", nullptr, nullptr},
      {CheckpointLayout::TorchSave, "torch-save", "torch.save file of a state_dict (.pt/.bin)",
       "every file the index names is present and holds the keys the index gives it", detect_torch_save, nullptr,
       /*compare_only=*/true},
      {CheckpointLayout::DcpRankLocal, "dcp-rank-local",
       "DCP with rank-local metadata (__R.metadata, use_collectives=False)",
       "every rank that left data files has its __R.metadata, the ranks agree, and the chunks tile every tensor",
       detect_rank_local, open_rank_local_row},
      {CheckpointLayout::TorchSaveRanks, "torch-save-ranks", "per-rank torch.save files of DTensor shards (verl FSDP)",
       "every rank 0..W-1 has its file, every file holds the same keys, and copies of a box are equal",
       detect_torch_save_ranks, nullptr},
      {CheckpointLayout::TorchCheckpointing, "torch-checkpointing",
       "torch_checkpointing (DCPv2) items: <item>_<rank>.pt per rank (+ metadata.pkl; safetensors local shards placed "
       "by it)",
       "every rank 0..W-1 (metadata.pkl's world size) has its file of every item, the files agree with metadata.pkl, "
       "and the pieces "
       "tile every tensor",
       detect_torch_checkpointing, nullptr, false,
       "the torch_checkpointing module (src/torch_checkpointing/), which this build of dcpctl left out: configure it "
       "with -DDCPCTL_WITH_TORCH_CHECKPOINTING=ON"},
      {CheckpointLayout::HfSafetensors, "hf-safetensors", "Hugging Face safetensors (consolidated)",
       "every file the index (or the model-i-of-N names) promises is present and holds its keys", detect_safetensors,
       open_safetensors_row},
      {CheckpointLayout::HfDcpShards, "hf-dcp",
       "HF-mode DCP (HuggingFaceStorageWriter safetensors with DCP_SHARDING_INFO)",
       "no shard below the highest present is missing, and the chunks tile every tensor (a missing last rank cannot be "
       "seen)",
       nullptr, nullptr},
      {CheckpointLayout::Gguf, "gguf", "GGUF file (llama.cpp's model file, versions 2 and 3)",
       "the header parses as llama.cpp's reader parses it, every tensor's data sits where llama.cpp expects it "
       "(in order, each padded to the alignment) and inside the file",
       detect_gguf, nullptr, false,
       "the GGUF module (src/gguf/), which this build of dcpctl left out: configure it with -DDCPCTL_WITH_GGUF=ON",
       "GGUF type", "gguf"},
  };
  return rows;
}

}  // namespace

const std::vector<LayoutReader>& layout_readers() {
  return table();
}

const LayoutReader& layout_reader(CheckpointLayout l) {
  for (const auto& r : table())
    if (r.layout == l) return r;
  throw Error(Where(), "no reader for layout " + std::to_string(static_cast<int>(l)));
}

void install_reader(CheckpointLayout l, LayoutReader::Open open) {
  for (auto& r : table())
    if (r.layout == l) r.open = open;
}

void install_reader(CheckpointLayout l, LayoutReader::Open open, LayoutFindings (*check)(const Checkpoint&)) {
  for (auto& r : table())
    if (r.layout == l) {
      r.open = open;
      r.check = check;
    }
}

void install_opaque_decoder(CheckpointLayout l, Checkpoint (*decode)(const Checkpoint&)) {
  for (auto& r : table())
    if (r.layout == l) r.decode_opaque = decode;
}

}  // namespace dcpctl
