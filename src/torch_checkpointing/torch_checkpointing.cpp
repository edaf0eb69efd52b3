// torch_checkpointing ("DCPv2"; PyPI torch-checkpointing, meta-pytorch/torch_checkpointing; read
// from checkpoints 0.1.1 wrote with torch 2.15): its CheckpointManager.save leaves a folder of
// top-level items, one file per item and rank, and no `.metadata`:
//
//   <item>_<rank>.pt   the default layout (TorchSerialization): torch.save of the item's value on
//                      that rank. A state dict's DTensors are pickled whole (mesh, placements and
//                      the local tensor: item/rank_torch_files.cpp reads them exactly as it reads
//                      verl's files, never executing anything); a plain value (`step_0.pt` holding
//                      7) is one value.
//   metadata.pkl       rank 0's, when an item declares a resharder: a pickle of plain dicts,
//                      {"version": "2.0", "world_size": W, "metadata": {item: {
//                      "nested_path_to_metadata": {'["a"]["b"]': [{"ranks": (...),
//                      "sharding_metadata": {...global_shape, dtype, stride, mesh_spec,
//                      placements...}}]}, "rank_to_layout_info": {rank: None | layout}}}}.
//                      Read here (the restricted VM: its classes would be refused, none are
//                      expected) for the world size, each item's layout per rank, and each
//                      DTensor's global shape, dtype, mesh and placements; the pickled DTensors
//                      of .pt items must agree with it (metadata-mismatch, missing-key), their
//                      geometry read is the DTensors'; safetensors items are placed by it.
//                      0.1.1 writes it in a CheckpointManager's first save only (it caches the
//                      metadata and writes again only when it changes).
//   other layouts      per item (ItemSpec.layout), recorded per rank in metadata.pkl's
//                      rank_to_layout_info ({file_path, serialization_format}):
//                      SafetensorsSerialization's local shards under flattened keys are read,
//                      placed by metadata.pkl's sharding metadata (item/tc_safetensors.cpp);
//                      TorchSerialization at a custom path (`rank_{rank}/model.pt`, filled in per
//                      rank, sub-folders allowed, never leaving the folder) is read as the default
//                      files are. JSON and raw-bytes items (JsonSerialization: json.dumps of the
//                      value, sort_keys, indent 4; RawSerialization: the bytes as given) are
//                      non-tensor items: 0.1.1 records only items with sharding metadata, so
//                      their files are found by name (`<item>_<rank>[.ext]`, not claimed by
//                      another item, sub-folders too: `config_0.json`, `extra/blob_0.bin`), or
//                      where metadata.pkl records them; each is one bytes item holding its lowest
//                      rank's file (ItemFormat::Raw, decoded by the item reader through
//                      item/raw_values.h: `.json` the JSON value, else bytes). Other layout types
//                      are refused (UnsupportedError naming torch_checkpointing and the layout),
//                      as are `<item>_<rank>.safetensors` files without metadata.pkl (nothing
//                      places them).
//
// Keys are `<item>.<flattened key>` (DCP's flattening, so a dcp.save twin of the same payload has
// the same keys); non-tensor leaves (an optimizer's param_groups, a step count) are kept as values
// (Checkpoint::values), not as items. Complete: every rank 0..W-1 (W from metadata.pkl, else the
// highest rank seen + 1: a missing last rank is then invisible) has its file of every item, every
// file holds the same keys, and the pieces tile every tensor (verify checks the tiling).
// The commit protocol writes `tmp_<name>/` and renames it; a `tmp_` folder is a save in flight
// (meta/run_folder.cpp). An HF-looking folder of `<item>_<R>.safetensors` local shards without
// metadata.pkl is refused by the safetensors row (meta/readers.cpp refuse_local_shards).
#include <algorithm>
#include <optional>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "item/raw_values.h"
#include "item/torch_file.h"
#include "meta/geometry.h"
#include "meta/layouts.h"
#include "pickle/repr.h"
#include "pickle/vm.h"
#include "store/file.h"
#include "torch_checkpointing/torch_checkpointing.h"

