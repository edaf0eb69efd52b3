#include "check/hf_checks.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "check/hf_config_checks.h"
#include "check/hf_schema.h"
#include "check/safetensors_audit.h"
#include "meta/keep_dtype_entry.h"
#include "meta/structure.h"
#include "store/file.h"
#include "util/numeric.h"

namespace dcpctl {

using nlohmann::json;

namespace hf_checks_impl {

constexpr uint64_t kMaxJsonBytes = 64ull << 20;
constexpr uint64_t kCompareWindow = 4ull << 20;

bool name_ends(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// A small JSON file (config, index); discarded when it is not JSON.
json read_json(const std::string& path) {
  ReadFile f(path);
  if (f.size() > kMaxJsonBytes) return json::value_t::discarded;
  return json::parse(f.read_all(), nullptr, false);
}

// The files beside the weights that a loader or a server reads.
bool sidecar_name(const std::string& n) {
  static const char* kNames[] = {"config.json",
                                 "generation_config.json",
                                 "special_tokens_map.json",
                                 "added_tokens.json",
                                 "chat_template.jinja",
                                 "chat_template.json",
                                 "tekken.json",
                                 "merges.txt",
                                 "spiece.model",
                                 "spk_dict.pt"};  // Qwen2.5-Omni's speakers (write/assets.h)
  for (const char* k : kNames)
    if (n == k) return true;
  return n.rfind("tokenizer", 0) == 0 || n.rfind("vocab", 0) == 0 || name_ends(n, ".tiktoken");
}

// Whether tensors `a` and `b` of `ck` hold the same bytes: chunk by chunk, where both are cut
// into the same boxes; nullopt otherwise.
std::optional<bool> tensors_equal(const Checkpoint& ck, const TensorMeta& a, const TensorMeta& b) {
  if (a.num_chunks() != b.num_chunks() || a.chunk_dims != b.chunk_dims) return std::nullopt;
  std::vector<uint8_t> x, y;
  for (size_t c = 0; c < a.num_chunks(); ++c) {
    const StorageRef &ra = a.storage[c], &rb = b.storage[c];
    if (!ra.present() || !rb.present() || ra.format != ItemFormat::Raw || rb.format != ItemFormat::Raw)
      return std::nullopt;
    if (ra.length != rb.length) return false;
    ReadFile fa(ck.path_of(ra.file)), fb(ck.path_of(rb.file));
    if (ra.offset > fa.size() || ra.length > fa.size() - ra.offset || rb.offset > fb.size() ||
        rb.length > fb.size() - rb.offset)
      return std::nullopt;  // the audit reports the window
    for (uint64_t done = 0; done < ra.length; done += kCompareWindow) {
      const size_t k = static_cast<size_t>(std::min(kCompareWindow, ra.length - done));
      x.resize(k), y.resize(k);
      fa.read_at(ra.offset + done, x.data(), k, a.fqn);
      fb.read_at(rb.offset + done, y.data(), k, b.fqn);
      if (x != y) return false;
    }
  }
  return true;
}

// The structural findings that one of the audit's names more precisely: a header the reader
// refused (bad-safetensors-header) where the audit found why; an overlap the audit reports too;
// chunks of one key in two files (HF folders have no sharding info) that key-in-several-files names.
Findings merge_findings(Findings structure, const Findings& precise) {
  std::set<std::string> audited;
  std::set<std::tuple<std::string, std::string, std::optional<uint64_t>, std::string>> seen;
  std::set<std::string> several;
  for (const auto& f : precise) {
    audited.insert(f.where.file);
    seen.insert({f.code, f.where.file, f.where.offset, f.where.key});
    if (f.code == "key-in-several-files") several.insert(f.where.key);
  }
  Findings out;
  for (auto& f : structure) {
    if (f.code == "bad-safetensors-header" && audited.count(f.where.file)) continue;
    if (seen.count({f.code, f.where.file, f.where.offset, f.where.key})) continue;
    if (f.code == "chunk-overlap" && several.count(f.where.key)) continue;
    out.push_back(std::move(f));
  }
  out.insert(out.end(), precise.begin(), precise.end());
  return out;
}

}  // namespace hf_checks_impl

using namespace hf_checks_impl;

bool is_hf_checkpoint(const Checkpoint& ck) {
  return ck.layout == CheckpointLayout::HfSafetensors || ck.layout == CheckpointLayout::HfDcpShards;
}

namespace {

// check_hf_folder's steps: the checkpoint's structure, every safetensors file audited, the index,
// config.json against the tensors and the model schema, the sidecars.
class HfFolderChecker {
 public:
  HfFolderChecker(const std::string& path, const HfCheckOptions& opts, const Checkpoint* opened)
      : path_(path), opts_(opts), ck_(opened) {
    const PathInfo st = stat_path(path);
    if (st.kind == PathInfo::missing)
      throw IoError(Where(path), "cannot open: " + (st.err ? errno_text(st.err) : std::string("no such file")));
    folder_ = st.kind == PathInfo::directory;
    dir_ = folder_ ? path : path.find('/') == std::string::npos ? "." : path.substr(0, path.find_last_of('/'));
    index_ = join_path(dir_, "model.safetensors.index.json");
    config_ = join_path(dir_, "config.json");
    has_index_ = folder_ && path_exists(index_);
    has_config_ = folder_ && path_exists(config_);
  }

