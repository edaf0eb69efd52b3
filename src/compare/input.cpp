#include "compare/input.h"

#include "check/megatron_vocab.h"
#include "meta/derived.h"
#include "meta/geometry.h"
#include "meta/readers.h"
#include "pickle/repr.h"
#include "view/model.h"

namespace dcpctl {

std::unique_ptr<Input> open_input(const std::string& path) {
  auto in = std::make_unique<Input>();
  in->path = path;
  OpenOptions o;
  o.compare = true;
  in->ck = open_checkpoint(path, o);
  if (!in->ck.incomplete.empty()) {
    std::string text;
    for (const auto& f : in->ck.incomplete) text += "\n  " + f.text();
    throw FormatError(Where(path), "the checkpoint is incomplete:" + text);
  }
  in->reader = std::make_unique<ItemReader>(in->ck);
  return in;
}

void decode_opaque(Input& in) {
  auto decode = layout_reader(in.ck.layout).decode_opaque;
  if (!decode) return;
  in.reader.reset();  // it reads the checkpoint replaced here
  in.ck = decode(in.ck);
  in.reader = std::make_unique<ItemReader>(in.ck);
}

std::string value_repr(const Input& in, const BytesMeta& b) {
  if (auto it = in.ck.values.find(b.fqn); it != in.ck.values.end()) return it->second;
  std::unique_ptr<pickle::Tree> tree = in.reader->read_bytes(b);
  return pickle::repr(tree->root, 1u << 20);
}

void map_input(Input& in, const std::string& map, const Selection& selection, const std::string& config,
               const std::string& from) {
  ModelRequest rq;
  rq.selection = selection;
  rq.map = map;
  rq.config = config;
  rq.map_from = from;
  rq.fit_map = fit_megatron_vocab;  // a Megatron checkpoint's padded vocabulary, as the exports cut it
  // No view but the map applies to a diff: the model is the map's table over the input.
  Checkpoint table = build_model(in.ck, rq).checkpoint();
  in.ck = std::move(table);
  in.reader = std::make_unique<ItemReader>(in.ck);
  in.map = in.ck.derived->output.map.get();
}

std::vector<SelectedItem> input_items(const Input& in, const Selection& selection) {
  return select_items(in.ck.md, in.map ? Selection{} : selection);
}

void expect_reads(Input& in, const std::vector<const SelectedItem*>& items) {
  std::vector<StorageRef> refs;
  auto add = [&](const TensorMeta& t) { refs.insert(refs.end(), t.storage.begin(), t.storage.end()); };
  for (const SelectedItem* it : items) {
    if (!it->tensor) {
      refs.push_back(in.ck.md.bytes[it->index].storage);
    } else if (const MappedTensor* mt = mapped_tensor(in, in.ck.md.tensors[it->index].fqn)) {
      for (const MapPart& part : mt->parts) add(in.ck.md.tensors[part.tensor]);
    } else {
      add(in.ck.md.tensors[it->index]);
    }
  }
  in.reader->expect(refs);
}

const TensorMeta& input_tensor(const Input& in, const SelectedItem& item) {
  const TensorMeta& t = in.ck.md.tensors[item.index];
  const MappedTensor* mt = item.tensor ? mapped_tensor(in, t.fqn) : nullptr;
  return mt ? mt->meta : t;
}

const MappedTensor* mapped_tensor(const Input& in, const std::string& fqn) {
  return in.ck.derived ? in.ck.derived->parts_of(fqn) : nullptr;
}

namespace {

void require_chunks_tile(const Input& in, const TensorMeta& t) {
  for (size_t i = 0; i < t.num_chunks(); ++i)
    if (!t.storage[i].present() && t.chunk_numel(i) > 0)
      throw FormatError(Where(in.ck.metadata_path, std::nullopt, t.fqn),
                        "chunk " + std::to_string(i) + " has no storage entry");
  Coverage c = check_coverage(t, 1);
  if (c.exact) return;
  std::string why;
  if (c.missing_elements) why = std::to_string(c.missing_elements) + " elements no chunk holds";
  if (c.overlap_elements)
    why += std::string(why.empty() ? "" : ", ") + std::to_string(c.overlap_elements) + " elements held twice";
  if (!c.out_of_bounds.empty()) why += std::string(why.empty() ? "" : ", ") + "a chunk outside the shape";
  throw FormatError(Where(in.ck.metadata_path, std::nullopt, t.fqn), "the chunks do not tile the tensor: " + why);
}

}  // namespace

void require_tiled(const Input& in, const TensorMeta& t) {
  // A key map's output: its parts' tensors (inputs, one of them maybe under the output's own name).
  if (const MappedTensor* mt = mapped_tensor(in, t.fqn)) {
    for (const MapPart& part : mt->parts) require_chunks_tile(in, in.ck.md.tensors[part.tensor]);
    return;
  }
  require_chunks_tile(in, t);
}

}  // namespace dcpctl
