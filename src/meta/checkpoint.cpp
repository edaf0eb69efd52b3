#include "meta/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <regex>

#include "meta/layouts.h"
#include "meta/run_folder.h"
#include "store/file.h"

namespace dcpctl {

using meta_detail::ends_with;

const char* layout_name(CheckpointLayout l) {
  switch (l) {
    case CheckpointLayout::Dcp: return "dcp";
    case CheckpointLayout::DcpSafetensorsItems: return "dcp-safetensors-items";
    case CheckpointLayout::DcpRankLocal: return "dcp-rank-local";
    case CheckpointLayout::HfDcpShards: return "hf-dcp";
    case CheckpointLayout::HfSafetensors: return "hf-safetensors";
    case CheckpointLayout::TorchSave: return "torch-save";
    case CheckpointLayout::TorchSaveRanks: return "torch-save-ranks";
  }
  return "?";
}

const char* layout_description(CheckpointLayout l) {
  switch (l) {
    case CheckpointLayout::Dcp: return "DCP (.metadata + torch.save items)";
    case CheckpointLayout::DcpSafetensorsItems: return "DCP with safetensors items (SerializationFormat.SAFETENSORS)";
    case CheckpointLayout::DcpRankLocal: return "DCP with rank-local metadata (__R.metadata, use_collectives=False)";
    case CheckpointLayout::HfDcpShards: return "HF-mode DCP (HuggingFaceStorageWriter safetensors with DCP_SHARDING_INFO)";
    case CheckpointLayout::HfSafetensors: return "Hugging Face safetensors (consolidated)";
    case CheckpointLayout::TorchSave: return "torch.save file of a state_dict (.pt/.bin)";
    case CheckpointLayout::TorchSaveRanks: return "per-rank torch.save files of DTensor shards (verl FSDP)";
  }
  return "?";
}

uint64_t Checkpoint::data_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.size.value_or(0);
  return n;
}

std::string Checkpoint::path_of(uint32_t file) const { return join_path(dir, md.files.at(file)); }

std::optional<RankTorchFile> rank_torch_file(const std::string& name) {
  static const std::regex kName(R"(model_world_size_(\d{1,7})_rank_(\d{1,7})\.pt)");
  std::smatch m;
  if (!std::regex_match(name, m, kName)) return std::nullopt;
  RankTorchFile f{std::stoi(m[1].str()), std::stoi(m[2].str())};
  if (f.world_size < 1) return std::nullopt;
  return f;
}

namespace {
RankTorchFilesOpener g_rank_torch_files_opener = nullptr;
}

void set_rank_torch_files_opener(RankTorchFilesOpener opener) { g_rank_torch_files_opener = opener; }

std::optional<int> rank_of_file(const std::string& p) {
  if (p.size() < 3 || p.compare(0, 2, "__") != 0) return std::nullopt;
  size_t i = 2;
  int r = 0;
  bool any = false;
  while (i < p.size() && p[i] >= '0' && p[i] <= '9' && r < 100000000) {
    r = r * 10 + (p[i++] - '0');
    any = true;
  }
  if (!any || i >= p.size() || p[i] != '_') return std::nullopt;
  return r;
}

void require_complete(const Checkpoint& ck) {
  if (ck.incomplete.empty()) return;
  std::string text;
  for (const auto& f : ck.incomplete) text += "\n  " + f.text();
  throw FormatError(Where(ck.dir), "the checkpoint is incomplete; refusing to write from it:" + text);
}

namespace meta_detail {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

void stat_data_files(Checkpoint& ck) {
  ck.files.clear();
  for (const auto& rel : ck.md.files) {
    DataFileInfo fi;
    fi.relative_path = rel;
    std::string p = join_path(ck.dir, rel);
    if (rel.find("..") != std::string::npos || (!rel.empty() && rel[0] == '/')) {
      fi.error = "path leaves the checkpoint directory";
    } else if (PathInfo st = stat_path(p); st.kind == PathInfo::missing) {
      fi.missing = st.err == ENOENT || st.err == 0;
      fi.error = st.err ? errno_text(st.err) : std::string("no such object");
    } else if (st.kind != PathInfo::file) {
      fi.error = "not a regular file";
    } else {
      fi.size = st.size;
    }
    ck.files.push_back(std::move(fi));
  }
}

}  // namespace meta_detail