namespace dcpctl {

using meta_detail::ends_with;
using pickle::Kind;
using pickle::Value;

namespace {

struct ItemFile {
  std::string item;
  int rank = 0;
};

std::optional<ItemFile> item_file(const std::string& n, const std::string& ext) {
  static const std::regex kPt(R"((.+)_(\d{1,7})\.pt)"), kSt(R"((.+)_(\d{1,7})\.safetensors)");
  std::smatch m;
  if (!std::regex_match(n, m, ext == ".pt" ? kPt : kSt)) return std::nullopt;
  return ItemFile{m[1].str(), std::stoi(m[2].str())};
}

// '["state","proj.weight","exp_avg"]' -> "state.proj.weight.exp_avg" (DCP's flattening); nullopt
// for anything else.
std::optional<std::string> flatten_nested_path(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(path, nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty()) return std::nullopt;
  std::string out;
  for (const auto& e : j) {
    if (!out.empty()) out += ".";
    if (e.is_string())
      out += e.get<std::string>();
    else if (e.is_number_integer())
      out += std::to_string(e.get<int64_t>());
    else
      return std::nullopt;
  }
  return out;
}

bool is_seq(const Value* v) {
  return v && (v->kind == Kind::List || v->kind == Kind::Tuple);
}

std::vector<int64_t> ints(const Value* v, const Where& w, const char* what, int64_t lo) {
  if (!is_seq(v)) throw FormatError(w, std::string(what) + " is not a list of ints");
  std::vector<int64_t> out;
  for (const Value& d : v->items()) {
    if (d.kind != Kind::Int || d.as_int() < lo)
      throw FormatError(w, std::string(what) + " holds " + pickle::repr(d, 40));
    out.push_back(d.as_int());
  }
  return out;
}

// One DTensorShardingMetadata's data: {"global_shape", "dtype", "stride", "mesh_spec":
// {"device_type", "mesh_shape", "mesh_data", "mesh_dim_names"}, "placements": [{"type": "Shard",
// "dim"} | {"type": "StridedShard", "dim", "split_factor"} | {"type": "Replicate"}]}.
tc::ShardGroup read_group(const Value& ranks, const Value& data, const Where& w, size_t ndim) {
  tc::ShardGroup g;
  for (int64_t r : ints(&ranks, w, "ranks", 0)) g.ranks.push_back(static_cast<int>(std::min<int64_t>(r, 1 << 30)));
  const Value* mesh = data.get("mesh_spec");
  if (!mesh || mesh->kind != Kind::Dict) throw FormatError(w, "sharding metadata without a mesh_spec dict");
  g.mesh_shape = ints(mesh->get("mesh_shape"), w, "mesh_shape", 1);
  g.mesh_data = ints(mesh->get("mesh_data"), w, "mesh_data", 0);
  int64_t n = 1;
  for (int64_t d : g.mesh_shape) {
    if (d > (int64_t{1} << 24) || n > (int64_t{1} << 24))
      throw FormatError(w, "a mesh of shape " + dims_text(g.mesh_shape));
    n *= d;
  }
  if (static_cast<int64_t>(g.mesh_data.size()) != n)
    throw FormatError(w, "mesh_data holds " + std::to_string(g.mesh_data.size()) + " ranks, mesh_shape " +
                             dims_text(g.mesh_shape) + " needs " + std::to_string(n));
  const Value* pl = data.get("placements");
  if (!is_seq(pl)) throw FormatError(w, "sharding metadata without a placements list");
  for (const Value& p : pl->items()) {
    const Value* type = p.kind == Kind::Dict ? p.get("type") : nullptr;
    if (!type || type->kind != Kind::Str)
      throw FormatError(w, "a placement " + pickle::repr(p, 60) + " without a type");
    MeshPlacement mp;
    std::string t(type->as_str());
    if (t == "Replicate") {
      mp.kind = MeshPlacement::Replicate;
    } else if (t == "Shard" || t == "StridedShard") {
      mp.kind = t == "Shard" ? MeshPlacement::Shard : MeshPlacement::StridedShard;
      const Value* dim = p.get("dim");
      if (!dim || dim->kind != Kind::Int) throw FormatError(w, t + " placement without an int dim");
      mp.dim = dim->as_int() < 0 ? dim->as_int() + static_cast<int64_t>(ndim) : dim->as_int();
      if (mp.kind == MeshPlacement::StridedShard) {
        const Value* sf = p.get("split_factor");
        if (!sf || sf->kind != Kind::Int) throw FormatError(w, "StridedShard placement without an int split_factor");
        mp.split_factor = sf->as_int();
      }
    } else {
      throw UnsupportedError(
          w, "torch_checkpointing: a DTensor placement of type '" + t + "' (only Shard, StridedShard and Replicate)");
    }
    g.placements_text += (g.placements_text.empty() ? "" : ", ") + mp.text();
    g.placements.push_back(mp);
  }
  if (g.placements.size() != g.mesh_shape.size())
    throw FormatError(
        w, std::to_string(g.placements.size()) + " placements on a mesh of shape " + dims_text(g.mesh_shape));
  return g;
}

// Each tensor of an item's nested_path_to_metadata (0.1.1: {path: [{"ranks": (...),
// "sharding_metadata": {"type": "DTensorShardingMetadata", "data": {...}}}]}); entries of another
// form are skipped.
void read_tc_tensors(const std::string& path, const std::string& item, const Value& entry, tc::Metadata& md) {
  const Value* nested = entry.kind == Kind::Dict ? entry.get("nested_path_to_metadata") : nullptr;
  if (!nested || nested->kind != Kind::Dict) return;
  pickle::Items np = nested->items();
  for (uint64_t i = 0; i + 1 < np.size(); i += 2) {
    if (np[i].kind != Kind::Str) continue;
    std::optional<std::string> key = flatten_nested_path(std::string(np[i].as_str()));
    if (!key || !is_seq(&np[i + 1])) continue;
    std::string fqn = item + "." + *key;
    Where w(path, std::nullopt, fqn);
    tc::Tensor t;
    t.item = item;
    bool described = false;
    for (const Value& shard : np[i + 1].items()) {
      const Value* sm = shard.kind == Kind::Dict ? shard.get("sharding_metadata") : nullptr;
      const Value* type = sm && sm->kind == Kind::Dict ? sm->get("type") : nullptr;
      const Value* data = sm && sm->kind == Kind::Dict ? sm->get("data") : nullptr;
      if (!type || type->kind != Kind::Str || type->as_str() != "DTensorShardingMetadata" || !data ||
          data->kind != Kind::Dict)
        continue;
      const Value* dt = data->get("dtype");
      if (!dt || dt->kind != Kind::Str) continue;
      std::vector<int64_t> shape = ints(data->get("global_shape"), w, "global_shape", 0);
      std::string dtype(dt->as_str());
      if (dtype.rfind("torch.", 0) == 0) dtype = dtype.substr(6);
      if (described && (shape != t.shape || dtype != t.dtype))
        throw FormatError(w, "two groups of ranks describe it as " + t.dtype + " " + dims_text(t.shape) + " and " +
                                 dtype + " " + dims_text(shape));
      t.shape = shape;
      t.dtype = dtype;
      described = true;
      const Value* ranks = shard.get("ranks");
      if (ranks) t.groups.push_back(read_group(*ranks, *data, w, shape.size()));
    }
    if (!described) continue;
    if (!md.tensors.count(fqn)) md.order.push_back(fqn);
    md.tensors[fqn] = std::move(t);
  }
}

// rank_to_layout_info: {rank: None | {"file_path": "model_0.safetensors", "serialization_format":
// {"type": "SafetensorsSerialization", ...}}}.
void read_tc_layouts(const std::string& path, const std::string& item, const Value& entry, tc::Metadata& md) {
  const Value* layouts = entry.kind == Kind::Dict ? entry.get("rank_to_layout_info") : nullptr;
  if (!layouts || layouts->kind != Kind::Dict) return;
  pickle::Items li = layouts->items();
  for (uint64_t j = 0; j + 1 < li.size(); j += 2) {
    Where w(path, std::nullopt, item);
    if (li[j].kind != Kind::Int || li[j].as_int() < 0 || li[j].as_int() >= md.world)
      throw FormatError(w, "rank_to_layout_info has a rank " + pickle::repr(li[j], 40) + " outside the world of " +
                               std::to_string(md.world));
    int rank = static_cast<int>(li[j].as_int());
    const Value& v = li[j + 1];
    if (v.kind == Kind::None) {
      md.layouts[item][rank] = std::nullopt;
      continue;
    }
    const Value* fp = v.kind == Kind::Dict ? v.get("file_path") : nullptr;
    const Value* fmt = v.kind == Kind::Dict ? v.get("serialization_format") : nullptr;
    const Value* type = fmt && fmt->kind == Kind::Dict ? fmt->get("type") : nullptr;
    if (!fp || fp->kind != Kind::Str || !type || type->kind != Kind::Str)
      throw FormatError(w, "rank " + std::to_string(rank) + "'s layout " + pickle::repr(v, 120) +
                               " is not {file_path, serialization_format}");
    tc::FileLayout fl{std::string(fp->as_str()), std::string(type->as_str())};
    tc::check_inside(fl.file_path, w);
    md.layouts[item][rank] = fl;
  }
}

}  // namespace

namespace tc {

void check_inside(const std::string& rel, const Where& where) {
  bool bad = rel.empty() || rel[0] == '/' || rel.find('\0') != std::string::npos;
  for (size_t b = 0; !bad && b < rel.size();) {
    size_t e = std::min(rel.find('/', b), rel.size());
    bad = rel.compare(b, e - b, "..") == 0 && e - b == 2;
    b = e + 1;
  }
  if (bad) throw FormatError(where, "file_path '" + rel + "' leaves the checkpoint folder");
}

std::string Metadata::item_layout(const std::string& item) const {
  auto it = layouts.find(item);
  if (it == layouts.end()) return "";
  for (const auto& [rank, l] : it->second)
    if (l) return l->type;
  return "";
}

Metadata read_metadata(const std::string& path) {
  MappedFile mf(path);
  pickle::ParseOptions po;
  po.source = path;
  std::unique_ptr<pickle::Tree> tree = pickle::parse(mf.span(), po);
  const Value& root = tree->root;
  Where w(path);
  if (root.kind != Kind::Dict)
    throw FormatError(
        w, std::string("holds a ") + pickle::kind_name(root.kind) + ", not torch_checkpointing's metadata dict");
  const Value* version = root.get("version");
  if (!version || version->kind != Kind::Str)
    throw FormatError(Where(path, std::nullopt, "version"), "missing: not torch_checkpointing's metadata.pkl");
  if (version->as_str() != "2.0")
    throw UnsupportedError(Where(path, std::nullopt, "version"),
                           "torch_checkpointing metadata version " + std::string(version->as_str()) +
                               "; dcpctl reads version 2.0 (torch-checkpointing 0.1)");
  Metadata md;
  md.path = path;
  const Value* ws = root.get("world_size");
  if (!ws || ws->kind != Kind::Int || ws->as_int() < 1 || ws->as_int() > 1000000)
    throw FormatError(Where(path, std::nullopt, "world_size"), "missing or not a positive int");
  md.world = static_cast<int>(ws->as_int());
  const Value* items = root.get("metadata");
  if (!items || items->kind != Kind::Dict)
    throw FormatError(Where(path, std::nullopt, "metadata"), "missing or not a dict");
  pickle::Items it = items->items();
  for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
    if (it[i].kind != Kind::Str)
      throw FormatError(Where(path, std::nullopt, "metadata"), "an item key that is not a str");
    std::string item(it[i].as_str());
    md.items.insert(item);
    read_tc_tensors(path, item, it[i + 1], md);
    read_tc_layouts(path, item, it[i + 1], md);
  }
  return md;
}

}  // namespace tc

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// metadata.pkl against the DTensors the files hold: a tensor whose global shape or dtype differs,
// or one metadata.pkl names that no file holds, makes the checkpoint incomplete (the library's
// resharding load plans from metadata.pkl, so either side being wrong breaks it).
void check_against_metadata(Checkpoint& ck, const std::string& meta_path, const tc::Metadata& md,
                            const std::set<std::string>& items_present) {
  std::set<std::string> seen;
  for (const auto& t : ck.md.tensors) {
    auto it = md.tensors.find(t.fqn);
    if (it == md.tensors.end()) continue;
    seen.insert(t.fqn);
    if (it->second.shape != t.shape || it->second.dtype != t.dtype_name)
      ck.incomplete.push_back({"metadata-mismatch", Where(meta_path, std::nullopt, t.fqn),
                               "metadata.pkl says " + it->second.dtype + " " + shape_text(it->second.shape) +
                                   ", the ranks' files hold " + t.dtype_name + " " + shape_text(t.shape)});
  }
  for (const auto& [fqn, t] : md.tensors)
    if (!seen.count(fqn) && items_present.count(fqn.substr(0, fqn.find('.'))) && ck.md.find_tensor(fqn) == nullptr)
      ck.incomplete.push_back(
          {"missing-key", Where(meta_path, std::nullopt, fqn),
           "metadata.pkl names this " + t.dtype + " " + shape_text(t.shape) + " tensor; no rank's file holds it"});
}

