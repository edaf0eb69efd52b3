// Derived tensors: the table of tensors a checkpoint is seen as, once views have rewritten it.
//
// A checkpoint as opened is a table of saved tensors (Metadata::tensors, what `.metadata` or the
// safetensors headers say). A view (src/view/: dequantize, LoRA adapter and merge, and later
// quantize) maps that table to a new one: it drops entries (an fp8 weight's scales), renames them
// (a PEFT adapter's keys), and replaces some with tensors it computes (a dequantized weight, a
// merged weight). Such a computed tensor keeps a TensorMeta in the new table like any other (its
// name, dtype, shape, and chunks that follow one saved tensor's chunks, so the planner cuts and
// deals it as it would that tensor) and is registered here with how to read any byte range of
// any of its chunks and what that read holds in memory. Readers and planners never ask which view
// made it: the item reader hands a derived tensor's reads to its DerivedTensor
// (item/item_reader.h), the memory model adds its working_bytes (plan/memory.h).
//
// Views compose: a derived tensor reads its inputs (TensorMeta as they are in the table it was
// made from) through a reader of that table, so a merged weight can be read from a dequantized
// base, a quantized one from a merged weight. Every table is complete: a view that keeps or
// renames a derived tensor of the table below carries its entry (the tensor and the table its
// inputs are in) under the new name, so one lookup in the newest table finds every derived tensor
// of the model, and anything it does not find is a saved tensor, read by its storage.
//
// This header is the table's interface only: what each view computes is in src/view/.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/geometry.h"
#include "meta/metadata.h"
#include "util/error.h"

namespace dcpctl {

struct DerivedTable;
struct Codec;        // meta/codecs/codecs.h
class ElementBound;  // view/codecs/bound.h
struct MappedModel;  // view/maps/keymap.h
struct MappedTensor;

// What a derived tensor reads its inputs through: the tensors of the table below it, saved or
// derived (the item reader implements it for every level).
class TensorReads {
 public:
  // Bytes [from, from + n) of the dense chunk `chunk` of `t` (n = UINT64_MAX: to its end), `t` as
  // the table below the caller has it.
  virtual void read(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, void* dst) const = 0;
  // A whole tensor of that table, assembled from its chunks (a scale, an adapter's A and B).
  virtual std::vector<uint8_t> read_whole(const TensorMeta& t) const = 0;

