#include "meta/metadata.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <unordered_map>

#include "meta/folder.h"
#include "pickle/vm.h"

namespace dcpctl {

using pickle::Kind;
using pickle::Value;

uint64_t TensorMeta::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t TensorMeta::chunk_numel(size_t i) const {
  uint64_t n = 1;
  const int64_t* s = chunk_sizes(i);
  for (size_t d = 0; d < ndim(); ++d) n *= static_cast<uint64_t>(s[d]);
  return n;
}

uint64_t TensorMeta::nbytes() const {
  return dtype ? numel() * itemsize(*dtype) : 0;
}

const TensorMeta* Metadata::find_tensor(const std::string& fqn) const {
  for (const auto& t : tensors)
    if (t.fqn == fqn) return &t;
  return nullptr;
}

std::string Metadata::writer_releases() const {
  // Lower bound from what is present, upper bound from what is absent. Fields are written even
  // when None (dataclass __dict__), so their presence dates the writer.
  std::string lo = "1.13", hi;
  bool legacy_shard = metadata_class.find("_shard.checkpoint") != std::string::npos;
  if (legacy_shard) return "1.13 (torch.distributed._shard.checkpoint)";
  lo = "2.0";
  if (properties_class.find("checkpoint.metadata") != std::string::npos) lo = "2.3";
  if (properties_class.find("sharded_tensor") != std::string::npos) hi = "2.2";
  if (has_storage_meta_field)
    lo = "2.4";
  else if (hi.empty())
    hi = "2.3";
  if (has_transform_field) lo = "2.7";
  if (has_version_field)
    lo = "2.8";
  else if (hi.empty() && has_storage_meta_field)
    hi = "2.8";
  if (strided_tensors())
    lo = "2.15";
  else if (hi.empty() && has_version_field && !tensors.empty())
    hi = "2.14";
  if (hi.empty()) return lo + " or newer";
  if (hi == lo) return lo;
  return lo + " to " + hi;
}

size_t Metadata::strided_tensors() const {
  size_t n = 0;
  for (const auto& t : tensors) n += t.strides_recorded;
  return n;
}

Metadata::LoaderBound Metadata::oldest_loader() const {
  // Newest bound first: each is a thing an older reader cannot unpickle or decode.
  if (size_t n = strided_tensors())
    return {"2.15", std::to_string(n) + " TensorProperties record strides (a 6-tuple; torch <= 2.14 unpacks 5)"};
  for (size_t i = 1; i < transform_sets.size(); ++i)
    if (!transform_sets[i].empty())
      return {"2.7",
              "items need transforms (" + transform_sets[i].front() + "): torch.distributed.checkpoint._extension"};
  if (has_storage_meta_field) return {"2.4", "names the class StorageMeta (torch >= 2.4)"};
  if (properties_class.find("checkpoint.metadata") != std::string::npos)
    return {"2.3", "names torch.distributed.checkpoint.metadata.TensorProperties (torch >= 2.3)"};
  return {};
}

namespace {

using meta_detail::MetadataFolder;
using meta_detail::state_dict;
using meta_detail::Tables;

// The globals that DCP writers put in `.metadata`. Anything else is listed as unknown.
bool known_global(std::string_view module, std::string_view name) {
  static const char* kModules[] = {
      "torch.distributed.checkpoint.metadata",
      "torch.distributed.checkpoint.filesystem",
      "torch.distributed._shard.checkpoint.metadata",
      "torch.distributed._shard.checkpoint.filesystem",
      "torch.distributed._shard.sharded_tensor.metadata",
      "torch.distributed.checkpoint._extension",
  };
  for (const char* m : kModules)
    if (module == m) return true;
  if (module == "torch") return name == "Size" || dtype_from_torch_name(name).has_value();
  if (module == "torch.serialization") return name == "_get_layout";
  if (module == "pathlib" || module == "pathlib._local")
    return name == "PosixPath" || name == "WindowsPath" || name == "PurePosixPath";
  if (module == "collections") return name == "OrderedDict";
  return false;
}

class Mapper {
 public:
  // The pickle memo lets one small object be referenced many times (a chunk list shared by
  // thousands of keys); copying it out per reference would turn a few hundred KB into GBs. In a
  // real writer's file every chunk, dimension and path part costs bytes (torch's `.metadata` spends
  // over 10 bytes on each), so everything copied out is charged against a budget of twice the
  // input size.
  Mapper(Tables& tb, MetadataFolder& folded) : md_(tb.md), tb_(tb), folded_(folded) {}

