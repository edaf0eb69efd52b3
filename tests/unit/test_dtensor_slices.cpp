// DTensor's placement rule as runs of global indices (item/dtensor_slices.h), against what torch
// 2.15 computes: the expected index lists are the output of each placement's own _split_tensor
// applied mesh dim by mesh dim to torch.arange (Shard, _StridedShard), printed by torch and copied
// here. The (dp, tp) = (0, 1) case is the one a reader computing _StridedShard as a plain Shard gets
// wrong (rows 9-16 instead of 17-24).
#include <catch2/catch.hpp>

#include "item/dtensor_slices.h"

using namespace dcpctl;

namespace {

std::vector<int64_t> indices(int64_t n, std::vector<int64_t> mesh, std::vector<int64_t> coord,
                             std::vector<MeshPlacement> pl) {
  std::vector<IndexRuns> runs = local_index_runs({n}, mesh, coord, pl, Where("test"));
  std::vector<int64_t> out;
  for (const IndexRun& r : runs.at(0))
    for (int64_t i = 0; i < r.length; ++i) out.push_back(r.start + i);
  return out;
}

std::vector<int64_t> range(int64_t a, int64_t b) {
  std::vector<int64_t> v;
  for (int64_t i = a; i < b; ++i) v.push_back(i);
  return v;
}

const MeshPlacement kShard0{MeshPlacement::Shard, 0, 1};
MeshPlacement strided(int64_t f) {
  return {MeshPlacement::StridedShard, 0, f};
}

}  // namespace

TEST_CASE("Shard(0): torch.chunk pieces, 33 rows over 2 = 17 + 16", "[dtensor_slices]") {
  CHECK(indices(33, {2}, {0}, {kShard0}) == range(0, 17));
  CHECK(indices(33, {2}, {1}, {kShard0}) == range(17, 33));
  CHECK(indices(3, {4}, {3}, {kShard0}).empty());  // ceil(3/4) = 1: the fourth piece is empty
}

TEST_CASE("_StridedShard then Shard on a (dp, tp) mesh: FSDP2 over tensor parallel", "[dtensor_slices]") {
  std::vector<MeshPlacement> pl = {strided(2), kShard0};
  CHECK(indices(33, {2, 2}, {0, 0}, pl) == range(0, 9));
  CHECK(indices(33, {2, 2}, {0, 1}, pl) == range(17, 25));
  CHECK(indices(33, {2, 2}, {1, 0}, pl) == range(9, 17));
  CHECK(indices(33, {2, 2}, {1, 1}, pl) == range(25, 33));
  // Computed as plain Shard, (0, 1) would be rows 9-16.
  CHECK(indices(33, {2, 2}, {0, 1}, {kShard0, kShard0}) == range(9, 17));
}

TEST_CASE("_StridedShard alone: runs that are not adjacent", "[dtensor_slices]") {
  CHECK(indices(9, {4}, {0}, {strided(2)}) == std::vector<int64_t>{0, 1, 5});
  CHECK(indices(9, {4}, {1}, {strided(2)}) == std::vector<int64_t>{2, 3, 6});
  CHECK(indices(9, {4}, {2}, {strided(2)}) == std::vector<int64_t>{4, 7});
  CHECK(indices(9, {4}, {3}, {strided(2)}) == std::vector<int64_t>{8});
  CHECK(indices(10, {2}, {0}, {strided(3)}) == std::vector<int64_t>{0, 1, 4, 5, 8});
  CHECK(indices(10, {2}, {1}, {strided(3)}) == std::vector<int64_t>{2, 3, 6, 7, 9});
  std::vector<IndexRuns> runs = local_index_runs({10, 4}, {2}, {0}, {strided(3)}, Where("test"));
  CHECK(runs.at(0).size() == 3);
  CHECK(local_shape(runs) == std::vector<int64_t>{5, 4});
}

TEST_CASE("Replicate and bad placements", "[dtensor_slices]") {
  MeshPlacement rep;
  CHECK(local_shape(local_index_runs({10, 4}, {2}, {1}, {rep}, Where("t"))) == std::vector<int64_t>{10, 4});
  CHECK_THROWS_AS(local_index_runs({10}, {2}, {0}, {MeshPlacement{MeshPlacement::Shard, 1, 1}}, Where("t")),
                  FormatError);
  CHECK_THROWS_AS(local_index_runs({10}, {2}, {2}, {kShard0}, Where("t")), FormatError);
  CHECK_THROWS_AS(local_index_runs({10}, {2}, {0}, {strided(0)}, Where("t")), FormatError);
  CHECK_THROWS_AS(local_index_runs({10}, {2, 2}, {0, 0}, {kShard0}, Where("t")), FormatError);
}