// A JSON or raw-bytes item: its file per rank (relative paths).
struct ValueItem {
  std::string key, pattern;  // pattern: for messages ("extra/blob_{rank}.bin")
  bool recorded = false;     // metadata.pkl's rank_to_layout_info names its files
  std::map<int, std::string> files;
};

// Files no other item claims, named `<item>_<rank>` with any extension but a torch or safetensors
// file's (the library's default naming, as `<item>_<rank>.pt`), at the top of the folder or in
// sub-folders (3 deep, 64 folders listed at most): 0.1.1 records no layout of JSON and raw items,
// so their names are all there is. `.json` is a JSON item, any other a raw one; the key is the
// name before `_<rank>` (`extra/blob_0.bin` is item "blob"). Ranks at or past the world are not
// an item's.
void scan_value_files(const std::string& dir, const std::string& rel, const std::vector<std::string>& names, int depth,
                      const std::set<std::string>& claimed, int world, std::map<std::string, ValueItem>& found,
                      int& listings) {
  static const std::regex kRanked(R"((.+)_(\d{1,7})(\.[A-Za-z0-9]{1,16})?)");
  for (const auto& n : names) {
    const std::string path = rel.empty() ? n : rel + "/" + n;
    if (claimed.count(path) || n == "metadata.pkl" || ends_with(n, ".pt") || ends_with(n, ".pth") ||
        ends_with(n, ".safetensors") || ends_with(n, ".pkl"))
      continue;
    PathInfo st = stat_path(join_path(dir, path));
    if (st.kind == PathInfo::directory) {
      if (depth < 3 && listings < 64) {
        ++listings;
        scan_value_files(dir, path, list_dir(join_path(dir, path)), depth + 1, claimed, world, found, listings);
      }
      continue;
    }
    std::smatch m;
    if (st.kind != PathInfo::file || !std::regex_match(n, m, kRanked)) continue;
    const int rank = std::stoi(m[2].str());
    if (rank >= world) continue;
    const std::string pattern = (rel.empty() ? "" : rel + "/") + m[1].str() + "_{rank}" + m[3].str();
    ValueItem& vi = found[pattern];
    vi.key = m[1].str();
    vi.pattern = pattern;
    vi.files[rank] = path;
  }
}

