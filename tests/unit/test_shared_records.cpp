// Keys that share one stored record (meta/shared_records.h) against items that overlap: the
// real case first (verl 0.9.1's FSDP2 rank files of a tied Llama, tests/fixtures/layouts/
// verl_fsdp2_tied: lm_head.weight IS model.embed_tokens.weight, one storage record per rank file),
// then that checkpoint's metadata damaged, then in-memory checkpoints for the rules one by one.
#include <catch2/catch.hpp>

#include <set>

#include "item/torch_file.h"
#include "meta/checkpoint.h"
#include "meta/shared_records.h"
#include "meta/structure.h"
#include "metadata_models.h"

using namespace dcpctl;

namespace {

const char* const kEmbed = "model.embed_tokens.weight";
const char* const kHead = "lm_head.weight";

Checkpoint open_tied() {
  install_item_readers();
  return open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/layouts/verl_fsdp2_tied/ckpt");
}

TensorMeta& find(Checkpoint& ck, const std::string& fqn) {
  for (auto& t : ck.md.tensors)
    if (t.fqn == fqn) return t;
  FAIL("no tensor " << fqn);
  throw;
}

std::vector<std::string> codes(const Findings& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs) out.push_back(f.code);
  return out;
}

// One data file of `size` bytes holding one-chunk tensors at the given windows.
Checkpoint windows(const std::vector<std::tuple<std::string, uint64_t, uint64_t>>& ws, uint64_t size = 1000) {
  std::vector<TensorMeta> ts;
  for (const auto& [fqn, offset, length] : ws) {
    TensorMeta t = tensor(fqn, {static_cast<int64_t>(length)}, {{0, static_cast<int64_t>(length)}}, DType::UInt8);
    t.storage[0].offset = offset;
    t.storage[0].length = length;
    t.storage[0].format = ItemFormat::Raw;
    ts.push_back(std::move(t));
  }
  Checkpoint ck = checkpoint(std::move(ts));
  ck.files.push_back({ck.md.files[0], size, "", false});
  return ck;
}

}  // namespace

TEST_CASE("shared records: verl's FSDP2 rank files of a tied model are one record per rank, not an overlap",
          "[shared]") {
  Checkpoint ck = open_tied();
  StructureReport r = check_structure(ck);
  INFO((r.problems.empty() ? std::string() : r.problems.front().text()));
  CHECK(r.problems.empty());
  REQUIRE(r.shared.size() == 1);
  const SharedRecord& s = r.shared[0];
  CHECK(s.keys == std::vector<std::string>{kHead, kEmbed});
  CHECK(s.same_bytes);
  REQUIRE(s.places.size() == 2);  // one record in each rank's file
  CHECK(s.places[0].file != s.places[1].file);
  CHECK(shared_text(ck, s).find("in each of 2 files") != std::string::npos);
  // The record is watched once, however many keys name it.
  std::set<std::pair<uint32_t, uint64_t>> seen;
  for (const auto& rc : ck.record_crcs) CHECK(seen.insert({rc.file, rc.offset}).second);
  // Read once: the head's data is the embedding's.
  std::vector<std::optional<size_t>> alias = same_data_as(ck.md);
  size_t embed = 0, head = 0, aliases = 0;
  for (size_t i = 0; i < ck.md.tensors.size(); ++i) {
    if (ck.md.tensors[i].fqn == kEmbed) embed = i;
    if (ck.md.tensors[i].fqn == kHead) head = i;
    aliases += alias[i].has_value();
  }
  CHECK(aliases == 1);
  CHECK(alias[std::max(embed, head)] == std::min(embed, head));
}

TEST_CASE("shared records: the tied fixture's head moved to straddle its record is window-overlap", "[shared]") {
  Checkpoint ck = open_tied();
  TensorMeta& head = find(ck, kHead);
  // Rank 0's shard is its whole record (18 of 35 rows): two bytes on, the window runs past the
  // record's end into the next one, and no longer is the embedding's record or a view in it.
  StorageRef& r = head.storage.at(0);
  bool whole = false;
  for (const auto& rc : ck.record_crcs)
    whole = whole || (rc.file == r.file && rc.offset == r.offset && rc.size == r.length);
  REQUIRE(whole);
  r.offset += 2;
  StructureReport rep = check_structure(ck);
  REQUIRE(codes(rep.problems) == std::vector<std::string>{"window-overlap"});
  CHECK(rep.problems[0].where.key == kHead);
  CHECK(rep.problems[0].message.find(kEmbed) != std::string::npos);
  // Still shared in the other rank's file, untouched.
  REQUIRE(rep.shared.size() == 1);
  CHECK(rep.shared[0].places.size() == 1);
  CHECK(same_data_as(ck.md) == std::vector<std::optional<size_t>>(ck.md.tensors.size()));
}

