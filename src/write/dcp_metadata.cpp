#include "write/dcp_metadata.h"

#include <random>

#include "pickle/pickler.h"

namespace dcpctl {
namespace {

constexpr const char* kMeta = "torch.distributed.checkpoint.metadata";

void new_object(Pickler& p, const char* module, const char* cls) {
  p.global(module, cls);
  p.empty_tuple();
  p.newobj();
}

void size_obj(Pickler& p, const std::vector<int64_t>& dims) {
  p.global("torch", "Size");
  if (dims.size() <= 3) {
    for (int64_t d : dims) p.integer(d);
    p.tuple(dims.size());
  } else {
    p.mark();
    for (int64_t d : dims) p.integer(d);
    p.tuple_from_mark();
  }
  p.tuple(1);
  p.reduce();
}

void tensor_md(Pickler& p, const MetaTensorOut& t) {
  new_object(p, kMeta, "TensorStorageMetadata");
  p.empty_dict();
  p.mark();
  p.str("properties", true);
  new_object(p, kMeta, "TensorProperties");
  p.mark();
  p.global("torch", t.dtype_name);
  p.global("torch.serialization", "_get_layout");
  p.str("torch.strided", true);
  p.tuple(1);
  p.reduce();
  p.boolean(t.requires_grad);
  p.global(kMeta, "_MEM_FORMAT_ENCODING");
  p.integer(0);
  p.tuple(1);
  p.reduce();
  p.boolean(false);  // pin_memory
  p.tuple_from_mark();
  p.build();
  p.str("size", true);
  size_obj(p, t.shape);
  p.str("chunks", true);
  p.empty_list();
  for (size_t i = 0; i < t.chunks.size(); i += 1000) {
    p.mark();
    for (size_t c = i; c < t.chunks.size() && c < i + 1000; ++c) {
      new_object(p, kMeta, "ChunkStorageMetadata");
      p.empty_dict();
      p.mark();
      p.str("offsets", true);
      size_obj(p, t.chunks[c].offsets);
      p.str("sizes", true);
      size_obj(p, t.chunks[c].sizes);
      p.setitems();
      p.build();
    }
    p.appends();
  }
  p.setitems();
  p.build();
}

void storage_info(Pickler& p, const std::string& file, uint64_t offset, uint64_t length,
                  const std::vector<std::string>* transforms) {
  new_object(p, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
  p.empty_dict();
  p.mark();
  p.str("relative_path", true);
  p.str(file, true);
  p.str("offset", true);
  p.integer(static_cast<int64_t>(offset));
  p.str("length", true);
  p.integer(static_cast<int64_t>(length));
  if (transforms && !transforms->empty()) {
    p.str("transform_descriptors", true);
    p.empty_list();
    p.mark();
    for (const auto& t : *transforms) p.str(t, true);
    p.appends();
  }
  p.setitems();
  p.build();
}

}  // namespace

std::string uuid4() {
  std::random_device rd;
  std::mt19937_64 g((static_cast<uint64_t>(rd()) << 32) ^ rd());
  uint64_t a = g(), b = g();
  a = (a & 0xFFFFFFFFFFFF0FFFull) | 0x0000000000004000ull;  // version 4
  b = (b & 0x3FFFFFFFFFFFFFFFull) | 0x8000000000000000ull;  // variant 10
  char s[40];
  std::snprintf(s, sizeof s, "%08llx-%04llx-%04llx-%04llx-%012llx", static_cast<unsigned long long>(a >> 32),
                static_cast<unsigned long long>((a >> 16) & 0xFFFF), static_cast<unsigned long long>(a & 0xFFFF),
                static_cast<unsigned long long>(b >> 48), static_cast<unsigned long long>(b & 0xFFFFFFFFFFFFull));
  return s;
}

namespace {

// Metadata.state_dict_metadata: each key's TensorStorageMetadata or BytesStorageMetadata.
void state_dict_metadata(Pickler& p, const MetadataOut& md) {
  p.str("state_dict_metadata", true);
  p.empty_dict();
  for (size_t i = 0; i < md.order.size(); i += 1000) {
    p.mark();
    for (size_t k = i; k < md.order.size() && k < i + 1000; ++k) {
      auto [is_tensor, idx] = md.order[k];
      if (is_tensor) {
        p.str(md.tensors[idx].fqn, true);
        tensor_md(p, md.tensors[idx]);
      } else {
        p.str(md.bytes[idx].fqn, true);
        new_object(p, kMeta, "BytesStorageMetadata");
      }
    }
    p.setitems();
  }
}

// Metadata.planner_data: each key's path in the state dict, a tuple of keys and indices.
void planner_data(Pickler& p, const MetadataOut& md) {
  p.str("planner_data", true);
  p.empty_dict();
  if (md.planner_data.empty()) return;
  p.mark();
  size_t n = 0;
  for (const auto& [key, path] : md.planner_data) {
    p.str(key, true);
    auto elem = [&](const PathElem& e) {
      if (e.is_index)
        p.integer(e.index);
      else
        p.str(e.key, true);
    };
    if (path.size() <= 3) {
      for (const auto& e : path) elem(e);
      p.tuple(path.size());
    } else {
      p.mark();
      for (const auto& e : path) elem(e);
      p.tuple_from_mark();
    }
    if (++n % 1000 == 0) {
      p.setitems();
      p.mark();
    }
  }
  p.setitems();
}

// A MetadataIndex(fqn, offset, index): a tensor's chunk (`chunk` set) or a bytes item.
void metadata_index(Pickler& p, const std::string& fqn, const std::vector<int64_t>* offsets,
                    std::optional<size_t> chunk) {
  new_object(p, kMeta, "MetadataIndex");
  p.empty_dict();
  p.mark();
  p.str("fqn", true);
  p.str(fqn, true);
  p.str("index", true);
  if (chunk) {
    p.integer(static_cast<int64_t>(*chunk));
    p.str("offset", true);
    size_obj(p, *offsets);
  } else {
    p.none();
  }
  p.setitems();
  p.build();
}

// Metadata.storage_data: each chunk's and bytes item's MetadataIndex -> _StorageInfo.
void storage_data(Pickler& p, const MetadataOut& md) {
  p.str("storage_data", true);
  p.empty_dict();
  size_t entries = 0;
  p.mark();
  auto flush = [&] {
    if (++entries % 1000 == 0) {
      p.setitems();
      p.mark();
    }
  };
  for (auto [is_tensor, idx] : md.order) {
    if (is_tensor) {
      const MetaTensorOut& t = md.tensors[idx];
      for (size_t c = 0; c < t.chunks.size(); ++c) {
        metadata_index(p, t.fqn, &t.chunks[c].offsets, c);
        storage_info(p, md.files[t.chunks[c].file], t.chunks[c].offset, t.chunks[c].length, &t.chunks[c].transforms);
        flush();
      }
    } else {
      const MetaBytesOut& b = md.bytes[idx];
      metadata_index(p, b.fqn, nullptr, std::nullopt);
      storage_info(p, md.files[b.file], b.offset, b.length, &b.transforms);
      flush();
    }
  }
  p.setitems();
}

// Metadata.storage_meta: a StorageMeta(checkpoint_id, save_id, load_id, modules).
void storage_meta(Pickler& p, const MetadataOut& md) {
  p.str("storage_meta", true);
  new_object(p, kMeta, "StorageMeta");
  p.empty_dict();
  p.mark();
  p.str("checkpoint_id", true);
  if (md.checkpoint_id)
    p.str(*md.checkpoint_id);
  else
    p.none();
  p.str("save_id", true);
  p.str(md.save_id);
  p.str("load_id", true);
  p.none();
  p.str("modules", true);
  p.empty_list();
  if (!md.modules.empty()) {
    p.mark();
    for (const auto& m : md.modules) p.str(m, true);
    p.appends();
  }
  p.setitems();
  p.build();
}

}  // namespace

std::string metadata_pickle(const MetadataOut& md) {
  Pickler p(4);
  new_object(p, kMeta, "Metadata");
  p.empty_dict();
  p.mark();
  state_dict_metadata(p, md);
  planner_data(p, md);
  storage_data(p, md);
  storage_meta(p, md);
  p.str("version", true);
  p.str("1.0.0");
  p.setitems();
  p.build();
  p.stop();
  return p.take();
}

}  // namespace dcpctl
