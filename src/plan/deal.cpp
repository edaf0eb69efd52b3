#include "plan/deal.h"

#include <algorithm>

#include "plan/format.h"
#include "plan/memory.h"
#include "store/upload.h"
#include "util/error.h"
#include "util/sha256.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// The tasks of record `ri`: an AtOffsets record whose pieces are all runs is one task per piece
// (each written at its own offset, in parallel; lanes dealt round-robin from `next`); an InOrder
// record is one task, streamed when the plan says it streams (its pieces in order), else assembled.
void add_tasks(const Checkpoint& ck, const WritePlan& plan, size_t ri, int writer, unsigned lanes, uint64_t window,
               unsigned& next, std::vector<Task>& out) {
  const Record& r = plan.records[ri];
  const bool pt = plan.target.in_order();
  std::vector<ChunkRef> chunks;
  for (const Piece& p : r.pieces) chunks.push_back({static_cast<uint32_t>(p.source - ck.md.tensors.data()), p.chunk});
  // A key map's output is assembled (its pieces need not come in order, nor whole chunks): each
  // chunk it reads once, in order.
  const bool mapped = plan.tensors[r.tensor].mapped != nullptr && !plan.tensors[r.tensor].renamed;
  // An assembled record reads its chunks in chunk order (assemble_box); under torchrun the
  // transfers follow this list.
  if (mapped || (pt ? !r.streams : !r.runs)) {
    std::sort(chunks.begin(), chunks.end());
    chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  }
  if (pt) {
    out.push_back({ri, chunks, mapped || !r.streams, writer, 0});
  } else if (r.runs && !mapped) {
    for (const ChunkRef& c : chunks) {
      const TensorMeta& t = ck.md.tensors[c.tensor];
      const uint64_t bytes = t.chunk_numel(c.chunk) * itemsize(*t.dtype);
      if (window == 0 || bytes <= window) {
        out.push_back({ri, {c}, false, writer, next++ % lanes});
        continue;
      }
      for (uint64_t from = 0; from < bytes; from += window)
        out.push_back({ri, {c}, false, writer, next++ % lanes, from, std::min(window, bytes - from)});
    }
  } else {
    out.push_back({ri, chunks, true, writer, next++ % lanes});
  }
}

// With an exchange: every chunk of every task, from the rank that reads it to the task's writer;
// then each rank's set-aside and the budget. An owner decodes a zstd chunk it pushes whole, one per
// pushing lane at a time; that memory is set aside from its budget up front, and its lanes share
// the rest (dist/exchange.h says why pushers do not wait on the gate). Every rank computes every
// rank's set-aside, so a budget too small is refused alike everywhere, before any transfer.
void plan_transfers(const Checkpoint& ck, const WritePlan& plan, const DealRequest& rq, Deal& d) {
  const Metadata& md = ck.md;
  Visibility all;
  const Visibility& vis = rq.visibility ? *rq.visibility : (all = Visibility::everything(rq.world, md.files.size()));
  std::vector<uint64_t> load(static_cast<size_t>(rq.world), 0);
  for (const Task& task : d.tasks) {
    for (const ChunkRef& ref : task.chunks) {
      const TensorMeta& t = md.tensors[ref.tensor];
      uint32_t c = ref.chunk;
      uint32_t file = t.storage[c].file;
      uint64_t bytes = t.chunk_numel(c) * itemsize(*t.dtype);
      int owner;
      if (rq.parallel_write && vis.can_read(task.writer, file)) {
        owner = task.writer;
        load[static_cast<size_t>(owner)] += bytes;
      } else {
        owner = least_loaded(load, bytes, [&](int r) { return vis.can_read(r, file); });
      }
      if (owner < 0)
        throw FormatError(
            Where(ck.path_of(file), std::nullopt, t.fqn),
            "no rank can read this data file (--local-files: each rank sees only the files in its own directory)");
      d.transfers.push_back({ref.tensor, c, owner, task.writer, task.lane});
    }
  }
  std::vector<std::vector<uint64_t>> per_lane(static_cast<size_t>(rq.world), std::vector<uint64_t>(d.lanes, 0));
  for (const Transfer& tr : d.transfers) {
    const TensorMeta& t = md.tensors[tr.tensor];
    if (tr.owner == tr.writer || t.storage[tr.chunk].transforms == 0) continue;
    uint64_t& m = per_lane[static_cast<size_t>(tr.owner)][tr.lane];
    m = std::max(m, whole_chunk_need(t, tr.chunk));
  }
  // A rank's need (plan/memory.h): its set-aside, plus the largest writer buffer if it writes anything.
  for (int r = 0; r < rq.world; ++r)
    for (uint64_t m : per_lane[static_cast<size_t>(r)]) d.set_aside[static_cast<size_t>(r)] += m;
  ProcessMemory most;
  int most_rank = 0;
  for (int r = 0; r < rq.world; ++r)
    if (ProcessMemory m = process_memory(plan, d, r); m.total() > most.total()) most = m, most_rank = r;
  if (!rq.budget_given) d.budget = std::max(d.budget, most.total());
  if (most.total() > d.budget) {
    throw UsageError(
        Where(ck.metadata_path),
        "under torchrun, rank " + std::to_string(most_rank) + " decodes the zstd chunks it sends whole, " +
            std::to_string(d.lanes) + " lane(s) at once: it needs " + std::to_string(most.set_aside) +
            " bytes for them" +
            (most.buffers ? " beside its largest buffer (" + std::to_string(most.buffers) + ")" : std::string()) +
            ", more than --max-memory " + std::to_string(d.budget) + "; raise --max-memory or lower --threads");
  }
}

