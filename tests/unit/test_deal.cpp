// Dealing a plan to processes (plan/deal.h), on metadata models built in memory: the one dealing
// rule, output files to writers, tasks and lanes, chunk transfers under --local-files, the memory
// set aside for zstd chunks pushed whole and the budget refusals, and the plan digest the ranks
// agree on; and how the executor groups a writer's tasks to share their reads
// (write/shared_reads.h: join_runs, group_tasks).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "metadata_models.h"
#include "plan/deal.h"
#include "plan/memory.h"
#include "util/error.h"
#include "write/shared_reads.h"

using namespace dcpctl;

namespace {

// Three tensors of 40, 40 and 120 bytes, each in two row shards saved by ranks 0 and 1.
Checkpoint two_rank_checkpoint() {
  return checkpoint(
      {tensor("a", {10}, {{0, 5}, {5, 5}}, DType::Float32, 2), tensor("b", {10}, {{0, 5}, {5, 5}}, DType::Float32, 2),
       tensor("c", {30}, {{0, 15}, {15, 15}}, DType::Float32, 2)},
      2);
}

Target hf_dir(uint64_t shard) {
  Target t;
  t.format = &formats::hf_folder;
  t.max_shard_size = shard;
  return t;
}

}  // namespace

TEST_CASE("deal: least_loaded takes the least loaded eligible rank, ties to the lowest") {
  std::vector<uint64_t> load{5, 3, 3, 0};
  CHECK(least_loaded(load, 10, [](int r) { return r != 3; }) == 1);  // 1 and 2 tie at 3: the lowest
  CHECK(load == std::vector<uint64_t>{5, 13, 3, 0});
  CHECK(least_loaded(load, 1, [](int) { return true; }) == 3);
  CHECK(least_loaded(load, 1, [](int) { return false; }) == -1);
  CHECK(load == std::vector<uint64_t>{5, 13, 3, 1});
}

TEST_CASE("deal: files go to writers by bytes with --parallel-write, else all to rank 0") {
  Checkpoint ck = two_rank_checkpoint();
  WritePlan plan = plan_write(ck, {}, std::nullopt, hf_dir(40));  // three shards: 40, 40, 120 bytes
  REQUIRE(plan.files.size() == 3);
  DealRequest rq;
  rq.world = 2;
  rq.lanes = 2;
  Deal rank0 = deal_work(ck, plan, rq);
  CHECK(rank0.writer_of == std::vector<int>{0, 0, 0});
  CHECK(rank0.files_of(1).empty());
  rq.parallel_write = true;
  Deal spread = deal_work(ck, plan, rq);
  CHECK(spread.writer_of == std::vector<int>{0, 1, 0});  // 40 -> 0, 40 -> 1, 120 -> 0 (tie, lowest)
  CHECK(spread.files_of(0) == std::vector<size_t>{0, 2});
  // Tasks are listed writer by writer; each record is runs (row shards), one task per piece,
  // lanes dealt round-robin per writer.
  std::vector<int> writers;
  for (const Task& t : spread.tasks) writers.push_back(t.writer);
  CHECK(std::is_sorted(writers.begin(), writers.end()));
  CHECK(spread.tasks.size() == 6);
  for (const Task& t : spread.tasks) {
    CHECK(!t.whole);
    CHECK(t.chunks.size() == 1);
    CHECK(spread.writer_of[plan.records[t.record].dest] == t.writer);
  }
  CHECK(spread.tasks[0].lane == 0);
  CHECK(spread.tasks[1].lane == 1);
  CHECK(spread.tasks[2].lane == 0);
  CHECK(spread.transfers.empty());  // no exchange asked for
}

TEST_CASE("deal: a hashed output's runs are dealt as consecutive windows, lane after lane") {
  Checkpoint ck = two_rank_checkpoint();                            // chunks of 20, 20, 20, 20, 60, 60 bytes
  WritePlan plan = plan_write(ck, {}, std::nullopt, hf_dir(1000));  // one shard
  DealRequest rq;
  rq.lanes = 3;
  const size_t whole = deal_work(ck, plan, rq).tasks.size();
  CHECK(whole == 6);
  rq.hash_window = 16;
  Deal d = deal_work(ck, plan, rq);
  // 20 bytes: windows of 16 and 4; 60 bytes: 16, 16, 16, 12. In the chunks' order, each window
  // at the next lane, so the lanes write near one another through the file.
  REQUIRE(d.tasks.size() == 4 * 2 + 2 * 4);
  size_t i = 0;
  for (size_t ri = 0; ri < plan.records.size(); ++ri)
    for (const Piece& p : plan.records[ri].pieces) {
      const uint64_t bytes = p.source->chunk_numel(p.chunk) * 4;
      for (uint64_t from = 0; from < bytes; from += 16, ++i) {
        const Task& t = d.tasks[i];
        CHECK(t.record == ri);
        CHECK(t.chunks.front().chunk == p.chunk);
        CHECK(t.from == from);
        CHECK(t.bytes == std::min<uint64_t>(16, bytes - from));
        CHECK(t.lane == i % 3);
      }
    }
  CHECK(i == d.tasks.size());
  rq.hash_window = 64;  // every chunk within one window: whole chunks, as without
  CHECK(deal_work(ck, plan, rq).tasks.size() == whole);
}

