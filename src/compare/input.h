// What diff and stats read: any checkpoint open_checkpoint() opens for a comparison (every
// layout of the readers' table, meta/readers.h, the torch.save row included), with a reader over
// it. Incomplete inputs are refused (FormatError, exit 3): a comparison that silently skipped a
// missing shard would be a gate that lies.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "item/item_reader.h"
#include "meta/checkpoint.h"
#include "meta/select.h"
#include "view/maps/keymap.h"

namespace dcpctl {

struct Input {
  std::string path;
  Checkpoint ck;
  std::unique_ptr<ItemReader> reader;  // reads ck (which therefore never moves)
  // --map: ck is the key map's table (view/maps/map_view.h), its outputs the items, the selection
  // applied; null otherwise.
  const MappedModel* map = nullptr;
};

std::unique_ptr<Input> open_input(const std::string& path);

// `in` with the opaque types its layout's module decodes (a GGUF's block types: meta/readers.h's
// decode_opaque) read as the float32 values they decode to; unchanged for any other layout. diff of
// two such files and stats read them so.
void decode_opaque(Input& in);

// A non-tensor value as Python would repr it (decoded by the restricted VM, never executed).
std::string value_repr(const Input& in, const BytesMeta& b);

// --map: the input becomes the model view/model.h builds with the key map `map` (a name or a
// file), its parameters from `config` or the input's own config.json, `from` as apply_key_map's:
// the map's table, whose outputs its reader reads from their parts. Throws what build_model
// throws, leaving the input as it was; `excluded` lists what --exclude left out.
void map_input(Input& in, const std::string& map, const Selection& selection, const std::string& config,
               const std::string& from = "");
// The selected items (a mapped input's: every output of the map, which applied the selection).
std::vector<SelectedItem> input_items(const Input& in, const Selection& selection);
// Tells the input's reader which of those items will be read (ItemReader::expect): a key map's
// output, the tensors it is made of.
void expect_reads(Input& in, const std::vector<const SelectedItem*>& items);
// The tensor an item of input_items names (a key map's output: the map's meta of it).
const TensorMeta& input_tensor(const Input& in, const SelectedItem& item);
// The key map's output named `fqn` (meta/derived.h's DerivedTable::parts), or null.
const MappedTensor* mapped_tensor(const Input& in, const std::string& fqn);

// Throws FormatError naming the tensor when its chunks do not tile it exactly (a hole or an
// overlap would make a window's bytes undefined).
void require_tiled(const Input& in, const TensorMeta& t);

}  // namespace dcpctl
