// The typed model of a DCP checkpoint's `.metadata`, mapped from the pickle tree.
//
// `.metadata` is `pickle.dump(Metadata)` (see shared/docs/dcp-format.md §1):
//   Metadata.__dict__ = {state_dict_metadata: {fqn: TensorStorageMetadata | BytesStorageMetadata},
//                        planner_data: {fqn: (path, elems)} | None,
//                        storage_data: {MetadataIndex(fqn, offset, index): _StorageInfo},
//                        storage_meta: StorageMeta | None    (2.4+),
//                        version: "1.0.0"                    (2.9+)}
//   TensorStorageMetadata.__dict__ = {properties: TensorProperties, size: torch.Size,
//                                     chunks: [ChunkStorageMetadata(offsets, sizes)]}
//   TensorProperties: BUILD with the 5-tuple (dtype, layout, requires_grad, memory_format,
//                     pin_memory) from __getstate__; an older dict state is accepted too.
//   _StorageInfo.__dict__ = {relative_path, offset, length, transform_descriptors? (2.7+)}
// Class paths differ by release (1.13 used torch.distributed._shard.checkpoint.*; TensorProperties
// lived in _shard.sharded_tensor.metadata up to 2.2); any module path is accepted as long as the
// class name and fields match. Unknown attributes are kept as names (extra_attributes) and unknown
// globals are listed (unknown_globals), never executed and never fatal unless a needed field is
// missing or has the wrong shape.
//
// Memory: chunk geometry is packed per tensor (offsets and sizes in one int64 array), storage
// references are 24 bytes per chunk, so 5 million chunks cost a few hundred MB. Objects the
// pickle shares through its memo (one chunk list under many keys) are copied out per use, so the
// elements copied out are capped at about twice the file size (FormatError beyond): a small
// hostile file cannot expand into gigabytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "util/dtype.h"
#include "util/finding.h"
#include "util/span_reader.h"

namespace dcpctl {

// How an item's bytes encode it.
enum class ItemFormat : uint8_t {
  TorchSave,  // a torch.save zip (DCP's default SerializationFormat.TORCH_SAVE; bytes items)
  Raw,        // the chunk's elements themselves, dense C order, little-endian: a tensor inside a
              // safetensors file or blob (HF-mode DCP, SerializationFormat.SAFETENSORS)
};

// Where one chunk's (or bytes item's) bytes live. 24 bytes: a model holds one per chunk (5 million
// in a large run's `.metadata`, all of them pages touched for the first time while it is parsed).
struct StorageRef {
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr uint32_t kMaxTransformSets = 1u << 24;  // transforms' range (refused beyond)
  uint32_t file = kNone;                                   // index into Metadata::files; kNone: no storage_data entry
  uint32_t transforms : 24;                                // index into Metadata::transform_sets; 0 = no transforms
  ItemFormat format : 8;
  uint64_t offset = 0;
  uint64_t length = 0;
  StorageRef() : transforms(0), format(ItemFormat::TorchSave) {}
  bool present() const { return file != kNone; }
};
static_assert(sizeof(StorageRef) == 24, "one per chunk");

struct TensorMeta {
  std::string fqn;
  std::string dtype_name;      // as pickled ("float32"); kept even when unknown to us
  std::optional<DType> dtype;  // nullopt: a dtype this version does not know
  bool requires_grad = false;
  // Its TensorProperties carry a sixth value, the strides (torch >= 2.15; older torch cannot
  // unpickle such a `.metadata`: "too many values to unpack (expected 5)").
  bool strides_recorded = false;
  std::vector<int64_t> shape;
  std::vector<int64_t> chunk_dims;  // chunk i: offsets at [2*i*nd, +nd), sizes at [(2*i+1)*nd, +nd)
  std::vector<StorageRef> storage;  // parallel to the chunks