// Lists each JSON or raw item as one non-tensor item of ck.md (BytesMeta, ItemFormat::Raw: the
// file's bytes as they are), its value the lowest rank's file (what a one-process load reads;
// the library gives each rank its own file's). Every rank's JSON file must parse (item-invalid
// otherwise); a file metadata.pkl names that is missing is a missing rank.
void add_value_items(Checkpoint& ck, const std::map<std::string, ValueItem>& items, int world,
                     const std::string& meta_path) {
  std::vector<std::pair<const ValueItem*, uint32_t>> listed;  // item, its value's file
  for (const auto& [key, vi] : items) {
    if (vi.recorded)
      for (int r = 0; r < world; ++r)
        if (!vi.files.count(r))
          ck.incomplete.push_back({"missing-rank", Where(meta_path, std::nullopt, key),
                                   "rank_to_layout_info gives rank " + std::to_string(r) + " of " +
                                       std::to_string(world) + " no file of item '" + key + "'"});
    bool first = true;
    for (const auto& [rank, rel] : vi.files) {
      const std::string path = join_path(ck.dir, rel);
      if (!path_exists(path)) {  // only a recorded item names files that may be absent
        ck.incomplete.push_back({"missing-rank", Where(path),
                                 "rank " + std::to_string(rank) + " of " + std::to_string(world) +
                                     " has no file of item '" + key +
                                     "' where metadata.pkl's rank_to_layout_info puts it: its save did not finish"});
        continue;
      }
      const uint32_t file = static_cast<uint32_t>(ck.md.files.size());
      ck.md.files.push_back(rel);
      if (first) listed.push_back({&vi, file});
      first = false;
      if (!raw::json_file(rel)) continue;
      ReadFile f(path);
      if (f.size() > (uint64_t{64} << 20)) continue;  // checked when read
      std::string text(static_cast<size_t>(f.size()), '\0');
      f.read_at(0, text.data(), text.size(), key);
      try {
        raw::value_tree(text, true, Where(path, std::nullopt, key));
      } catch (const FormatError& e) {
        ck.incomplete.push_back({"item-invalid", e.where(), e.detail()});
      } catch (const UnsupportedError&) {
        // valid: refused when a command needs the value
      }
    }
  }
  meta_detail::stat_data_files(ck);
  for (const auto& [vi, file] : listed) {
    if (!ck.files[file].size) continue;
    BytesMeta b;
    b.fqn = vi->key;
    b.storage.file = file;
    b.storage.offset = 0;
    b.storage.length = *ck.files[file].size;
    b.storage.format = ItemFormat::Raw;
    ck.md.order.push_back({false, static_cast<uint32_t>(ck.md.bytes.size())});
    ck.md.bytes.push_back(std::move(b));
  }
}

