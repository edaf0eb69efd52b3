// The gguf row of the readers' table (readers.h): a GGUF file (llama.cpp's model file, versions 2
// and 3) read as llama.cpp reads it, so that what `inspect` lists and `verify` passes is what
// llama.cpp loads. The rules are ggml/src/gguf.cpp's gguf_init_from_file_impl and
// llama-model-loader.cpp's bounds check (llama.cpp as vendored by llama-cpp-python 0.3.36):
//
//   header   "GGUF", u32 version (1 is refused there as no longer supported, above 3 as unknown;
//            a version whose low 16 bits are zero is the other byte order), u64 tensor count,
//            u64 key count
//   keys     key (u64 length + bytes), u32 type, value; no key twice; an array holds one type of
//            scalars or strings (no arrays of arrays); `general.alignment`, when present, a u32
//            power of two (default 32)
//   infos    name (shorter than GGML_MAX_NAME, 64; no name twice), u32 n_dims (at most 4), that
//            many u64 `ne` (ggml's order: ne[0] the row; none negative, their product within
//            int64), u32 ggml type (one ggml defines), u64 offset; a row is whole blocks of its type
//   data     from the header's end rounded up to the alignment; tensor i at the running size of
//            the ones before it, each padded to the alignment (gguf.cpp refuses any other offset),
//            its bytes inside the file (the model loader's "not within the file bounds")
//
// Split files (`NAME-00001-of-0000N.gguf`, gguf/gguf.h; llama-model-loader.cpp's splits): a file
// whose split.count is above 1 is one shard of a model; the shards are named from its own name,
// split.no and split.count (llama_split_prefix; a name that does not end so is damage), read in
// order as one model whatever shard was given, the keys the first shard's, each tensor stored in
// its shard. A shard absent is `missing-shard`; a shard whose split.no is not its place (or not a
// u16), or a first shard's split.tensors.count that is
// not the tensors found, is `gguf-split` (ck.incomplete, naming the shard and the key's offset:
// verify exits 3, writers refuse); a tensor name in two shards is damage as within one file.
//
// A break of the first three is the file's damage at that offset (FormatError, exit 3): llama.cpp
// would not open it. An offset out of place is a problem of the file (md.problems), bytes past the
// end a missing piece (ck.incomplete), each naming the tensor, so that `verify` lists every one.
//
// Every length is checked against the bytes left in the file before anything is read or
// allocated (a hostile count cannot make memory grow past the file's size), and the header is
// read through a 1 MiB window: the tokenizer's arrays (150 k strings) are walked, not kept. Keys
// become Checkpoint::values (their value as text, an array as its length and type); tensors are
// one chunk each, shape in torch's order (ne reversed), stored raw at their offset. A plain type
// (F32, F16, BF16, the integers, F64) is its torch dtype, readable by every command; a block type
// (Q8_0, Q4_K, ...) keeps ggml's name as its dtype, which `inspect` and `verify` describe; the
// commands that read values decode the types gguf/decoded.h names under --dtype and refuse the
// others (and every block type without --dtype) as unsupported (exit 5, naming the tensor).
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>

#include "gguf/reader.h"
#include "gguf/types.h"
#include "meta/layouts.h"
#include "store/file.h"
#include "util/error.h"

