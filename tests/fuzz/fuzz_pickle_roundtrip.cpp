// libFuzzer target: a round trip through the pickle *writer* (pickle/pickler.cpp). The input
// drives a generator of random trees (None, bools, ints of every width, big ints, floats with any
// bit pattern, str memoized or not, bytes, globals, tuples of every length, lists, dicts, sets,
// torch.Size, objects made by REDUCE with and without BUILD state), written at protocol 2 or 4.
// The restricted VM must read back exactly the tree that was written (floats bit for bit), and
// Pickler::value() re-emitting the VM's tree must give bytes that read back the same again. A
// mismatch aborts; so does any exception, a crash or a sanitizer report.
// Seeds: none needed (any bytes make a tree); tests/fuzz/corpus's builtin pickles are used.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pickle/pickler.h"
#include "pickle/vm.h"

namespace {

using dcpctl::Pickler;
using dcpctl::pickle::Kind;
using dcpctl::pickle::Value;

struct Node {
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  uint64_t f = 0;         // float bits
  std::string s, module;  // Str/Bytes/BigInt bytes; Global module + s = name
  bool memo = false;
  std::vector<Node> items;  // containers; Dict as k,v,...; Object: {callable, args, state}
};

Node gen(FuzzedDataProvider& in, int depth, int& budget);

Node gen_leaf(FuzzedDataProvider& in) {
  Node n;
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: n.kind = Kind::None; break;
    case 1:
      n.kind = Kind::Bool;
      n.b = in.ConsumeBool();
      break;
    case 2: {
      n.kind = Kind::Int;
      // Every encoding width: BININT1/2, BININT, LONG1 with 5..8 bytes.
      int shift = in.ConsumeIntegralInRange<int>(0, 63);
      n.i = in.ConsumeIntegral<int64_t>() >> shift;
      break;
    }
    case 3: {
      // A big int as minimal two's complement that does not fit int64 (as CPython writes it).
      n.kind = Kind::BigInt;
      size_t len = in.ConsumeIntegralInRange<size_t>(9, 300);
      n.s = in.ConsumeBytesAsString(len);
      n.s.resize(len, '\x5a');
      if (n.s.back() == '\0' || n.s.back() == '\xff') n.s.back() = '\x01';
      break;
    }
    case 4:
      n.kind = Kind::Float;
      n.f = in.ConsumeIntegral<uint64_t>();
      break;
    case 5: {
      n.kind = Kind::Str;
      // Valid UTF-8 only (a str is text): ASCII and a two-byte sequence, of any length.
      size_t len = in.ConsumeIntegralInRange<size_t>(0, in.ConsumeBool() ? 20 : 400);
      std::string raw = in.ConsumeBytesAsString(len);
      for (unsigned char c : raw) {
        if (c < 0x80)
          n.s.push_back(static_cast<char>(c));
        else {
          n.s.push_back('\xc3');
          n.s.push_back(static_cast<char>(0x80 | (c & 0x3f)));
        }
      }
      n.memo = in.ConsumeBool();
      break;
    }
    case 6:
      n.kind = Kind::Bytes;
      n.s = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(0, 300));
      break;
    default:
      n.kind = Kind::Global;
      n.module = in.ConsumeBool() ? "torch" : "collections.abc";
      n.s = in.ConsumeBool() ? "FloatStorage" : "Mapping";
      break;
  }
  return n;
}

Node gen(FuzzedDataProvider& in, int depth, int& budget) {
  if (--budget <= 0 || depth > 20 || in.remaining_bytes() == 0 || in.ConsumeIntegralInRange<int>(0, 9) < 5)
    return gen_leaf(in);
  Node n;
  int kind = in.ConsumeIntegralInRange<int>(0, 5);
  size_t count = in.ConsumeIntegralInRange<size_t>(0, in.ConsumeBool() ? 5 : 1200);
  switch (kind) {
    case 0: n.kind = Kind::Tuple; break;
    case 1: n.kind = Kind::List; break;
    case 2: n.kind = Kind::Dict; break;
    case 3: n.kind = Kind::Set; break;
    case 4: n.kind = Kind::Size; break;
    default: n.kind = Kind::Object; break;
  }
  if (n.kind == Kind::Object) {
    Node callable;
    callable.kind = Kind::Global;
    callable.module = "mod";
    callable.s = "Cls" + std::to_string(in.ConsumeIntegralInRange<int>(0, 3));
    Node args;
    args.kind = Kind::Tuple;
    for (size_t k = 0, m = in.ConsumeIntegralInRange<size_t>(0, 4); k < m && budget > 0; ++k)
      args.items.push_back(gen(in, depth + 1, budget));
    Node state = in.ConsumeBool() ? gen(in, depth + 1, budget) : Node{};
    n.items = {callable, args, state};
    return n;
  }
  for (size_t k = 0; k < count && budget > 0 && in.remaining_bytes() > 0; ++k) {
    if (n.kind == Kind::Size) {
      Node d;
      d.kind = Kind::Int;
      d.i = in.ConsumeIntegralInRange<int64_t>(0, int64_t(1) << 40);
      n.items.push_back(d);
    } else if (n.kind == Kind::Set) {
      Node e = gen_leaf(in);  // set members: hashable leaves
      n.items.push_back(e);
    } else if (n.kind == Kind::Dict) {
      n.items.push_back(gen_leaf(in));
      n.items.push_back(gen(in, depth + 1, budget));
    } else {
      n.items.push_back(gen(in, depth + 1, budget));
    }
  }
  return n;
}