// A torch_checkpointing folder opened: metadata.pkl's layouts read, the item files listed into a
// RankFileSet, the JSON and raw items found, then the checkpoint read and what it lacks noted.
class TorchCheckpointingOpener {
 public:
  explicit TorchCheckpointingOpener(const Probe& p)
      : p_(p), dir_(p.path), meta_path_(join_path(dir_, "metadata.pkl")) {}

  Checkpoint open() {
    if (p_.exists("metadata.pkl")) meta_ = tc::read_metadata(meta_path_);
    if (meta_)
      for (const auto& item : meta_->items) read_layout(item);
    start_set();
    list_files();
    set_world();
    find_value_items();
    keep_present();
    Checkpoint ck = read_set();
    if (meta_) {
      for (const auto& item : st_items_) tc::add_safetensors_item(ck, *meta_, item);
      if (!st_items_.empty()) meta_detail::stat_data_files(ck);
      ck.metadata_sources.insert(ck.metadata_sources.begin(), meta_path_);
      check_against_metadata(ck, meta_path_, *meta_, items_seen_);
    }
    if (!values_.empty()) add_value_items(ck, values_, set_.world, meta_path_);
    for (const auto& item : absent_items_)
      ck.incomplete.push_back({"missing-item", Where(join_path(dir_, item + "_0.pt")),
                               "metadata.pkl names item '" + item + "', but no rank's file of it is here"});
    return ck;
  }

