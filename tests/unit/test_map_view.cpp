// The key map as a table (view/maps/map_view.h): its outputs read as tensors, any byte range assembled
// from the parts, equal to what the written table's parts assemble (item/window.h's WindowReader,
// as the planner plans every --map export without a later view).

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "item/item_reader.h"
#include "item/window.h"
#include "meta/checkpoint.h"
#include "meta/derived.h"
#include "meta/pieces.h"
#include "meta/select.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "util/dtype.h"
#include "view/maps/keymap.h"
#include "view/maps/map_view.h"
#include "view/model.h"
#include "write/execute.h"

using namespace dcpctl;

namespace {

// The torchtitan DeepSeek-V3 fixture (its run's step and config.json) and the request that maps it.
const std::string kTitanDsv3 = std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/layouts/titan_deepseek_v3";

ModelRequest titan_dsv3_request() {
  ModelRequest rq;
  rq.map = "torchtitan-deepseek-v3";
  rq.config = kTitanDsv3 + "/config.json";
  return rq;
}

}  // namespace

TEST_CASE("pieces: run_boxes cuts any element range into at most 2 * ndim runs, in order, covering it") {
  const std::vector<int64_t> shape{3, 4, 5};
  const uint64_t total = 60;
  for (uint64_t first = 0; first < total; ++first)
    for (uint64_t count = 0; first + count <= total; ++count) {
      std::vector<Box> boxes = run_boxes(shape, first, count);
      CHECK(boxes.size() <= 6);
      uint64_t at = first;
      for (const Box& b : boxes) {
        REQUIRE(is_run(b, shape));
        CHECK(first_element(b, shape) == at);
        at += b.numel();
      }
      CHECK(at == first + count);
    }
  CHECK(run_boxes({}, 0, 1).size() == 1);
}

TEST_CASE("views: the map view reads each output's byte ranges as the planner's map assembles them") {
  Checkpoint ck = open_checkpoint(kTitanDsv3 + "/run/step-2");
  MappedModel map = apply_key_map(load_key_map("torchtitan-deepseek-v3"), ck.md, select_items(ck.md, {}),
                                  ModelConfig(kTitanDsv3 + "/config.json", "").map(ck.dir));
  Checkpoint view = mapped_view(ck, map, MapTable::Read);
  REQUIRE(view.md.tensors.size() == map.tensors.size());
  REQUIRE(view.derived);
  CHECK(view.derived->views["map"]["name"] == "torchtitan-deepseek-v3");
  CHECK(view.derived->parts.empty());  // read as tensors by the view above
  // The written table: the inputs held, each output filled from its parts as the planner plans it.
  Checkpoint written = mapped_view(ck, map, MapTable::Written);
  REQUIRE(written.md.tensors.size() > ck.md.tensors.size());
  CHECK(written.derived->parts.size() == map.tensors.size());
  ItemReader held(written), mapped(view);
  WindowReader windows(held, nullptr);
  std::mt19937 rng(7);
  size_t assembled = 0, renamed = 0, reshaped = 0;
  for (size_t i = 0; i < map.tensors.size(); ++i) {
    const MappedTensor& mt = map.tensors[i];
    const TensorMeta& t = view.md.tensors[i];
    REQUIRE(t.fqn == mt.meta.fqn);
    const uint64_t bytes = mt.meta.numel() * itemsize(*mt.meta.dtype);
    std::vector<uint8_t> want(bytes), scratch(bytes);
    windows.fill(mt.meta, Window{0, mt.meta.numel()}, want.data(), scratch.data());
    if (renames_whole(ck.md, mt)) {  // the saved tensor renamed: its chunks, read as saved
      ++renamed;
      CHECK_FALSE(view.derived->find(t.fqn));
      CHECK(t.num_chunks() == ck.md.tensors[mt.parts[0].tensor].num_chunks());
      continue;
    }
    ++assembled;
    REQUIRE(t.num_chunks() == 1);
    REQUIRE(view.derived->find(t.fqn));
    CHECK_FALSE(mapped.readable_in_place(t, 0));
    std::vector<uint8_t> got(bytes);
    mapped.read_chunk(t, 0, got.data());
    CHECK(got == want);
    for (int k = 0; k < 8; ++k) {  // byte ranges, whole elements or not
      const uint64_t from = rng() % bytes, n = rng() % (bytes - from + 1);
      std::vector<uint8_t> part(n);
      mapped.read_chunk_bytes(t, 0, from, n, part.data());
      CHECK(std::equal(part.begin(), part.end(), want.begin() + static_cast<std::ptrdiff_t>(from)));  // n may be 0
    }
    CHECK(view.derived->working_bytes(t, 0) > 0);
    // Its chunk is its own (no saved item holds it): described as computed, its dtype and shape.
    TensorBlob b = mapped.describe_chunk(t, 0);
    CHECK(b.dtype == *t.dtype);
    CHECK(b.size == t.shape);
    CHECK(b.contiguous());
    const TensorMeta& first = ck.md.tensors[mt.parts[0].tensor];
    if (t.shape != std::vector<int64_t>(first.chunk_sizes(0), first.chunk_sizes(0) + first.ndim())) ++reshaped;
  }
  CHECK(reshaped >= 2);   // the joined / unstacked outputs, unlike their first part's first chunk
  CHECK(assembled >= 4);  // the unstacked experts, the joined / permuted attention weights
  CHECK(renamed >= 4);
}

