// The pickle writer (pickle/pickler) and the DCP `.metadata` writer (write/dcp_metadata), read
// back with dcpctl's own readers (the restricted VM, parse_metadata). torch reading what they
// write is checked by the interop tests (reshard-*, consolidate-*); these pin the exact bytes and
// fields.
#include <catch2/catch.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "meta/metadata.h"
#include "pickle/pickler.h"
#include "pickle/vm.h"
#include "write/dcp_metadata.h"

using namespace dcpctl;
using pickle::Kind;

namespace {

std::unique_ptr<pickle::Tree> read(const std::string& bytes) {
  pickle::ParseOptions po;
  po.source = "test.pkl";
  return pickle::parse(ByteSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), po);
}

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

}  // namespace

TEST_CASE("pickler: integers use CPython's encodings, byte for byte") {
  // python3 -c "import pickle; print(pickle.dumps([0, 255, 256, 65536, -1, 2**31, -2**63], 2).hex())"
  // gives 80025d71 00 28 4b00 4bff 4d0001 4a00000100 4affffffff 8a050000008000 8a080000000000000080 65 2e
  Pickler p(2);
  p.empty_list();
  p.mark();
  for (int64_t v : {int64_t(0), int64_t(255), int64_t(256), int64_t(65536), int64_t(-1), int64_t(1) << 31, INT64_MIN})
    p.integer(v);
  p.appends();
  p.stop();
  CHECK(hex(p.data()) ==
        "80025d284b004bff4d00014a000001004affffffff8a05000000800"
        "08a0800000000000000806"
        "52e");
}

