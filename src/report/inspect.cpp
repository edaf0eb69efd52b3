#include "report/inspect.h"

#include <fnmatch.h>

#include <map>
#include <set>

#include "meta/frameworks.h"
#include "meta/geometry.h"
#include "meta/lora_keys.h"
#include "meta/readers.h"
#include "view/codecs/quantized.h"
#include "meta/shared_records.h"

namespace dcpctl {

using nlohmann::json;

bool matches_any(const std::string& key, const std::vector<std::string>& globs) {
  for (const auto& g : globs)
    if (::fnmatch(g.c_str(), key.c_str(), 0) == 0) return true;
  return false;
}

namespace {

json opt(const std::optional<std::string>& s) { return s ? json(*s) : json(nullptr); }

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

json inspect_report(const Checkpoint& ck, const InspectOptions& opts) {
  const Metadata& md = ck.md;
  json out;
  out["schema_version"] = 1;
  out["checkpoint"] = ck.dir;
  out["layout"] = layout_name(ck.layout);

  json m;
  m["path"] = ck.metadata_path;
  m["bytes"] = ck.metadata_bytes;
  m["pickle_protocol"] = md.pickle_protocol;
  m["class"] = md.metadata_class;
  m["version"] = opt(md.version);
  // Dated from .metadata's classes and fields; per-rank torch.save files carry none of them.
  m["writer_releases"] = ck.layout == CheckpointLayout::TorchSaveRanks || ck.layout == CheckpointLayout::TorchCheckpointing ? std::string("unknown") : md.writer_releases();
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
  out["metadata"] = m;
  out["framework"] = describe_framework(ck.dir);
  out["quantization"] = describe_quantization(ck);
  LoraModel lora = find_lora(ck.md);
  out["lora"] = lora.empty() && lora.foreign.empty() ? json(nullptr) : lora.describe(ck.md);

  json problems = json::array();
  for (const auto& p : md.problems) problems.push_back({{"code", p.code}, {"key", p.where.key}, {"message", p.message}});
  bool complete = ck.incomplete.empty();
  for (const auto& p : ck.incomplete) problems.push_back({{"code", p.code}, {"key", p.where.key}, {"message", p.text()}});

  // Items per file, for the file table.
  std::vector<uint64_t> items_per_file(md.files.size(), 0);
  auto count_ref = [&](const StorageRef& r) {
    if (r.present()) ++items_per_file[r.file];
  };

  json items = json::array();
  uint64_t chunks = 0, tensor_bytes = 0, n_tensors = 0, n_bytes = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> dtypes;
  for (const auto& t : md.tensors) {
    for (const auto& r : t.storage) count_ref(r);
    Coverage cov = check_coverage(t, 4);
    size_t missing_storage = 0;
    for (size_t c = 0; c < t.num_chunks(); ++c)
      if (!t.storage[c].present() && t.chunk_numel(c) > 0) ++missing_storage;
    bool ok = cov.exact && missing_storage == 0;
    if (!ok) {
      complete = false;
      if (cov.missing_elements)
        problems.push_back({{"code", "chunk-gap"}, {"key", t.fqn},
                            {"message", std::to_string(cov.missing_elements) + " elements covered by no chunk" +
                                            (cov.holes.empty() ? "" : ", e.g. " + cov.holes[0].text())}});
      if (cov.overlap_elements)
        problems.push_back({{"code", "chunk-overlap"}, {"key", t.fqn},
                            {"message", std::to_string(cov.overlap_elements) + " elements covered by more than one chunk"}});
      for (size_t c : cov.out_of_bounds)
        problems.push_back({{"code", "chunk-out-of-bounds"}, {"key", t.fqn},
                            {"message", "chunk " + std::to_string(c) + " reaches outside the tensor's shape"}});
      if (missing_storage)
        problems.push_back({{"code", "missing-storage"}, {"key", t.fqn},
                            {"message", std::to_string(missing_storage) + " chunk(s) have no storage_data entry"}});
    }
    const bool opaque = opaque_type(ck, t);  // a GGUF block type: known, laid out, not decoded
    if (!t.dtype && !opaque)
      problems.push_back({{"code", "unknown-dtype"}, {"key", t.fqn}, {"message", "dtype " + t.dtype_name + " is unknown to dcpctl"}});
    const uint64_t bytes = opaque ? t.storage[0].length : t.nbytes();
    ++n_tensors;
    chunks += t.num_chunks();
    tensor_bytes += bytes;
    auto& d = dtypes[t.dtype_name];
    d.first += 1;
    d.second += bytes;
    if (!opts.filters.empty() && !matches_any(t.fqn, opts.filters)) continue;
    json j;
    j["key"] = t.fqn;
    j["kind"] = "tensor";
    if (json p = path_json(md, t.fqn); !p.is_null()) j["path"] = p;
    j["dtype"] = t.dtype_name;
    j["shape"] = t.shape;
    j["numel"] = t.numel();
    j["bytes"] = bytes;
    j["requires_grad"] = t.requires_grad;
    j["chunks"] = t.num_chunks();
    j["sharding"] = describe_sharding(t, cov);
    j["complete"] = ok;
    if (opts.chunks) {
      json cl = json::array();
      for (size_t c = 0; c < t.num_chunks(); ++c) {
        json cj = ref_json(ck, t.storage[c]);
        cj["offsets"] = std::vector<int64_t>(t.chunk_offsets(c), t.chunk_offsets(c) + t.ndim());
        cj["sizes"] = std::vector<int64_t>(t.chunk_sizes(c), t.chunk_sizes(c) + t.ndim());
        cl.push_back(std::move(cj));
      }
      j["chunk_list"] = std::move(cl);
    }
    items.push_back(std::move(j));
  }
  for (const auto& b : md.bytes) {
    count_ref(b.storage);
    ++n_bytes;
    if (!b.storage.present()) {
      complete = false;
      problems.push_back({{"code", "missing-storage"}, {"key", b.fqn}, {"message", "bytes item has no storage_data entry"}});
    }
    if (!opts.filters.empty() && !matches_any(b.fqn, opts.filters)) continue;
    json j = ref_json(ck, b.storage);
    j["key"] = b.fqn;
    j["kind"] = "bytes";
    if (json p = path_json(md, b.fqn); !p.is_null()) j["path"] = p;
    items.push_back(std::move(j));
  }

  json files = json::array();
  std::set<int> ranks;
  uint64_t missing_files = 0;
  for (size_t i = 0; i < ck.files.size(); ++i) {
    const auto& f = ck.files[i];
    json j;
    j["path"] = f.relative_path;
    auto r = rank_of_file(f.relative_path);
    j["rank"] = r ? json(*r) : json(nullptr);
    if (r) ranks.insert(*r);
    j["bytes"] = f.size ? json(*f.size) : json(nullptr);
    j["items"] = items_per_file[i];
    if (!f.size) {
      j["error"] = f.error;
      ++missing_files;
      complete = false;
      problems.push_back({{"code", "missing-file"}, {"key", ""}, {"message", f.relative_path + ": " + f.error}});
    }
    files.push_back(std::move(j));
  }

  json s;
  s["files"] = ck.files.size();
  s["files_missing"] = missing_files;
  s["data_bytes"] = ck.data_bytes();
  s["ranks"] = std::vector<int>(ranks.begin(), ranks.end());
  s["tensors"] = n_tensors;
  s["bytes_items"] = n_bytes;
  s["chunks"] = chunks;
  s["tensor_bytes"] = tensor_bytes;
  s["complete"] = complete;
  json dj = json::object();
  for (const auto& [name, v] : dtypes) dj[name] = {{"tensors", v.first}, {"bytes", v.second}};
  s["dtypes"] = dj;
  out["summary"] = s;
  // A layout's own keys, in the section its reader names (meta/readers.h values_section: a GGUF
  // file's, each value as text, an array of more than 8 as its length and element type).
  if (const char* section = layout_reader(ck.layout).values_section)
    out[section] = {{"format", md.metadata_class}, {"keys", ck.values}};
  out["files"] = files;
  out["items"] = items;
  out["problems"] = problems;
  // Keys that read one stored record (meta/shared_records.h): no problem, but a reader should know.
  json shared = json::array();
  for (const SharedRecord& sr : check_windows(ck).shared) {
    json records = json::array();
    for (const auto& p : sr.places)
      records.push_back({{"file", md.files[p.file]}, {"offset", p.offset}, {"length", p.length}});
    shared.push_back(
        {{"keys", sr.keys}, {"same_bytes", sr.same_bytes}, {"records", records}, {"message", shared_text(ck, sr)}});
  }
  out["shared"] = shared;
  return out;
}

}  // namespace dcpctl