  void charge(uint64_t n, const std::string& key) { tb_.charge(n, key); }
  [[noreturn]] void fail(const std::string& key, const std::string& msg) { tb_.fail(key, msg); }

  const Value* attr(const Value& obj, std::string_view name) {
    const Value* d = state_dict(obj);
    return d ? d->get(name) : nullptr;
  }
  std::string class_name(const Value& obj) const {
    if (obj.kind == Kind::Ext) return folded_.class_name(obj.len);
    const Value& c = obj.kind == Kind::Object ? obj.as_object().callable : obj;
    if (c.kind != Kind::Global) return std::string("<") + pickle::kind_name(c.kind) + ">";
    return std::string(c.as_global().module) + "." + std::string(c.as_global().name);
  }
  bool class_is(const Value& obj, std::string_view name) const {
    if (obj.kind == Kind::Ext) return folded_.cls(obj.len) && folded_.cls(obj.len)->name == name;
    if (obj.kind != Kind::Object) return false;
    const Value& c = obj.as_object().callable;
    return c.kind == Kind::Global && c.as_global().name == name;
  }

  void dims(const Value* v, std::vector<int64_t>& out, const std::string& key, const char* what) {
    if (!v || (v->kind != Kind::Size && v->kind != Kind::Tuple && v->kind != Kind::List))
      fail(key, std::string(what) + " is " + (v ? pickle::kind_name(v->kind) : "missing") + ", expected torch.Size");
    charge(v->items().size(), key);
    for (const Value& d : v->items()) {
      if (d.kind != Kind::Int) fail(key, std::string(what) + " holds a " + pickle::kind_name(d.kind));
      if (d.as_int() < 0) fail(key, std::string(what) + " holds a negative dimension " + std::to_string(d.as_int()));
      out.push_back(d.as_int());
    }
  }

  std::optional<std::string> opt_str(const Value* v) {
    if (!v || v->kind == Kind::None) return std::nullopt;
    if (v->kind == Kind::Str) return std::string(v->as_str());
    // A folded object was made with no arguments: a path of no parts, as below.
    if (v->kind == Kind::Ext && v->len != MetadataFolder::kRun && v->len != MetadataFolder::kAttached)
      return std::string();
    // pathlib paths: REDUCE(PosixPath, (part, part, ...)).
    if (v->kind == Kind::Object && v->as_object().args.kind == Kind::Tuple) {
      std::string s;
      for (const Value& p : v->as_object().args.items()) {
        if (p.kind != Kind::Str) return "<" + class_name(*v) + ">";
        std::string_view part = p.as_str();
        if (!s.empty() && s.back() != '/') s += '/';
        s += part;
      }
      return s;
    }
    return "<" + std::string(pickle::kind_name(v->kind)) + ">";
  }

  void properties(const Value& props, TensorMeta& t) {
    md_.properties_class = class_name(props);
    if (!meta_detail::read_properties(props, t))
      fail(t.fqn, "tensor properties carry no dtype (" + class_name(props) + ")");
    t.dtype = dtype_from_torch_name(t.dtype_name);
  }

