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
//                      expected) for the world size, each item's layout, and each DTensor's
//                      global shape and dtype, which the pickled DTensors must agree with
//                      (metadata-mismatch, missing-key); the geometry read is the DTensors'.
//                      0.1.1 writes it in a CheckpointManager's first save only (it caches the
//                      metadata and writes again only when it changes).
//   other layouts      per item (ItemSpec.layout: SafetensorsSerialization's local shards under
//                      flattened keys, custom paths with `{rank}`, JSON, raw bytes): recognised
//                      and refused (UnsupportedError naming torch_checkpointing and the layout).
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

#include "item/torch_file.h"
#include "meta/layouts.h"
#include "pickle/repr.h"
#include "pickle/vm.h"
#include "store/file.h"

namespace dcpctl {

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

struct TcMetadata {
  int world = 0;
  std::map<std::string, std::string> layouts;  // item -> its layout's type, for items not in the default
  std::set<std::string> items;
  // `<item>.<flattened key>` -> what metadata.pkl says of that DTensor: global shape and dtype
  // ("float32"); checked against the pickled DTensors (check_against_metadata).
  struct Tensor {
    std::vector<int64_t> shape;
    std::string dtype;
  };
  std::map<std::string, Tensor> tensors;
};

// '["state","proj.weight","exp_avg"]' -> "state.proj.weight.exp_avg" (DCP's flattening); nullopt
// for anything else.
std::optional<std::string> flatten_nested_path(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(path, nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty()) return std::nullopt;
  std::string out;
  for (const auto& e : j) {
    if (!out.empty()) out += ".";
    if (e.is_string()) out += e.get<std::string>();
    else if (e.is_number_integer()) out += std::to_string(e.get<int64_t>());
    else return std::nullopt;
  }
  return out;
}

// Each DTensor's global shape and dtype from an item's nested_path_to_metadata (0.1.1:
// {path: [{"ranks": (...), "sharding_metadata": {"type": "DTensorShardingMetadata", "data":
// {"global_shape": [...], "dtype": "torch.float32", ...}}}]}); entries of another form are skipped.
void read_tc_tensors(const std::string& path, const std::string& item, const Value& entry, TcMetadata& md) {
  const Value* nested = entry.kind == Kind::Dict ? entry.get("nested_path_to_metadata") : nullptr;
  if (!nested || nested->kind != Kind::Dict) return;
  pickle::Items np = nested->items();
  for (uint64_t i = 0; i + 1 < np.size(); i += 2) {
    if (np[i].kind != Kind::Str) continue;
    std::optional<std::string> key = flatten_nested_path(std::string(np[i].as_str()));
    if (!key || (np[i + 1].kind != Kind::List && np[i + 1].kind != Kind::Tuple)) continue;
    for (const Value& shard : np[i + 1].items()) {
      const Value* sm = shard.kind == Kind::Dict ? shard.get("sharding_metadata") : nullptr;
      const Value* type = sm && sm->kind == Kind::Dict ? sm->get("type") : nullptr;
      const Value* data = sm && sm->kind == Kind::Dict ? sm->get("data") : nullptr;
      if (!type || type->kind != Kind::Str || type->as_str() != "DTensorShardingMetadata" || !data || data->kind != Kind::Dict) continue;
      const Value* gs = data->get("global_shape");
      const Value* dt = data->get("dtype");
      if (!gs || (gs->kind != Kind::List && gs->kind != Kind::Tuple) || !dt || dt->kind != Kind::Str) continue;
      TcMetadata::Tensor t;
      for (const Value& d : gs->items()) {
        if (d.kind != Kind::Int || d.as_int() < 0)
          throw FormatError(Where(path, std::nullopt, item + "." + *key), "global_shape holds " + pickle::repr(d, 40) + ", not a size");
        t.shape.push_back(d.as_int());
      }
      std::string dtype(dt->as_str());
      t.dtype = dtype.rfind("torch.", 0) == 0 ? dtype.substr(6) : dtype;
      md.tensors[item + "." + *key] = t;
    }
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// metadata.pkl against the DTensors the files hold: a tensor whose global shape or dtype differs,
// or one metadata.pkl names that no file holds, makes the checkpoint incomplete (the library's
// resharding load plans from metadata.pkl, so either side being wrong breaks it).
void check_against_metadata(Checkpoint& ck, const std::string& meta_path, const TcMetadata& md, const std::set<std::string>& items_present) {
  std::set<std::string> seen;
  for (const auto& t : ck.md.tensors) {
    auto it = md.tensors.find(t.fqn);
    if (it == md.tensors.end()) continue;
    seen.insert(t.fqn);
    if (it->second.shape != t.shape || it->second.dtype != t.dtype_name)
      ck.incomplete.push_back({"metadata-mismatch", Where(meta_path, std::nullopt, t.fqn),
                               "metadata.pkl says " + it->second.dtype + " " + shape_text(it->second.shape) + ", the ranks' files hold " +
                                   t.dtype_name + " " + shape_text(t.shape)});
  }
  for (const auto& [fqn, t] : md.tensors)
    if (!seen.count(fqn) && items_present.count(fqn.substr(0, fqn.find('.'))) && ck.md.find_tensor(fqn) == nullptr)
      ck.incomplete.push_back({"missing-key", Where(meta_path, std::nullopt, fqn),
                               "metadata.pkl names this " + t.dtype + " " + shape_text(t.shape) + " tensor; no rank's file holds it"});
}

TcMetadata read_tc_metadata(const std::string& path) {
  MappedFile mf(path);
  pickle::ParseOptions po;
  po.source = path;
  std::unique_ptr<pickle::Tree> tree = pickle::parse(mf.span(), po);
  const Value& root = tree->root;
  Where w(path);
  if (root.kind != Kind::Dict) throw FormatError(w, std::string("holds a ") + pickle::kind_name(root.kind) + ", not torch_checkpointing's metadata dict");
  const Value* version = root.get("version");
  if (!version || version->kind != Kind::Str)
    throw FormatError(Where(path, std::nullopt, "version"), "missing: not torch_checkpointing's metadata.pkl");
  if (version->as_str() != "2.0")
    throw UnsupportedError(Where(path, std::nullopt, "version"), "torch_checkpointing metadata version " + std::string(version->as_str()) +
                                                                  "; dcpctl reads version 2.0 (torch-checkpointing 0.1)");
  TcMetadata md;
  const Value* ws = root.get("world_size");
  if (!ws || ws->kind != Kind::Int || ws->as_int() < 1 || ws->as_int() > 1000000)
    throw FormatError(Where(path, std::nullopt, "world_size"), "missing or not a positive int");
  md.world = static_cast<int>(ws->as_int());
  const Value* items = root.get("metadata");
  if (!items || items->kind != Kind::Dict) throw FormatError(Where(path, std::nullopt, "metadata"), "missing or not a dict");
  pickle::Items it = items->items();
  for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
    if (it[i].kind != Kind::Str) throw FormatError(Where(path, std::nullopt, "metadata"), "an item key that is not a str");
    std::string item(it[i].as_str());
    md.items.insert(item);
    read_tc_tensors(path, item, it[i + 1], md);
    const Value* layouts = it[i + 1].kind == Kind::Dict ? it[i + 1].get("rank_to_layout_info") : nullptr;
    if (!layouts || layouts->kind != Kind::Dict) continue;
    pickle::Items li = layouts->items();
    for (uint64_t j = 1; j < li.size(); j += 2) {
      if (li[j].kind == Kind::None) continue;
      std::string type = pickle::repr(li[j], 200);
      if (li[j].kind == Kind::Dict)
        if (const Value* fmt = li[j].get("serialization_format"); fmt && fmt->kind == Kind::Dict)
          if (const Value* t = fmt->get("type"); t && t->kind == Kind::Str) type = std::string(t->as_str());
      md.layouts.emplace(item, type);
    }
  }
  return md;
}

Checkpoint open_torch_checkpointing(const Probe& p) {
  const std::string& dir = p.path;
  std::string meta_path = join_path(dir, "metadata.pkl");
  std::optional<TcMetadata> meta;
  if (p.exists("metadata.pkl")) meta = read_tc_metadata(meta_path);
  RankFileSet set;
  set.dir = dir;
  set.layout = CheckpointLayout::TorchCheckpointing;
  set.metadata_class = meta ? "torch_checkpointing metadata.pkl (version 2.0) + <item>_<rank>.pt" : "torch_checkpointing <item>_<rank>.pt (no metadata.pkl)";
  set.values = true;
  set.pattern = "<item>_R.pt";
  set.file_name = [](int r, const std::string& item) { return item + "_" + std::to_string(r) + ".pt"; };
  int max_rank = -1;
  std::set<std::string> items_seen;
  for (const auto& n : p.names()) {
    if (auto st = item_file(n, ".safetensors"))
      throw UnsupportedError(Where(join_path(dir, n)),
                             "torch_checkpointing: item '" + st->item +
                                 "' is saved in the SafetensorsSerialization layout, which dcpctl does not read yet: not a Hugging "
                                 "Face model, but each rank's local shard under the same flattened keys (" + st->item + "_<rank>.safetensors, "
                                 "no offsets), placed by " + (meta ? "metadata.pkl beside them" : "a metadata.pkl this folder lacks"));
    auto f = item_file(n, ".pt");
    if (!f) continue;
    set.files.push_back({f->rank, n, f->item});
    items_seen.insert(f->item);
    max_rank = std::max(max_rank, f->rank);
  }
  if (meta) {
    for (const auto& [item, type] : meta->layouts)
      throw UnsupportedError(Where(meta_path, std::nullopt, item), "torch_checkpointing: item '" + item + "' is saved in a " + type +
                                                                        " layout, which dcpctl does not read (only the default TorchSerialization "
                                                                        "layout, <item>_<rank>.pt)");
    for (const auto& item : meta->items)
      if (!items_seen.count(item)) {
        set.files.push_back({0, "", item});  // placeholder: every rank of it missing
      }
    set.world = meta->world;
    set.metadata_path = meta_path;
  } else {
    set.world = max_rank + 1;
  }
  // Files of items every rank lacks are named in the findings, not read.
  std::vector<RankFileSet::File> present;
  std::vector<std::string> absent_items;
  for (auto& f : set.files) {
    if (f.name.empty()) {
      absent_items.push_back(f.prefix);
      continue;
    }
    if (f.rank >= set.world)
      throw FormatError(Where(join_path(dir, f.name)), "rank " + std::to_string(f.rank) + " of a world of " + std::to_string(set.world) +
                                                           " (metadata.pkl's world_size)");
    present.push_back(f);
  }
  set.files = std::move(present);
  if (set.files.empty()) throw FormatError(Where(dir), "torch_checkpointing: no <item>_<rank>.pt file");
  Checkpoint ck = open_rank_file_set(set);
  if (meta) {
    ck.metadata_sources.insert(ck.metadata_sources.begin(), meta_path);
    check_against_metadata(ck, meta_path, *meta, items_seen);
  }
  for (const auto& item : absent_items)
    ck.incomplete.push_back({"missing-item", Where(join_path(dir, item + "_0.pt")),
                             "metadata.pkl names item '" + item + "', but no rank's file of it is here"});
  return ck;
}

}  // namespace

void install_torch_checkpointing() { install_reader(CheckpointLayout::TorchCheckpointing, &open_torch_checkpointing); }

}  // namespace dcpctl