namespace {

bool is_rank_metadata(const std::string& n) { return std::regex_match(n, std::regex(R"(__\d+\.metadata)")); }

// The directory has no `.metadata`: find which other layout it holds, or say what it is not.
Checkpoint open_without_metadata(const std::string& dir) {
  std::vector<std::string> names = list_dir(dir);
  std::vector<std::string> rank_md, safet, rank_pt;
  size_t distcp = 0;
  for (const auto& n : names) {
    if (is_rank_metadata(n)) rank_md.push_back(n);
    if (rank_torch_file(n)) rank_pt.push_back(n);
    if (ends_with(n, ".safetensors")) safet.push_back(n);
    if (ends_with(n, ".distcp")) ++distcp;
  }
  std::string index = join_path(dir, "model.safetensors.index.json");
  if (!rank_md.empty()) return meta_detail::open_rank_local(dir, rank_md);
  if (!rank_pt.empty()) {
    if (!g_rank_torch_files_opener)
      throw UnsupportedError(Where(join_path(dir, rank_pt.front())), "per-rank torch.save files need dcpctl's item layer, "
                                                                      "which this program did not install");
    return g_rank_torch_files_opener(dir, rank_pt);
  }
  if (!safet.empty()) return meta_detail::open_safetensors_files(dir, safet, path_exists(index) ? index : "");
  // HuggingFaceStorageWriter(enable_consolidation=True) writes the per-rank shards to sharded/
  // and the consolidated files beside it; with only the shards left, read those.
  std::string sharded = join_path(dir, "sharded");
  if (is_directory(sharded)) {
    std::vector<std::string> inner;
    for (const auto& n : list_dir(sharded))
      if (ends_with(n, ".safetensors")) inner.push_back("sharded/" + n);
    if (!inner.empty()) return meta_detail::open_safetensors_files(dir, inner, "");
  }
  std::string path = join_path(dir, ".metadata");
  if (distcp > 0)
    throw FormatError(Where(path), "missing, although the directory holds " + std::to_string(distcp) +
                                       " .distcp files: the save did not finish (the coordinator writes "
                                       ".metadata last), or this node lacks the shared filesystem copy");
  if (path_exists(index))
    throw FormatError(Where(index), "names the model's files, but the directory holds no .safetensors file");
  // A trainer's step folder (checkpoint-N/ with pytorch_model_fsdp_0/ or model/ inside): the
  // model checkpoint in it, incomplete when the trainer's own marker says the save did not finish.
  if (auto sf = step_folder(dir)) {
    Checkpoint ck = open_checkpoint(sf->model);
    ck.step_dir = dir;
    ck.trainer = sf->trainer;
    ck.asset_dirs = sf->asset_dirs;
    if (!sf->unfinished.empty())
      ck.incomplete.insert(ck.incomplete.begin(),
                           Finding{"step-unfinished", Where(dir), sf->unfinished + " (give " + sf->model +
                                                                      " itself to read the model files regardless)"});
    return ck;
  }
  if (auto refusal = run_folder_refusal(dir)) throw UsageError(Where(dir), *refusal);
  throw FormatError(Where(path), "missing: " + dir + " is not a DCP checkpoint directory");
}

}  // namespace

Checkpoint open_checkpoint(const std::string& path, const std::vector<uint8_t>* metadata) {
  PathInfo st = stat_path(path);
  if (st.kind == PathInfo::missing)
    throw IoError(Where(path), "cannot open checkpoint: " + (st.err ? errno_text(st.err) : std::string("no such object or prefix")));
  if (st.kind != PathInfo::directory) {
    if (ends_with(path, ".metadata"))
      throw UsageError(Where(path), "give the checkpoint directory, not its .metadata file");
    if (ends_with(path, ".safetensors")) {
      size_t slash = path.find_last_of('/');
      std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
      return meta_detail::open_safetensors_files(dir, {path.substr(slash + 1)}, "");
    }
    throw IoError(Where(path), "not a directory: a DCP checkpoint is a directory holding .metadata");
  }
  const std::string& dir = path;
  Checkpoint ck;
  ck.dir = dir;
  ck.metadata_path = join_path(dir, ".metadata");
  if (metadata) {
    ck.metadata_bytes = metadata->size();
    ck.md = parse_metadata(ByteSpan(metadata->data(), metadata->size()), ck.metadata_path + " (received from another rank)");
  } else {
    if (!path_exists(ck.metadata_path)) return open_without_metadata(dir);
    MappedFile mf(ck.metadata_path);
    ck.metadata_bytes = mf.size();
    MetadataParseOptions po;
    po.consumed = [&mf](uint64_t done) { mf.drop_before(done); };
    ck.md = parse_metadata(mf.span(), ck.metadata_path, po);
  }
  ck.metadata_sources = {ck.metadata_path};
  meta_detail::stat_data_files(ck);
  meta_detail::resolve_safetensors_items(ck);
  return ck;
}

}  // namespace dcpctl