  void tensor(const std::string& fqn, const Value& v) {
    if (v.kind == Kind::Ext && v.len == MetadataFolder::kTensor) {
      // Read (and charged) as below when it was folded; only its name and storage are left. The
      // record is moved out unless the value was copied (DUP, memo), when it is copied. (A value
      // is only ever duplicated with kMemo set on it; a second use of a moved record would be a
      // bug, refused rather than read as empty.)
      MetadataFolder::Tensor& ft = folded_.tensors[v.bits];
      if (ft.moved) fail(fqn, "internal error: a folded tensor record was read twice");
      md_.properties_class = ft.props_class;
      if (md_attached_.size() <= md_.tensors.size()) md_attached_.resize(md_.tensors.size() + 1, 0);
      md_attached_[md_.tensors.size()] = ft.attached > 0;
      if (v.flags & Value::kMemo) {
        // Shared through the memo: every use is a copy, charged as the generic path charges it.
        size_t nd = ft.meta.shape.size();
        charge(nd, fqn);
        charge(ft.chunks, fqn);
        for (uint64_t c = 0; c < ft.chunks; ++c) charge(2 * nd, fqn);
        md_.tensors.push_back(ft.meta);
      } else {
        md_.tensors.push_back(std::move(ft.meta));
        ft.moved = true;
        ft.md_index = md_.tensors.size() - 1;
      }
      md_.tensors.back().fqn = fqn;
      md_.tensors.back().storage.resize(ft.chunks);
      return;
    }
    TensorMeta t;
    t.fqn = fqn;
    const Value* props = attr(v, "properties");
    if (!props) fail(fqn, "TensorStorageMetadata without properties");
    properties(*props, t);
    dims(attr(v, "size"), t.shape, fqn, "size");
    const Value* chunks = attr(v, "chunks");
    if (!chunks || chunks->kind != Kind::List) fail(fqn, "TensorStorageMetadata without a chunk list");
    size_t nd = t.shape.size();
    charge(chunks->items().size(), fqn);
    t.chunk_dims.reserve(chunks->items().size() * 2 * nd);
    size_t i = 0;
    for (const Value& c : chunks->items()) {
      if (c.kind == Kind::Ext && c.len == MetadataFolder::kChunk) {
        const int64_t* d = folded_.dims.data() + c.bits;
        if (static_cast<size_t>(d[0]) != nd)
          fail(fqn, "chunk " + std::to_string(i) + " has " + std::to_string(d[0]) + " offsets for a " +
                        std::to_string(nd) + "-d tensor");
        charge(2 * nd, fqn);
        t.chunk_dims.insert(t.chunk_dims.end(), d + 1, d + 1 + 2 * nd);
        ++i;
        continue;
      }
      size_t before = t.chunk_dims.size();
      std::string what = "chunk " + std::to_string(i);
      dims(attr(c, "offsets"), t.chunk_dims, fqn, (what + " offsets").c_str());
      if (t.chunk_dims.size() - before != nd)
        fail(fqn, what + " has " + std::to_string(t.chunk_dims.size() - before) + " offsets for a " +
                      std::to_string(nd) + "-d tensor");
      dims(attr(c, "sizes"), t.chunk_dims, fqn, (what + " sizes").c_str());
      if (t.chunk_dims.size() - before != 2 * nd)
        fail(fqn, what + " has " + std::to_string(t.chunk_dims.size() - before - nd) + " sizes for a " +
                      std::to_string(nd) + "-d tensor");
      ++i;
    }
    t.storage.resize(i);
    md_.tensors.push_back(std::move(t));
  }

  uint32_t transform_index(const Value* v, const std::string& key) {
    if (!v || v->kind == Kind::None) return 0;
    if (v->kind != Kind::List && v->kind != Kind::Tuple) fail(key, "transform_descriptors is not a list");
    std::vector<std::string> set;
    charge(v->items().size(), key);
    for (const Value& d : v->items()) {
      if (d.kind != Kind::Str) fail(key, "transform descriptor is not a string");
      set.emplace_back(d.as_str());
    }
    return tb_.transform_set(std::move(set));
  }

