// The one memory model (plan/memory.h), on metadata models built in memory: what reading a chunk
// holds, how a record's need splits into the executor's buffers, every process's need within its
// budget (automatic and given, with an exchange and with uploads), and the windows of the read
// side within --max-memory.
#include <catch2/catch.hpp>

#include <vector>

#include "item/item_reader.h"
#include "metadata_models.h"
#include "plan/deal.h"
#include "plan/memory.h"

using namespace dcpctl;

namespace {

// Two tensors of 40 and 120 bytes, each in two row shards saved by ranks 0 and 1.
Checkpoint two_ranks() {
  return checkpoint({tensor("a", {10}, {{0, 5}, {5, 5}}, DType::Float32, 2),
                     tensor("c", {30}, {{0, 15}, {15, 15}}, DType::Float32, 2)},
                    2);
}

Target safetensors_file() {
  Target t;
  t.format = &formats::safetensors;
  return t;
}

}  // namespace

TEST_CASE("memory: a chunk read whole holds what it is read from and its dense bytes") {
  Checkpoint ck = two_ranks();
  ck.md.transform_sets.push_back({"zstd"});
  const TensorMeta& c = ck.md.tensors[1];
  CHECK(chunk_bytes(c, 1) == 60);
  // Untransformed: read in place, or (a view that is not contiguous) gathered from its storage,
  // counted as the chunk's size.
  CHECK(decoded_item_need(c, 1) == 0);
  CHECK(whole_chunk_need(c, 1) == 120);
  CHECK(reader_need(c, 1) == 0);
  CHECK(reader_need(c, 1, 400) == 460);  // a view: its storage and a dense copy
  // zstd: the decoded item with the zip around it that the reader's cap allows.
  ck.md.tensors[1].storage[1].transforms = 1;
  const uint64_t zip = ItemLimits{}.zip_overhead;
  CHECK(decoded_item_need(c, 1) == 60 + zip);
  CHECK(whole_chunk_need(c, 1) == 120 + zip);
  CHECK(reader_need(c, 1) == 60 + zip);
  // A chunk whose item is not saved is not read: it holds nothing.
  ck.md.tensors[1].storage[1].file = StorageRef::kNone;
  CHECK(reader_need(c, 1) == 0);
}

TEST_CASE("memory: a record's need is its buffers, as the executor holds them") {
  Checkpoint ck = two_ranks();
  Target t;
  t.format = &formats::dcp;
  t.world_size = 3;  // rows 0-9 of c on rank 0: pieces of both source chunks, assembled
  WritePlan plan = plan_write(ck, {}, DType::BFloat16, t);
  for (const Record& r : plan.records) {
    const PlannedTensor& pt = plan.tensors[r.tensor];
    RecordBuffers b = record_buffers(pt, r);
    CHECK(b.raw == r.box.numel() * 4);
    CHECK(b.cast == r.box.numel() * 2);
    CHECK(b.raw + b.cast + b.rest == r.need);
    CHECK(r.need <= plan.largest_need);
  }
  CHECK(plan.budget == memory_budget(0, plan.largest_need));
  CHECK(memory_budget(0, 10) == 1ull << 30);
  CHECK(memory_budget(5000, 10) == 5000);
}

TEST_CASE("memory: every process's need is within its budget, automatic or given") {
  Checkpoint ck = two_ranks();
  ck.md.transform_sets.push_back({"zstd"});
  for (auto& t : ck.md.tensors) t.storage[1].transforms = 1;
  WritePlan plan = plan_write(ck, {}, std::nullopt, safetensors_file());
  Visibility vis = Visibility::everything(2, 2);
  vis.sees[0] = {true, false};  // rank 1 pushes file 1's zstd chunks to the writer
  DealRequest rq;
  rq.world = 2;
  rq.exchange = true;
  rq.visibility = &vis;
  rq.upload = true;
  for (bool given : {false, true}) {
    CAPTURE(given);
    WritePlan p = plan;
    if (given) {
      p.budget = 64ull << 20;
      rq.budget_given = true;
    }
    Deal d = deal_work(ck, p, rq);
    REQUIRE(d.memory.size() == 2);
    for (int r = 0; r < 2; ++r) {
      const ProcessMemory& m = d.memory[static_cast<size_t>(r)];
      CAPTURE(r);
      CHECK(m.total() <= d.budget);
      CHECK(m.budget == d.budget);
      CHECK(m.set_aside == d.set_aside[static_cast<size_t>(r)]);
      CHECK(m.upload == d.upload_bytes(r));
      CHECK(d.gate_bytes(r) == d.budget - m.set_aside - m.upload);
    }
    CHECK(d.memory[0].buffers == p.largest_need);  // rank 0 writes
    CHECK(d.memory[1].buffers == 0);               // rank 1 only pushes
    CHECK(d.memory[1].set_aside == whole_chunk_need(ck.md.tensors[1], 1));
    CHECK(d.memory[0].upload > 0);
    CHECK(d.describe()["per_process"][1]["memory"]["set_aside"] == d.memory[1].set_aside);
  }
}

TEST_CASE("memory: read-side windows stay within the budget over their threads") {
  // diff and stats: threads * elements * bytes per element within the budget, at least one element,
  // at most --window-bytes.
  for (uint64_t budget : {uint64_t{1}, uint64_t{1000}, uint64_t{1} << 20, uint64_t{1} << 34})
    for (unsigned threads : {1u, 2u, 16u}) {
      uint64_t e = window_elems(64ull << 20, 4, budget, threads, 12);
      CAPTURE(budget, threads, e);
      CHECK(e >= 1);
      CHECK(e <= (64ull << 20) / 4);
      if (e > 1) CHECK(e * threads * 12 <= budget);
    }
  // verify: half of what is left beside the reader's own allocations, at most 32 MiB, at least
  // an element; at least the largest chunk when chunks are decoded whole.
  CHECK(verify_window_bytes(1000, 0, 0, 4) == 500);
  CHECK(verify_window_bytes(1ull << 40, 0, 0, 4) == 32ull << 20);
  CHECK(verify_window_bytes(10, 100, 0, 4) == 4);
  CHECK(verify_window_bytes(1000, 100, 4000, 4) == 4000);
  // zstd somewhere: window buffers take half the budget, decoded chunks shared by windows the rest.
  Checkpoint ck = two_ranks();
  CHECK(window_budget(ck.md, 1000) == 1000);
  ck.md.transform_sets.push_back({"zstd"});
  ck.md.tensors[0].storage[0].transforms = 1;
  CHECK(window_budget(ck.md, 1000) == 500);
}
