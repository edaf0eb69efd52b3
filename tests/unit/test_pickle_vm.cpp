// The restricted pickle VM on hand-made pickles: one test per opcode family, plus hostile input.
// (Real `.metadata` files written by torch are covered by the fixture tests.)
#include <catch2/catch.hpp>
#include <string>

#include "pickle/repr.h"
#include "pickle/vm.h"

using namespace dcpctl;
using namespace dcpctl::pickle;

namespace {

std::unique_ptr<Tree> run(const std::string& bytes) {
  ParseOptions o;
  o.source = "test.pkl";
  return parse(ByteSpan(bytes), o);
}

std::string r(const std::string& bytes) {
  return repr(run(bytes)->root, 10000);
}

std::string bin(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

}  // namespace

TEST_CASE("scalars in every encoding") {
  CHECK(r("N.") == "None");
  CHECK(r(bin({0x80, 2, 0x88, '.'})) == "True");
  CHECK(r(bin({0x80, 2, 0x89, '.'})) == "False");
  CHECK(r("I00\n.") == "False");
  CHECK(r("I42\n.") == "42");
  CHECK(r("L-7L\n.") == "-7");
  CHECK(r(bin({'K', 200, '.'})) == "200");
  CHECK(r(bin({'M', 0x34, 0x12, '.'})) == "4660");
  CHECK(r(bin({'J', 0xff, 0xff, 0xff, 0xff, '.'})) == "-1");
  CHECK(r(bin({0x8a, 1, 0x80, '.'})) == "-128");
  CHECK(r(bin({0x8a, 5, 0, 0, 0, 0, 1, '.'})) == "4294967296");
  CHECK(r(bin({0x8a, 9, 1, 0, 0, 0, 0, 0, 0, 0, 0, '.'})) == "1");
  CHECK(r(bin({0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, '.'})) == "<int of 72 bits>");
  CHECK(r("F0.5\n.") == "0.5");
  CHECK(r(bin({'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, '.'})) == "1.5");
}

TEST_CASE("strings and bytes") {
  CHECK(r(bin({0x8c, 3, 'a', 'b', 'c', '.'})) == "'abc'");
  CHECK(r(bin({'X', 2, 0, 0, 0, 'h', 'i', '.'})) == "'hi'");
  CHECK(r(bin({0x8d, 1, 0, 0, 0, 0, 0, 0, 0, 'z', '.'})) == "'z'");
  CHECK(r(bin({'C', 2, 0, 0xff, '.'})) == "b'\\x00\\xff'");
  CHECK(r(bin({'B', 1, 0, 0, 0, 'q', '.'})) == "b'q'");
  CHECK(r(bin({0x96, 1, 0, 0, 0, 0, 0, 0, 0, 'y', '.'})) == "b'y'");
  CHECK(r("S'it\\'s'\n.") == "'it\\'s'");
  CHECK(r("Vcaf\\u00e9\n.") == "'caf\xc3\xa9'");
  CHECK(r(bin({'U', 1, 0xe9, '.'})) == "'\xc3\xa9'");
}

TEST_CASE("containers") {
  CHECK(r(").") == "()");
  CHECK(r(bin({'K', 1, 'K', 2, 0x86, '.'})) == "(1, 2)");
  CHECK(r(bin({'K', 1, 0x85, '.'})) == "(1,)");
  CHECK(r("(I1\nI2\nI3\nI4\nt.") == "(1, 2, 3, 4)");
  CHECK(r("]I1\na.") == "[1]");
  CHECK(r("](I1\nI2\ne.") == "[1, 2]");
  CHECK(r("(I1\nl.") == "[1]");
  CHECK(r(bin({'}', 0x8c, 1, 'k', 'K', 1, 's', '.'})) == "{'k': 1}");
  CHECK(r(bin({'}', '(', 0x8c, 1, 'a', 'K', 1, 0x8c, 1, 'b', 'K', 2, 'u', '.'})) == "{'a': 1, 'b': 2}");
  CHECK(r("(S'a'\nI1\nd.") == "{'a': 1}");
  CHECK(r(bin({0x8f, '(', 'K', 1, 0x90, '.'})) == "{1}");
  CHECK(r(bin({'(', 'K', 1, 0x91, '.'})) == "{1}");
}

TEST_CASE("memo: MEMOIZE, PUT and GET share the object") {
  // l = []; t = (l, l); l.append(7)  -> ([7], [7])
  CHECK(r(bin({0x80, 4, ']', 0x94, 'h', 0, 'h', 0, 0x86, 'h', 0, 'K', 7, 'a', '0', '.'})) == "([7], [7])");
  CHECK(r("]p0\ng0\n0.") == "[]");
  CHECK(r(bin({']', 'q', 3, '0', 'h', 3, '.'})) == "[]");
  CHECK(r(bin({']', 'r', 9, 0, 0, 0, '0', 'j', 9, 0, 0, 0, '.'})) == "[]");
  CHECK(r(bin({'K', 1, '2', 0x86, '.'})) == "(1, 1)");  // DUP
  SECTION("the scan's multi-opcode steps note every memo read, at any distance from the end") {
    // The first pass steps over runs that protocol 4 repeats for every object (`h a h b`, a string
    // and its MEMOIZE, `TUPLEn MEMOIZE TUPLE1 MEMOIZE REDUCE MEMOIZE [SETITEMS BUILD]`) in one
    // step while enough bytes are left. A memo entry read back only from inside such a run must
    // still be kept: torch.Size (2) and 'b' (4) are read only as the second GET of a pair, 'a' (3)
    // right after a run, the object (11) after one that closes it; padding moves every run across
    // the point where the scan goes back to stepping one opcode at a time.
    std::string head =
        bin({0x80, 4, '(', 0x8c, 5,    't', 'o',  'r',  'c',  'h',  0x94, 0x8c, 4,   'S',  'i', 'z', 'e',  0x94, 0x93,
             0x94,                                       // 0 'torch', 1 'Size', 2 torch.Size
             0x8c, 1, 'a', 0x94, 0x8c, 1,   'b',  0x94,  // 3 'a', 4 'b'
             0x8c, 1, 'm', 0x8c, 1,    'C', 0x93, 0x94,  // 5 m.C
             'h',  5, ')', 0x81, 0x94, '}', 0x94, '(',   // 6 object, 7 its dict
             'h',  3, 'h', 2,    'K',  7,   'K',  8,    0x86, 0x94, 0x85, 0x94, 'R', 0x94, 'u', 'b',
             0x94,  // 8-10 dims, args, Size; 11 object
             'h',  3, 'h', 2,    'K',  7,   'K',  8,    0x86, 0x94, 0x85, 0x94, 'R', 0x94, 'h', 3,   0x86,
             0x94,  // 12-14; 15 (Size, 'a')
             'h',  3, 'h', 4,    0x86, 'h', 11});
    const std::string obj = "m.C() state={'a': torch.Size([7, 8])}";
    // (The globals and strings stay on the stack where they were made, inside the MARK.)
    const std::string want =
        "(torch.Size, 'a', 'b', m.C, " + obj + ", 'a', (torch.Size([7, 8]), 'a'), ('a', 'b'), " + obj + ")";
    for (size_t pad = 0; pad <= 12; ++pad) {
      INFO("padding " << pad);
      std::string p = head;
      for (size_t k = 0; k < pad; ++k) p += bin({'N', '0'});  // NONE POP: no effect
      CHECK(r(p + bin({'t', '.'})) == want);
    }
  }
}

TEST_CASE("globals and object construction never execute") {
  // os.system('echo pwned') via REDUCE: becomes an inert Object.
  auto t = run("cos\nsystem\n(S'echo pwned'\ntR.");
  REQUIRE(t->root.kind == Kind::Object);
  CHECK(t->root.as_object().callable.is_global("os", "system"));
  CHECK(repr(t->root) == "os.system('echo pwned')");
  REQUIRE(t->globals().size() == 1);
  CHECK(t->globals()[0]->module == "os");

  // STACK_GLOBAL + NEWOBJ + BUILD with a dict state.
  std::string p = bin({0x80, 4, 0x8c, 1, 'm', 0x8c, 1, 'C', 0x93, ')', 0x81, '}', 0x8c, 1, 'x', 'K', 5, 's', 'b', '.'});
  auto o = run(p);
  REQUIRE(o->root.kind == Kind::Object);
  CHECK(o->root.as_object().state.get("x")->as_int() == 5);
  CHECK(r("(I1\nim\nC\n.") == "m.C(1)");
  CHECK(r("(cm\nC\nI1\no.") == "m.C(1)");
}

TEST_CASE("torch.Size and OrderedDict are recognised as data") {
  CHECK(r("ctorch\nSize\n((I4\nI5\nttR.") == "torch.Size([4, 5])");
  CHECK(run("ctorch\nSize\n((I4\nI5\nttR.")->root.kind == Kind::Size);
  CHECK(r("ccollections\nOrderedDict\n)R.") == "{}");
  CHECK(r("ccollections\nOrderedDict\n)R(S'a'\nI1\nu.") == "{'a': 1}");
}

TEST_CASE("persistent ids") {
  CHECK(r(bin({0x8c, 1, 's', 0x85, 'Q', '.'})) == "persistent_id(('s',))");
  CHECK(r("P7\n.") == "persistent_id('7')");
}

TEST_CASE("protocol framing") {
  CHECK(r(bin({0x80, 4, 0x95, 2, 0, 0, 0, 0, 0, 0, 0, 'N', '.'})) == "None");
  CHECK_THROWS_AS(run(bin({0x80, 6, 'N', '.'})), UnsupportedError);
}

TEST_CASE("hostile pickles give clean errors with offsets") {
  auto msg = [](const std::string& p) -> std::string {
    try {
      run(p);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(msg("") == "test.pkl: offset 0: pickle ends without a STOP opcode");
  CHECK(msg("N") == "test.pkl: offset 1: pickle ends without a STOP opcode");
  CHECK(msg(".") == "test.pkl: offset 0: STOP on an empty stack");
  CHECK(msg("a.") == "test.pkl: offset 0: APPEND needs a list and an item");
  CHECK(msg(bin({0xff})) == "test.pkl: offset 0: unknown pickle opcode 0xff");
  // BINUNICODE claiming 4 GiB with 2 bytes left: refused before any allocation.
  CHECK(msg(bin({'X', 0xff, 0xff, 0xff, 0xff, 'a', '.'})) ==
        "test.pkl: offset 5: string of 4294967295 bytes runs past the end of the data (2 bytes left)");
  CHECK(msg(bin({0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '.'})).find("runs past the end") !=
        std::string::npos);
  CHECK(msg(bin({0x95, 0xff, 0, 0, 0, 0, 0, 0, 0, 'N', '.'})) ==
        "test.pkl: offset 0: FRAME of 255 bytes runs past the end of the data (2 bytes left)");
  CHECK(msg("h\x05.") == "test.pkl: offset 0: memo entry 5 is read before it was stored");
  CHECK(msg("K\x01"
            "K\x02"
            "s.")
            .find("SETITEM") != std::string::npos);
  CHECK(msg("(I1\nI2\ne.").find("APPENDS") != std::string::npos);
  CHECK(msg("t.").find("without a MARK") != std::string::npos);
  CHECK(msg("I1x\n.").find("malformed number") != std::string::npos);
  CHECK(msg(bin({0x82, 1, '.'})).find("extension registry") != std::string::npos);
  CHECK(msg(bin({0x97, '.'})).find("out-of-band") != std::string::npos);
  CHECK(msg("NNb.").find("BUILD on a None") != std::string::npos);
}

TEST_CASE("nesting depth is capped") {
  std::string deep;
  for (int i = 0; i < 600; ++i) deep += "]";
  for (int i = 0; i < 599; ++i) deep += "a";
  deep += ".";
  try {
    run(deep);
    FAIL("no error");
  } catch (const FormatError& e) {
    CHECK(std::string(e.what()).find("nesting deeper than 512") != std::string::npos);
  }
  std::string ok;
  for (int i = 0; i < 100; ++i) ok += "]";
  for (int i = 0; i < 99; ++i) ok += "a";
  ok += ".";
  CHECK(run(ok)->root.depth == 99);
}

TEST_CASE("self-referencing list does not hang repr or json") {
  // l = []; l.append(l)
  auto t = run(bin({0x80, 4, ']', 0x94, 'h', 0, 'a', '.'}));
  std::string s = repr(t->root, 100);
  CHECK(s.size() <= 103);
  nlohmann::json j;
  CHECK_FALSE(to_json(t->root, j));
}

TEST_CASE("json conversion") {
  nlohmann::json j;
  REQUIRE(to_json(run("(S'a'\n(I1\nF2.5\nNtd.")->root, j));
  CHECK(j.dump() == R"({"a":[1,2.5,null]})");
}

namespace {

// Folds m.C objects whose state is {'x': int} into Ext(tag 7, x).
struct FoldC final : Folder {
  int offered = 0;
  bool fold(const GlobalRef& cls, const Value&, const Value& state, Value& out) override {
    ++offered;
    const Value* x = state.kind == Kind::Dict ? state.get("x") : nullptr;
    if (cls.module != "m" || cls.name != "C" || !x || x->kind != Kind::Int) return false;
    out.kind = Kind::Ext;
    out.len = 7;
    out.bits = static_cast<uint64_t>(x->as_int());
    return true;
  }
};

std::unique_ptr<Tree> run_folded(const std::string& bytes, FoldC& f) {
  ParseOptions o;
  o.source = "test.pkl";
  o.folder = &f;
  return parse(ByteSpan(bytes), o);
}

// protocol 4: m.C() with BUILD {'x': 5}, optionally memoized (MEMOIZE) as entry 0
std::string c_obj(int x, bool memoize) {
  std::string s = bin({0x8c, 1, 'm', 0x8c, 1, 'C', 0x93, ')', 0x81});
  if (memoize) s += bin({0x94});
  return s + bin({'}', 0x8c, 1, 'x', 'K', x, 's', 'b'});
}

}  // namespace

TEST_CASE("a Folder replaces the objects it knows, and only those nobody else references") {
  FoldC f;
  // [C(x=5), C(x=6)] -> two Ext values
  auto t = run_folded(bin({0x80, 4, ']', '('}) + c_obj(5, false) + c_obj(6, false) + bin({'e', '.'}), f);
  REQUIRE(t->root.kind == Kind::List);
  REQUIRE(t->root.items().size() == 2);
  CHECK(t->root.items()[0].kind == Kind::Ext);
  CHECK(t->root.items()[0].bits == 5);
  CHECK(t->root.items()[1].bits == 6);
  CHECK(f.offered == 2);

  // c = C(x=5) memoized and read back: (c, c) must stay one shared generic object.
  FoldC g;
  auto u = run_folded(bin({0x80, 4}) + c_obj(5, true) + bin({'h', 0, 0x86, '.'}), g);
  REQUIRE(u->root.kind == Kind::Tuple);
  CHECK(u->root.items()[0].kind == Kind::Object);
  CHECK(&u->root.items()[0].as_object() == &u->root.items()[1].as_object());
  CHECK(g.offered == 0);

  // a state the folder declines keeps the generic object
  FoldC h;
  auto v = run_folded(
      bin({0x80, 4, 0x8c, 1, 'm', 0x8c, 1, 'C', 0x93, ')', 0x81, '}', 0x8c, 1, 'y', 'K', 1, 's', 'b', '.'}), h);
  CHECK(v->root.kind == Kind::Object);
  CHECK(h.offered == 1);
}

TEST_CASE("memory given back early is never reused while still referenced") {
  // torch.Size(t) where t = (4, 5) is memoized and read back: the Size and t share the dims.
  CHECK(r(bin({0x80, 4,   0x8c, 5,    't',  'o',  'r', 'c', 'h', 0x8c, 4, 'S', 'i', 'z',  'e',  0x93, 'K',
               4,    'K', 5,    0x86, 0x94, 0x85, 'R', 'h', 0,   'K',  9, 'K', 9,   0x86, 0x87, '.'})) ==
        "(torch.Size([4, 5]), (4, 5), (9, 9))");
  // the args tuple ((4, 5),) memoized and read back after the REDUCE
  CHECK(r(bin({0x80, 4,   0x8c, 5,    't',  'o',  'r', 'c', 'h', 0x8c, 4, 'S', 'i', 'z',  'e',  0x93, 'K',
               4,    'K', 5,    0x86, 0x85, 0x94, 'R', 'h', 0,   'K',  9, 'K', 9,   0x86, 0x87, '.'})) ==
        "(torch.Size([4, 5]), ((4, 5),), (9, 9))");
  // a folded object's state children held by the memo survive the fold: C with state
  // {'x': 3, 'k': (1, 2)}, the tuple memoized and read back, then a new tuple is allocated
  FoldC f;
  std::string p =
      bin({0x80, 4,   0x8c, 1, 'm', 0x8c, 1,    'C',  0x93, ')', 0x81, '}', 0x8c, 1, 'x', 'K', 3,    's',  0x8c,
           1,    'k', 'K',  1, 'K', 2,    0x86, 0x94, 's',  'b', 'h',  0,   'K',  8, 'K', 8,   0x86, 0x87, '.'});
  CHECK(r(p) == "(m.C() state={'x': 3, 'k': (1, 2)}, (1, 2), (8, 8))");
  auto t = run_folded(p, f);
  CHECK(t->root.items()[0].kind == Kind::Ext);
  CHECK(repr(t->root, 1000) == "(<record>, (1, 2), (8, 8))");
}

namespace {

// Folds m.C objects whose state is {'x': int, 'd': torch.Size} into Ext(tag 8, x * 1000 + sum(d)),
// and those with {'x': int} alone as FoldC does.
struct FoldCD final : Folder {
  int offered = 0;
  bool fold(const GlobalRef& cls, const Value& args, const Value& state, Value& out) override {
    ++offered;
    if (cls.module != "m" || cls.name != "C" || args.kind != Kind::Tuple || args.len != 0 || state.kind != Kind::Dict)
      return false;
    const Value* x = state.get("x");
    const Value* d = state.get("d");
    if (!x || x->kind != Kind::Int) return false;
    int64_t sum = 0;
    if (d) {
      if (d->kind != Kind::Size) return false;
      for (const Value& v : d->items()) sum += v.as_int();
    }
    out.kind = Kind::Ext;
    out.len = d ? 8 : 7;
    out.bits = static_cast<uint64_t>(x->as_int() * 1000 + sum);
    return true;
  }
};

// Protocol 4 prologue: memo 0 = m.C (the global), memo 1 = torch.Size, memo 2 = 'x', memo 3 = 'd'.
std::string prologue() {
  return bin({0x80, 4,   0x8c, 1,   'm', 0x8c, 1,    'C',  0x93, 0x94, 0x8c, 5,    't', 'o', 'r',  'c', 'h', 0x8c,
              4,    'S', 'i',  'z', 'e', 0x93, 0x94, 0x8c, 1,    'x',  0x94, 0x8c, 1,   'd', 0x94, '0', '0'});
}
// C(x=x, d=Size(a, b)) as a pickler writes it after the first one: the class and the names read
// back (BINGET), the object, its dict, the Size's tuples memoized (3 + 2 MEMOIZEs... 5 entries).
std::string flat_obj(int x, int a, int b) {
  return bin({'h', 0, ')', 0x81, 0x94, '}', 0x94, '(',  'h',  2,    'K', x,    'h', 3,
              'h', 1, 'K', a,    'K',  b,   0x86, 0x94, 0x85, 0x94, 'R', 0x94, 'u', 'b'});
}

std::unique_ptr<Tree> run_with(const std::string& bytes, Folder* f, Limits limits = {}) {
  ParseOptions o;
  o.source = "test.pkl";
  o.folder = f;
  o.limits = limits;
  return parse(ByteSpan(bytes), o);
}

std::string error_of(const std::string& bytes, Folder* f, Limits limits = {}) {
  try {
    run_with(bytes, f, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("flat objects are folded in one step, with the memo numbered as opcode by opcode") {
  // [C(1, (2, 3)), C(4, (5, 6))], then a string memoized at the next index and read back: the
  // fast path must count the MEMOIZEs it steps over (memo: 4 in the prologue, the list 4, then
  // 5 per object: object, dict, dims tuple, args tuple, Size; 'z' is 15).
  std::string p = prologue() + bin({']', 0x94, '('}) + flat_obj(1, 2, 3) + flat_obj(4, 5, 6) +
                  bin({'e', 0x8c, 1, 'z', 0x94, '0', 'h', 15, 0x86, '.'});
  FoldCD f;
  auto t = run_with(p, &f);
  REQUIRE(t->root.kind == Kind::Tuple);
  const Value& list = t->root.items()[0];
  REQUIRE(list.items().size() == 2);
  CHECK(list.items()[0].kind == Kind::Ext);
  CHECK(list.items()[0].len == 8);
  CHECK(list.items()[0].bits == 1005);
  CHECK(list.items()[1].bits == 4011);
  CHECK(t->root.items()[1].is_str("z"));
  CHECK(f.offered == 2);
  // Without a folder, the same pickle is two generic objects and the same memo numbering.
  CHECK(r(p) ==
        "([m.C() state={'x': 1, 'd': torch.Size([2, 3])}, m.C() state={'x': 4, 'd': torch.Size([5, 6])}], 'z')");
}

TEST_CASE("a flat object any part of which the memo reads back stays generic") {
  // The inner dims tuple of the second object (memo index 12) is read back after.
  std::string p =
      prologue() + bin({']', 0x94, '('}) + flat_obj(1, 2, 3) + flat_obj(4, 5, 6) + bin({'e', 'h', 12, 0x86, '.'});
  FoldCD f;
  auto t = run_with(p, &f);
  const Value& list = t->root.items()[0];
  CHECK(list.items()[0].kind == Kind::Ext);
  // Read back: the generic run keeps the tuple, and BUILD still folds the object (the folder
  // must not keep the state), so the result is the same record; the tuple is intact.
  CHECK(list.items()[1].kind == Kind::Ext);
  CHECK(repr(t->root.items()[1], 100) == "(5, 6)");
  // The second object itself read back (memo index 10): never folded, one shared object.
  std::string q =
      prologue() + bin({']', 0x94, '('}) + flat_obj(1, 2, 3) + flat_obj(4, 5, 6) + bin({'e', 'h', 10, 0x86, '.'});
  FoldCD g;
  auto u = run_with(q, &g);
  CHECK(u->root.items()[0].items()[1].kind == Kind::Object);
  CHECK(&u->root.items()[0].items()[1].as_object() == &u->root.items()[1].as_object());
}

TEST_CASE("caps fire the same with the flat-object fast path") {
  std::string p = prologue() + bin({']', 0x94, '('}) + flat_obj(1, 2, 3) + flat_obj(4, 5, 6) + bin({'e', '.'});
  FoldCD f;
  // The memo index cap: MEMOIZE inside the second object goes past it.
  Limits l;
  l.max_memo_index = 12;
  std::string folded = error_of(p, &f, l);
  CHECK(folded.find("memo index 13 is absurdly large") != std::string::npos);
  CHECK(folded == error_of(p, nullptr, l));
  // The mark cap: the object's MARK is one too many.
  Limits m;
  m.max_marks = 1;
  folded = error_of(p, &f, m);
  CHECK(folded.find("nested MARKs") != std::string::npos);
  CHECK(folded == error_of(p, nullptr, m));
  // A memo read of an entry never stored, inside a flat object, is the generic error.
  std::string q =
      prologue() + bin({'h', 0, ')', 0x81, 0x94, '}', 0x94, '(', 'h', 2, 'K', 1, 'h', 99, 'K', 1, 'u', 'b', '.'});
  CHECK(error_of(q, &f) == error_of(q, nullptr));
  CHECK(error_of(q, &f).find("memo entry 99 is read before it was stored") != std::string::npos);
  // Cut anywhere: the same error with and without the folder.
  for (size_t n = 0; n < p.size(); ++n) {
    INFO("cut at " << n);
    FoldCD h;
    CHECK(error_of(p.substr(0, n), &h) == error_of(p.substr(0, n), nullptr));
  }
}