  // A storage_data key, from a folded record or a generic MetadataIndex object.
  struct KeyView {
    std::string_view fqn;
    bool has_offset = false;
    const int64_t* offset = nullptr;
    size_t nd = 0;
    int64_t index = -1;  // -1: None or absent
    uint32_t folded_fqn = UINT32_MAX;
  };

  static Value key_ext(uint64_t id) {
    Value v;
    v.kind = Kind::Ext;
    v.len = MetadataFolder::kKey;
    v.bits = id;
    return v;
  }
  static Value storage_ext(uint64_t id) {
    Value v = key_ext(id);
    v.len = MetadataFolder::kStorage;
    return v;
  }

  void storage_entry(const Value& k, const Value& v) {
    KeyView key;
    std::vector<int64_t> want;
    if (k.kind == Kind::Ext && k.len == MetadataFolder::kKey) {
      const MetadataFolder::Key& fk = folded_.keys[k.bits];
      key.fqn = folded_.fqns[fk.fqn];
      key.folded_fqn = fk.fqn;
      key.has_offset = fk.nd() != MetadataFolder::kNoOffset;
      if (key.has_offset) {
        key.offset = folded_.dims.data() + fk.dims_at();
        key.nd = fk.nd();
      }
      key.index = fk.index == MetadataFolder::kNoIndex ? -1 : static_cast<int64_t>(fk.index);
    } else {
      const Value* fqn_v = attr(k, "fqn");
      if (!fqn_v || fqn_v->kind != Kind::Str) fail("", "storage_data key without an fqn (" + class_name(k) + ")");
      key.fqn = fqn_v->as_str();
      const Value* offset = attr(k, "offset");
      if (offset && offset->kind != Kind::None) {
        dims(offset, want, std::string(key.fqn), "storage key offset");
        key.has_offset = true;
        key.offset = want.data();
        key.nd = want.size();
      }
      const Value* index = attr(k, "index");
      if (index && index->kind == Kind::Int && index->as_int() >= 0) key.index = index->as_int();
    }

    StorageRef ref;
    if (v.kind == Kind::Ext && v.len == MetadataFolder::kStorage) {
      const MetadataFolder::Stored& fs = folded_.storage[v.bits];
      if (fs.transforms & MetadataFolder::kHasTransformField) md_.has_transform_field = true;
      uint32_t ts = fs.transforms & ~MetadataFolder::kHasTransformField;
      if (ts) {
        if (folded_sets_.size() <= ts) folded_sets_.resize(ts + 1, StorageRef::kNone);
        uint32_t& m = folded_sets_[ts];
        if (m == StorageRef::kNone) m = tb_.transform_set(folded_.transform_sets[ts]);
        ref.transforms = m;
      }
      if (folded_files_.size() <= fs.file) folded_files_.resize(fs.file + 1, StorageRef::kNone);
      uint32_t& f = folded_files_[fs.file];
      if (f == StorageRef::kNone) f = tb_.file_index(folded_.files[fs.file]);
      ref.file = f;
      ref.offset = fs.offset;
      ref.length = fs.length;
    } else {
      std::string fqn(key.fqn);
      const Value* rp = attr(v, "relative_path");
      const Value* off = attr(v, "offset");
      const Value* len = attr(v, "length");
      if (!rp || rp->kind != Kind::Str) fail(fqn, "storage entry without a relative_path");
      if (!off || off->kind != Kind::Int || off->as_int() < 0) fail(fqn, "storage entry without a valid offset");
      if (!len || len->kind != Kind::Int || len->as_int() < 0) fail(fqn, "storage entry without a valid length");
      ref.file = tb_.file_index(rp->as_str());
      ref.offset = static_cast<uint64_t>(off->as_int());
      ref.length = static_cast<uint64_t>(len->as_int());
      if (const Value* td = attr(v, "transform_descriptors")) {
        md_.has_transform_field = true;
        ref.transforms = transform_index(td, fqn);
      }
    }
    attach(key, ref);
  }

