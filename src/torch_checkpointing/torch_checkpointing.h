// torch_checkpointing's metadata.pkl as the reader uses it (torch_checkpointing.cpp reads it,
// tc_safetensors.cpp places the safetensors layout's local shards by it). Internal to the module.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "item/dtensor_slices.h"
#include "meta/checkpoint.h"
#include "pickle/tree.h"

namespace dcpctl::tc {

// Where one rank wrote one item: LayoutInfo{file_path, serialization_format}. Absent (nullopt in
// rank_to_layout_info) means the default layout, <item>_<rank>.pt.
struct FileLayout {
  std::string file_path;  // relative to the checkpoint folder; {rank} already filled in
  std::string type;  // "TorchSerialization", "SafetensorsSerialization", "JsonSerialization", "RawSerialization", ...
};

// One group of ranks that agree on a tensor's sharding (DTensorShardingMetadata).
struct ShardGroup {
  std::vector<int> ranks;
  std::vector<int64_t> mesh_shape, mesh_data;
  std::vector<MeshPlacement> placements;
  std::string placements_text;
};

struct Tensor {
  std::string item;
  std::vector<int64_t> shape;
  std::string dtype;               // "float32"
  std::vector<ShardGroup> groups;  // empty: sharding metadata of another type (not placed)
};

struct Metadata {
  std::string path;
  int world = 0;
  std::set<std::string> items;
  std::map<std::string, std::map<int, std::optional<FileLayout>>> layouts;  // item -> rank -> layout
  std::vector<std::string> order;         // `<item>.<flattened key>` in metadata.pkl's order
  std::map<std::string, Tensor> tensors;  // by `<item>.<flattened key>`
  // The layout type of an item when any rank has a layout that is not the default; "" otherwise.
  std::string item_layout(const std::string& item) const;
};

Metadata read_metadata(const std::string& path);

// Adds `item`, saved in the SafetensorsSerialization layout, to `ck`: each rank's file (from
// metadata.pkl's rank_to_layout_info) appended to ck.md.files, each tensor's local shards placed
// by its sharding metadata (dtensor_slices.h). What is missing or disagrees is a finding in
// ck.incomplete. ck.files is left for the caller to stat (meta_detail::stat_data_files).
void add_safetensors_item(Checkpoint& ck, const Metadata& md, const std::string& item);

// A relative path inside the checkpoint folder (no "..", not absolute); FormatError otherwise.
void check_inside(const std::string& rel, const Where& where);

}  // namespace dcpctl::tc

namespace dcpctl {

struct Probe;
// The readers' table's torch-checkpointing row (meta/readers.h): a folder's items and ranks.
Checkpoint open_torch_checkpointing(const Probe& p);

}  // namespace dcpctl