 protected:
  ~TensorReads() = default;
};

class DerivedTensor {
 public:
  virtual ~DerivedTensor() = default;
  // The saved tensor whose chunks this one follows chunk for chunk (what describing a chunk
  // checks, and what messages name).
  virtual const TensorMeta& follows() const = 0;
  // Bytes [from, from + n) of the dense chunk `chunk` of this tensor as its table has it (n =
  // UINT64_MAX: to its end). `below` reads its inputs.
  virtual void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const = 0;
  // What one read of chunk `chunk` holds besides the caller's buffer: its inputs as read (a chunk
  // of the saved weight, whole scales, A and B) and the float32 working copies it computes in; not
  // what reading an input holds in the table below (DerivedTable::working_bytes adds that).
  virtual uint64_t working_bytes(size_t chunk) const = 0;
  // The tensors of the table below whose reads a read of this one makes while it holds its
  // working_bytes: follows() by default (the weight a dequantized, merged or quantized tensor is
  // computed from); every part's tensor for a mapped one. Those read whole (a scale, an adapter's
  // A and B) need not be named where the table below never computes them.
  virtual std::vector<const TensorMeta*> inputs() const { return {&follows()}; }
};

// What the views leave for a writer and the planner, carried up through every table above them.
struct ViewOutput {
  // --lora adapter: adapter_config.json as written.
  std::optional<nlohmann::json> adapter_config;
  // --dtype dequantized quantized weights: an HF config loses its quantization_config.
  bool dequantized = false;
  // --dtype dequantized quantized weights: each decoded weight's codec and error bound (null: none
  // implemented for its format), by its name in the dequantize view: what diff's audit of an
  // export holds its values to (compare/export_bound.h).
  struct Decoded {
    const Codec* codec = nullptr;
    std::shared_ptr<const ElementBound> bound;
  };
  std::map<std::string, Decoded> decoded;
  // --quantize: config.json's quantization_config as written.
  std::optional<nlohmann::json> quantization_config;
  // --quantize: further files written beside config.json (name, text): ModelOpt's hf_quant_config.json.
  std::vector<std::pair<std::string, std::string>> quantization_files;
  // --quantize: the keys --dtype must not cast (the quantized weights and their scales).
  std::vector<std::string> keep_dtype;
  // --map: the key map as applied (view/maps/map_view.h): what it made, left out, dropped and ties,
  // for the summary and diff's audit.
  std::shared_ptr<const MappedModel> map;
};

struct DerivedTable {
  struct Entry {
    std::shared_ptr<const DerivedTensor> tensor;
    std::shared_ptr<const DerivedTable> inputs;  // the table its inputs are in; null: the saved tensors
  };
  std::unordered_map<std::string, Entry> tensors;  // by name in this table
  // What each view applied says of itself (--json's "dequantized", "lora", "quantized"), by the
  // view's name: printed, never read back to decide.
  nlohmann::json views = nlohmann::json::object();
  // What the views leave for a writer and the planner.
  ViewOutput output;
  // A key map's table that holds its inputs (view/maps/map_view.h): each output's parts of this
  // table's tensors, by the output's name, pointing into output.map. The planner plans such a
  // tensor's records from its parts, and a window reader reads it so (item/window.h). Not
  // carried by table_over: a view over the map reads its outputs as tensors.
  std::unordered_map<std::string, const MappedTensor*> parts;

  // The entry of the derived tensor named `fqn`; null for a saved tensor.
  const Entry* find(const std::string& fqn) const;
  // The parts of the key map's output named `fqn` (see `parts`); null for any other tensor.
  const MappedTensor* parts_of(const std::string& fqn) const;
  // The most one read of chunk `chunk` of `t` (a tensor of this table) holds: 0 for a saved tensor;
  // for a derived one its own working_bytes and, on top, the most a read of any chunk of one of its
  // inputs() holds in the table below (a view over a view: the quantized weight over a mapped or
  // merged one, the merged weight over a dequantized base), level by level down to the saved table.
  uint64_t working_bytes(const TensorMeta& t, size_t chunk) const;
  bool empty() const { return tensors.empty() && views.empty(); }
};

// A new table over `below` (null: the saved tensors) that carries every entry of `below`, for a
// view to add to: `rename` gives each carried entry's name in the new table ("" drops it; null:
// the same names).
std::shared_ptr<DerivedTable> table_over(const std::shared_ptr<const DerivedTable>& below,
                                         const std::function<std::string(const std::string&)>& rename = nullptr);

// The range [from, from + n) of `label` (a chunk, a scale), `bytes` long, checked (n = UINT64_MAX:
// to its end): one past its end is a FormatError at `where`. Returns n.
uint64_t checked_range(const Where& where, const std::string& label, uint64_t bytes, uint64_t from, uint64_t n);

// Bytes [from, from + n) of something a derived tensor computes whole (`bytes` long; `compute`
// writes all of it): into dst when the whole is asked, else into a copy of its own, from which the
// range is copied. The range is checked as checked_range does.
void read_part(const Where& where, const std::string& label, uint64_t bytes, uint64_t from, uint64_t n, void* dst,
               const std::function<void(uint8_t*)>& compute);

// Box `box` of `t` (a tensor of the table `below` reads), dense in C order in t's dtype: each chunk
// that meets it read in place where its part is one run of the chunk (an FSDP dim-0 shard), else
// read whole and its part copied (one expert of a stack, the rows of a split weight).
std::vector<uint8_t> read_box(const TensorReads& below, const TensorMeta& t, const Box& box);

}  // namespace dcpctl