  // Which item an fqn names: tensor index, bytes index, or neither. Folded keys carry an interned
  // fqn, so the string lookup is done once per distinct fqn, not once per chunk.
  struct Target {
    bool tensor = false;
    size_t id = SIZE_MAX;
  };
  Target target(const KeyView& key) {
    if (key.folded_fqn != UINT32_MAX && key.folded_fqn < folded_targets_.size() &&
        folded_targets_[key.folded_fqn].second)
      return folded_targets_[key.folded_fqn].first;
    Target t;
    std::string fqn(key.fqn);
    if (key.has_offset) {
      auto it = tensor_ids_.find(fqn);
      if (it != tensor_ids_.end()) t = {true, it->second};
    } else {
      auto it = bytes_ids_.find(fqn);
      if (it != bytes_ids_.end()) t = {false, it->second};
    }
    if (key.folded_fqn != UINT32_MAX && key.has_offset) {  // bytes keys are rare: not cached
      if (folded_targets_.size() <= key.folded_fqn) folded_targets_.resize(key.folded_fqn + 1);
      folded_targets_[key.folded_fqn] = {t, true};
    }
    return t;
  }

  void attach(const KeyView& key, const StorageRef& ref) {
    Target tg = target(key);
    if (!key.has_offset) {
      if (tg.id == SIZE_MAX) {
        orphan(std::string(key.fqn), "storage entry for a bytes item that state_dict_metadata does not list");
        return;
      }
      StorageRef& slot = md_.bytes[tg.id].storage;
      if (slot.present()) duplicate(std::string(key.fqn));
      slot = ref;
      return;
    }
    if (tg.id == SIZE_MAX) {
      orphan(std::string(key.fqn), "storage entry for a tensor that state_dict_metadata does not list");
      return;
    }
    TensorMeta& t = md_.tensors[tg.id];
    // Storage entries were written into this tensor while decoding: this entry's outcome would
    // depend on whether it came before or after them. Done again without attaching.
    if (tg.id < md_attached_.size() && md_attached_[tg.id]) attach_conflict_ = true;
    size_t nd = t.ndim();
    auto matches = [&](size_t i) {
      return key.nd == nd && std::equal(key.offset, key.offset + nd, t.chunk_offsets(i));
    };
    size_t hit = t.num_chunks();
    if (key.index >= 0 && static_cast<uint64_t>(key.index) < t.num_chunks() &&
        matches(static_cast<size_t>(key.index))) {
      hit = static_cast<size_t>(key.index);
    } else if (key.nd == nd) {
      hit = chunk_by_offsets(tg.id, key.offset);
    }
    if (hit == t.num_chunks()) {
      orphan(std::string(key.fqn), "storage entry at offsets " + dims_text(key.offset, key.nd) + " matches no chunk");
      return;
    }
    if (t.storage[hit].present()) duplicate(std::string(key.fqn));
    t.storage[hit] = ref;
  }

  // The first chunk of tensor `tid` at offsets `want` (num_chunks() if none). The index is built
  // on the first key whose `index` does not name its chunk (some writers leave it None): a scan
  // per key would be quadratic in the number of chunks.
  size_t chunk_by_offsets(size_t tid, const int64_t* want) {
    const TensorMeta& t = md_.tensors[tid];
    size_t nd = t.ndim();
    auto bytes = [nd](const int64_t* d) { return std::string(reinterpret_cast<const char*>(d), nd * sizeof(int64_t)); };
    auto& index = chunk_index_[tid];
    if (index.empty())
      for (size_t i = 0; i < t.num_chunks(); ++i) index.emplace(bytes(t.chunk_offsets(i)), i);  // keeps the first
    auto found = index.find(bytes(want));
    return found == index.end() ? t.num_chunks() : found->second;
  }