namespace dcpctl {

namespace gguf {

namespace {
constexpr GgmlType kTypes[] = {
    {0, "F32", 1, 4, DType::Float32},
    {1, "F16", 1, 2, DType::Float16},
    {2, "Q4_0", 32, 18, {}},
    {3, "Q4_1", 32, 20, {}},
    {6, "Q5_0", 32, 22, {}},
    {7, "Q5_1", 32, 24, {}},
    {8, "Q8_0", 32, 34, {}},
    {9, "Q8_1", 32, 40, {}},
    {10, "Q2_K", 256, 84, {}},
    {11, "Q3_K", 256, 110, {}},
    {12, "Q4_K", 256, 144, {}},
    {13, "Q5_K", 256, 176, {}},
    {14, "Q6_K", 256, 210, {}},
    {15, "Q8_K", 256, 292, {}},
    {16, "IQ2_XXS", 256, 66, {}},
    {17, "IQ2_XS", 256, 74, {}},
    {18, "IQ3_XXS", 256, 98, {}},
    {19, "IQ1_S", 256, 50, {}},
    {20, "IQ4_NL", 32, 18, {}},
    {21, "IQ3_S", 256, 110, {}},
    {22, "IQ2_S", 256, 82, {}},
    {23, "IQ4_XS", 256, 136, {}},
    {24, "I8", 1, 1, DType::Int8},
    {25, "I16", 1, 2, DType::Int16},
    {26, "I32", 1, 4, DType::Int32},
    {27, "I64", 1, 8, DType::Int64},
    {28, "F64", 1, 8, DType::Float64},
    {29, "IQ1_M", 256, 56, {}},
    {30, "BF16", 1, 2, DType::BFloat16},
    {34, "TQ1_0", 256, 54, {}},
    {35, "TQ2_0", 256, 66, {}},
    {39, "MXFP4", 32, 17, {}},
    {40, "NVFP4", 64, 36, {}},
    {41, "Q1_0", 128, 18, {}},
    {42, "Q2_0", 64, 18, {}},
};
}  // namespace

const GgmlType* ggml_type(uint32_t id) {
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

namespace {

constexpr uint32_t kMaxVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr size_t kMaxName = 64;   // GGML_MAX_NAME
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr size_t kWindow = 1 << 20;

enum ValueType : uint32_t { U8, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64, kTypeCount };
constexpr const char* kTypeNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
constexpr uint32_t kScalarBytes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

// The header, read front to back through a window of the file.
class Cursor {
 public:
  Cursor(const ReadFile& f, std::string path) : f_(f), path_(std::move(path)), size_(f.size()) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - std::min(size_, pos_); }
  void set_key(std::string k) { key_ = std::move(k); }
  [[noreturn]] void fail(uint64_t at, const std::string& what) const {
    throw FormatError(Where(path_, at, key_), what);
  }

  // Bytes [pos, pos + n) in memory; n at most kWindow.
  const uint8_t* take(uint64_t n, const char* what) {
    if (n > size_ - std::min(size_, pos_))
      fail(pos_, std::string("the file ends inside ") + what + " (" + std::to_string(n) + " bytes at this offset, " +
                     std::to_string(size_ - std::min(size_, pos_)) + " left)");
    if (pos_ < at_ || pos_ + n > at_ + buf_.size()) {
      size_t len = static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(n, kWindow), size_ - pos_));
      buf_.resize(len);
      f_.read_at(pos_, buf_.data(), len, key_);
      at_ = pos_;
    }
    const uint8_t* p = buf_.data() + (pos_ - at_);
    pos_ += n;
    return p;
  }
  template <class T>
  T scalar(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  uint32_t u32(const char* what) { return scalar<uint32_t>(what); }
  uint64_t u64(const char* what) { return scalar<uint64_t>(what); }
  // A string; `keep` bytes of it kept (the rest walked over).
  std::string str(const char* what, size_t keep = std::numeric_limits<size_t>::max()) {
    uint64_t at = pos_;
    uint64_t n = u64(what);
    if (n > size_ - pos_) fail(at, std::string(what) + " of " + std::to_string(n) + " bytes, past the end of the file");
    std::string out;
    uint64_t left = n;
    while (left) {
      uint64_t part = std::min<uint64_t>(left, kWindow);
      const uint8_t* p = take(part, what);
      if (out.size() < keep)
        out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(std::min<uint64_t>(part, keep - out.size())));
      left -= part;
    }
    return out;
  }

 private:
  const ReadFile& f_;
  std::string path_, key_;
  uint64_t size_, pos_ = 0, at_ = 0;
  std::vector<uint8_t> buf_;
};

std::string quoted(const std::string& s) {
  constexpr size_t kShown = 200;
  std::string out = "'";
  for (char c : s.substr(0, kShown)) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\'' || c == '\\')
      out += std::string("\\") + c;
    else
      out += c;
  }
  out += s.size() > kShown ? "...' (" + std::to_string(s.size()) + " bytes)" : "'";
  return out;
}