// Uploads into object storage: each process's part size (from the largest file it writes) and its
// part buffers (what its format wants; fewer where a given --max-memory is tight; refused when not
// even the fewest fit beside its largest buffer and its set-aside).
void plan_uploads(const Checkpoint& ck, const WritePlan& plan, const DealRequest& rq, Deal& d) {
  const Format& format = *plan.target.format;
  uint64_t values = 0;
  for (const SelectedItem* it : plan.values) values += ck.md.bytes[it->index].storage.length;
  uint64_t most = 0;
  for (int r = 0; r < d.world; ++r) {
    std::vector<size_t> mine = d.files_of(r);
    uint64_t largest = 0;
    for (size_t f : mine) {
      // Estimates for what is appended (zip records, non-tensor values); exact for safetensors but
      // for the header.
      uint64_t est = plan.files[f].data_bytes + plan.files[f].records.size() * 4096 + values + (1ull << 20);
      largest = std::max(largest, est);
    }
    const uint64_t part = upload_part_size(largest, rq.part_rules);
    auto [want, least] = format.part_buffers(mine.size(), d.lanes, std::max(1u, rq.threads));
    // Rank 0 writes the last, small files (index, .metadata, config) after the others.
    if (r == 0) want = std::max(want, 1u), least = std::max(least, 1u);
    unsigned buffers = want;
    if (rq.budget_given) {
      const uint64_t held = process_memory(plan, d, r).total();  // its buffers and set-aside (no parts yet)
      const uint64_t room = d.budget > held ? d.budget - held : 0;
      buffers = static_cast<unsigned>(std::min<uint64_t>(want, room / part));
      if (buffers < least)
        throw UsageError(Where(rq.output),
                         "uploading to object storage holds at least " + std::to_string(least) + " part buffer(s) of " +
                             std::to_string(part) + " bytes beside the largest buffer (" +
                             std::to_string(process_memory(plan, d, r).buffers) + " bytes)" +
                             (d.world > 1 ? " on rank " + std::to_string(r) : std::string()) +
                             ": raise --max-memory to at least " + std::to_string(held + least * part));
    }
    d.part_size[static_cast<size_t>(r)] = part;
    d.part_buffers[static_cast<size_t>(r)] = buffers;
    most = std::max(most, uint64_t{buffers} * part);
  }
  if (!rq.budget_given) d.budget += most;
}

}  // namespace

std::vector<size_t> Deal::files_of(int rank) const {
  std::vector<size_t> out;
  for (size_t f = 0; f < writer_of.size(); ++f)
    if (writer_of[f] == rank) out.push_back(f);
  return out;
}