TEST_CASE("pickler: values read back through the VM, strings and globals memoized") {
  for (int proto : {2, 4}) {
    INFO("protocol " << proto);
    Pickler p(proto);
    p.empty_dict();
    p.mark();
    p.str("k", true);
    p.floating(-0.0);
    p.str("k2", true);
    p.bytes(std::string("\x00\xff\x80", 3));
    p.str("k", true);  // the memo: a BINGET, same key again
    p.global("torch", "FloatStorage");
    p.str("big", true);
    p.big_integer(std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x01", 9));  // 2**64
    p.setitems();
    p.stop();
    auto t = read(p.data());
    REQUIRE(t->root.kind == Kind::Dict);
    auto it = t->root.items();
    REQUIRE(it.size() == 8);
    CHECK(it[0].as_str() == "k");
    uint64_t zero_bits;
    double d = it[1].as_float();
    std::memcpy(&zero_bits, &d, 8);
    CHECK(zero_bits == 0x8000000000000000ull);
    CHECK(it[3].kind == Kind::Bytes);  // protocol 2 writes _codecs.encode(..., 'latin1'): bytes again
    CHECK(it[3].as_str() == std::string("\x00\xff\x80", 3));
    CHECK(it[4].as_str() == "k");
    CHECK(it[5].kind == Kind::Global);
    CHECK(it[5].as_global().module == "torch");
    CHECK(it[5].as_global().name == "FloatStorage");
    CHECK(it[7].kind == Kind::BigInt);
    CHECK(it[7].as_str() == std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x01", 9));
  }
  // The memo: "k" written twice costs one BINGET the second time (protocol 2: q\x00 ... h\x00).
  Pickler p(2);
  p.str("k", true);
  p.str("k", true);
  CHECK(hex(p.data()) ==
        "8002"
        "58010000006b"
        "7100"
        "6800");
}

// pickle_json: the one JSON -> pickle of the project (torch_checkpointing's JSON items,
// Megatron-LM's args): the values json.load gives, an integer past int64 a Python int as it is.
TEST_CASE("pickler: pickle_json writes the values json.load gives, deep nesting refused as Python's json refuses it") {
  const auto j = nlohmann::json::parse(R"({"a": [1, 18446744073709551615, -2, 1.5, "s", null, true], "b": {}})");
  Pickler p(2);
  pickle_json(p, j);
  p.stop();
  auto t = read(p.data());
  REQUIRE(t->root.kind == Kind::Dict);
  auto top = t->root.items();
  REQUIRE(top.size() == 4);
  CHECK(top[0].as_str() == "a");
  auto a = top[1].items();
  REQUIRE(a.size() == 7);
  CHECK(a[0].as_int() == 1);
  CHECK(a[1].kind == Kind::BigInt);  // 2**64 - 1: eight 0xff bytes and a sign byte
  CHECK(a[1].as_str() == std::string("\xff\xff\xff\xff\xff\xff\xff\xff\x00", 9));
  CHECK(a[2].as_int() == -2);
  CHECK(a[3].as_float() == 1.5);
  CHECK(a[4].as_str() == "s");
  CHECK(a[5].kind == Kind::None);
  CHECK(a[6].kind == Kind::Bool);
  CHECK(top[2].as_str() == "b");
  CHECK(top[3].kind == Kind::Dict);
  nlohmann::json deep = 0;
  for (int i = 0; i < 1001; ++i) deep = nlohmann::json::array({deep});
  Pickler q(2);
  CHECK_THROWS_AS(pickle_json(q, deep), std::length_error);
}

TEST_CASE("pickler: value() re-emits a decoded tree that decodes the same") {
  Pickler p(2);
  p.global("torch", "Size");
  p.mark();
  p.integer(3);
  p.integer(70000);
  p.tuple_from_mark();
  p.tuple(1);
  p.reduce();
  p.stop();
  auto t = read(p.data());
  REQUIRE(t->root.kind == Kind::Size);
  Pickler again(4);
  REQUIRE(again.value(t->root));
  again.stop();
  auto t2 = read(again.data());
  REQUIRE(t2->root.kind == Kind::Size);
  REQUIRE(t2->root.items().size() == 2);
  CHECK(t2->root.items()[1].as_int() == 70000);
  // A persistent id cannot be carried over.
  Pickler q(2);
  q.str("storage");
  q.binpersid();
  q.stop();
  Pickler r(2);
  CHECK_FALSE(r.value(read(q.data())->root));
  // ... unless a persistent_id hook stands in for it (write/lightning_meta.h renames storages).
  Pickler h(2);
  h.persistent_id = [](Pickler& w, const pickle::Value& pid) {
    if (!pid.is_str("storage")) return false;
    w.str("renamed");
    return true;
  };
  REQUIRE(h.value(read(q.data())->root));
  h.stop();
  auto t3 = read(h.data());
  REQUIRE(t3->root.kind == Kind::PersId);
  CHECK(t3->root.as_persid().is_str("renamed"));
}

TEST_CASE("pickler: an OrderedDict stays one (CPython's opcodes), a dict stays a dict") {
  // python3 -c "import pickle, collections; print(pickle.dumps(collections.OrderedDict(b=1, a=2), 2).hex())"
  // gives 8002 63636f6c6c656374696f6e730a4f726465726564446963740a 71 00 29 52 71 01 28 ... 75 2e
  // (GLOBAL collections OrderedDict, EMPTY_TUPLE, REDUCE, MARK, pairs, SETITEMS).
  Pickler p(2);
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.reduce();
  p.mark();
  p.str("b");
  p.integer(1);
  p.str("a");
  p.integer(2);
  p.setitems();
  p.stop();
  auto t = read(p.data());
  REQUIRE(t->root.kind == Kind::Dict);
  CHECK((t->root.flags & pickle::Value::kOrdered) != 0);
  Pickler again(2);
  REQUIRE(again.value(t->root));
  again.stop();
  // value() memoizes the keys (BINPUT after each), otherwise the same opcodes as CPython's
  CHECK(again.data().compare(0, 33, p.data(), 0, 33) == 0);
  auto t2 = read(again.data());
  CHECK((t2->root.flags & pickle::Value::kOrdered) != 0);
  REQUIRE(t2->root.items().size() == 4);
  CHECK(t2->root.items()[0].as_str() == "b");
  Pickler d(2);
  d.empty_dict();
  d.stop();
  auto t3 = read(d.data());
  CHECK((t3->root.flags & pickle::Value::kOrdered) == 0);
  Pickler d2(2);
  REQUIRE(d2.value(t3->root));
  d2.stop();
  CHECK(d2.data() == d.data());
}

TEST_CASE(".metadata writer: what it writes parses back field for field") {
  MetadataOut out;
  out.files = {"__0_0.distcp", "__1_0.distcp"};
  MetaTensorOut w;
  w.fqn = "model.w";
  w.dtype_name = "bfloat16";
  w.requires_grad = true;
  w.shape = {5, 3};
  w.chunks.push_back({{0, 0}, {3, 3}, 0, 0, 1200, {"stream.zstd/1"}});
  w.chunks.push_back({{3, 0}, {2, 3}, 1, 64, 1100, {}});
  MetaTensorOut s;
  s.fqn = "scalar";
  s.dtype_name = "float8_e4m3fn";
  s.chunks.push_back({{}, {}, 1, 2000, 700, {}});
  MetaBytesOut b;
  b.fqn = "step";
  b.file = 0;
  b.offset = 1200;
  b.length = 450;
  b.transforms = {"stream.zstd/1"};
  out.tensors = {w, s};
  out.bytes = {b};
  out.order = {{true, 0}, {false, 0}, {true, 1}};
  out.planner_data["model.w"] = {{false, "model", 0}, {false, "w", 0}};
  out.planner_data["step"] = {{false, "step", 0}};
  out.planner_data["scalar"] = {{false, "scalar", 0}};
  out.checkpoint_id = "/tmp/ck";
  out.save_id = "0f0e0d0c-0b0a-4908-8706-050403020100";
  out.modules = {"model", "optim"};
  std::string bytes = metadata_pickle(out);
  Metadata md = parse_metadata(ByteSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "out/.metadata");
  CHECK(md.pickle_protocol == 4);
  CHECK(md.problems.empty());
  CHECK(md.unknown_globals.empty());
  CHECK(md.metadata_class == "torch.distributed.checkpoint.metadata.Metadata");
  CHECK(md.version == std::optional<std::string>("1.0.0"));
  CHECK(md.files == out.files);
  REQUIRE(md.order.size() == 3);
  CHECK(md.order[0] == std::make_pair(true, 0u));
  CHECK(md.order[1] == std::make_pair(false, 0u));
  CHECK(md.order[2] == std::make_pair(true, 1u));
  REQUIRE(md.tensors.size() == 2);
  const TensorMeta& t = md.tensors[0];
  CHECK(t.fqn == "model.w");
  CHECK(t.dtype == std::optional<DType>(DType::BFloat16));
  CHECK(t.requires_grad);
  CHECK(t.shape == std::vector<int64_t>{5, 3});
  REQUIRE(t.num_chunks() == 2);
  CHECK(std::vector<int64_t>(t.chunk_offsets(1), t.chunk_offsets(1) + 2) == std::vector<int64_t>{3, 0});
  CHECK(std::vector<int64_t>(t.chunk_sizes(1), t.chunk_sizes(1) + 2) == std::vector<int64_t>{2, 3});
  CHECK(t.storage[1].file == 1);
  CHECK(t.storage[1].offset == 64u);
  CHECK(t.storage[1].length == 1100u);
  CHECK(t.storage[1].transforms == 0u);
  // A tensor chunk's transforms (a zstd-compressed tensor item) are written like a bytes item's.
  REQUIRE(t.storage[0].transforms != 0u);
  CHECK(md.transform_sets.at(t.storage[0].transforms) == std::vector<std::string>{"stream.zstd/1"});
  // dcpctl writes 5-tuple TensorProperties: loadable by torch 2.4 through 2.15.
  CHECK(md.strided_tensors() == 0);
  CHECK(md.oldest_loader().release == "2.7");  // the zstd transform needs torch's _extension (2.7)
  const TensorMeta& sc = md.tensors[1];
  CHECK(sc.dtype == std::optional<DType>(DType::Float8_E4M3FN));
  CHECK(sc.ndim() == 0);
  CHECK(sc.storage[0].offset == 2000u);
  REQUIRE(md.bytes.size() == 1);
  CHECK(md.bytes[0].fqn == "step");
  CHECK(md.bytes[0].storage.offset == 1200u);
  CHECK(md.bytes[0].storage.length == 450u);
  REQUIRE(md.bytes[0].storage.transforms != 0u);
  CHECK(md.transform_sets.at(md.bytes[0].storage.transforms) == std::vector<std::string>{"stream.zstd/1"});
  CHECK(md.has_planner_data);
  REQUIRE(md.planner_data.count("model.w") == 1);
  CHECK(md.planner_data["model.w"].size() == 2);
  CHECK(md.planner_data["model.w"][1].key == "w");
  REQUIRE(md.storage_meta.has_value());
  CHECK(md.storage_meta->checkpoint_id == std::optional<std::string>("/tmp/ck"));
  CHECK(md.storage_meta->save_id == std::optional<std::string>(out.save_id));
  CHECK(md.storage_meta->modules == out.modules);
}

TEST_CASE("uuid4 is a canonical version-4 uuid, different each time") {
  std::string a = uuid4(), b = uuid4();
  REQUIRE(a.size() == 36);
  CHECK(a[8] == '-');
  CHECK(a[14] == '4');
  CHECK(std::string("89ab").find(a[19]) != std::string::npos);
  CHECK(a != b);
}
