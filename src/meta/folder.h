// The `.metadata` folder: compact records for the objects a large checkpoint's metadata holds
// millions of, built while the pickle is decoded (see pickle::Folder). Internal to metadata.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "meta/metadata.h"
#include "pickle/vm.h"

namespace dcpctl::meta_detail {

using pickle::Kind;
using pickle::Value;

// The attribute dict of an object (BUILD state, or the dict of a (dict, slots) state from
// __getstate__); null for anything else.
const Value* state_dict(const Value& obj);

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
    if (md.transform_sets.size() >= StorageRef::kMaxTransformSets)
      throw UnsupportedError(Where(md.source), "more than " + std::to_string(StorageRef::kMaxTransformSets - 1) +
                                                   " distinct sets of transform descriptors");
    md.transform_sets.push_back(std::move(set));
    return static_cast<uint32_t>(md.transform_sets.size() - 1);
  }
};

// TensorProperties as the Mapper reads it: an object whose state is the tuple of __getstate__
// (dtype first, requires_grad third; torch >= 2.15 appends the strides as a sixth value), an older
// attribute dict, or a bare tuple. Fills t.dtype_name, t.requires_grad and t.strides_recorded.
// False: no dtype.
bool read_properties(const Value& props, TensorMeta& t);

// n bytes at a and b are equal: word loads, inlined (memcmp is a library call, and the strings
// compared here are short: names, paths, keys).
inline bool same_bytes(const char* a, const char* b, size_t n) {
  auto load8 = [](const char* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
  };
  auto load4 = [](const char* p) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    return w;
  };
  if (n >= 8) {
    for (size_t i = 0; i + 8 <= n; i += 8)
      if (load8(a + i) != load8(b + i)) return false;
    return load8(a + n - 8) == load8(b + n - 8);
  }
  if (n >= 4) return load4(a) == load4(b) && load4(a + n - 4) == load4(b + n - 4);
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}
inline bool same_str(std::string_view a, std::string_view b) {
  return a.size() == b.size() && same_bytes(a.data(), b.data(), a.size());
}

// A short string hash for the interning tables (std::hash of a string_view is a library call
// that dominates when millions of keys are interned).
struct StrHash {
  size_t operator()(std::string_view s) const noexcept {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
    const char* p = s.data();
    size_t n = s.size();
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      h = (h ^ w) * 0xff51afd7ed558ccdull;
      h ^= h >> 32;
    }
    uint64_t w = 0;
    if (n) std::memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// A vector of trivially copyable records that grows by realloc (for a large block, glibc moves the
// pages with mremap instead of copying them, and the old block is never resident beside the new)
// and whose appends leave the new slots for the caller to write (std::vector::resize zero-fills
// them first, out of line).
template <typename T>
class RecordVec {
  static_assert(std::is_trivially_copyable<T>::value, "records are moved with realloc");

 public:
  RecordVec() = default;
  RecordVec(const RecordVec&) = delete;
  RecordVec& operator=(const RecordVec&) = delete;
  ~RecordVec() { std::free(p_); }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  size_t capacity() const { return cap_; }
  const T& operator[](size_t i) const { return p_[i]; }
  // n more slots at the end, not initialised.
  T* append(size_t n) {
    if (cap_ - n_ < n) grow(n_ + n);
    T* at = p_ + n_;
    n_ += n;
    return at;
  }
  void push_back(const T& v) { *append(1) = v; }
  void truncate(size_t n) { n_ = n < n_ ? n : n_; }
  void reserve(size_t n) {
    if (n > cap_) resize_block(n);
  }

