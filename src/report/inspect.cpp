#include "report/inspect.h"

#include <fnmatch.h>

#include <map>
#include <set>

#include "meta/frameworks.h"
#include "meta/geometry.h"
#include "meta/lora_keys.h"
#include "meta/readers.h"
#include "meta/shared_records.h"
#include "view/codecs/quantized.h"

namespace dcpctl {

using nlohmann::json;

bool matches_any(const std::string& key, const std::vector<std::string>& globs) {
  for (const auto& g : globs)
    if (::fnmatch(g.c_str(), key.c_str(), 0) == 0) return true;
  return false;
}

namespace {

json opt(const std::optional<std::string>& s) {
  return s ? json(*s) : json(nullptr);
}

json path_json(const Metadata& md, const std::string& key) {
  auto it = md.planner_data.find(key);
  if (it == md.planner_data.end()) return nullptr;
  json p = json::array();
  for (const auto& e : it->second) p.push_back(e.is_index ? json(e.index) : json(e.key));
  return p;
}

json ref_json(const Checkpoint& ck, const StorageRef& r) {
  json j;
  j["file"] = r.present() ? json(ck.md.files[r.file]) : json(nullptr);
  j["offset"] = r.offset;
  j["length"] = r.length;
  if (r.transforms) j["transforms"] = ck.md.transform_sets[r.transforms];
  return j;
}

}  // namespace

namespace {

json metadata_section(const Checkpoint& ck) {
  const Metadata& md = ck.md;
  json m;
  m["path"] = ck.metadata_path;
  m["bytes"] = ck.metadata_bytes;
  m["pickle_protocol"] = md.pickle_protocol;
  m["class"] = md.metadata_class;
  m["version"] = opt(md.version);
  // Dated from .metadata's classes and fields; per-rank torch.save files carry none of them.
  m["writer_releases"] =
      ck.layout == CheckpointLayout::TorchSaveRanks || ck.layout == CheckpointLayout::TorchCheckpointing
          ? std::string("unknown")
          : md.writer_releases();
  m["strided_tensors"] = md.strided_tensors();
  Metadata::LoaderBound lb = md.oldest_loader();
  m["loadable_by"] = {{"oldest", lb.release.empty() ? json(nullptr) : json(lb.release)},
                      {"reason", lb.reason.empty() ? json(nullptr) : json(lb.reason)}};
  m["checkpoint_id"] = md.storage_meta ? opt(md.storage_meta->checkpoint_id) : json(nullptr);
  m["save_id"] = md.storage_meta ? opt(md.storage_meta->save_id) : json(nullptr);
  m["load_id"] = md.storage_meta ? opt(md.storage_meta->load_id) : json(nullptr);
  m["modules"] = md.storage_meta ? json(md.storage_meta->modules) : json::array();
  m["has_planner_data"] = md.has_planner_data;
  m["unknown_globals"] = md.unknown_globals;
  m["extra_attributes"] = md.extra_attributes;
  m["sources"] = ck.metadata_sources;
  return m;
}

// Keys that read one stored record (meta/shared_records.h): no problem, but a reader should know.
json shared_section(const Checkpoint& ck) {
  json shared = json::array();
  for (const SharedRecord& sr : check_windows(ck).shared) {
    json records = json::array();
    for (const auto& p : sr.places)
      records.push_back({{"file", ck.md.files[p.file]}, {"offset", p.offset}, {"length", p.length}});
    shared.push_back(
        {{"keys", sr.keys}, {"same_bytes", sr.same_bytes}, {"records", records}, {"message", shared_text(ck, sr)}});
  }
  return shared;
}

// inspect_report's tables: every item, every file, the totals, and the problems found on the way.
class Inventory {
 public:
  Inventory(const Checkpoint& ck, const InspectOptions& opts)
      : ck_(ck), md_(ck.md), opts_(opts), complete_(ck.incomplete.empty()), items_per_file_(ck.md.files.size(), 0) {
    for (const auto& p : md_.problems)
      problems_.push_back({{"code", p.code}, {"key", p.where.key}, {"message", p.message}});
    for (const auto& p : ck.incomplete)
      problems_.push_back({{"code", p.code}, {"key", p.where.key}, {"message", p.text()}});
    for (const auto& t : md_.tensors) add_tensor(t);
    for (const auto& b : md_.bytes) add_bytes(b);
    add_files();
  }

  void report(json& out) {
    out["summary"] = summary();
    // A layout's own keys, in the section its reader names (meta/readers.h values_section: a GGUF
    // file's, each value as text, an array of more than 8 as its length and element type).
    if (const char* section = layout_reader(ck_.layout).values_section)
      out[section] = {{"format", md_.metadata_class}, {"keys", ck_.values}};
    out["files"] = files_;
    out["items"] = items_;
    out["problems"] = problems_;
  }

 private:
  void problem(const char* code, const std::string& key, const std::string& message) {
    problems_.push_back({{"code", code}, {"key", key}, {"message", message}});
  }
  void count_ref(const StorageRef& r) {
    if (r.present()) ++items_per_file_[r.file];
  }

  void coverage_problems(const TensorMeta& t, const Coverage& cov, size_t missing_storage) {
    if (cov.missing_elements)
      problem("chunk-gap", t.fqn,
              std::to_string(cov.missing_elements) + " elements covered by no chunk" +
                  (cov.holes.empty() ? "" : ", e.g. " + cov.holes[0].text()));
    if (cov.overlap_elements)
      problem("chunk-overlap", t.fqn,
              std::to_string(cov.overlap_elements) + " elements covered by more than one chunk");
    for (size_t c : cov.out_of_bounds)
      problem("chunk-out-of-bounds", t.fqn, "chunk " + std::to_string(c) + " reaches outside the tensor's shape");
    if (missing_storage)
      problem("missing-storage", t.fqn, std::to_string(missing_storage) + " chunk(s) have no storage_data entry");
  }