void write(Pickler& p, const Node& n) {
  switch (n.kind) {
    case Kind::None: p.none(); return;
    case Kind::Bool: p.boolean(n.b); return;
    case Kind::Int: p.integer(n.i); return;
    case Kind::BigInt: p.big_integer(n.s); return;
    case Kind::Float: {
      double d;
      std::memcpy(&d, &n.f, 8);
      p.floating(d);
      return;
    }
    case Kind::Str: p.str(n.s, n.memo); return;
    case Kind::Bytes: p.bytes(n.s); return;
    case Kind::Global: p.global(n.module, n.s); return;
    case Kind::Tuple:
      if (n.items.size() <= 3) {
        for (const Node& c : n.items) write(p, c);
        p.tuple(n.items.size());
      } else {
        p.mark();
        for (const Node& c : n.items) write(p, c);
        p.tuple_from_mark();
      }
      return;
    case Kind::List:
      p.empty_list();
      if (n.items.size() == 1) {
        write(p, n.items[0]);
        p.append();
      } else if (!n.items.empty()) {
        p.mark();
        for (const Node& c : n.items) write(p, c);
        p.appends();
      }
      return;
    case Kind::Dict:
      p.empty_dict();
      if (n.items.size() == 2) {
        write(p, n.items[0]);
        write(p, n.items[1]);
        p.setitem();
      } else if (!n.items.empty()) {
        p.mark();
        for (const Node& c : n.items) write(p, c);
        p.setitems();
      }
      return;
    case Kind::Set:
    case Kind::Size:
      if (n.kind == Kind::Set)
        p.global("builtins", "set");
      else
        p.global("torch", "Size");
      if (n.kind == Kind::Set) {
        p.empty_list();
        if (!n.items.empty()) {
          p.mark();
          for (const Node& c : n.items) write(p, c);
          p.appends();
        }
      } else {
        p.mark();
        for (const Node& c : n.items) write(p, c);
        p.tuple_from_mark();
      }
      p.tuple(1);
      p.reduce();
      return;
    case Kind::Object:
      write(p, n.items[0]);
      write(p, n.items[1]);
      p.reduce();
      if (n.items[2].kind != Kind::None) {
        write(p, n.items[2]);
        p.build();
      }
      return;
    default: std::abort();
  }
}

// Aborts unless the VM's value is the node that was written.
void same(const Node& n, const Value& v) {
  if (n.kind == Kind::BigInt) {
    if (v.kind != Kind::BigInt || v.as_str() != n.s) std::abort();
    return;
  }
  if (v.kind != n.kind) std::abort();
  switch (n.kind) {
    case Kind::None: return;
    case Kind::Bool:
      if (v.as_bool() != n.b) std::abort();
      return;
    case Kind::Int:
      if (v.as_int() != n.i) std::abort();
      return;
    case Kind::Float: {
      double d = v.as_float();
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      if (bits != n.f) std::abort();
      return;
    }
    case Kind::Str:
    case Kind::Bytes:
      if (v.as_str() != n.s) std::abort();
      return;
    case Kind::Global:
      if (v.as_global().module != n.module || v.as_global().name != n.s) std::abort();
      return;
    case Kind::Object: {
      const auto& o = v.as_object();
      same(n.items[0], o.callable);
      same(n.items[1], o.args);
      same(n.items[2], o.state);
      return;
    }
    case Kind::Set: {
      // A set's members come back as written (the VM keeps order; duplicates are not merged).
      if (v.items().size() != n.items.size()) std::abort();
      for (size_t k = 0; k < n.items.size(); ++k) same(n.items[k], v.items()[k]);
      return;
    }
    default: {
      auto items = v.items();
      if (items.size() != n.items.size()) std::abort();
      for (size_t k = 0; k < n.items.size(); ++k) same(n.items[k], items[k]);
      return;
    }
  }
}

std::unique_ptr<dcpctl::pickle::Tree> read(const std::string& bytes) {
  dcpctl::pickle::ParseOptions po;
  po.source = "roundtrip.pkl";
  return dcpctl::pickle::parse(dcpctl::ByteSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), po);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  int protocol = in.ConsumeBool() ? 4 : 2;
  int budget = 3000;
  Node root = gen(in, 0, budget);
  Pickler p(protocol);
  write(p, root);
  p.stop();
  auto tree = read(p.data());  // any exception escapes: libFuzzer reports it as a crash
  same(root, tree->root);
  Pickler again(protocol);
  if (!again.value(tree->root)) std::abort();  // no persistent ids were written
  again.stop();
  same(root, read(again.data())->root);
  return 0;
}
