// Safetensors directories as one checkpoint view: HF-mode DCP and plain Hugging Face output.
//
// HuggingFaceStorageWriter (torch 2.8+ [I]; read in 2.14.1's hf_storage.py) writes, per rank,
// `shard-{rank+1:05}-model-{i:05}-of-{N:05}.safetensors` (save_distributed=True; under `sharded/`
// with enable_consolidation=True, the consolidated files beside it), or
// `model-{i:05}-of-{N:05}.safetensors` + `model.safetensors.index.json` from one rank. Each
// shard's `__metadata__` carries DCP_SHARDING_INFO ({fqn: {"saved_offsets": [..]}}) and
// DCP_VERSION. torch's HuggingFaceStorageReader reads every `*.safetensors` in the directory
// and builds its Metadata the same way as here: a tensor's chunk is one file's entry at its
// saved_offsets (zeros without sharding info), its global shape the maximum of offset + size
// over its chunks. (So a missing LAST rank's file cannot be seen from the shapes: the shard
// numbers 1..max are checked instead.)
// With an index, its weight_map decides which files belong to the model (as transformers
// loads it): a key it names that its file lacks, or a file it names that is missing, makes the
// checkpoint incomplete; a key a file holds that the index does not name is reported.
// Unlike torch's reader, every safetensors dtype is mapped exactly (torch 2.14's _get_dtype and
// _getdtype fall back to float32 for some, e.g. BOOL/U16/F8 in older code paths).
#include <nlohmann/json.hpp>

#include <map>
#include <regex>
#include <set>

#include "meta/layouts.h"
#include "meta/safetensors_header.h"
#include "store/file.h"

namespace dcpctl::meta_detail {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxIndexBytes = 64ull << 20;

}  // namespace