 private:
  // Items metadata.pkl says are saved in another layout than the default: safetensors local
  // shards, or torch.save files at a custom path (`rank_{rank}/model.pt`, filled in per rank).
  void read_layout(const std::string& item) {
    std::string type = meta_->item_layout(item);
    if (type.empty()) return;
    if (type == "SafetensorsSerialization") {
      st_items_.insert(item);
      return;
    }
    if (type == "JsonSerialization" || type == "RawSerialization") return read_value_layout(item, type);
    if (type == "TorchSerialization") return read_torch_layout(item, type);
    throw UnsupportedError(Where(meta_path_, std::nullopt, item),
                           "torch_checkpointing: item '" + item + "' is saved in a " + type +
                               " layout, which dcpctl does not read (TorchSerialization, at "
                               "<item>_<rank>.pt or a custom path, SafetensorsSerialization, "
                               "JsonSerialization and RawSerialization are read)");
  }

  void read_value_layout(const std::string& item, const std::string& type) {
    ValueItem& vi = values_[item];
    vi.key = item;
    vi.recorded = true;
    for (const auto& [rank, l] : meta_->layouts.at(item)) {
      if (!l || l->type != type)
        throw UnsupportedError(Where(meta_path_, std::nullopt, item),
                               "torch_checkpointing: item '" + item + "' is saved in " + type +
                                   " by some ranks and in " + (l ? l->type : std::string("the default layout")) +
                                   " by rank " + std::to_string(rank) + "; dcpctl reads an item in one layout");
      if (raw::json_file(l->file_path) != (type == "JsonSerialization"))
        throw UnsupportedError(
            Where(meta_path_, std::nullopt, item),
            "torch_checkpointing: item '" + item + "' is saved in " + type + " at " + l->file_path +
                "; dcpctl tells a JSON item by its .json name (0.1 records no layout of such items), so it "
                "reads neither a JSON item under another name nor a raw item under a .json one");
      vi.files[rank] = l->file_path;
      vi.pattern = l->file_path;
    }
  }

