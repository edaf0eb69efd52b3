// Writing a DCP `.metadata` pickle that real torch (2.4 through the pinned release) loads.
//
// The shape follows shared/docs/dcp-format.md §6 and what torch 2.14 itself writes (see
// tests/fixtures/FORMAT_NOTES.md): pickle protocol 4; classes from
// torch.distributed.checkpoint.metadata (Metadata, TensorStorageMetadata, TensorProperties,
// ChunkStorageMetadata, BytesStorageMetadata, MetadataIndex, StorageMeta, _MEM_FORMAT_ENCODING)
// and torch.distributed.checkpoint.filesystem._StorageInfo; dataclasses as NEWOBJ + BUILD(dict);
// TensorProperties as BUILD with the 5-tuple (dtype, layout, requires_grad, memory format 0,
// pin_memory) its __setstate__ takes; torch.Size as REDUCE(torch.Size, (dims,)); MetadataIndex
// for bytes items without an offset; storage_meta with plain strings (no pathlib objects, which
// older Pythons cannot unpickle); version "1.0.0".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meta/metadata.h"

namespace dcpctl {

struct MetaChunkOut {
  std::vector<int64_t> offsets, sizes;
  uint32_t file = 0;
  uint64_t offset = 0, length = 0;
  std::vector<std::string> transforms;  // _StorageInfo.transform_descriptors (2.7+; empty: none)
};

struct MetaTensorOut {
  std::string fqn;
  std::string dtype_name;  // torch name: "bfloat16"
  bool requires_grad = false;
  std::vector<int64_t> shape;
  std::vector<MetaChunkOut> chunks;
};

struct MetaBytesOut {
  std::string fqn;
  uint32_t file = 0;
  uint64_t offset = 0, length = 0;
  std::vector<std::string> transforms;
};

struct MetadataOut {
  std::vector<std::pair<bool, uint32_t>> order;  // {is_tensor, index}, state_dict_metadata order
  std::vector<MetaTensorOut> tensors;
  std::vector<MetaBytesOut> bytes;
  std::vector<std::string> files;  // relative paths
  std::map<std::string, std::vector<PathElem>> planner_data;
  std::optional<std::string> checkpoint_id;
  std::string save_id;
  std::vector<std::string> modules;  // StorageMeta.modules
};

std::string metadata_pickle(const MetadataOut& md);

// A random uuid4 in its canonical text form (what DCP uses for save ids).
std::string uuid4();

}  // namespace dcpctl
