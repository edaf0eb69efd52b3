// The object tree a pickle decodes to, built by the restricted VM (vm.h) without executing
// anything.
//
// A Value is 16 bytes: a kind, a nesting depth, a count and a payload. Payloads that do not fit
// inline point into arenas owned by a Tree, so a Value is valid exactly as long as its Tree.
// Large `.metadata` files hold millions of chunks; keeping values small and arena-allocated (no
// per-node heap block, no reference counts) is what keeps memory within a few times the file.
//
// What Python objects become:
//   None, bool, int (fits int64), float          inline
//   int beyond int64 (LONG1/LONG4)                BigInt: little-endian two's-complement bytes
//   str, bytes/bytearray                          Str / Bytes: bytes in the arena (str is UTF-8)
//   tuple, list, dict, set/frozenset              Tuple / List / Dict (flattened k,v,k,v) / Set
//   a global reference (module, name)             Global; nothing is imported or looked up
//   cls(*args) via REDUCE / NEWOBJ, then BUILD    Object {callable, args, state}
//   torch.Size((d0, d1, ...))                     Size: the dims, as a tuple of Int
//   collections.OrderedDict()                     Dict (it is one), flagged kOrdered
//   persistent id (BINPERSID)                     PersId {pid}
//   an object a Folder recognised (vm.h)          Ext {tag in len, payload in bits}: the Folder's
//                                                 own compact record; the Tree holds nothing of it
#pragma once

#include <cstdint>
#include <string_view>

namespace dcpctl::pickle {

enum class Kind : uint8_t {
  None,
  Bool,
  Int,
  BigInt,
  Float,
  Str,
  Bytes,
  Tuple,
  List,
  Dict,
  Set,
  Global,
  Object,
  Size,
  PersId,
  Ext,
};

const char* kind_name(Kind k);

struct Value;

struct Items;

struct GlobalRef {
  std::string_view module;
  std::string_view name;
};

struct ObjectNode;

struct Value {
  Kind kind = Kind::None;
  uint8_t flags = 0;   // kBoxed: items in a growable vector; kMemo: referenced from elsewhere too
  uint16_t depth = 0;  // nesting depth (leaves 0); capped by the VM
  uint32_t len = 0;    // strings/bytes: length; frozen containers: item count
  uint64_t bits = 0;   // inline payload or a pointer into the owning Tree's arenas

  static constexpr uint8_t kBoxed = 1;
  static constexpr uint8_t kMemo = 2;     // also held by a memo entry that is read back (or DUP'd)
  static constexpr uint8_t kOrdered = 4;  // a Dict made by collections.OrderedDict() (re-pickled as one)

  bool is(Kind k) const { return kind == k; }
  bool is_none() const { return kind == Kind::None; }

  // Typed access. Callers check the kind first; these do not.
  bool as_bool() const { return bits != 0; }
  int64_t as_int() const { return static_cast<int64_t>(bits); }
  double as_float() const;
  std::string_view as_str() const { return {reinterpret_cast<const char*>(bits), len}; }  // Str, Bytes, BigInt
  Items items() const;  // Tuple, List, Set, Size; Dict as k0,v0,k1,v1,...
  uint64_t dict_size() const;
  const GlobalRef& as_global() const { return *reinterpret_cast<const GlobalRef*>(bits); }
  const ObjectNode& as_object() const { return *reinterpret_cast<const ObjectNode*>(bits); }
  const Value& as_persid() const { return *reinterpret_cast<const Value*>(bits); }

  bool is_str(std::string_view s) const { return kind == Kind::Str && as_str() == s; }
  // For Dict: the value stored under string key `key`, or nullptr.
  const Value* get(std::string_view key) const;
  // For Object and Global: "module.name" of the class (or of the global itself).
  bool is_global(std::string_view module, std::string_view name) const;
};

// A read-only view of contiguous Values.
struct Items {
  const Value* ptr = nullptr;
  uint64_t count = 0;
  const Value* begin() const { return ptr; }
  const Value* end() const { return ptr + count; }
  uint64_t size() const { return count; }
  bool empty() const { return count == 0; }
  const Value& operator[](uint64_t i) const { return ptr[i]; }
};

// Inline: the folder and the mapper read millions of small frozen containers. Only a container
// still open (kBoxed) asks the Tree (its vector's layout lives in tree.h).
Items boxed_items(const Value& v);
inline Items Value::items() const {
  if (flags & kBoxed) return boxed_items(*this);
  return {reinterpret_cast<const Value*>(bits), len};
}

inline uint64_t Value::dict_size() const {
  return items().size() / 2;
}

struct ObjectNode {
  Value callable;  // a Global (or, in odd pickles, anything)
  Value args;      // Tuple (REDUCE/NEWOBJ args), or None
  Value state;     // what BUILD gave (dict, tuple, ...), None if no BUILD
};

}  // namespace dcpctl::pickle