  void read_torch_layout(const std::string& item, const std::string& type) {
    for (const auto& [rank, l] : meta_->layouts.at(item)) {
      if (l && l->type != type)
        throw UnsupportedError(Where(meta_path_, std::nullopt, item),
                               "torch_checkpointing: item '" + item + "' is saved in " + type +
                                   " by some ranks and in " + l->type + " by rank " + std::to_string(rank) +
                                   "; dcpctl reads an item in one layout");
      custom_[{item, rank}] = l ? l->file_path : item + "_" + std::to_string(rank) + ".pt";
    }
  }

  void start_set() {
    set_.dir = dir_;
    set_.layout = CheckpointLayout::TorchCheckpointing;
    set_.metadata_class = meta_ ? std::string("torch_checkpointing metadata.pkl (version 2.0) + <item>_<rank>.pt") +
                                      (st_items_.empty() ? "" : " + <item>_<rank>.safetensors")
                                : "torch_checkpointing <item>_<rank>.pt (no metadata.pkl)";
    set_.values = true;
    set_.pattern = "<item>_R.pt";
    set_.file_name = [custom = custom_](int r, const std::string& item) {
      auto it = custom.find({item, r});
      return it != custom.end() ? it->second : item + "_" + std::to_string(r) + ".pt";
    };
  }

  // The .pt files: at their custom paths, then by name.
  void list_files() {
    for (const auto& [key, path] : custom_) {
      claimed_.insert(path);
      if (!path_exists(join_path(dir_, path))) continue;  // open_rank_file_set names the missing rank
      items_seen_.insert(key.first);
      set_.files.push_back({key.second, path, key.first});
      max_rank_ = std::max(max_rank_, key.second);
    }
    for (const auto& n : p_.names()) {
      if (claimed_.count(n)) continue;  // a custom path that also looks like <item>_<rank>.pt
      if (auto st = item_file(n, ".safetensors")) {
        if (meta_) continue;  // read where metadata.pkl's layouts say
        refuse_local_shards(n, st->item);
      }
      auto f = item_file(n, ".pt");
      if (!f) continue;
      set_.files.push_back({f->rank, n, f->item});
      items_seen_.insert(f->item);
      max_rank_ = std::max(max_rank_, f->rank);
    }
  }