  HfReport run() && {
    check_structure_of();
    audit_files();
    check_index();
    if (has_config_ && ck_) check_config();
    check_sidecars();
    r_.problems = merge_findings(std::move(structure_), precise_);
    r_.summary = {{"config", has_config_ ? json(config_) : json(nullptr)},
                  {"index", has_index_ ? json(index_) : json(nullptr)},
                  {"files_audited", files_.size()},
                  {"sidecars", sidecars_},
                  {"config_checks", config_checks_},
                  {"schema", schema_}};
    return std::move(r_);
  }

 private:
  void check_structure_of() {
    if (!ck_) {
      try {
        own_.emplace(open_checkpoint(path_));
        ck_ = &*own_;
      } catch (const FormatError& e) {
        structure_.push_back({"metadata-invalid", e.where(), e.detail()});
      }
    }
    if (ck_) {
      StructureReport s = check_structure(*ck_);
      structure_ = std::move(s.problems);
      r_.warnings = std::move(s.warnings);
    }
  }

  // Every .safetensors file the checkpoint reads; when it could not be opened, every one here.
  void audit_files() {
    if (ck_) {
      for (uint32_t f = 0; f < ck_->md.files.size(); ++f)
        if (ck_->files[f].size) files_.push_back(ck_->path_of(f));
    } else if (folder_) {
      for (const auto& n : list_dir(dir_))
        if (name_ends(n, ".safetensors")) files_.push_back(join_path(dir_, n));
    } else {
      files_.push_back(path_);
    }
    for (const auto& f : files_) audit_file(f);
  }

  void audit_file(const std::string& f) {
    SafetensorsAudit a = audit_safetensors_file(f);
    precise_.insert(precise_.end(), a.problems.begin(), a.problems.end());
    const KeepDtypeEntry keep = read_keep_dtype_entry(a.metadata);
    if (!keep.error.empty())
      r_.warnings.push_back({"keep-dtype-entry-invalid",
                             Where(f, std::nullopt, std::string("__metadata__.") + kKeepDtypeEntry),
                             keep.error + ": ignored, so no tensor of this file counts as kept by --keep-dtype"});
    if (!keep.globs.empty())
      for (const auto& t : a.tensors)
        if (const std::string* g = keep_dtype_glob_of(keep.globs, t.key)) user_kept_.emplace(t.key, *g);
    file_bytes_ += 8 + a.header_bytes + a.data_bytes;
    std::set<std::string> here;
    for (const auto& t : a.tensors)
      if (here.insert(t.key).second) {
        files_of_[t.key].push_back(f);
        tensor_bytes_ += t.end >= t.begin ? t.end - t.begin : 0;
      }
  }