TEST_CASE("shared records: the tied fixture's head made a view inside the record is shared, not the same bytes",
          "[shared]") {
  Checkpoint ck = open_tied();
  TensorMeta& head = find(ck, kHead);
  // Rank 1's shard (17 rows) views the first rows of a record of the padded shard size (18 rows):
  // one row on, the window is still inside the record, as a view x[1:] of one storage would be.
  StorageRef& r = head.storage.at(1);
  const Checkpoint::RecordCrc* rec = nullptr;
  for (const auto& rc : ck.record_crcs)
    if (rc.file == r.file && rc.offset <= r.offset && r.offset + r.length <= rc.offset + rc.size) rec = &rc;
  REQUIRE(rec);
  const uint64_t row = r.length / 17;
  REQUIRE(r.offset + row + r.length <= rec->offset + rec->size);
  r.offset += row;
  StructureReport rep = check_structure(ck);
  CHECK(rep.problems.empty());
  REQUIRE(rep.shared.size() == 1);
  CHECK_FALSE(rep.shared[0].same_bytes);
  CHECK(shared_text(ck, rep.shared[0]).find("views of one stored record") != std::string::npos);
}

TEST_CASE("shared records: the same item named by two keys is shared, a partial overlap is window-overlap",
          "[shared]") {
  SECTION("the same window") {
    StructureReport r = check_structure(windows({{"a", 0, 64}, {"b", 0, 64}, {"c", 64, 36}}));
    CHECK(r.problems.empty());
    REQUIRE(r.shared.size() == 1);
    CHECK(r.shared[0].keys == std::vector<std::string>{"a", "b"});
    CHECK(r.shared[0].same_bytes);
    CHECK(r.shared[0].places.at(0).offset == 0);
    CHECK(r.shared[0].places.at(0).length == 64);
  }
  SECTION("a partial overlap") {
    StructureReport r = check_structure(windows({{"a", 0, 64}, {"b", 32, 64}}));
    CHECK(codes(r.problems) == std::vector<std::string>{"window-overlap"});
    CHECK(r.problems.at(0).where.key == "b");
    CHECK(r.shared.empty());
  }
  SECTION("one window inside another, with no record around them") {
    StructureReport r = check_structure(windows({{"a", 0, 64}, {"b", 16, 16}}));
    CHECK(codes(r.problems) == std::vector<std::string>{"window-overlap"});
  }
  SECTION("the same window as one that is overlapped: each overlap is reported") {
    StructureReport r = check_structure(windows({{"a", 0, 64}, {"b", 0, 64}, {"c", 60, 10}}));
    CHECK(codes(r.problems) == std::vector<std::string>{"window-overlap"});
    CHECK(r.problems.at(0).where.key == "c");
    CHECK(r.shared.size() == 1);
  }
  SECTION("an empty window overlaps nothing") {
    StructureReport r = check_structure(windows({{"a", 0, 64}, {"b", 10, 0}}));
    CHECK(r.problems.empty());
    CHECK(r.shared.empty());
  }
  SECTION("past the end of the file") {
    StructureReport r = check_structure(windows({{"a", 0, 64}, {"b", 0, 64}}, 32));
    CHECK(codes(r.problems) == std::vector<std::string>{"window-out-of-file", "window-out-of-file"});
  }
}

TEST_CASE("shared records: views inside one torch.save record are shared, a window across its end is not", "[shared]") {
  auto with_record = [](Checkpoint ck) {
    ck.record_crcs.push_back({0, 200, 100, 0, "a", "data/0"});
    ck.record_crcs.push_back({0, 200, 100, 0, "b", "data/0"});  // listed once per key: one record
    return ck;
  };
  SECTION("overlapping views") {
    StructureReport r = check_structure(with_record(windows({{"a", 200, 50}, {"b", 230, 70}, {"c", 0, 200}})));
    CHECK(r.problems.empty());
    REQUIRE(r.shared.size() == 1);
    CHECK(r.shared[0].keys == std::vector<std::string>{"a", "b"});
    CHECK_FALSE(r.shared[0].same_bytes);
    CHECK(r.shared[0].places.at(0).offset == 200);
    CHECK(r.shared[0].places.at(0).length == 100);
  }
  SECTION("a window across the record's end") {
    StructureReport r = check_structure(with_record(windows({{"a", 200, 50}, {"b", 290, 20}})));
    CHECK(codes(r.problems) == std::vector<std::string>{"window-overlap"});
    CHECK(r.problems.at(0).where.key == "b");
    CHECK(r.shared.empty());
  }
  SECTION("one key's windows in a record share nothing") {
    StructureReport r = check_structure(with_record(windows({{"a", 200, 50}, {"a", 250, 50}})));
    CHECK(r.problems.empty());
    CHECK(r.shared.empty());
  }
}