 private:
  void grow(size_t need) { resize_block(std::max(need, cap_ < 64 ? size_t{64} : 2 * cap_)); }
  void resize_block(size_t cap) {
    if (cap > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    void* q = std::realloc(p_, cap * sizeof(T));
    if (!q) throw std::bad_alloc();
    p_ = static_cast<T*>(q);
    cap_ = cap;
  }
  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

// Folds the objects a large `.metadata` holds millions of into compact records while the pickle
// is decoded (see pickle::Folder), when they look exactly as DCP writes them:
//   ChunkStorageMetadata  -> kChunk: nd, offsets, sizes in `dims`
//   MetadataIndex         -> kKey: a Key (interned fqn, index, offsets in `dims`)
//   _StorageInfo          -> kStorage: a Stored (interned file, transforms, offset, length)
//   TensorStorageMetadata -> kTensor: a finished TensorMeta (all but its fqn and storage), its
//                            chunks' dims moved out of `dims` (and given back when they were the
//                            last records made)
// and the pairs of a dict, when each is (kKey i, kStorage i) with i counting up, into one kRun
// pair (first i, count) standing for all of them in order: storage_data then costs nothing per
// entry beyond its two records. Anything else (an extra attribute, a field of an unexpected type,
// a class another module path also used) is declined and reaches the Mapper as a generic object,
// which reads it (or reports it) as before. A folded value may be copied (DUP, memo) like any
// other: records are never changed once made, and the dims of a tensor's chunks are given back
// only when no chunk value of it was ever copied.
// Cost per chunk: its offsets and sizes in its tensor's chunk_dims, and per storage entry 16 + 24
// bytes of records plus its offsets.
//
// Attaching (`attach`): a storage pair whose key names a folded tensor (by the name a dict pair
// (str, kTensor) gave it), with offsets equal to those of the chunk its index names, no transforms,
// and a chunk slot still empty, is written straight into that tensor's storage vector (the
// StorageRef the Mapper would write, its file an index into `files`), its key and storage records
// are given back at once, and the pair becomes (or extends) a kAttached run pair. What the Mapper
// would have done with those pairs is then nothing but that write, provided the dict it reads as
// storage_data holds every attached run exactly once, each tensor written to was moved (not
// copied) into the model under the same name, and no other storage entry targets such a tensor;
// the Mapper checks all three, and when one fails the whole parse is done again without
// attaching (parse_metadata). A 5-million-chunk storage_data then costs no records at all.
class MetadataFolder final : public pickle::Folder {
 public:
  enum Tag : uint32_t { kChunk = 1, kKey, kStorage, kTensor, kRun, kAttached, kTags };
  static constexpr uint32_t kNoOffset = 255;  // Key::nd of a key whose offset is None
  static constexpr uint32_t kNoIndex = UINT32_MAX;
  struct Key {
    uint32_t fqn;     // index into fqns
    uint32_t index;   // kNoIndex: None, negative or absent
    uint64_t packed;  // offsets at dims[packed >> 8, + nd), nd = packed & 0xff (kNoOffset: None)
    uint32_t nd() const { return static_cast<uint32_t>(packed & 0xff); }
    uint64_t dims_at() const { return packed >> 8; }
  };
  struct Stored {
    uint32_t file;        // index into files
    uint32_t transforms;  // index into transform_sets | kHasTransformField when the attribute was there
    uint64_t offset, length;
  };
  static constexpr uint32_t kNoName = UINT32_MAX;         // named_: no tensor of that name yet
  static constexpr uint32_t kAmbiguous = UINT32_MAX - 1;  // named_: more than one
  struct Tensor {
    TensorMeta meta;             // fqn empty; storage sized to the chunks, attached entries filled in
    uint64_t chunks = 0;         // how many the storage vector must hold
    std::string props_class;     // the Mapper's class_name of its properties
    bool moved = false;          // meta was moved into the model
    uint32_t name = kNoName;     // the fqn id a dict pair gave it (attaching looks it up by that)
    uint64_t attached = 0;       // storage entries written into meta.storage while decoding
    size_t md_index = SIZE_MAX;  // where the Mapper moved it
  };
  // Consecutive attached pairs of one dict: the first pair is (kAttached run id, kAttached 0), and
  // the others are merged into it. files: the folder file ids the run's entries name, in the order
  // of their first use within the run (the Mapper assigns model file ids in that order).
  struct AttachedRun {
    uint64_t count = 0;
    uint32_t files_begin = 0, files_end = 0;  // into run_files
    bool transform_field = false;             // some entry had the transform_descriptors attribute
  };
  bool attach = true;
  std::vector<AttachedRun> runs;
  std::vector<uint32_t> run_files;
  uint64_t attached_total = 0;

  // input_bytes: the size of the pickle, from which the record vectors are first reserved.
  MetadataFolder(Tables& tb, uint64_t input_bytes) : tb_(tb), input_bytes_(input_bytes) {}

  RecordVec<int64_t> dims;  // chunks: nd, offsets..., sizes...; keys: offsets...
  RecordVec<Key> keys;
  RecordVec<Stored> storage;
  std::vector<Tensor> tensors;
  std::deque<std::string> fqns, files;  // stable: the id maps view them
  std::vector<std::vector<std::string>> transform_sets{{}};
  static constexpr uint32_t kHasTransformField = 1u << 31;

  bool fold(const pickle::GlobalRef& cls, const Value& args, const Value& state, Value& out) override;
  bool join_pair(Value* last, Value& k, Value& v) override;

  // The class every record of `tag` was folded from (nullptr for runs), and its "module.name".
  const pickle::GlobalRef* cls(uint32_t tag) const { return tag < kTags ? cls_[tag] : nullptr; }
  std::string class_name(uint32_t tag) const {
    const pickle::GlobalRef* g = tag < kTags ? cls_[tag] : nullptr;
    return g ? std::string(g->module) + "." + std::string(g->name) : "<record>";
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
  bool tensor(const Value& st, Value& out);
  bool try_attach(Value* last, Value& k, Value& v);
  void give_back_key(uint64_t i, size_t nd);
  void give_back_storage(uint64_t j);
  struct Dead {  // records of attached pairs, [from, to), not yet given back
    uint64_t from = 0, to = 0, dims = 0;
  };
  Dead dead_keys_, dead_storage_;
  // The interning state of one list (fqns or files).
  struct Interned {
    std::unordered_map<std::string_view, uint32_t, StrHash> ids;
    std::string_view last;  // the string last looked up (it views the input or the pickle's arena)
    uint32_t last_id = 0;
    // Per id: the string looked up after it last time, and its id. Storage entries cycle through
    // the same files in the same order (one chunk per rank), so this is usually the next one.
    struct Next {
      std::string_view view;
      uint32_t id = 0;
    };
    std::vector<Next> next;
  };
  uint32_t intern(std::deque<std::string>& list, Interned& in, std::string_view s);
  void reserve_records();

  Tables& tb_;
  uint64_t input_bytes_;
  bool reserved_ = false;
  // The class each tag was first folded from; an object of another class of the same name is
  // declined, so that every record of a tag names one class.
  const pickle::GlobalRef* cls_[kTags] = {};
  // Recently seen classes and what they fold to (0: nothing), so that most objects are told apart
  // by a pointer comparison (the Tree interns globals).
  struct Seen {
    const pickle::GlobalRef* cls;
    uint32_t tag;
  };
  std::vector<Seen> seen_;
  Interned fqn_in_, file_in_;
  std::vector<uint32_t> named_;       // fqn id -> tensor id, kNoName or kAmbiguous
  std::vector<uint32_t> file_stamp_;  // folder file id -> 1 + the last run that listed it
  struct Cached {
    const std::deque<std::string>* list = nullptr;
    std::string_view view;
    uint32_t id = 0;
  };
  static constexpr size_t kCache = 4096;
  Cached cache_[kCache];
};

}  // namespace dcpctl::meta_detail