  // The index: one file per key, and its total_size.
  void check_index() {
    if (ck_ && ck_->layout == CheckpointLayout::HfSafetensors)
      for (const auto& [key, in] : files_of_)
        for (size_t i = 1; i < in.size(); ++i)
          precise_.push_back({"key-in-several-files", Where(in[i], std::nullopt, key),
                              "also held by " + in[0] + ": a loader keeps one of the two"});
    if (!has_index_) return;
    json j = read_json(index_);
    const json* total =
        j.is_object() && j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size")
            ? &j["metadata"]["total_size"]
            : nullptr;
    if (!total || !total->is_number_unsigned() || !ck_) return;
    const uint64_t want = total->get<uint64_t>();
    if (want != tensor_bytes_ && want != file_bytes_)
      precise_.push_back({"index-total-size", Where(index_, std::nullopt, "metadata.total_size"),
                          "total_size is " + std::to_string(want) + " but the indexed files hold " +
                              std::to_string(tensor_bytes_) + " bytes of tensors (" + std::to_string(file_bytes_) +
                              " bytes of files)"});
  }

  // config.json against the tensors (a folder's). A release layout transformers renames on load
  // (check/hf_schema.h: load_renames) is checked under the save_pretrained names its keys load as;
  // the findings name the folder's keys.
  void check_config() {
    json c = read_json(config_);
    // Checked as its config class reads it (Dory's saved config counts two blocks a layer).
    if (!c.is_discarded()) c = config_as_loaded(c);
    model_ = c.is_discarded() ? nullptr : schema_for_config(c);
    if (model_) {
      std::vector<std::string> keys;
      for (const auto& t : ck_->md.tensors) keys.push_back(t.fqn);
      layout_ = key_layout(*model_, keys);
    }
    for (const auto& [key, save] : layout_.save_names) folder_key_.emplace(save, key);
    for (const auto& [key, other] : layout_.collisions)
      precise_.push_back({"key-loads-twice", Where(config_, std::nullopt, key),
                          "and " + other + " both load as " + model_->cls + "'s " +
                              (layout_.save_names.count(key) ? layout_.save_names.at(key) : key) +
                              " (transformers' load-time renames): from_pretrained keeps one of the two"});
    for (const auto& t : ck_->md.tensors) {
      const std::string& key = save_name(t.fqn);
      if (by_key_.count(key)) continue;  // key-loads-twice
      tensors_.push_back({key, t.dtype ? torch_name(*t.dtype) : t.dtype_name, t.shape});
      by_key_[key] = &t;
    }
    check_config_fields(c);
    // The keys against the model schema of the config's model_type (check/hf_schema.h).
    if (!c.is_discarded()) check_schema(c);
  }

  const std::string& save_name(const std::string& k) const {
    auto n = layout_.save_names.find(k);
    return n == layout_.save_names.end() ? k : n->second;
  }

  // A finding's key as the folder names it: its own key, or a missing one in its layout's name.
  void own_names(Findings& fs) const {
    if (layout_.save_names.empty()) return;
    for (auto& f : fs) {
      if (auto k = folder_key_.find(f.where.key); k != folder_key_.end()) {
        f.where.key = k->second;
      } else if (std::string r = release_name(*model_, f.where.key); !r.empty()) {
        f.where.key = r;
      }
    }
  }

  // Global scales: four bytes each, read where they lie (one open file a shard at a time).
  std::optional<double> read_scalar(const std::string& key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return std::nullopt;
    const TensorMeta& t = *it->second;
    if (!t.dtype || *t.dtype != DType::Float32 || t.numel() != 1 || t.num_chunks() != 1) return std::nullopt;
    const StorageRef& s = t.storage[0];
    if (!s.present() || s.format != ItemFormat::Raw || s.length != 4) return std::nullopt;
    const std::string path = ck_->path_of(s.file);
    auto& f = scalar_files_[path];
    if (!f) f = std::make_unique<ReadFile>(path);
    if (s.offset > f->size() || 4 > f->size() - s.offset) return std::nullopt;  // the audit reports the window
    uint8_t b[4];
    f->read_at(s.offset, b, 4, t.fqn);
    return static_cast<double>(bits_f32(static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
                                        static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24));
  }