  static std::string dims_text(const int64_t* v, size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  }
  void orphan(const std::string& fqn, const std::string& msg) {
    md_.problems.push_back({"orphan-storage", Where(md_.source, std::nullopt, fqn), msg});
  }
  void duplicate(const std::string& fqn) {
    md_.problems.push_back(
        {"duplicate-storage", Where(md_.source, std::nullopt, fqn), "more than one storage entry for the same chunk"});
  }

  void planner(const Value& pd) {
    if (pd.kind == Kind::None) return;
    if (pd.kind != Kind::Dict) {
      md_.problems.push_back(
          {"planner-data", Where(md_.source),
           std::string("planner_data is a ") + pickle::kind_name(pd.kind) + ", not a dict; nesting cannot be rebuilt"});
      return;
    }
    md_.has_planner_data = true;
    pickle::Items it = pd.items();
    for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
      if (it[i].kind != Kind::Str) continue;
      const Value& path = it[i + 1];
      if (path.kind != Kind::Tuple && path.kind != Kind::List) continue;
      std::vector<PathElem> elems;
      charge(path.items().size(), std::string(it[i].as_str()));
      for (const Value& e : path.items()) {
        PathElem pe;
        if (e.kind == Kind::Str) {
          pe.key = std::string(e.as_str());
        } else if (e.kind == Kind::Int) {
          pe.is_index = true;
          pe.index = e.as_int();
        } else {
          pe.key = "<" + std::string(pickle::kind_name(e.kind)) + ">";
        }
        elems.push_back(std::move(pe));
      }
      md_.planner_data.emplace(std::string(it[i].as_str()), std::move(elems));
    }
  }

  void storage_meta(const Value& sm) {
    if (sm.kind == Kind::None) return;
    StorageMetaInfo info;
    info.checkpoint_id = opt_str(attr(sm, "checkpoint_id"));
    info.save_id = opt_str(attr(sm, "save_id"));
    info.load_id = opt_str(attr(sm, "load_id"));
    if (const Value* mods = attr(sm, "modules"); mods && (mods->kind == Kind::List || mods->kind == Kind::Tuple)) {
      charge(mods->items().size(), "");
      for (const Value& m : mods->items())
        if (m.kind == Kind::Str) info.modules.emplace_back(m.as_str());
    }
    md_.storage_meta = std::move(info);
  }

  // The entries of attached run `r` (see MetadataFolder): their storage is already in their
  // tensors; what storage_entry would still do is assign model file ids in the order of first use
  // and note the transform_descriptors attribute.
  void attached_run(uint64_t r) {
    if (run_seen_.size() < folded_.runs.size()) run_seen_.resize(folded_.runs.size(), 0);
    if (run_seen_[r]) attach_conflict_ = true;  // the same run twice: the dict was copied into itself
    run_seen_[r] = 1;
    const MetadataFolder::AttachedRun& run = folded_.runs[r];
    attached_seen_ += run.count;
    if (run.transform_field) md_.has_transform_field = true;
    for (uint32_t i = run.files_begin; i < run.files_end; ++i) {
      uint32_t fid = folded_.run_files[i];
      if (folded_files_.size() <= fid) folded_files_.resize(fid + 1, StorageRef::kNone);
      uint32_t& f = folded_files_[fid];
      if (f == StorageRef::kNone) f = tb_.file_index(folded_.files[fid]);
    }
  }

  // Whether the storage entries attached while decoding are exactly what reading storage_data
  // entry by entry would have written (see MetadataFolder); if so, their file ids are made the
  // model's.
  bool attached_as_read() {
    if (folded_.attached_total == 0) return true;
    if (attach_conflict_ || attached_seen_ != folded_.attached_total) return false;
    for (const MetadataFolder::Tensor& ft : folded_.tensors) {
      if (!ft.attached) continue;
      if (!ft.moved || ft.md_index >= md_.tensors.size() || ft.name >= folded_.fqns.size() ||
          md_.tensors[ft.md_index].fqn != folded_.fqns[ft.name])
        return false;
    }
    // Every attached entry's file was mapped by its run (attached_run), each run read once: the
    // folder's file ids become the model's (usually the same: both number files by first use).
    bool same = true;
    for (uint32_t fid = 0; fid < folded_files_.size(); ++fid) same = same && folded_files_[fid] == fid;
    if (same) return true;
    for (const MetadataFolder::Tensor& ft : folded_.tensors) {
      if (!ft.attached) continue;
      for (StorageRef& r : md_.tensors[ft.md_index].storage) {
        if (!r.present()) continue;
        if (r.file >= folded_files_.size() || folded_files_[r.file] == StorageRef::kNone) return false;
        r.file = folded_files_[r.file];
      }
    }
    return true;
  }

