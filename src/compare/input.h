// What diff and stats read: any checkpoint open_checkpoint() opens (every DCP layout, a Hugging
// Face directory, one .safetensors file) or a torch.save file (item/torch_file.h), with a reader
// over it. Incomplete inputs are refused (FormatError, exit 3): a comparison that silently
// skipped a missing shard would be a gate that lies.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "item/item_reader.h"
#include "meta/checkpoint.h"
#include "meta/keymap.h"
#include "meta/select.h"

namespace dcpctl {

struct Input {
  std::string path;
  Checkpoint ck;
  std::map<std::string, std::string> inline_values;  // torch.save files: key -> repr of a non-tensor leaf
  std::unique_ptr<ItemReader> reader;                // reads ck (which therefore never moves)
  std::optional<MappedModel> mapped;                 // --map: its tensors seen through a key map
};

std::unique_ptr<Input> open_input(const std::string& path);

// A non-tensor value as Python would repr it (decoded by the restricted VM, never executed).
std::string value_repr(const Input& in, const BytesMeta& b);

// --map: the input's selected tensors seen through the key map `map` (a name or a file;
// view/model.h builds it), its parameters from `config` or the input's own config.json; `from`
// as apply_key_map's. Throws what build_model throws; `excluded` lists what --exclude left out.
void map_input(Input& in, const std::string& map, const Selection& selection, const std::string& config, const std::string& from = "");
// The selected items: the map's tensors (index: into mapped->tensors) when the input is mapped.
std::vector<SelectedItem> input_items(const Input& in, const Selection& selection);
// Tells the input's reader which of those items will be read (ItemReader::expect): under a map,
// the saved tensors its outputs are made of.
void expect_reads(Input& in, const std::vector<const SelectedItem*>& items);
// The tensor an item of input_items names.
const TensorMeta& input_tensor(const Input& in, const SelectedItem& item);
// The map's tensor whose synthetic meta `t` is, or null for a saved tensor.
const MappedTensor* mapped_tensor(const Input& in, const TensorMeta& t);

// Throws FormatError naming the tensor when its chunks do not tile it exactly (a hole or an
// overlap would make a window's bytes undefined).
void require_tiled(const Input& in, const TensorMeta& t);

}  // namespace dcpctl