TEST_CASE("deal: a DCP checkpoint's rank files are dealt to the processes by bytes") {
  Checkpoint ck = checkpoint({tensor("w", {40}, {{0, 40}})});
  Target dcp;
  dcp.format = &formats::dcp;
  dcp.world_size = 4;
  WritePlan plan = plan_write(ck, {}, std::nullopt, dcp);
  REQUIRE(plan.files.size() == 4);
  DealRequest rq;
  rq.world = 3;
  Deal d = deal_work(ck, plan, rq);
  CHECK(d.writer_of == std::vector<int>{0, 1, 2, 0});
  CHECK(d.tasks.empty());  // a rank file is written record by record, by one thread
  rq.world = 1;
  CHECK(deal_work(ck, plan, rq).writer_of == std::vector<int>{0, 0, 0, 0});
}

TEST_CASE("deal: chunks are read by ranks that see their file, the writer itself with --parallel-write") {
  Checkpoint ck = two_rank_checkpoint();
  WritePlan plan = plan_write(ck, {}, std::nullopt, hf_dir(1000));  // one shard
  Visibility vis = Visibility::everything(3, 2);
  vis.sees[0] = {false, false};  // rank 0 (the writer) sees neither file
  vis.sees[1] = {true, false};
  vis.sees[2] = {true, true};
  DealRequest rq;
  rq.world = 3;
  rq.exchange = true;
  rq.visibility = &vis;
  Deal d = deal_work(ck, plan, rq);
  REQUIRE(d.transfers.size() == 6);
  for (const Transfer& tr : d.transfers) {
    const TensorMeta& t = ck.md.tensors[tr.tensor];
    CHECK(vis.can_read(tr.owner, t.storage[tr.chunk].file));
    CHECK(tr.writer == 0);
    if (t.storage[tr.chunk].file == 1) CHECK(tr.owner == 2);  // only rank 2 sees file 1
  }
  // File 0's chunks alternate between ranks 1 and 2 as their loads grow.
  int ones = 0;
  for (const Transfer& tr : d.transfers) ones += tr.owner == 1;
  CHECK(ones >= 1);

  // With --parallel-write a writer that sees the chunk's file reads it itself.
  Visibility all = Visibility::everything(2, 2);
  rq.world = 2;
  rq.parallel_write = true;
  rq.visibility = &all;
  WritePlan shards = plan_write(ck, {}, std::nullopt, hf_dir(40));
  Deal pw = deal_work(ck, shards, rq);
  for (const Transfer& tr : pw.transfers) CHECK(tr.owner == tr.writer);

  // A file nobody sees is refused, naming it and the key.
  vis.sees[2] = {true, false};
  rq.world = 3;
  rq.parallel_write = false;
  rq.visibility = &vis;
  CHECK_THROWS_WITH(deal_work(ck, plan, rq), Catch::Contains("__1_0.distcp") && Catch::Contains("no rank can read"));
}

TEST_CASE("deal: zstd chunks an owner pushes whole are set aside from its budget, too small a budget is refused") {
  Checkpoint ck = two_rank_checkpoint();
  ck.md.transform_sets.push_back({"zstd"});
  for (auto& t : ck.md.tensors) t.storage[1].transforms = 1;  // every chunk in file 1 is zstd
  WritePlan plan = plan_write(ck, {}, std::nullopt, hf_dir(1000));
  Visibility vis = Visibility::everything(2, 2);
  vis.sees[0] = {true, false};  // the writer cannot read file 1: rank 1 pushes its chunks
  DealRequest rq;
  rq.world = 2;
  rq.lanes = 1;
  rq.exchange = true;
  rq.visibility = &vis;
  Deal d = deal_work(ck, plan, rq);
  // The largest zstd chunk pushed on the one lane: c's second half, 15 floats, decoded and dense.
  CHECK(d.set_aside[1] == whole_chunk_need(ck.md.tensors[2], 1));
  CHECK(d.set_aside[0] == 0);
  CHECK(d.gate_bytes(1) == d.budget - d.set_aside[1]);
  CHECK(d.budget == plan.budget);  // the automatic budget (1 GiB) holds it

  // A given --max-memory below rank 1's set-aside (the decoded item, 60 bytes and the zip around
  // them, and the dense chunk) is refused before any transfer, naming
  // rank 1 (the writer's own buffers made small enough to fit).
  plan.largest_need = 10;
  plan.budget = 100;
  rq.budget_given = true;
  CHECK_THROWS_AS(deal_work(ck, plan, rq), UsageError);
  CHECK_THROWS_WITH(deal_work(ck, plan, rq), Catch::Contains("rank 1") && Catch::Contains("--max-memory 100"));
  // Not given: the budget rises to the need.
  rq.budget_given = false;
  CHECK(deal_work(ck, plan, rq).budget >= whole_chunk_need(ck.md.tensors[2], 1));
}