// One scalar of `type` as text.
std::string scalar_text(Cursor& c, uint32_t type) {
  switch (type) {
    case U8: return std::to_string(c.scalar<uint8_t>("a u8"));
    case I8: return std::to_string(c.scalar<int8_t>("an i8"));
    case U16: return std::to_string(c.scalar<uint16_t>("a u16"));
    case I16: return std::to_string(c.scalar<int16_t>("an i16"));
    case U32: return std::to_string(c.scalar<uint32_t>("a u32"));
    case I32: return std::to_string(c.scalar<int32_t>("an i32"));
    case U64: return std::to_string(c.scalar<uint64_t>("a u64"));
    case I64: return std::to_string(c.scalar<int64_t>("an i64"));
    case F32: {
      char b[32];
      std::snprintf(b, sizeof b, "%.9g", static_cast<double>(c.scalar<float>("an f32")));
      return b;
    }
    case F64: {
      char b[32];
      std::snprintf(b, sizeof b, "%.17g", c.scalar<double>("an f64"));
      return b;
    }
    case Bool: {
      uint8_t v = c.scalar<uint8_t>("a bool");
      return v == 0 ? "False" : "True";
    }
    case String: return quoted(c.str("a string value", 256));
  }
  return {};
}

// A key's value as text (an array of more than 8 elements as its length and type), walking over it.
std::string value_text(Cursor& c, uint32_t type, uint64_t type_at) {
  if (type >= kTypeCount) c.fail(type_at, "value type " + std::to_string(type) + " is not one GGUF defines (0-12)");
  if (type != Array) return scalar_text(c, type);
  uint64_t at = c.pos();
  uint32_t et = c.u32("an array's element type");
  if (et >= kTypeCount || et == Array)
    c.fail(at, "array element type " + std::to_string(et) +
                   (et == Array ? " (an array of arrays, which llama.cpp does not read)" : " is not one GGUF defines"));
  uint64_t n = c.u64("an array's length");
  // Every element takes at least a byte (a string its 8-byte length): a count past what the file
  // has left is damage, found before walking it.
  const uint64_t min_bytes = et == String ? 8 : kScalarBytes[et];
  if (n > c.left() / min_bytes)
    c.fail(at, "an array of " + std::to_string(n) + " " + kTypeNames[et] + ", more than the " +
                   std::to_string(c.left()) + " bytes left can hold");
  std::string shown = "[";
  for (uint64_t i = 0; i < n; ++i) {
    std::string v = scalar_text(c, et);
    if (i < 8) shown += (i ? ", " : "") + v;
  }
  if (n > 8) return "[" + std::to_string(n) + " " + kTypeNames[et] + "]";
  return shown + "]";
}

// One file's header: its keys (each value as text), the split keys' values and where they are,
// and its tensor infos; the data laid out by lay_out.
struct Info {
  std::string name;
  std::vector<int64_t> ne;
  const gguf::GgmlType* type;
  uint64_t offset, at;
};
struct SplitKey {
  bool present = false;
  uint32_t type = 0;
  std::string text;
  uint64_t at = 0;  // the value's offset
};
struct Parsed {
  std::string path;
  uint32_t version = 0;
  std::map<std::string, std::string> values;
  std::map<std::string, SplitKey> split;  // split.no, split.count, split.tensors.count
  std::vector<Info> infos;
  uint64_t alignment = kDefaultAlignment, data_start = 0, file_size = 0;
};