  // False: storage entries attached while decoding do not match what storage_data says (see
  // MetadataFolder); the caller parses again without attaching.
  bool run(const pickle::Tree& tree) {
    for (const auto* g : tree.globals()) {
      std::string path = std::string(g->module) + "." + std::string(g->name);
      md_.globals.push_back(path);
      if (!known_global(g->module, g->name)) md_.unknown_globals.push_back(path);
    }
    const Value& root = tree.root;
    if (!class_is(root, "Metadata"))
      fail("", "the pickle holds a " +
                   (root.kind == Kind::Object || root.kind == Kind::Ext ? class_name(root)
                                                                        : std::string(pickle::kind_name(root.kind))) +
                   ", not a DCP Metadata object");
    md_.metadata_class = class_name(root);
    const Value* st = state_dict(root);
    if (!st) fail("", "Metadata object has no attribute dict");

    static const char* kKnown[] = {"state_dict_metadata", "planner_data", "storage_data", "storage_meta", "version"};
    pickle::Items fields = st->items();
    for (uint64_t i = 0; i + 1 < fields.size(); i += 2) {
      if (fields[i].kind != Kind::Str) continue;
      std::string_view name = fields[i].as_str();
      if (std::none_of(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return name == k; }))
        md_.extra_attributes.emplace_back(name);
    }

    const Value* sdm = st->get("state_dict_metadata");
    if (!sdm || sdm->kind != Kind::Dict) fail("", "Metadata.state_dict_metadata is missing or not a dict");
    pickle::Items items = sdm->items();
    for (uint64_t i = 0; i + 1 < items.size(); i += 2) {
      if (items[i].kind != Kind::Str) fail("", "state_dict_metadata has a non-string key");
      std::string fqn(items[i].as_str());
      const Value& v = items[i + 1];
      if (tensor_ids_.count(fqn) || bytes_ids_.count(fqn)) fail(fqn, "listed twice in state_dict_metadata");
      if (class_is(v, "BytesStorageMetadata")) {
        bytes_ids_.emplace(fqn, md_.bytes.size());
        md_.order.emplace_back(false, static_cast<uint32_t>(md_.bytes.size()));
        md_.bytes.push_back(BytesMeta{fqn, {}});
      } else if (attr(v, "chunks") || class_is(v, "TensorStorageMetadata")) {
        tensor_ids_.emplace(fqn, md_.tensors.size());
        md_.order.emplace_back(true, static_cast<uint32_t>(md_.tensors.size()));
        tensor(fqn, v);
      } else {
        throw UnsupportedError(Where(md_.source, std::nullopt, fqn),
                               "item of unknown kind " + class_name(v) + " in state_dict_metadata");
      }
    }