  [[noreturn]] void refuse_local_shards(const std::string& n, const std::string& item) const {
    throw UnsupportedError(
        Where(join_path(dir_, n)),
        "torch_checkpointing: item '" + item +
            "' is saved in the SafetensorsSerialization layout: not a Hugging Face model, but each rank's local "
            "shard under the same flattened keys (" +
            item +
            "_<rank>.safetensors, no offsets); their global "
            "shapes and each rank's slice are in metadata.pkl, which this folder lacks (torch-checkpointing 0.1 "
            "writes it only when an item declares a resharder, in a manager's first save), so the local shards "
            "cannot be placed");
  }

  void set_world() {
    if (meta_) {
      for (const auto& item : meta_->items)
        if (!items_seen_.count(item) && !st_items_.count(item) && !values_.count(item)) {
          set_.files.push_back({0, "", item});  // placeholder: every rank of it missing
        }
      set_.world = meta_->world;
      set_.metadata_path = meta_path_;
    } else {
      set_.world = max_rank_ + 1;
    }
  }

  // JSON and raw items: those metadata.pkl records, and files no other item claims named as an
  // item's (0.1.1 records none of them).
  void find_value_items() {
    std::set<std::string> taken = claimed_;
    if (meta_)
      for (const auto& [item, ranks] : meta_->layouts)
        for (const auto& [rank, l] : ranks)
          if (l) taken.insert(l->file_path);
    std::map<std::string, ValueItem> found;
    int listings = 0;
    scan_value_files(dir_, "", p_.names(), 0, taken, set_.world, found, listings);
    for (auto& [pattern, vi] : found) {
      auto [it, fresh] = values_.emplace(vi.key, vi);
      if (!fresh)
        throw UnsupportedError(
            Where(join_path(dir_, vi.files.begin()->second)),
            "torch_checkpointing: " + it->second.pattern + " and " + pattern + " both look like the files of item '" +
                vi.key + "' (a JSON or raw item's, named <item>_<rank>); dcpctl cannot tell which is the item");
    }
  }

  // Files of items every rank lacks are named in the findings, not read.
  void keep_present() {
    std::vector<RankFileSet::File> present;
    for (auto& f : set_.files) {
      if (f.name.empty()) {
        absent_items_.push_back(f.prefix);
        continue;
      }
      if (f.rank >= set_.world)
        throw FormatError(Where(join_path(dir_, f.name)), "rank " + std::to_string(f.rank) + " of a world of " +
                                                              std::to_string(set_.world) +
                                                              " (metadata.pkl's world_size)");
      present.push_back(f);
    }
    set_.files = std::move(present);
  }

  Checkpoint read_set() {
    Checkpoint ck;
    if (!set_.files.empty()) {
      ck = open_rank_file_set(set_);
    } else if (st_items_.empty()) {
      throw FormatError(Where(dir_), "torch_checkpointing: no <item>_<rank>.pt file");
    } else {  // every item in the safetensors layout
      ck.dir = dir_;
      ck.layout = CheckpointLayout::TorchCheckpointing;
      ck.metadata_path = meta_path_;
      ck.md.metadata_class = set_.metadata_class;
      ck.md.source = meta_path_;
    }
    return ck;
  }

  const Probe& p_;
  const std::string& dir_;
  const std::string meta_path_;
  std::optional<tc::Metadata> meta_;
  std::set<std::string> st_items_;
  std::map<std::string, ValueItem> values_;                    // JSON and raw items, by key
  std::map<std::pair<std::string, int>, std::string> custom_;  // (item, rank) -> its .pt path
  RankFileSet set_;
  int max_rank_ = -1;
  std::set<std::string> items_seen_, claimed_;
  std::vector<std::string> absent_items_;
};

}  // namespace

Checkpoint open_torch_checkpointing(const Probe& p) {
  return TorchCheckpointingOpener(p).open();
}

}  // namespace dcpctl