  void add_tensor(const TensorMeta& t) {
    for (const auto& r : t.storage) count_ref(r);
    Coverage cov = check_coverage(t, 4);
    size_t missing_storage = 0;
    for (size_t c = 0; c < t.num_chunks(); ++c)
      if (!t.storage[c].present() && t.chunk_numel(c) > 0) ++missing_storage;
    const bool ok = cov.exact && missing_storage == 0;
    if (!ok) {
      complete_ = false;
      coverage_problems(t, cov, missing_storage);
    }
    const bool opaque = opaque_type(ck_, t);  // a GGUF block type: known, laid out, not decoded
    if (!t.dtype && !opaque) problem("unknown-dtype", t.fqn, "dtype " + t.dtype_name + " is unknown to dcpctl");
    const uint64_t bytes = opaque ? t.storage[0].length : t.nbytes();
    ++n_tensors_;
    chunks_ += t.num_chunks();
    tensor_bytes_ += bytes;
    auto& d = dtypes_[t.dtype_name];
    d.first += 1;
    d.second += bytes;
    if (!opts_.filters.empty() && !matches_any(t.fqn, opts_.filters)) return;
    json j;
    j["key"] = t.fqn;
    j["kind"] = "tensor";
    if (json p = path_json(md_, t.fqn); !p.is_null()) j["path"] = p;
    j["dtype"] = t.dtype_name;
    j["shape"] = t.shape;
    j["numel"] = t.numel();
    j["bytes"] = bytes;
    j["requires_grad"] = t.requires_grad;
    j["chunks"] = t.num_chunks();
    j["sharding"] = describe_sharding(t, cov);
    j["complete"] = ok;
    if (opts_.chunks) j["chunk_list"] = chunk_list(t);
    items_.push_back(std::move(j));
  }

  json chunk_list(const TensorMeta& t) const {
    json cl = json::array();
    for (size_t c = 0; c < t.num_chunks(); ++c) {
      json cj = ref_json(ck_, t.storage[c]);
      cj["offsets"] = std::vector<int64_t>(t.chunk_offsets(c), t.chunk_offsets(c) + t.ndim());
      cj["sizes"] = std::vector<int64_t>(t.chunk_sizes(c), t.chunk_sizes(c) + t.ndim());
      cl.push_back(std::move(cj));
    }
    return cl;
  }

  void add_bytes(const BytesMeta& b) {
    count_ref(b.storage);
    ++n_bytes_;
    if (!b.storage.present()) {
      complete_ = false;
      problem("missing-storage", b.fqn, "bytes item has no storage_data entry");
    }
    if (!opts_.filters.empty() && !matches_any(b.fqn, opts_.filters)) return;
    json j = ref_json(ck_, b.storage);
    j["key"] = b.fqn;
    j["kind"] = "bytes";
    if (json p = path_json(md_, b.fqn); !p.is_null()) j["path"] = p;
    items_.push_back(std::move(j));
  }

  void add_files() {
    for (size_t i = 0; i < ck_.files.size(); ++i) {
      const auto& f = ck_.files[i];
      json j;
      j["path"] = f.relative_path;
      auto r = rank_of_file(f.relative_path);
      j["rank"] = r ? json(*r) : json(nullptr);
      if (r) ranks_.insert(*r);
      j["bytes"] = f.size ? json(*f.size) : json(nullptr);
      j["items"] = items_per_file_[i];
      if (!f.size) {
        j["error"] = f.error;
        ++missing_files_;
        complete_ = false;
        problem("missing-file", "", f.relative_path + ": " + f.error);
      }
      files_.push_back(std::move(j));
    }
  }

  json summary() const {
    json s;
    s["files"] = ck_.files.size();
    s["files_missing"] = missing_files_;
    s["data_bytes"] = ck_.data_bytes();
    s["ranks"] = std::vector<int>(ranks_.begin(), ranks_.end());
    s["tensors"] = n_tensors_;
    s["bytes_items"] = n_bytes_;
    s["chunks"] = chunks_;
    s["tensor_bytes"] = tensor_bytes_;
    s["complete"] = complete_;
    json dj = json::object();
    for (const auto& [name, v] : dtypes_) dj[name] = {{"tensors", v.first}, {"bytes", v.second}};
    s["dtypes"] = dj;
    return s;
  }

  const Checkpoint& ck_;
  const Metadata& md_;
  const InspectOptions& opts_;
  json problems_ = json::array();
  bool complete_;
  std::vector<uint64_t> items_per_file_;  // for the file table
  json items_ = json::array();
  json files_ = json::array();
  uint64_t chunks_ = 0, tensor_bytes_ = 0, n_tensors_ = 0, n_bytes_ = 0, missing_files_ = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> dtypes_;  // name -> (tensors, bytes)
  std::set<int> ranks_;
};

}  // namespace

json inspect_report(const Checkpoint& ck, const InspectOptions& opts) {
  json out;
  out["schema_version"] = 1;
  out["checkpoint"] = ck.dir;
  out["layout"] = layout_name(ck.layout);
  out["metadata"] = metadata_section(ck);
  out["framework"] = describe_framework(ck.dir);
  out["quantization"] = describe_quantization(ck);
  LoraModel lora = find_lora(ck.md);
  out["lora"] = lora.empty() && lora.foreign.empty() ? json(nullptr) : lora.describe(ck.md);
  Inventory(ck, opts).report(out);
  out["shared"] = shared_section(ck);
  return out;
}

}  // namespace dcpctl
