// Chunk geometry (plan/geometry: does a set of chunks tile a tensor?) and key selection
// (plan/select: --select, --include, --exclude), on metadata models built in memory.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "meta/geometry.h"
#include "meta/select.h"
#include "util/error.h"

using namespace dcpctl;

namespace {

// A tensor of `shape` split into `chunks`, each {offsets..., sizes...}.
TensorMeta tensor(std::vector<int64_t> shape, std::vector<std::vector<int64_t>> chunks) {
  TensorMeta t;
  t.fqn = "w";
  t.dtype = DType::Float32;
  t.dtype_name = "float32";
  t.shape = shape;
  for (const auto& c : chunks) {
    REQUIRE(c.size() == 2 * shape.size());
    t.chunk_dims.insert(t.chunk_dims.end(), c.begin(), c.end());
    StorageRef r;
    r.file = 0;
    t.storage.push_back(r);
  }
  return t;
}

}  // namespace

TEST_CASE("geometry: row shards over 4 tile exactly") {
  TensorMeta t = tensor({8, 3}, {{0, 0, 2, 3}, {2, 0, 2, 3}, {4, 0, 2, 3}, {6, 0, 2, 3}});
  Coverage c = check_coverage(t);
  CHECK(c.exact);
  CHECK(c.missing_elements == 0);
  CHECK(c.overlap_elements == 0);
  CHECK(c.empty_chunks == 0);
  CHECK(describe_sharding(t) == "Shard(0) over 4");
}

TEST_CASE("geometry: a 2x2 grid, and an uneven split with an empty shard at offset == shape") {
  TensorMeta grid = tensor({4, 6}, {{0, 0, 2, 3}, {0, 3, 2, 3}, {2, 0, 2, 3}, {2, 3, 2, 3}});
  CHECK(check_coverage(grid).exact);
  CHECK(describe_sharding(grid) == "2x2 grid (Shard(0), Shard(1))");
  // torch.chunk of 5 rows over 4 ranks: 2, 2, 1, then an empty shard DCP writes at offset 5.
  TensorMeta uneven = tensor({5, 2}, {{0, 0, 2, 2}, {2, 0, 2, 2}, {4, 0, 1, 2}, {5, 0, 0, 2}});
  Coverage c = check_coverage(uneven);
  CHECK(c.exact);
  CHECK(c.empty_chunks == 1);
  CHECK(c.out_of_bounds.empty());
  CHECK(describe_sharding(uneven) == "Shard(0) over 4 (1 empty)");
}

TEST_CASE("geometry: a hole is reported with its box and element count") {
  TensorMeta t = tensor({6, 4}, {{0, 0, 2, 4}, {4, 0, 2, 4}});
  Coverage c = check_coverage(t);
  CHECK_FALSE(c.exact);
  CHECK(c.missing_elements == 8);
  CHECK(c.overlap_elements == 0);
  REQUIRE(c.holes.size() == 1);
  CHECK(c.holes[0].text() == "[2:4, 0:4]");
  CHECK(c.holes[0].numel() == 8);
}

TEST_CASE("geometry: overlaps are counted once per element and name the pair") {
  TensorMeta t = tensor({4, 4}, {{0, 0, 3, 4}, {2, 0, 2, 4}});
  Coverage c = check_coverage(t);
  CHECK_FALSE(c.exact);
  CHECK(c.overlap_elements == 4);  // row 2, four columns
  CHECK(c.missing_elements == 0);
  REQUIRE(c.overlaps.size() == 1);
  CHECK(c.overlaps[0] == std::make_pair<size_t, size_t>(0, 1));
}

TEST_CASE("geometry: chunks reaching outside the shape, or negative, are out of bounds") {
  TensorMeta t = tensor({4}, {{0, 3}, {3, 2}, {-1, 1}});
  Coverage c = check_coverage(t);
  CHECK_FALSE(c.exact);
  CHECK(c.out_of_bounds == std::vector<size_t>{1, 2});
  CHECK(c.missing_elements == 1);  // element 3: its only chunk is out of bounds
}

TEST_CASE("geometry: whole tensors, 0-d tensors and empty tensors") {
  CHECK(describe_sharding(tensor({3, 3}, {{0, 0, 3, 3}})) == "whole");
  TensorMeta scalar = tensor({}, {{}});
  CHECK(check_coverage(scalar).exact);
  CHECK(describe_sharding(scalar) == "whole");
  TensorMeta empty = tensor({0, 5}, {{0, 0, 0, 5}});
  CHECK(check_coverage(empty).exact);
  CHECK(describe_sharding(tensor({4}, {})) == "no chunks");
  CHECK(check_coverage(tensor({4}, {})).missing_elements == 4);
}