TEST_CASE("deal: the plan digest is the same for the same plan and deal, and changes with either") {
  Checkpoint ck = two_rank_checkpoint();
  WritePlan plan = plan_write(ck, {}, std::nullopt, hf_dir(40));
  DealRequest rq;
  rq.world = 2;
  rq.parallel_write = true;
  const std::string d1 = plan_digest(plan, deal_work(ck, plan, rq));
  CHECK(d1.size() == 64);
  CHECK(plan_digest(plan_write(ck, {}, std::nullopt, hf_dir(40)), deal_work(ck, plan, rq)) == d1);
  rq.parallel_write = false;  // the same records, written by other ranks
  CHECK(plan_digest(plan, deal_work(ck, plan, rq)) != d1);
  rq.parallel_write = true;
  WritePlan bf16 = plan_write(ck, {}, DType::BFloat16, hf_dir(40));  // other bytes
  CHECK(plan_digest(bf16, deal_work(ck, bf16, rq)) != d1);
}

TEST_CASE("shared reads: runs that touch or overlap in one chunk are one window, gaps and other chunks are not") {
  // Chunk 0: three experts' runs back to back (given out of order), one 100 bytes further on;
  // chunk 1: a run at the same offsets, and one inside another.
  std::vector<RunRead> runs = {{0, 100, 100}, {0, 0, 100}, {1, 0, 100}, {0, 200, 100}, {0, 400, 50}, {1, 20, 30}};
  JoinedRuns j = join_runs(runs, 1 << 20);
  REQUIRE(j.windows.size() == 3);
  CHECK((j.windows[0].key == 0 && j.windows[0].offset == 0 && j.windows[0].bytes == 300));
  CHECK((j.windows[1].key == 0 && j.windows[1].offset == 400 && j.windows[1].bytes == 50));  // a gap is never read
  CHECK((j.windows[2].key == 1 && j.windows[2].offset == 0 && j.windows[2].bytes == 100));   // another chunk
  CHECK(j.window_of == std::vector<uint32_t>{0, 0, 2, 0, 1, 2});
  // Every run lies inside its window, at the offset the executor copies it from.
  for (size_t i = 0; i < runs.size(); ++i) {
    const ReadWindow& w = j.windows[j.window_of[i]];
    CHECK(w.key == runs[i].key);
    CHECK(runs[i].offset >= w.offset);
    CHECK(runs[i].offset + runs[i].bytes <= w.offset + w.bytes);
  }
}

TEST_CASE("shared reads: a window stays within its limit, a longer run is a window of its own") {
  std::vector<RunRead> runs;
  for (uint64_t e = 0; e < 12; ++e) runs.push_back({0, e * 100, 100});  // 12 experts of one chunk
  JoinedRuns j = join_runs(runs, 450);
  REQUIRE(j.windows.size() == 3);  // 4 runs a window: 400 bytes
  for (const ReadWindow& w : j.windows) CHECK(w.bytes == 400);
  CHECK(j.window_of[3] == 0);
  CHECK(j.window_of[4] == 1);
  CHECK(j.window_of[11] == 2);
  j = join_runs({{0, 0, 1000}, {0, 1000, 10}}, 450);
  REQUIRE(j.windows.size() == 2);
  CHECK(j.windows[0].bytes == 1000);
  CHECK(join_runs({}, 450).windows.empty());
}

TEST_CASE("shared reads: tasks grouped in order within the limit; one that cannot share runs alone") {
  // cost 0: cannot share; 50 over the limit of 40: alone, not shared.
  std::vector<TaskGroup> g = group_tasks({10, 10, 10, 10, 10, 0, 10, 50, 20, 25}, 40, 512);
  REQUIRE(g.size() == 7);
  auto is = [](const TaskGroup& t, size_t b, size_t e, bool shared) {
    return t.begin == b && t.end == e && t.shared == shared;
  };
  CHECK(is(g[0], 0, 4, true));  // 4 x 10 = the limit
  CHECK(is(g[1], 4, 5, true));
  CHECK(is(g[2], 5, 6, false));
  CHECK(is(g[3], 6, 7, true));  // the task of cost 0 ended the group before it
  CHECK(is(g[4], 7, 8, false));
  CHECK(is(g[5], 8, 9, true));  // 20 + 25 > 40
  CHECK(is(g[6], 9, 10, true));
  // At most max_tasks a group; every task in exactly one group, in order.
  g = group_tasks(std::vector<uint64_t>(10, 1), 1000, 4);
  REQUIRE(g.size() == 3);
  CHECK((is(g[0], 0, 4, true) && is(g[1], 4, 8, true) && is(g[2], 8, 10, true)));
  CHECK(group_tasks({}, 40, 4).empty());
}
