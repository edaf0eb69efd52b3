#include "item/torch_file.h"

#include <algorithm>
#include <memory>
#include <set>

#include "item/tensor_blob.h"
#include "item/torch_zip.h"
#include "meta/layouts.h"
#include "pickle/repr.h"
#include "pickle/vm.h"
#include "store/file.h"

namespace dcpctl {

using pickle::Kind;
using pickle::Value;

namespace {

constexpr uint64_t kMaxPickleBytes = 1ull << 30;
constexpr int kMaxDepth = 256;

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

}  // namespace

bool is_tensor(const Value& v) {
  return v.kind == Kind::Object &&
         (v.is_global("torch._utils", "_rebuild_tensor_v2") || v.is_global("torch._utils", "_rebuild_tensor_v3") ||
          v.is_global("torch._utils", "_rebuild_parameter") ||
          v.is_global("torch._utils", "_rebuild_parameter_with_state"));
}

std::string key_text(const Value& k) {
  switch (k.kind) {
    case Kind::Str: return std::string(k.as_str());
    case Kind::Int: return std::to_string(k.as_int());
    case Kind::Bool: return k.as_bool() ? "True" : "False";
    default: return pickle::repr(k, 1000);
  }
}

bool is_module_metadata(const Value& root, const Value& key, const Value& value) {
  return (root.flags & Value::kOrdered) && key.is_str("_metadata") && value.kind == Kind::Dict;
}

TorchArchive open_torch_archive(const std::string& path) {
  auto file = std::make_shared<ReadFile>(path);
  uint8_t magic[4] = {0, 0, 0, 0};
  if (file->size() >= 4) file->read_at(0, magic, 4);
  if (!(magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4)) {
    if (magic[0] == 0x80)
      throw UnsupportedError(Where(path),
                             "a legacy (pre-1.6, non-zip) torch.save file; re-save it with a current torch");
    throw FormatError(Where(path), "not a torch.save archive (no zip header)");
  }
  struct Whole final : ByteSource {
    std::shared_ptr<ReadFile> f;
    uint64_t size() const override { return f->size(); }
    void read(uint64_t pos, void* buf, size_t n) const override { f->read_near(pos, buf, n, 0, f->size()); }
  };
  auto src = std::make_shared<Whole>();
  src->f = file;
  TorchArchive a;
  a.file = file;
  a.zip = std::make_unique<TorchZip>(src, Where(path));
  if (a.zip->has("byteorder")) {
    std::vector<uint8_t> bo = a.zip->read_small("byteorder", 64);
    if (std::string(bo.begin(), bo.end()) != "little")
      throw UnsupportedError(Where(path), "saved in byte order '" + std::string(bo.begin(), bo.end()) + "'");
  }
  std::vector<uint8_t> pkl = a.zip->read_small("data.pkl", kMaxPickleBytes);
  a.pickle_bytes = pkl.size();
  pickle::ParseOptions po;
  po.source = path + ": data.pkl";
  a.tree = pickle::parse(ByteSpan(pkl.data(), pkl.size()), po);
  return a;
}

namespace {

// What torch/_weights_only_unpickler.py allows in plain values.
bool allowed_global(std::string_view m, std::string_view n) {
  if (m == "collections" && n == "OrderedDict") return true;
  if (m == "torch" && (n == "Size" || n == "device" || dtype_from_torch_name(n))) return true;
  if ((m == "builtins" || m == "__builtin__") && (n == "set" || n == "frozenset" || n == "bytearray" || n == "complex"))
    return true;
  if (m == "_codecs" && n == "encode") return true;
  return false;
}

// The first global in `v` torch.load(weights_only=True) would refuse, or "".
std::string unsafe_global(const Value& v, int depth = 0) {
  if (depth > kMaxDepth) return "";
  switch (v.kind) {
    case Kind::Global:
      return allowed_global(v.as_global().module, v.as_global().name)
                 ? ""
                 : std::string(v.as_global().module) + "." + std::string(v.as_global().name);
    case Kind::Object: {
      const auto& o = v.as_object();
      for (const Value* p : {&o.callable, &o.args, &o.state})
        if (auto s = unsafe_global(*p, depth + 1); !s.empty()) return s;
      return "";
    }
    case Kind::Tuple:
    case Kind::List:
    case Kind::Set:
    case Kind::Dict:
    case Kind::Size:
      for (const Value& e : v.items())
        if (auto s = unsafe_global(e, depth + 1); !s.empty()) return s;
      return "";
    case Kind::PersId: return "persistent id outside a tensor";
    default: return "";
  }
}

// traverse_state_dict's _is_terminal: a list is traversed when it holds a tensor, or a dict, or
// a list that is itself traversed; anything else that is not a dict is one value.
bool terminal(const Value& v, int depth) {
  if (v.kind == Kind::Dict) return false;
  if (v.kind != Kind::List || depth > kMaxDepth) return true;
  for (const Value& e : v.items()) {
    if ((e.kind == Kind::Dict || e.kind == Kind::List) && !terminal(e, depth + 1)) return false;
    if (is_tensor(e)) return false;
  }
  return true;
}

class Flattener {
 public:
  Flattener(TorchFileView& view, TorchZip& zip, const std::string& path, uint32_t file)
      : v_(view), zip_(zip), path_(path), file_(file) {}