TEST_CASE("views: a quantized weight over the map view counts the map's read under it (--max-memory)") {
  Checkpoint ck = open_checkpoint(kTitanDsv3 + "/run/step-2");
  ModelRequest rq = titan_dsv3_request();
  rq.quantize.scheme = "fp8-block";
  Model model = build_model(ck, rq);
  const Checkpoint& view = model.checkpoint();
  REQUIRE(view.derived);
  Target target;  // one .safetensors file
  WritePlan plan = plan_write(view, {}, std::nullopt, target);
  size_t over_parts = 0;
  for (const PlannedTensor& pt : plan.tensors) {
    const DerivedTable::Entry* e = view.derived->find(pt.t->fqn);
    if (!e || !e->inputs) continue;
    // A quantized weight whose weight the map assembles from parts (a derived tensor of the map's table).
    const TensorMeta& w = e->tensor->follows();
    if (!e->inputs->find(w.fqn)) continue;
    uint64_t map_read = 0;
    for (size_t c = 0; c < w.num_chunks(); ++c) map_read = std::max(map_read, e->inputs->working_bytes(w, c));
    REQUIRE(map_read > 0);
    ++over_parts;
    for (size_t ri : pt.records) {
      Record& r = plan.records[ri];
      for (const Piece& p : r.pieces)
        CHECK(view.derived->working_bytes(*p.source, p.chunk) == e->tensor->working_bytes(p.chunk) + map_read);
      Record plain = r;
      CHECK(r.need >= record_need(pt, plain, target, 0, nullptr) + e->tensor->working_bytes(0) + map_read);
    }
  }
  CHECK(over_parts >= 2);  // the unstacked experts, the joined attention weights
}

TEST_CASE("views: the written map table holds an input named as another output apart, and reads both") {
  // A map that names its outputs as other inputs: down.weight <- qkv.weight transposed (computed),
  // up.weight <- proj.weight (renamed); the inputs down.weight and up.weight are held beside them.
  char name[] = "/tmp/dcpctl-map-XXXXXX.json";
  const int fd = ::mkstemps(name, 5);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(name) << R"({"schema": "dcpctl-map/1", "name": "swap", "sides": ["a", "b"], "rules": [
    {"a": "app.model.layers.{L}.down.weight", "b": "m.layers.{L}.up.weight", "transpose": true},
    {"a": "app.model.layers.{L}.up.weight", "b": "m.layers.{L}.proj.weight"},
    {"a": "app.model.layers.{L}.proj.weight", "b": "app.model.layers.{L}.up.weight"},
    {"a": "app.model.layers.{L}.qkv.weight", "b": "app.model.layers.{L}.down.weight", "transpose": true}]})";
  const KeyMap km = load_key_map(name);
  std::remove(name);
  Checkpoint ck = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/sample/ckpt");
  Selection sel;
  sel.include = {"*.down.weight", "*.up.weight", "*.proj.weight", "*.qkv.weight"};
  MappedModel map = apply_key_map(km, ck.md, select_items(ck.md, sel), MapConfig{});
  const Checkpoint written = mapped_view(ck, map, MapTable::Written), read = mapped_view(ck, map, MapTable::Read);
  ItemReader saved(ck), in_written(written), in_read(read);
  WindowReader windows(in_written, nullptr);
  size_t apart = 0;
  for (size_t i = 0; i < ck.md.tensors.size(); ++i) {  // every input held at its index, read as itself
    const TensorMeta &s = ck.md.tensors[i], &h = written.md.tensors[i];
    if (h.fqn != s.fqn) {
      CHECK(h.fqn == s.fqn + " (input of --map)");
      ++apart;
    }
    if (!s.dtype || s.numel() == 0) continue;
    std::vector<uint8_t> want(s.nbytes()), got(s.nbytes()), scratch(s.nbytes());
    WindowReader plain(saved, nullptr);
    plain.fill(s, Window{0, s.numel()}, want.data(), scratch.data());
    windows.fill(h, Window{0, h.numel()}, got.data(), scratch.data());
    CHECK(got == want);
  }
  CHECK(apart == 4);  // down.weight and up.weight of both layers
  WindowReader computed(in_read, nullptr);
  for (const TensorMeta& t : read.md.tensors) {  // each output: from its parts = as the view computes it
    std::vector<uint8_t> want(t.nbytes()), got(t.nbytes()), scratch(t.nbytes());
    computed.fill(t, Window{0, t.numel()}, want.data(), scratch.data());
    windows.fill(t, Window{0, t.numel()}, got.data(), scratch.data());
    CHECK(got == want);
  }
  // Planned from the held inputs: a record's pieces point at them.
  WritePlan plan = plan_write(written, {}, std::nullopt, Target{});
  REQUIRE(plan.tensors.size() == map.tensors.size());
  for (const Record& r : plan.records)
    for (const Piece& p : r.pieces)
      CHECK((p.source >= written.md.tensors.data() && p.source < written.md.tensors.data() + ck.md.tensors.size()));
}