    if (const Value* sd = st->get("storage_data"); sd && sd->kind == Kind::Dict) {
      pickle::Items e = sd->items();
      for (uint64_t i = 0; i + 1 < e.size(); i += 2) {
        if (e[i].kind == Kind::Ext && e[i].len == MetadataFolder::kAttached && e[i].bits < folded_.runs.size() &&
            e[i + 1].kind == Kind::Ext && e[i + 1].len == MetadataFolder::kAttached) {
          attached_run(e[i].bits);
          continue;
        }
        if (e[i].kind == Kind::Ext && e[i].len == MetadataFolder::kRun) {
          // Pairs (kKey j, kStorage j) for j in [first, first + count), joined while decoding.
          for (uint64_t j = e[i].bits, end = e[i].bits + e[i + 1].bits; j < end; ++j)
            storage_entry(key_ext(j), storage_ext(j));
          continue;
        }
        storage_entry(e[i], e[i + 1]);
      }
    } else if (sd && sd->kind != Kind::None) {
      fail("", std::string("Metadata.storage_data is a ") + pickle::kind_name(sd->kind));
    }
    if (!attached_as_read()) return false;
    if (const Value* pd = st->get("planner_data")) planner(*pd);
    if (const Value* sm = st->get("storage_meta")) {
      md_.has_storage_meta_field = true;
      storage_meta(*sm);
    }
    if (const Value* ver = st->get("version")) {
      md_.has_version_field = true;
      md_.version = opt_str(ver);
    }
    return true;
  }

 private:
  Metadata& md_;
  Tables& tb_;
  MetadataFolder& folded_;
  std::unordered_map<std::string, size_t> tensor_ids_, bytes_ids_;
  std::unordered_map<size_t, std::unordered_map<std::string, size_t>> chunk_index_;
  std::vector<std::pair<Target, bool>> folded_targets_;  // by folded fqn id: {target, known}
  std::vector<uint32_t> folded_files_;                   // folded file id -> Metadata::files index
  std::vector<uint32_t> folded_sets_;                    // folded transform set -> Metadata's
  std::vector<uint8_t> md_attached_;                     // by model tensor: storage attached while decoding
  std::vector<uint8_t> run_seen_;                        // by attached run: read in storage_data
  uint64_t attached_seen_ = 0;
  bool attach_conflict_ = false;
};

int pickle_protocol(ByteSpan b) {
  return b.size >= 2 && b.data[0] == 0x80 ? b.data[1] : (b.size ? 0 : -1);
}

}  // namespace

namespace {

// One parse; false when attaching storage entries while decoding did not hold (see MetadataFolder).
bool parse_once(Metadata& md, ByteSpan bytes, const std::string& source, const MetadataParseOptions& options,
                bool attach) {
  md.source = source;
  md.pickle_protocol = pickle_protocol(bytes);
  if (bytes.size == 0) throw FormatError(Where(source, 0), "file is empty");
  Tables tables{md, 2 * static_cast<uint64_t>(bytes.size) + (1u << 20), {}};
  MetadataFolder folder(tables, bytes.size);
  folder.attach = attach;
  pickle::ParseOptions opts;
  opts.source = source;
  if (options.fold) opts.folder = &folder;
  opts.consumed = options.consumed;
  opts.byte_templates = options.byte_templates;
  pickle::ParseStats ps;
  opts.stats = &ps;
  std::unique_ptr<pickle::Tree> tree = pickle::parse(bytes, opts);
  auto t0 = std::chrono::steady_clock::now();
  bool ok = Mapper(tables, folder).run(*tree);
  if (options.stats) {
    options.stats->bytes = bytes.size;
    options.stats->scan_seconds += ps.scan_seconds;
    options.stats->decode_seconds += ps.decode_seconds;
    options.stats->flat_template += ps.flat_template;
    options.stats->flat_generic += ps.flat_generic;
    options.stats->flat_declined += ps.flat_declined;
    options.stats->scan_templated = ps.scan_templated;
    options.stats->memo_kept = ps.memo_kept;
    options.stats->map_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++options.stats->parses;
  }
  return ok;
}

}  // namespace

Metadata parse_metadata(ByteSpan bytes, const std::string& source, const MetadataParseOptions& options) {
  if (options.stats) *options.stats = MetadataParseStats{};
  {
    Metadata md;
    if (parse_once(md, bytes, source, options, options.fold && options.attach)) return md;
  }
  Metadata md;
  parse_once(md, bytes, source, options, false);
  return md;
}

}  // namespace dcpctl