// `names`: the tensor names of the files read before (a split's shards share one namespace).
Parsed parse_file(const std::string& path, std::unordered_set<std::string>& names) {
  Parsed p;
  p.path = path;
  ReadFile f(path);
  Cursor c(f, path);
  const uint8_t* magic = c.take(4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) c.fail(0, "not a GGUF file: it does not start with \"GGUF\"");
  uint32_t version = c.u32("the version");
  if ((version & 0xFFFF) == 0)
    c.fail(4, "GGUF version " + std::to_string(version) +
                  ": written in the other byte order (big-endian), which llama.cpp does not read");
  if (version == 1)
    throw UnsupportedError(Where(path, 4), "GGUF version 1, which llama.cpp no longer reads (versions 2 and 3)");
  if (version > kMaxVersion)
    throw UnsupportedError(
        Where(path, 4), "GGUF version " + std::to_string(version) + ", newer than the versions dcpctl knows (2 and 3)");
  p.version = version;
  uint64_t n_tensors = c.u64("the tensor count");
  uint64_t n_kv = c.u64("the key count");
  // Each key takes at least 12 bytes (length, type) and each tensor info 24: counts past that are damage.
  if (n_kv > f.size() / 12)
    c.fail(16, "a key count of " + std::to_string(n_kv) + ", more than a file of " + std::to_string(f.size()) +
                   " bytes can hold");
  if (n_tensors > f.size() / 24)
    c.fail(8, "a tensor count of " + std::to_string(n_tensors) + ", more than a file of " + std::to_string(f.size()) +
                  " bytes can hold");

  for (uint64_t i = 0; i < n_kv; ++i) {
    uint64_t at = c.pos();
    c.set_key({});
    std::string key = c.str("a key");
    c.set_key(key);
    if (p.values.count(key)) c.fail(at, "the key '" + key + "' a second time");
    uint64_t type_at = c.pos();
    uint32_t type = c.u32("a value type");
    if (key == "general.alignment") {
      if (type != U32)
        c.fail(type_at, std::string("general.alignment is a ") + (type < kTypeCount ? kTypeNames[type] : "?") +
                            ", not the u32 llama.cpp reads");
      p.alignment = c.u32("general.alignment");
      if (p.alignment == 0 || (p.alignment & (p.alignment - 1)))
        c.fail(type_at + 4, "general.alignment " + std::to_string(p.alignment) + " is not a power of two");
      p.values[key] = std::to_string(p.alignment);
      continue;
    }
    p.values[key] = value_text(c, type, type_at);
    if (key == "split.no" || key == "split.count" || key == "split.tensors.count")
      p.split[key] = {true, type, p.values[key], type_at + 4};
  }

  for (uint64_t i = 0; i < n_tensors; ++i) {
    Info t;
    t.at = c.pos();
    c.set_key({});
    t.name = c.str("a tensor name", 4096);
    c.set_key(t.name);
    if (t.name.size() >= kMaxName)
      c.fail(t.at, "a tensor name of " + std::to_string(t.name.size()) + " bytes; llama.cpp takes names shorter than " +
                       std::to_string(kMaxName));
    if (!names.insert(t.name).second)
      c.fail(t.at, "the tensor name '" + t.name + "' a second time (in this file or an earlier shard of its split)");
    uint64_t dims_at = c.pos();
    uint32_t n_dims = c.u32("the tensor's dimension count");
    if (n_dims > kMaxDims)
      c.fail(dims_at, std::to_string(n_dims) + " dimensions; ggml tensors have at most " + std::to_string(kMaxDims));
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t v = static_cast<int64_t>(c.u64("a dimension"));
      if (v < 0) c.fail(dims_at + 4 + 8 * d, "dimension " + std::to_string(d) + " is " + std::to_string(v));
      if (v && elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(v))
        c.fail(dims_at, "the dimensions' product overflows int64");
      elements *= static_cast<uint64_t>(v);
      t.ne.push_back(v);
    }
    uint64_t type_at = c.pos();
    uint32_t type = c.u32("the tensor's type");
    t.type = gguf::ggml_type(type);
    if (!t.type)
      throw UnsupportedError(Where(path, type_at, t.name),
                             "ggml type " + std::to_string(type) + ", which dcpctl does not know");
    if (!t.ne.empty() && t.ne[0] % t.type->block)
      c.fail(type_at, std::string(t.type->name) + " with rows of " + std::to_string(t.ne[0]) +
                          " elements, not whole blocks of " + std::to_string(t.type->block));
    // Its bytes must be a number: elements within int64 can still be more bytes than 2^64.
    if (elements / t.type->block > std::numeric_limits<uint64_t>::max() / t.type->block_bytes)
      c.fail(dims_at, std::to_string(elements) + " elements of " + t.type->name + ", more bytes than any file holds");
    t.offset = c.u64("the tensor's offset");
    p.infos.push_back(std::move(t));
  }
  c.set_key({});
  p.data_start = (c.pos() + p.alignment - 1) / p.alignment * p.alignment;
  p.file_size = f.size();
  return p;
}