TEST_CASE("plan: the dry run's rendered plan is the JSON tree's text, byte for byte (mapped and saved pieces)") {
  // --dry-run --json renders every record's pieces as text (WritePlan::render) and splices it into
  // the summary's dump (dump_summary): it must print what json::dump(2) of the tree prints.
  Checkpoint mapped_ck = open_checkpoint(kTitanDsv3 + "/run/step-2");
  Model model = build_model(mapped_ck, titan_dsv3_request());
  Checkpoint saved = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/sample/ckpt");
  Target sharded;
  sharded.max_shard_size = 1 << 20;
  // A piece's input named so that json::dump escapes it (a quote, a backslash, a control
  // character, UTF-8): the text's slow path.
  Checkpoint written = model.checkpoint();
  const WritePlan first = plan_write(written, {}, std::nullopt, sharded);
  REQUIRE((!first.records.empty() && !first.records[0].pieces.empty()));
  const TensorMeta* in = first.records[0].pieces[0].source;
  REQUIRE((in >= written.md.tensors.data() && in < written.md.tensors.data() + written.md.tensors.size()));
  written.md.tensors[static_cast<size_t>(in - written.md.tensors.data())].fqn += "\"\\\x02\xc3\xa9";
  for (const Checkpoint* ck : std::vector<const Checkpoint*>{&written, &saved}) {
    WritePlan plan = plan_write(*ck, {}, std::nullopt, sharded);
    REQUIRE(plan.records.size() >= 2);
    bool mapped = false;
    for (const PlannedTensor& pt : plan.tensors) mapped = mapped || pt.mapped;
    CHECK(mapped == (ck != &saved));
    if (mapped)
      CHECK(plan.describe().at(0).at("pieces").at(0).at("tensor").get<std::string>().find("\xc3\xa9") !=
            std::string::npos);
    // A key json::dump escapes.
    plan.tensors[plan.records[0].tensor].key = "a\"b\\c\x01\xc3\xa9";
    const nlohmann::json tree = plan.describe();
    REQUIRE(tree.at(0).at("pieces").size() >= 1);
    for (unsigned indent : {0u, 2u, 6u}) {
      const std::string pad(indent, ' ');
      // The tree dumped at that depth: an object's member, `indent` spaces in.
      std::string want = tree.dump(2);
      for (size_t at = want.find('\n'); at != std::string::npos; at = want.find('\n', at + 1)) want.insert(at + 1, pad);
      CHECK(plan.render(indent) == want);
    }
    nlohmann::json summary = {
        {"schema_version", 1}, {"tensors", plan.tensors.size()}, {"deal", {{"lanes", 4}}}, {"zz", "last"}};
    nlohmann::json rendered = summary;
    summary["plan"] = tree;
    rendered["plan"] = plan.render(2);
    rendered["deal"] = "{\n    \"lanes\": 4\n  }";
    rendered[kRenderedPlan] = true;
    std::ostringstream os;
    dump_summary(rendered, os);
    CHECK(os.str() == summary.dump(2) + "\n");
    // Without the mark the summary is dumped as it is.
    std::ostringstream plain;
    dump_summary(summary, plain);
    CHECK(plain.str() == summary.dump(2) + "\n");
  }
  // No records: an empty array.
  WritePlan none;
  CHECK(none.render(2) == "[]");
}
