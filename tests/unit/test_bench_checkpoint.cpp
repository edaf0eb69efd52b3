// bench: the tensor sizes of a checkpoint's rank, against torch's own view of the fixtures
// (expected.json, written by the torch that wrote the checkpoint).
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/layout.h"
#include "meta/checkpoint.h"
#include "util/error.h"

using namespace dcpctl;
using namespace dcpctl::bench;

namespace {

// rank -> in-memory bytes of the tensor chunks it wrote, from expected.json.
std::map<int, std::pair<uint64_t, uint64_t>> torch_view(const std::string& fixture) {
  std::ifstream f(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/" + fixture + "/expected.json");
  nlohmann::json j = nlohmann::json::parse(f);
  std::map<int, std::pair<uint64_t, uint64_t>> out;  // bytes, chunks
  for (const auto& [key, item] : j["keys"].items()) {
    if (item["kind"] != "tensor") continue;
    uint64_t numel = 1;
    for (const auto& d : item["shape"]) numel *= d.get<uint64_t>();
    if (numel == 0) continue;
    const uint64_t itemsize = item["nbytes"].get<uint64_t>() / numel;
    for (size_t i = 0; i < item["chunk_list"].size(); ++i) {
      uint64_t n = 1;
      for (const auto& d : item["chunk_list"][i]["sizes"]) n *= d.get<uint64_t>();
      auto r = rank_of_file(item["storage"][i]["file"].get<std::string>());
      REQUIRE(r);
      out[*r].first += n * itemsize;
      out[*r].second += 1;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("bench checkpoint: a rank's tensor chunks match torch's view", "[bench]") {
  for (const char* fixture : {"sample", "dtensor_2d_mesh", "multi_file", "all_dtypes_sharded"}) {
    INFO(fixture);
    const std::string dir = std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/" + fixture + "/ckpt";
    auto expected = torch_view(fixture);
    REQUIRE_FALSE(expected.empty());
    for (const auto& [rank, want] : expected) {
      INFO("rank " << rank);
      RankTensors rt = rank_tensors(dir, rank);
      CHECK(rt.bytes == want.first);
      CHECK(rt.sizes.size() == want.second);
      CHECK(rt.ranks.size() == expected.size());
    }
  }
}

TEST_CASE("bench checkpoint: a rank without data names the ranks that have some", "[bench]") {
  const std::string dir = std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/sample/ckpt";
  try {
    rank_tensors(dir, 7);
    FAIL("no throw");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("ranks with tensor data: 0,1") != std::string::npos);
  }
  CHECK_THROWS_AS(rank_tensors(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/no_such_fixture", 0), Error);
}