std::map<std::string, std::string> read_weight_map(const std::string& index) {
  ReadFile f(index);
  if (f.size() > kMaxIndexBytes)
    throw FormatError(Where(index),
                      "index of " + std::to_string(f.size()) + " bytes is larger than dcpctl reads (64 MiB)");
  json j = json::parse(f.read_all(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw FormatError(Where(index), "not a Hugging Face index (a JSON object with a \"weight_map\" object)");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : j["weight_map"].items()) {
    if (!v.is_string()) throw FormatError(Where(index, std::nullopt, k), "weight_map value is not a file name");
    std::string file = v.get<std::string>();
    if (file.empty() || file[0] == '/' || file.find("..") != std::string::npos)
      throw FormatError(Where(index, std::nullopt, k), "weight_map names '" + file + "', outside the directory");
    out[k] = file;
  }
  return out;
}

namespace {

// A folder of safetensors files opened as one checkpoint: the files (the index's, or all), each
// file's header read into chunks of its tensors, then the index and the file names checked.
class SafetensorsFolder {
 public:
  SafetensorsFolder(const std::string& dir, const std::vector<std::string>& names, const std::string& index)
      : dir_(dir), names_(names), index_(index), md_(ck_.md) {}

  Checkpoint open() {
    ck_.dir = dir_;
    ck_.layout = CheckpointLayout::HfSafetensors;
    md_.metadata_class = "safetensors headers";
    list_files();
    for (uint32_t f = 0; f < md_.files.size(); ++f) read_file(f);
    if (sharded_) ck_.layout = CheckpointLayout::HfDcpShards;
    check_index();
    check_numbering();
    return std::move(ck_);
  }

 private:
  void list_files() {
    std::vector<std::string> files = names_;
    if (!index_.empty()) {
      weight_map_ = read_weight_map(index_);
      std::set<std::string> named;
      for (const auto& [k, f] : weight_map_) named.insert(f);
      for (const auto& n : names_)
        if (!named.count(n))
          md_.problems.push_back(
              {"unindexed-file", Where(join_path(dir_, n)),
               "a .safetensors file the index does not name (a stale shard of another save?); not read"});
      files.assign(named.begin(), named.end());
      ck_.metadata_path = index_;
      ck_.metadata_sources.push_back(index_);
    } else {
      ck_.metadata_path = names_.size() == 1 ? join_path(dir_, names_[0]) : dir_;
    }
    md_.source = ck_.metadata_path;
    md_.files = files;
    stat_data_files(ck_);
  }

  // File f's header: each entry a chunk of its tensor, at its DCP_SHARDING_INFO offsets if any.
  void read_file(uint32_t f) {
    if (!ck_.files[f].size) return;  // reported as a missing file
    std::string path = ck_.path_of(f);
    ck_.metadata_sources.push_back(path);
    SafetensorsHeader h;
    std::map<std::string, std::vector<int64_t>> offsets;
    try {
      ReadFile file(path);
      h = read_safetensors_header(file, 0, file.size());
      offsets = dcp_sharding_info(h, path);
    } catch (const FormatError& e) {
      ck_.incomplete.push_back({"bad-safetensors-header", e.where(), e.detail()});
      return;
    }
    ck_.metadata_bytes += 8 + h.header_bytes;
    const bool sharded = h.metadata.count("DCP_SHARDING_INFO");
    if (sharded) sharded_ = true;
    for (const auto& e : h.tensors) {
      Where where(path, h.data_start + e.begin, e.key);
      std::vector<int64_t> off(e.shape.size(), 0);
      if (sharded) {
        auto it = offsets.find(e.key);
        if (it == offsets.end() || it->second.size() != e.shape.size()) {
          md_.problems.push_back(
              {"sharding-info-mismatch", where, "DCP_SHARDING_INFO has no saved_offsets of this tensor's rank"});
          continue;
        }
        off = it->second;
      }
      add_chunk(f, h, e, off, where);
    }
  }

  // Entry e of file f (header h) as a chunk at `off` of its tensor, the tensor listed when first seen.
  void add_chunk(uint32_t f, const SafetensorsHeader& h, const SafetensorsTensorInfo& e,
                 const std::vector<int64_t>& off, const Where& where) {
    StorageRef ref;
    ref.file = f;
    ref.offset = h.data_start + e.begin;
    ref.length = e.end - e.begin;
    ref.format = ItemFormat::Raw;
    auto [it, added] = tensor_index_.emplace(e.key, static_cast<uint32_t>(md_.tensors.size()));
    if (added) {
      TensorMeta t;
      t.fqn = e.key;
      t.dtype = e.dtype;
      t.dtype_name = e.dtype ? torch_name(*e.dtype) : e.dtype_name;
      t.shape.resize(e.shape.size());
      for (size_t d = 0; d < e.shape.size(); ++d) t.shape[d] = off[d] + e.shape[d];
      md_.order.push_back({true, it->second});
      md_.tensors.push_back(std::move(t));
    }
    TensorMeta& t = md_.tensors[it->second];
    std::string dname = e.dtype ? torch_name(*e.dtype) : e.dtype_name;
    if (dname != t.dtype_name || e.shape.size() != t.ndim()) {
      md_.problems.push_back({"chunk-dtype-mismatch", where,
                              "this file holds " + dname + " of " + std::to_string(e.shape.size()) +
                                  " dims, another holds " + t.dtype_name + " of " + std::to_string(t.ndim())});
      return;
    }
    for (size_t d = 0; d < e.shape.size(); ++d) t.shape[d] = std::max(t.shape[d], off[d] + e.shape[d]);
    t.chunk_dims.insert(t.chunk_dims.end(), off.begin(), off.end());
    t.chunk_dims.insert(t.chunk_dims.end(), e.shape.begin(), e.shape.end());
    t.storage.push_back(ref);
    files_of_[e.key].insert(f);
  }

  // Every key the index names in the file that holds it, and every key held named by it.
  void check_index() {
    for (const auto& [key, file] : weight_map_) {
      auto fi = std::find(md_.files.begin(), md_.files.end(), file);
      uint32_t f = static_cast<uint32_t>(fi - md_.files.begin());
      if (!ck_.files[f].size) continue;  // the missing file is the finding
      if (!files_of_[key].count(f))
        ck_.incomplete.push_back({"missing-key", Where(join_path(dir_, file), std::nullopt, key),
                                  "the index names this tensor in this file, which does not hold it"});
    }
    if (!index_.empty())
      for (const auto& t : md_.tensors)
        if (!weight_map_.count(t.fqn))
          md_.problems.push_back({"unindexed-key", Where(ck_.metadata_path, std::nullopt, t.fqn),
                                  "a tensor the files hold that the index does not name"});
  }

  // File-name numbering: shard-R-model-i-of-N (R = rank + 1) and model-i-of-N. A gap in the
  // ranks or in 1..N is a file that is not there.
  void check_numbering() {
    static const std::regex kShard(R"((?:.*/)?shard-(\d+)-model-(\d+)-of-(\d+)\.safetensors)");
    static const std::regex kModel(R"((?:.*/)?model-(\d+)-of-(\d+)\.safetensors)");
    std::set<long> shard_ranks, model_parts;
    long model_total = 0;
    for (const auto& n : md_.files) {
      std::smatch m;
      if (std::regex_match(n, m, kShard)) {
        shard_ranks.insert(std::stol(m[1]));
      } else if (std::regex_match(n, m, kModel)) {
        model_parts.insert(std::stol(m[1]));
        model_total = std::max(model_total, std::stol(m[2]));
      }
    }
    if (!shard_ranks.empty())
      for (long r = 1; r < *shard_ranks.rbegin(); ++r)
        if (!shard_ranks.count(r))
          ck_.incomplete.push_back({"missing-shard", Where(dir_),
                                    "no file of shard " + std::to_string(r) + " (rank " + std::to_string(r - 1) +
                                        ") although shard " + std::to_string(*shard_ranks.rbegin()) + " is here"});
    if (index_.empty() && model_total > 0 && model_total < 100000)
      for (long i = 1; i <= model_total; ++i)
        if (!model_parts.count(i))
          ck_.incomplete.push_back({"missing-file", Where(dir_),
                                    "no model-" + std::string(5 - std::min<size_t>(5, std::to_string(i).size()), '0') +
                                        std::to_string(i) + "-of-... file although the names count " +
                                        std::to_string(model_total)});
  }

  const std::string& dir_;
  const std::vector<std::string>& names_;
  const std::string& index_;
  Checkpoint ck_;
  Metadata& md_;
  std::map<std::string, std::string> weight_map_;
  std::map<std::string, uint32_t> tensor_index_;
  std::map<std::string, std::set<uint32_t>> files_of_;  // key -> files holding a chunk of it
  bool sharded_ = false;
};

}  // namespace

Checkpoint open_safetensors_files(const std::string& dir, const std::vector<std::string>& names,
                                  const std::string& index) {
  return SafetensorsFolder(dir, names, index).open();
}

}  // namespace dcpctl::meta_detail