  size_t ndim() const { return shape.size(); }
  size_t num_chunks() const { return storage.size(); }
  const int64_t* chunk_offsets(size_t i) const { return chunk_dims.data() + 2 * i * ndim(); }
  const int64_t* chunk_sizes(size_t i) const { return chunk_dims.data() + (2 * i + 1) * ndim(); }
  uint64_t numel() const;
  uint64_t chunk_numel(size_t i) const;
  uint64_t nbytes() const;  // 0 when the dtype is unknown
};

struct BytesMeta {
  std::string fqn;
  StorageRef storage;
};

// One element of a planner_data path: a dict key or a list index.
struct PathElem {
  bool is_index = false;
  std::string key;
  int64_t index = 0;
};

struct StorageMetaInfo {
  std::optional<std::string> checkpoint_id, save_id, load_id;
  std::vector<std::string> modules;
};

struct Metadata {
  std::string source;  // path of the .metadata file, for messages
  int pickle_protocol = 0;
  std::vector<TensorMeta> tensors;  // in state_dict_metadata order
  std::vector<BytesMeta> bytes;     // in state_dict_metadata order
  // Every item in state_dict_metadata order: {is_tensor, index into tensors or bytes}.
  std::vector<std::pair<bool, uint32_t>> order;
  std::vector<std::string> files;                            // relative paths named by storage_data
  std::vector<std::vector<std::string>> transform_sets{{}};  // [0] is "none"

  bool has_planner_data = false;
  std::map<std::string, std::vector<PathElem>> planner_data;
  std::optional<StorageMetaInfo> storage_meta;
  bool has_storage_meta_field = false;
  std::optional<std::string> version;
  bool has_version_field = false;
  bool has_transform_field = false;
  std::string metadata_class;                 // "torch.distributed.checkpoint.metadata.Metadata"
  std::string properties_class;               // module.name of TensorProperties
  std::vector<std::string> globals;           // every global the pickle named
  std::vector<std::string> unknown_globals;   // those outside the set DCP writers use
  std::vector<std::string> extra_attributes;  // Metadata attributes beyond the known fields
  Findings problems;                          // non-fatal: orphan or duplicate storage entries, missing entries

  // Which torch releases could have written this file, from the classes and fields present.
  std::string writer_releases() const;
  // Tensors whose TensorProperties record strides (torch >= 2.15 writes them for every tensor).
  size_t strided_tensors() const;
  // The oldest torch release whose DCP reader can load this file, with the reason (what sets that
  // bound). Bounds that follow from the classes the pickle names, the fields only some releases
  // read and the transforms its items need; there is no upper bound (newer torch reads them all).
  struct LoaderBound {
    std::string release;  // "2.15", "2.7", ...; empty when nothing narrows it
    std::string reason;
  };
  LoaderBound oldest_loader() const;
  const TensorMeta* find_tensor(const std::string& fqn) const;
};

// What parsing one `.metadata` cost (steady clock).
struct MetadataParseStats {
  uint64_t bytes = 0;         // the pickle's size: every byte is read (twice: see pickle/vm.h)
  double scan_seconds = 0;    // VM pass 1
  double decode_seconds = 0;  // VM pass 2, folding included
  double map_seconds = 0;     // the tree mapped to the model
  unsigned parses = 0;        // 2 when attaching storage entries while decoding did not hold
  // Objects folded from a byte template, folded read opcode by opcode, and read by the flat path
  // but declined by the folder (pickle::ParseStats).
  uint64_t flat_template = 0, flat_generic = 0, flat_declined = 0;
  uint64_t scan_templated = 0;  // of the last parse: pickle::ParseStats
  uint64_t memo_kept = 0;
  double total_seconds() const { return scan_seconds + decode_seconds + map_seconds; }
};

struct MetadataParseOptions {
  // Told as the parser finishes with the input (see pickle::ParseOptions::consumed).
  std::function<void(uint64_t)> consumed;
  // Fold chunks and storage entries into compact records while decoding (see MetadataFolder in
  // metadata.cpp). Off only to check that both paths build the same model.
  bool fold = true;
  // Write storage entries into their tensors while decoding, when the Mapper can tell that this is
  // what reading storage_data would do (else the file is parsed again without). Off only to check
  // that both build the same model.
  bool attach = true;
  // The VM's byte templates (pickle::ParseOptions::byte_templates). Off only to check that both
  // read the same.
  bool byte_templates = true;
  MetadataParseStats* stats = nullptr;  // filled in when set (both parses together)
};

// Parses `.metadata` bytes. Throws FormatError (malformed) or UnsupportedError.
Metadata parse_metadata(ByteSpan bytes, const std::string& source, const MetadataParseOptions& options = {});

}  // namespace dcpctl