Deal deal_work(const Checkpoint& ck, const WritePlan& plan, const DealRequest& rq) {
  Deal d;
  d.world = std::max(1, rq.world);
  d.lanes = std::max(1u, rq.lanes);
  d.budget = plan.budget;
  d.set_aside.assign(static_cast<size_t>(d.world), 0);
  d.part_size.assign(static_cast<size_t>(d.world), 0);
  d.part_buffers.assign(static_cast<size_t>(d.world), 0);
  // Output files to writers: a DCP checkpoint's rank files and a --parallel-write's shards by
  // bytes; otherwise rank 0 writes everything.
  std::vector<uint64_t> load(static_cast<size_t>(d.world), 0);
  const Writing writing = plan.target.format->writing;
  const bool spread = writing == Writing::RankFiles || (rq.parallel_write && writing == Writing::AtOffsets);
  for (const PlannedFile& f : plan.files)
    d.writer_of.push_back(spread ? least_loaded(load, f.data_bytes, [](int) { return true; }) : 0);
  if (writing != Writing::RankFiles) {
    // Listed writer by writer: under torchrun the lowest writer with work left then always has
    // every owner at its next transfer, so a lane waiting on its rank's memory budget waits only
    // for lanes that are moving (dist/exchange.h). A .pt is written in order, on one lane.
    for (int w = 0; w < (plan.target.in_order() ? 1 : d.world); ++w) {
      unsigned next = 0;
      for (size_t ri = 0; ri < plan.records.size(); ++ri)
        if (plan.target.in_order() || d.writer_of[plan.records[ri].dest] == w)
          add_tasks(ck, plan, ri, w, d.lanes, rq.hash_window, next, d.tasks);
    }
  }
  // Who writes, once: process_memory asks it of every rank, up to three times a deal (a 405B
  // plan has two million tasks).
  d.writes.assign(static_cast<size_t>(d.world), 0);
  for (int w : d.writer_of) d.writes[static_cast<size_t>(w)] = 1;
  for (const Task& t : d.tasks) d.writes[static_cast<size_t>(t.writer)] = 1;
  if (rq.exchange) plan_transfers(ck, plan, rq, d);
  if (rq.upload) plan_uploads(ck, plan, rq, d);
  for (int r = 0; r < d.world; ++r) d.memory.push_back(process_memory(plan, d, r));
  return d;
}

json Deal::describe() const {
  json procs = json::array();
  for (int r = 0; r < world; ++r) {
    uint64_t writes = 0, reads = 0, pushes = 0;
    size_t files = 0;
    for (size_t f = 0; f < writer_of.size(); ++f) files += writer_of[f] == r;
    for (const Task& t : tasks) writes += t.writer == r;
    for (const Transfer& tr : transfers) {
      reads += tr.owner == r;
      pushes += tr.owner == r && tr.writer != r;
    }
    procs.push_back({{"rank", r},
                     {"files", files},
                     {"tasks", writes},
                     {"chunks_read", reads},
                     {"chunks_pushed", pushes},
                     {"set_aside", set_aside[static_cast<size_t>(r)]},
                     {"memory_gate", gate_bytes(r)}});
    if (static_cast<size_t>(r) < memory.size()) procs.back()["memory"] = memory[static_cast<size_t>(r)].describe();
    if (part_buffers[static_cast<size_t>(r)])
      procs.back()["upload"] = {{"part_size", part_size[static_cast<size_t>(r)]},
                                {"part_buffers", part_buffers[static_cast<size_t>(r)]}};
  }
  json tr = json::array();
  for (const Transfer& t : transfers) tr.push_back({t.tensor, t.chunk, t.owner, t.writer, t.lane});
  return {{"processes", world},     {"lanes", lanes},       {"budget", budget},
          {"writer_of", writer_of}, {"per_process", procs}, {"transfers", tr}};
}

std::string plan_digest(const WritePlan& plan, const Deal& deal) {
  json j = {{"records", plan.describe()}, {"budget", plan.budget}, {"deal", deal.describe()}};
  return Sha256::of(j.dump());
}

}  // namespace dcpctl
