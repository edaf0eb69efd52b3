// The `.metadata` folder: compact records for the objects a large checkpoint's metadata holds
// millions of, built while the pickle is decoded (see pickle::Folder). Internal to metadata.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meta/metadata.h"
#include "pickle/vm.h"

namespace dcpctl::meta_detail {

using pickle::Kind;
using pickle::Value;

// What the Folder and the Mapper share: the model being built, the interned file names and
// transform sets, and the expansion budget. The pickle memo lets one small object be referenced
// many times (a chunk list shared by thousands of keys); copying it out per reference would turn a
// few hundred KB into GBs. In a real writer's file every chunk, dimension and path part costs
// bytes (torch's `.metadata` spends over 10 bytes on each), so everything copied out is charged
// against a budget of twice the input size.
struct Tables {
  Metadata& md;
  uint64_t budget;
  std::unordered_map<std::string, uint32_t> file_ids;

  [[noreturn]] void fail(const std::string& key, const std::string& msg) {
    throw FormatError(Where(md.source, std::nullopt, key), msg);
  }
  void charge(uint64_t n, const std::string& key) {
    if (n > budget)
      fail(key,
           "describes far more elements than a file of this size can hold (objects shared through the "
           "pickle memo and repeated); refusing to expand it");
    budget -= n;
  }
  uint32_t file_index(std::string_view path) {
    auto it = file_ids.find(std::string(path));
    if (it != file_ids.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(md.files.size());
    md.files.emplace_back(path);
    file_ids.emplace(std::string(path), id);
    return id;
  }
  uint32_t transform_set(std::vector<std::string> set) {
    if (set.empty()) return 0;
    for (size_t i = 1; i < md.transform_sets.size(); ++i)
      if (md.transform_sets[i] == set) return static_cast<uint32_t>(i);
    md.transform_sets.push_back(std::move(set));
    return static_cast<uint32_t>(md.transform_sets.size() - 1);
  }
};

// Folds the three classes a large `.metadata` holds millions of into compact records while the
// pickle is decoded (see pickle::Folder): ChunkStorageMetadata, MetadataIndex and _StorageInfo,
// when they look exactly as DCP writes them. Anything else (an extra attribute, a field of an
// unexpected type) is declined and reaches the Mapper as a generic object, which reports it.
// A folded chunk costs 16 bytes of Value plus its dims; a storage entry 32 + 24 + 24 bytes.
class MetadataFolder final : public pickle::Folder {
 public:
  enum Tag : uint32_t { kChunk = 1, kKey, kStorage };
  static constexpr uint32_t kNoOffset = UINT32_MAX;
  struct Key {
    uint32_t fqn;   // index into fqns
    uint32_t nd;    // kNoOffset: offset None (a bytes item)
    uint64_t dims;  // offsets at dims[this, +nd)
    int64_t index;  // -1: None or absent
  };

  explicit MetadataFolder(Tables& tb) : tb_(tb) {}

  std::vector<int64_t> dims;  // chunks: nd, offsets..., sizes...; keys: offsets...
  std::vector<Key> keys;
  std::vector<StorageRef> storage;      // file: index into files; transforms: into transform_sets,
                                        // | kHasTransformField when the attribute was present
  std::deque<std::string> fqns, files;  // stable: the id maps view them
  std::vector<std::vector<std::string>> transform_sets{{}};
  static constexpr uint32_t kHasTransformField = 1u << 31;

  bool fold(const pickle::GlobalRef& cls, const Value& args, const Value& state, Value& out) override {
    if (args.kind != Kind::Tuple || args.len != 0 || state.kind != Kind::Dict) return false;
    if (cls.name == "ChunkStorageMetadata") return chunk(state, out);
    if (cls.name == "MetadataIndex") return key(state, out);
    if (cls.name == "_StorageInfo") return storage_info(state, out);
    return false;
  }

 private:
  static Value ext(Tag tag, uint64_t payload) {
    Value v;
    v.kind = Kind::Ext;
    v.len = tag;
    v.bits = payload;
    return v;
  }
  bool chunk(const Value& st, Value& out);
  bool key(const Value& st, Value& out);
  bool storage_info(const Value& st, Value& out);
  static uint32_t intern(std::deque<std::string>& list, std::unordered_map<std::string_view, uint32_t>& ids,
                         std::string_view s);

  Tables& tb_;
  std::unordered_map<std::string_view, uint32_t> fqn_ids_, file_ids_;
};

}  // namespace dcpctl::meta_detail
