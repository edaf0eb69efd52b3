// A restricted pickle virtual machine: decodes Python pickles (protocols 0-5) into a Tree of
// Values without ever importing, calling or executing anything.
//
// Format (CPython Lib/pickletools.py is the reference): a stream of one-byte opcodes, each with
// an inline argument of a fixed or length-prefixed size, operating on a stack, a mark stack and a
// memo. Protocol 2 adds PROTO/NEWOBJ/TUPLEn/LONG1; 3 adds BINBYTES; 4 adds FRAME, MEMOIZE,
// STACK_GLOBAL, SHORT_BINUNICODE, BINUNICODE8, NEWOBJ_EX, sets; 5 adds BYTEARRAY8 and out-of-band
// buffers (NEXT_BUFFER/READONLY_BUFFER), which need a side channel and are refused.
//
// What "restricted" means here:
//   GLOBAL/STACK_GLOBAL   push a Global naming (module, name); nothing is looked up.
//   REDUCE/NEWOBJ/INST/OBJ build an Object {callable, args}; nothing is called. Two callables are
//                         recognised as data: torch.Size(tuple) -> Size, OrderedDict() -> Dict.
//   BUILD                 stores the state on the Object; no __setstate__ runs.
//   PERSID/BINPERSID      push a PersId {pid}; torch uses these for tensor storages.
//   EXT1/2/4              (copyreg extension registry) refused: UnsupportedError (or, with
//                         ParseOptions::opaque_extensions, an unresolvable Global).
//
// Hostile input: every length is compared with what remains of the input before anything is
// allocated, so memory stays proportional to the input; the mark stack, nesting depth and memo
// indices are capped; every failure is a FormatError naming the source and absolute byte offset
// of the offending opcode.
//
// Memory: a first pass over the opcodes collects the memo indices that are ever read back (GET).
// Only those memo entries are kept, and containers nobody can reach again are moved into compact
// frozen storage as soon as they are complete. This is what keeps a 5-million-chunk `.metadata`
// within a small multiple of its file size.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "pickle/tree.h"
#include "util/span_reader.h"

namespace dcpctl::pickle {

struct Limits {
  uint32_t max_depth = 512;       // nesting of containers/objects in the result
  uint64_t max_marks = 1u << 20;  // open MARKs at once
  uint64_t max_memo_index = 1ull << 40;
};

// Folds objects of classes its owner knows into compact records while the pickle is decoded, so
// that millions of small objects (a `.metadata`'s chunks and storage entries) never exist as
// generic trees. At BUILD of an object made by NEWOBJ/REDUCE of a global, with its (still open)
// state, fold() either declines (false: the generic Object is kept) or sets `out` to stand for the
// object, normally an Ext value whose payload indexes the folder's own storage. Objects the memo
// refers to again are never offered: every reference must see the same value. A folder must not
// keep `state` or anything inside it: the VM reuses that memory right after.
class Folder {
 public:
  virtual ~Folder() = default;
  virtual bool fold(const GlobalRef& cls, const Value& args, const Value& state, Value& out) = 0;
  // Offered each key/value pair a dict is extended with (SETITEM, SETITEMS, DICT), after BUILD
  // folded what it could, with `last` the dict's last pair (two Values) or nullptr. It may merge
  // the pair into `last` (true: nothing is appended), or rewrite `k` and `v` into another pair
  // that stands for them (false: k, v are appended). Either way the folder's reader must see the
  // same pairs in the same order as without it; pairs are never offered for anything else.
  virtual bool join_pair(Value* last, Value& k, Value& v) {
    (void)last, (void)k, (void)v;
    return false;
  }
};

// Where a parse spent its time (steady clock), for reports that say what reading cost.
struct ParseStats {
  double scan_seconds = 0;    // pass 1: which memo entries are read back
  double decode_seconds = 0;  // pass 2: the opcodes, folding included
  // Objects folded (Folder) by the flat path: matched to a byte template of an earlier one
  // (vm.cpp), or read opcode by opcode; and objects the flat path read up to the Folder, which
  // declined them (then the generic opcodes ran).
  uint64_t flat_template = 0, flat_generic = 0, flat_declined = 0;
  uint64_t scan_templated = 0;  // runs of opcodes pass 1 stepped over by a byte template (vm.cpp)
  uint64_t memo_kept = 0;       // memo entries read back, as pass 1 found them
};

struct ParseOptions {
  std::string source;        // file name for error messages
  uint64_t base_offset = 0;  // absolute offset of the pickle within that file
  Limits limits;
  Folder* folder = nullptr;
  // Told, every 64 MiB of input, that the pass under way is done with the bytes before this
  // offset, so a caller reading a mapping can drop those pages (the second pass faults them back
  // in from the page cache as it goes).
  std::function<void(uint64_t)> consumed;
  ParseStats* stats = nullptr;  // filled in when set
  // EXT1/2/4 push Global{kExtensionModule, "<code>"} (a name no reader can resolve: the writing
  // process's copyreg registry held it) instead of refusing the whole pickle, so that a caller
  // can name the key that holds one (write/lightning_meta.h).
  bool opaque_extensions = false;
  // Byte templates of the objects a large `.metadata` repeats (vm.cpp), in the scan and in the
  // flat path, used when a folder is set. Off only to check that both read the same.
  bool byte_templates = true;
};

inline constexpr const char* kExtensionModule = "copyreg._extension_registry";

std::unique_ptr<Tree> parse(ByteSpan data, const ParseOptions& opts);

}  // namespace dcpctl::pickle