  void check_config_fields(const json& c) {
    // What the export kept (its keys are the folder's) under the names checked.
    std::set<std::string> kept_dtype;
    for (const auto& k : opts_.kept_dtype) kept_dtype.insert(save_name(k));
    std::map<std::string, std::string> user_kept_saved;
    for (const auto& [k, g] : user_kept_) user_kept_saved.emplace(save_name(k), g);
    SameBytes same = [&](const std::string& a, const std::string& b) -> std::optional<bool> {
      return tensors_equal(*ck_, *by_key_.at(a), *by_key_.at(b));
    };
    ReadScalar scalar = [&](const std::string& key) { return read_scalar(key); };
    ConfigCheckResult cr =
        c.is_discarded()
            ? ConfigCheckResult{{{"config-invalid", Where(config_), "not JSON (or over 64 MiB)"}}, {}, {}}
            : check_hf_config(c, config_, tensors_, same, opts_.require_mtp, scalar, kept_dtype, user_kept_saved);
    own_names(cr.problems);
    own_names(cr.warnings);
    precise_.insert(precise_.end(), cr.problems.begin(), cr.problems.end());
    r_.warnings.insert(r_.warnings.end(), cr.warnings.begin(), cr.warnings.end());
    config_checks_ = cr.checked;
  }

  void check_schema(const json& c) {
    SchemaCheckResult sr = check_hf_schema(c, config_, tensors_);
    own_names(sr.problems);
    own_names(sr.notes);
    sr.summary["layout"] = sr.summary.value("checked", false) ? json(layout_.layout) : json(nullptr);
    std::map<std::string, std::string> only_with;
    for (auto& [key, setting] : sr.only_with) only_with[folder_key_.count(key) ? folder_key_.at(key) : key] = setting;
    precise_.insert(precise_.end(), sr.problems.begin(), sr.problems.end());
    r_.notes.insert(r_.notes.end(), sr.notes.begin(), sr.notes.end());
    schema_ = sr.summary;
    r_.only_with = std::move(only_with);
  }

  void check_sidecars() {
    std::set<std::string> present;
    if (folder_)
      for (const auto& n : list_dir(dir_))
        if (sidecar_name(n)) present.insert(n), sidecars_.push_back(n);
    for (const auto& n : opts_.expect_files)
      if (!present.count(n) && !path_exists(join_path(dir_, n)))
        precise_.push_back({"sidecar-missing", Where(join_path(dir_, n)),
                            "expected beside the weights (the source had it), but not here"});
  }

  const std::string& path_;
  const HfCheckOptions& opts_;
  const Checkpoint* ck_;
  std::optional<Checkpoint> own_;  // opened here when the caller did not
  bool folder_ = false;
  std::string dir_;
  std::string index_, config_;  // model.safetensors.index.json, config.json
  bool has_index_ = false, has_config_ = false;
  HfReport r_;
  Findings structure_, precise_;
  std::vector<std::string> files_;
  std::map<std::string, std::vector<std::string>> files_of_;  // key -> files holding it
  uint64_t tensor_bytes_ = 0, file_bytes_ = 0;
  std::map<std::string, std::string> user_kept_;  // key -> the --keep-dtype glob its file's header records
  const ModelSchema* model_ = nullptr;
  KeyLayout layout_;
  std::map<std::string, std::string> folder_key_;  // save_pretrained name -> the folder's key
  std::vector<HfTensor> tensors_;                  // under the names checked
  std::map<std::string, const TensorMeta*> by_key_;
  std::map<std::string, std::unique_ptr<ReadFile>> scalar_files_;
  json config_checks_ = json::array();
  json schema_;
  json sidecars_ = json::array();
};

}  // namespace

HfReport check_hf_folder(const std::string& path, const HfCheckOptions& opts, const Checkpoint* opened) {
  return HfFolderChecker(path, opts, opened).run();
}

}  // namespace dcpctl