// The file's tensors into ck.md, stored in md.files[file]: each where gguf.cpp expects it, inside the file.
void lay_out(Checkpoint& ck, const Parsed& p, uint32_t file) {
  Metadata& md = ck.md;
  uint64_t expected = 0;
  size_t truncated = 0;
  std::string first_truncated;
  for (const auto& t : p.infos) {
    uint64_t elements = 1;
    for (int64_t v : t.ne) elements *= static_cast<uint64_t>(v);
    const uint64_t bytes = elements / t.type->block * t.type->block_bytes;
    Where where(p.path, t.at, t.name);
    if (t.offset != expected)
      md.problems.push_back({"gguf-offset", where,
                             "data at offset " + std::to_string(t.offset) + " of the data section; llama.cpp expects " +
                                 std::to_string(expected) + " (the tensors before it, each padded to " +
                                 std::to_string(p.alignment) + " bytes) and refuses the file"});
    expected += (bytes + p.alignment - 1) / p.alignment * p.alignment;
    const uint64_t file_size = p.file_size, data_start = p.data_start;
    const bool inside =
        t.offset <= file_size && data_start <= file_size - t.offset && bytes <= file_size - data_start - t.offset;
    if (!inside && truncated++ == 0) first_truncated = t.name;

    TensorMeta m;
    m.fqn = t.name;
    m.dtype = t.type->plain;
    m.dtype_name = t.type->plain ? torch_name(*t.type->plain) : t.type->name;
    m.shape.assign(t.ne.rbegin(), t.ne.rend());
    m.chunk_dims.assign(m.shape.size(), 0);
    m.chunk_dims.insert(m.chunk_dims.end(), m.shape.begin(), m.shape.end());
    StorageRef ref;
    ref.file = file;
    ref.offset = data_start + t.offset;
    ref.length = bytes;
    ref.format = ItemFormat::Raw;
    m.storage.push_back(ref);
    md.order.push_back({true, static_cast<uint32_t>(md.tensors.size())});
    md.tensors.push_back(std::move(m));
  }
  if (truncated)
    ck.incomplete.push_back({"gguf-truncated", Where(p.path, std::nullopt, first_truncated),
                             std::to_string(truncated) + " tensor(s) end past the file's " +
                                 std::to_string(p.file_size) +
                                 " bytes, the first this one (llama.cpp: \"data is not within the file bounds\")"});
}

// A split key's value as a number; nullopt when absent or not a number.
std::optional<uint64_t> split_value(const Parsed& p, const char* key) {
  auto it = p.split.find(key);
  if (it == p.split.end() || it->second.text.empty() ||
      it->second.text.find_first_not_of("0123456789") != std::string::npos || it->second.text.size() > 18)
    return std::nullopt;
  return std::stoull(it->second.text);
}

}  // namespace