  void walk(const std::string& key, const Value& v, int depth) {
    if (depth > kMaxDepth)
      throw UnsupportedError(Where(path_, std::nullopt, key), "nested deeper than " + std::to_string(kMaxDepth));
    if (v.kind == Kind::Dict) {
      pickle::Items it = v.items();
      for (uint64_t i = 0; i + 1 < it.size(); i += 2) walk(join(key, key_text(it[i])), it[i + 1], depth + 1);
    } else if (is_tensor(v)) {
      tensor(key, v);
    } else if (!terminal(v, 0)) {
      uint64_t i = 0;
      for (const Value& e : v.items()) walk(join(key, std::to_string(i++)), e, depth + 1);
    } else {
      value(key, v);
    }
  }

 private:
  static std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

  void tensor(const std::string& key, const Value& v) {
    Where where(path_, std::nullopt, key);
    if (auto bad = unsafe_global(v);
        !bad.empty() && bad.rfind("torch._utils.", 0) != 0 && bad.find("Storage") == std::string::npos)
      throw UnsupportedError(where, "holds " + bad + ", which torch.load(weights_only=True) refuses");
    TensorBlob b = interpret_tensor_pickle(v, where);
    RecordLocation rec = zip_.locate("data/" + b.storage_key);
    // A storage several tensors view (a tie, a slice) is one record, watched once.
    if (watched_.insert(rec.offset).second)
      v_.ck.record_crcs.push_back({file_, rec.offset, rec.size, rec.crc, key, "data/" + b.storage_key});
    size_t item = itemsize(b.dtype);
    uint64_t extent = b.extent();
    if (extent == UINT64_MAX || extent > rec.size / item)
      throw FormatError(where, "the tensor view needs " + std::to_string(extent) +
                                   " elements but its storage record holds " + std::to_string(rec.size / item));
    if (!b.contiguous() && b.numel() != 0)
      throw UnsupportedError(where, "tensor saved as a non-contiguous view (stride " + dims(b.stride) + " for shape " +
                                        dims(b.size) + "); save tensor.contiguous() or convert with torch first");
    TensorMeta t;
    t.fqn = key;
    t.dtype = b.dtype;
    t.dtype_name = torch_name(b.dtype);
    t.shape = b.size;
    t.chunk_dims.assign(t.ndim(), 0);
    t.chunk_dims.insert(t.chunk_dims.end(), b.size.begin(), b.size.end());
    StorageRef ref;
    ref.file = file_;
    ref.offset = rec.offset + static_cast<uint64_t>(b.storage_offset) * item;
    ref.length = b.numel() * item;
    ref.format = ItemFormat::Raw;
    t.storage.push_back(ref);
    add(true, static_cast<uint32_t>(v_.ck.md.tensors.size()), key);
    v_.ck.md.tensors.push_back(std::move(t));
  }

  void value(const std::string& key, const Value& v) {
    if (auto bad = unsafe_global(v); !bad.empty())
      throw UnsupportedError(Where(path_, std::nullopt, key),
                             "holds " + bad + ", which torch.load(weights_only=True) refuses");
    BytesMeta b;
    b.fqn = key;
    add(false, static_cast<uint32_t>(v_.ck.md.bytes.size()), key);
    v_.ck.md.bytes.push_back(std::move(b));
    v_.values[key] = pickle::repr(v, 1u << 20);
  }

  void add(bool tensor, uint32_t index, const std::string& key) {
    if (!v_.keys.emplace(key, file_).second) {
      uint32_t other = v_.keys[key];
      throw FormatError(Where(path_, std::nullopt, key), other == file_
                                                             ? "two values flatten to this key"
                                                             : "this key is also in " + v_.ck.md.files[other]);
    }
    v_.ck.md.order.push_back({tensor, index});
  }

  static std::string dims(const std::vector<int64_t>& d) {
    std::string s = "(";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + ")";
  }