TEST_CASE("geometry: an irregular but exact tiling is exact and called irregular") {
  // Row 0 split in columns 0:1 | 1:3, rows 1:3 whole: offsets give a 2x2 grid of 3 chunks.
  TensorMeta t = tensor({3, 3}, {{0, 0, 1, 1}, {0, 1, 1, 2}, {1, 0, 2, 3}});
  CHECK(check_coverage(t).exact);
  CHECK(describe_sharding(t) == "irregular (3 chunks)");
}

namespace {

Metadata model() {
  Metadata md;
  md.source = "ck/.metadata";
  const char* tensors[] = {"app.model.layers.0.w", "app.model.layers.0.b", "app.model.embed",
                           "app.optim.state.0.exp_avg", "app.modelx.w"};
  for (const char* k : tensors) {
    TensorMeta t;
    t.fqn = k;
    md.order.push_back({true, static_cast<uint32_t>(md.tensors.size())});
    md.tensors.push_back(t);
  }
  BytesMeta b;
  b.fqn = "app.epoch";
  md.order.push_back({false, 0});
  md.bytes.push_back(b);
  // planner_data: the nesting as saved ({"app": {"model": {"layers": [{"w"...}]}}}).
  md.planner_data["app.model.layers.0.w"] = {
      {false, "app", 0}, {false, "model", 0}, {false, "layers", 0}, {true, "", 0}, {false, "w", 0}};
  return md;
}

std::vector<std::string> keys(const std::vector<SelectedItem>& items) {
  std::vector<std::string> out;
  for (const auto& s : items) out.push_back(s.key);
  return out;
}

}  // namespace

TEST_CASE("select: no selection keeps everything in state_dict order, tensors and bytes") {
  auto got = select_items(model(), Selection{});
  CHECK(keys(got) == std::vector<std::string>{"app.model.layers.0.w", "app.model.layers.0.b", "app.model.embed",
                                              "app.optim.state.0.exp_avg", "app.modelx.w", "app.epoch"});
  CHECK(got.back().tensor == false);
  CHECK(got.back().index == 0);
  CHECK(got[2].index == 2);
}

TEST_CASE("select: --select strips the prefix on a dot boundary only") {
  Selection s;
  s.prefix = "app.model";
  auto got = select_items(model(), s);
  // app.modelx.w shares the characters but not the path element: it is not selected.
  CHECK(keys(got) == std::vector<std::string>{"layers.0.w", "layers.0.b", "embed"});
  // The planner_data path loses the selected elements and keeps the nesting below them.
  REQUIRE(got[0].path.size() == 3);
  CHECK(got[0].path[0].key == "layers");
  CHECK(got[0].path[1].is_index);
  CHECK(got[0].path[1].index == 0);
  CHECK(got[0].path[2].key == "w");
  // Without planner_data the output key is one flat element.
  REQUIRE(got[1].path.size() == 1);
  CHECK(got[1].path[0].key == "layers.0.b");
}

TEST_CASE("select: --include/--exclude globs match the saved key or the output key") {
  Selection s;
  s.prefix = "app.model";
  s.include = {"layers.*"};  // matches output keys; '*' crosses dots
  s.exclude = {"*.b"};
  CHECK(keys(select_items(model(), s)) == std::vector<std::string>{"layers.0.w"});
  Selection t;
  t.include = {"app.optim.*", "app.epoch"};
  CHECK(keys(select_items(model(), t)) == std::vector<std::string>{"app.optim.state.0.exp_avg", "app.epoch"});
  Selection u;
  u.include = {"APP.*"};  // case-sensitive
  CHECK_THROWS_AS(select_items(model(), u), UsageError);
}

TEST_CASE("select: nothing selected is a usage error naming the selection") {
  Selection s;
  s.prefix = "app.nothere";
  s.exclude = {"x"};
  try {
    select_items(model(), s);
    FAIL("no error");
  } catch (const UsageError& e) {
    std::string m = e.what();
    CHECK(m.find("ck/.metadata") != std::string::npos);
    CHECK(m.find("nothing selected by --select app.nothere --exclude x") != std::string::npos);
  }
}