Checkpoint open_gguf(const std::string& path) {
  Checkpoint ck;
  size_t slash = path.find_last_of('/');
  ck.dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  ck.layout = CheckpointLayout::Gguf;
  ck.metadata_path = path;
  Metadata& md = ck.md;
  md.source = path;

  std::unordered_set<std::string> names;
  Parsed given = parse_file(path, names);
  md.metadata_class = "GGUF v" + std::to_string(given.version);
  const std::optional<uint64_t> count = split_value(given, "split.count");
  if (!count || *count <= 1) {  // one file (llama.cpp reads split.count > 1 only as a split)
    ck.metadata_sources.push_back(path);
    md.files = {base_name(path)};
    meta_detail::stat_data_files(ck);
    ck.values = std::move(given.values);
    ck.metadata_bytes = given.data_start;
    lay_out(ck, given, 0);
    return ck;
  }

  // A split (llama-model-loader.cpp: llama_get_list_splits, the checks of each shard): the shards
  // are named from this one's name, its split.no and split.count (llama_split_prefix), read in
  // order as one model, the keys the first's.
  if (const SplitKey& k = given.split["split.count"]; k.type != U16)
    throw FormatError(Where(path, k.at, "split.count"),
                      std::string("split.count is a ") + kTypeNames[k.type] + ", not the u16 llama.cpp reads");
  const std::optional<uint64_t> no = split_value(given, "split.no");
  if (!no || *no >= *count)
    throw FormatError(
        Where(path, given.split.count("split.no") ? std::optional<uint64_t>(given.split["split.no"].at) : std::nullopt,
              "split.no"),
        "split.count is " + std::to_string(*count) + " but split.no " +
            (no ? "is " + std::to_string(*no) + ", not a shard of them" : std::string("is missing or not a number")));
  char tail[64];
  std::snprintf(tail, sizeof tail, "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(*no + 1),
                static_cast<unsigned long long>(*count));
  const std::string suffix = tail;
  if (path.size() <= suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    throw FormatError(Where(path, given.split["split.no"].at, "split.no"),
                      "shard " + std::to_string(*no + 1) + " of " + std::to_string(*count) +
                          " by its split keys, but its name does not end " + suffix +
                          ": the other shards cannot be found by name (llama.cpp: invalid split file name)");
  const std::string prefix = path.substr(0, path.size() - suffix.size());
  std::vector<std::pair<Parsed, uint32_t>> shards;  // each shard present, with its index
  names.clear();
  for (uint64_t i = 0; i < *count; ++i) {
    std::snprintf(tail, sizeof tail, "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(i + 1),
                  static_cast<unsigned long long>(*count));
    const std::string shard = prefix + tail;
    if (!path_exists(shard)) {
      ck.incomplete.push_back({"missing-shard", Where(shard),
                               "split.count in " + base_name(path) + " is " + std::to_string(*count) + ": shard " +
                                   std::to_string(i + 1) + " is not here (llama.cpp: failed to load GGUF split)"});
      continue;
    }
    Parsed p = parse_file(shard, names);
    // Each shard's split.no must be its place (llama.cpp refuses another).
    const std::optional<uint64_t> its_no = split_value(p, "split.no");
    const SplitKey& no_key = p.split["split.no"];
    if (!its_no || no_key.type != U16)
      ck.incomplete.push_back(
          {"gguf-split", Where(shard, no_key.present ? std::optional<uint64_t>(no_key.at) : std::nullopt, "split.no"),
           no_key.present ? "split.no is " + no_key.text +
                                (no_key.type != U16 ? " of type " + std::string(kTypeNames[no_key.type]) +
                                                          ", not the u16 llama.cpp reads"
                                                    : "")
                          : std::string("no split.no key: llama.cpp refuses a shard without it")});
    else if (*its_no != i)
      ck.incomplete.push_back({"gguf-split", Where(shard, no_key.at, "split.no"),
                               "split.no is " + std::to_string(*its_no) + " in shard " + std::to_string(i + 1) +
                                   " of " + std::to_string(*count) + " (its name): llama.cpp expects " +
                                   std::to_string(i) + " (invalid split file idx)"});
    // A later shard's own split.count is not read: llama.cpp takes the count from the first shard
    // only (llama_model_loader), so a shard found by its name loads whatever it says there.
    shards.emplace_back(std::move(p), static_cast<uint32_t>(i));
  }
  for (const auto& shard : shards) {
    ck.metadata_sources.push_back(shard.first.path);
    md.files.push_back(base_name(shard.first.path));
    ck.metadata_bytes += shard.first.data_start;
  }
  meta_detail::stat_data_files(ck);
  for (size_t f = 0; f < shards.size(); ++f) lay_out(ck, shards[f].first, static_cast<uint32_t>(f));
  // The keys are the first shard's (the others hold only their split keys); its split.tensors.count
  // is every tensor of the split.
  if (!shards.empty() && shards.front().second == 0) {
    Parsed& p0 = shards.front().first;
    ck.values = p0.values;
    ck.metadata_path = p0.path;
    const std::optional<uint64_t> total = split_value(p0, "split.tensors.count");
    const SplitKey& k = p0.split["split.tensors.count"];
    if (ck.incomplete.empty() && (!total || *total != md.tensors.size()))
      ck.incomplete.push_back(
          {"gguf-split",
           Where(p0.path, k.present ? std::optional<uint64_t>(k.at) : std::nullopt, "split.tensors.count"),
           (k.present ? "split.tensors.count is " + k.text : std::string("no split.tensors.count key")) + "; the " +
               std::to_string(shards.size()) + " shards hold " + std::to_string(md.tensors.size()) +
               " tensors (llama.cpp: corrupted model)"});
  } else {
    ck.values = given.values;
  }
  return ck;
}

}  // namespace gguf

}  // namespace dcpctl