  TorchFileView& v_;
  TorchZip& zip_;
  const std::string& path_;
  uint32_t file_;
  std::set<uint64_t> watched_;  // records already in record_crcs, by offset
};

// Flattens torch.save file number `f` of view.ck.md.files (at `path`) into the view.
void add_torch_file(TorchFileView& view, const std::string& path, uint32_t f) {
  TorchArchive a = open_torch_archive(path);
  Flattener fl(view, *a.zip, path, f);
  const Value& root = a.tree->root;
  if (root.kind == Kind::Dict) {
    pickle::Items it = root.items();
    for (uint64_t i = 0; i + 1 < it.size(); i += 2)
      if (!is_module_metadata(root, it[i], it[i + 1])) fl.walk(key_text(it[i]), it[i + 1], 1);
  } else if (is_tensor(root))
    throw UnsupportedError(Where(path), "holds one tensor, not a dict of tensors (a state_dict)");
  else
    throw UnsupportedError(
        Where(path), std::string("holds a ") + pickle::kind_name(root.kind) + ", not a dict of tensors (a state_dict)");
}

constexpr const char* kHfIndex = "pytorch_model.bin.index.json";
constexpr const char* kHfSingle = "pytorch_model.bin";

}  // namespace

bool is_torch_file_name(const std::string& p) {
  return ends_with(p, ".pt") || ends_with(p, ".pth") || ends_with(p, ".bin");
}

TorchFileView open_torch_file(const std::string& path) {
  TorchFileView view;
  Checkpoint& ck = view.ck;
  size_t slash = path.find_last_of('/');
  ck.dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  ck.metadata_path = path;
  ck.metadata_sources = {path};
  ck.layout = CheckpointLayout::TorchSave;
  ck.md.source = path;
  ck.md.metadata_class = "torch.save archive";
  ck.md.files = {path.substr(slash == std::string::npos ? 0 : slash + 1)};
  ck.files.push_back(DataFileInfo{ck.md.files[0], ReadFile(path).size(), ""});
  add_torch_file(view, path, 0);
  return view;
}

TorchFileView open_hf_torch_dir(const std::string& dir) {
  TorchFileView view;
  Checkpoint& ck = view.ck;
  Metadata& md = ck.md;
  ck.dir = dir;
  ck.layout = CheckpointLayout::TorchSave;
  md.metadata_class = "Hugging Face torch.save shards";
  std::string index = join_path(dir, kHfIndex);
  std::map<std::string, std::string> weight_map;
  if (path_exists(index)) {
    weight_map = meta_detail::read_weight_map(index);
    std::set<std::string> named;
    for (const auto& [k, f] : weight_map) named.insert(f);
    md.files.assign(named.begin(), named.end());
    ck.metadata_path = index;
    ck.metadata_sources.push_back(index);
  } else {
    md.files = {kHfSingle};
    ck.metadata_path = join_path(dir, kHfSingle);
  }
  md.source = ck.metadata_path;
  meta_detail::stat_data_files(ck);
  for (uint32_t f = 0; f < md.files.size(); ++f) {
    std::string path = ck.path_of(f);
    if (!ck.files[f].size) {
      ck.incomplete.push_back({"missing-file", Where(path),
                               ck.files[f].missing ? "data file missing (the index names it)"
                                                   : "data file unavailable: " + ck.files[f].error});
      continue;
    }
    ck.metadata_sources.push_back(path);
    add_torch_file(view, path, f);
  }
  if (!weight_map.empty()) {
    for (const auto& [key, file] : weight_map) {
      uint32_t f = static_cast<uint32_t>(std::find(md.files.begin(), md.files.end(), file) - md.files.begin());
      if (!ck.files[f].size) continue;  // the missing file is the finding
      auto it = view.keys.find(key);
      if (it == view.keys.end() || it->second != f)
        ck.incomplete.push_back({"missing-key", Where(join_path(dir, file), std::nullopt, key),
                                 "the index names this tensor in this file, which does not hold it"});
    }
    for (const auto& [key, f] : view.keys)
      if (!weight_map.count(key))
        md.problems.push_back({"unindexed-key", Where(ck.path_of(f), std::nullopt, key),
                               "a value the file holds that the index does not name"});
  }
  return view;
}

namespace {

Checkpoint open_torch_save_row(const Probe& p) {
  TorchFileView v = p.directory ? open_hf_torch_dir(p.path) : open_torch_file(p.path);
  v.ck.values = std::move(v.values);
  return std::move(v.ck);
}

Checkpoint open_torch_save_ranks_row(const Probe& p) {
  std::vector<std::string> names;
  for (const auto& n : p.names())
    if (rank_torch_file(n)) names.push_back(n);
  return open_rank_torch_files(p.path, names);
}

}  // namespace

void install_item_readers() {
  install_reader(CheckpointLayout::TorchSave, &open_torch_save_row);
  install_reader(CheckpointLayout::TorchSaveRanks, &open_torch_save_ranks_row);
}

}  // namespace dcpctl
