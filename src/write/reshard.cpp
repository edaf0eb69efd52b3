#include "write/reshard.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "dist/commit.h"
#include "dist/group.h"
#include "item/chunk_source.h"
#include "item/decoded_chunks.h"
#include "item/item_reader.h"
#include "plan/plan.h"
#include "util/failpoint.h"
#include "util/memory_gate.h"
#include "util/numeric.h"
#include "util/sha256.h"
#include "write/dcp_metadata.h"
#include "write/executor.h"
#include "write/output.h"
#include "write/run.h"
#include "write/stream.h"

namespace dcpctl {

using nlohmann::json;

json reshard(const Checkpoint& ck, const ReshardOptions& o) {
  require_complete(ck);
  auto t0 = std::chrono::steady_clock::now();
  const Metadata& md = ck.md;

  // ---- plan ----
  ItemReader reader(ck);
  Target target;
  target.kind = Target::Dcp;
  target.world_size = o.world_size;
  target.keep_layout = o.layout == Layout::Keep;
  target.max_memory = o.max_memory;
  WritePlan plan = plan_write(ck, o.selection, o.cast, target,
                              [&](const TensorMeta& t, size_t c) { return reader.readable_in_place(t, c); });
  const int world = static_cast<int>(plan.files.size());

  json summary;
  summary["schema_version"] = 1;
  summary["checkpoint"] = ck.dir;
  summary["output"] = o.output;
  summary["layout"] = o.layout == Layout::Keep ? "keep" : "fsdp";
  summary["world_size"] = world;
  summary["tensors"] = plan.tensors.size();
  summary["non_tensor_items"] = plan.values.size();
  summary["tensor_bytes"] = plan.total_bytes;
  summary["cast"] = plan.cast.summary();
  json ranks = json::array();
  for (int r = 0; r < world; ++r) {
    const PlannedFile& f = plan.files[static_cast<size_t>(r)];
    ranks.push_back({{"rank", r}, {"file", f.name}, {"chunks", f.records.size()}, {"tensor_bytes", f.data_bytes},
                     {"non_tensor_items", r == 0 ? plan.values.size() : 0}});
  }
  summary["ranks"] = ranks;
  summary["dry_run"] = o.dry_run;
  summary["max_memory"] = plan.budget;
  Group* group = o.group;
  bool leader = !group || group->rank() == 0;
  if (o.dry_run) {
    // What the real run would refuse, the dry run refuses too (exists without --force, inside
    // the checkpoint), and under torchrun on every rank, as the real run's set-up does.
    set_up_on_leader(group, [&] {
      check_output_path(o.output, o.force, ck.dir);
      return std::string();
    });
    summary["plan"] = plan.describe();
    return summary;
  }

  // ---- write ----
  if (group) {
    std::string save_id = md.storage_meta && md.storage_meta->save_id ? *md.storage_meta->save_id : "";
    group->agree("reshard", Sha256::of(summary.dump() + "|" + std::to_string(ck.metadata_bytes) + "|" + save_id));
  }
  // Rank 0 makes the temporary directory every process writes into.
  std::unique_ptr<OutputDir> dir;
  const std::string dir_path = set_up_on_leader(group, [&] {
    check_output_path(o.output, o.force, ck.dir);
    dir = std::make_unique<OutputDir>(o.output);
    return dir->temp_path();
  });
  MemoryGate gate(plan.budget);
  WriteProgress prog(plan.total_bytes, o.progress);

  MetadataOut mo;
  mo.save_id = uuid4();
  mo.checkpoint_id = o.output;
  for (const PlannedFile& f : plan.files) mo.files.push_back(f.name);
  mo.tensors.resize(plan.tensors.size());
  std::vector<size_t> part(plan.records.size());  // a record's index among its tensor's chunks
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlannedTensor& pt = plan.tensors[i];
    MetaTensorOut& mt = mo.tensors[i];
    mt.fqn = pt.key;
    mt.dtype_name = torch_name(pt.dst);
    mt.requires_grad = pt.t->requires_grad;
    mt.shape = pt.t->shape;
    mt.chunks.resize(pt.records.size());
    for (size_t c = 0; c < pt.records.size(); ++c) {
      const Record& r = plan.records[pt.records[c]];
      part[pt.records[c]] = c;
      mt.chunks[c].offsets = r.box.offsets;
      mt.chunks[c].sizes = r.box.sizes;
      mt.chunks[c].file = r.dest;
    }
  }
  auto chunk_out = [&](size_t ri) -> MetaChunkOut& { return mo.tensors[plan.records[ri].tensor].chunks[part[ri]]; };
  mo.bytes.resize(plan.values.size());
  {
    size_t ti = 0, bi = 0;
    for (const auto& it : plan.items) {
      if (it.tensor) {
        if (ti < plan.tensors.size() && plan.tensors[ti].key == it.key) mo.order.emplace_back(true, static_cast<uint32_t>(ti++));
      } else {
        mo.order.emplace_back(false, static_cast<uint32_t>(bi++));
      }
      if (!it.path.empty() && md.has_planner_data) mo.planner_data[it.key] = it.path;
    }
  }

  // Target rank files are dealt out to the processes round-robin (all to this one alone).
  std::vector<size_t> targets;
  for (int r = 0; r < world; ++r)
    if (!group || r % group->size() == group->rank()) targets.push_back(static_cast<size_t>(r));

  // A zstd source chunk read for several target chunks is decoded once (item/decoded_chunks.h).
  DecodedChunks decoded(reader, &gate);
  LocalChunks local(reader, kTransferWindow, &decoded);
  Executor run{plan, local, gate, prog, std::max(1u, o.threads)};
  run.direct_io = o.direct_io;
  auto write_files = [&] {
    run.write_dcp(targets, [&](size_t rank) { return std::make_unique<OutputFile>(dir_path + "/" + plan.files[rank].name); },
                  [&](size_t rank, OutputFile& out, StreamWindow& win) {
      if (rank != 0) return;
      // Non-tensor items first, as DCP writes them: their bytes (and transforms) unchanged.
      for (size_t b = 0; b < plan.values.size(); ++b) {
        const BytesMeta& bm = md.bytes[plan.values[b]->index];
        MetaBytesOut& mb = mo.bytes[b];
        mb.fqn = plan.values[b]->key;
        mb.file = 0;
        mb.offset = out.appended();
        mb.length = bm.storage.length;
        mb.transforms = md.transform_sets.at(bm.storage.transforms);
        // Copied as they are (still encoded), through the stream window (past the page cache
        // with --io direct): a large non-tensor item costs no more memory than a small one. The
        // copy's reads check the CRC-32 of every record in the item.
        const ReadFile& in = reader.watched_item_file(bm);
        stream_runs(out, {{&in, bm.storage.offset, bm.storage.length, bm.fqn}}, DType::UInt8, DType::UInt8, win);
      }
    }, [&](size_t ri, uint64_t offset, uint64_t length) {
      chunk_out(ri).offset = offset;
      chunk_out(ri).length = length;
    });
  };

  bool committed = write_then_commit(group, [&] {
    if (group) failpoint("reshard-write", group->rank());
    write_files();
    if (group && !leader) {
      // Tell rank 0 where this process's chunks landed: [record, offset, length].
      json locs = json::array();
      for (size_t r : targets)
        for (size_t ri : plan.files[r].records) locs.push_back({ri, chunk_out(ri).offset, chunk_out(ri).length});
      group->publish("locs/" + std::to_string(group->rank()), locs.dump());
    }
  }, [&] {
    for (int p = 1; group && p < group->size(); ++p)
      for (const auto& l : json::parse(group->fetch("locs/" + std::to_string(p)))) {
        size_t ri = l.at(0).get<size_t>();
        if (ri >= plan.records.size()) throw IoError(Where(), "rank " + std::to_string(p) + " reported a chunk outside the plan");
        MetaChunkOut& mc = chunk_out(ri);
        mc.offset = l.at(1).get<uint64_t>();
        mc.length = l.at(2).get<uint64_t>();
      }
    // .metadata last: a checkpoint without it is visibly incomplete.
    std::string pkl = metadata_pickle(mo);
    {
      OutputFile meta(dir_path + "/.metadata");
      meta.append(pkl.data(), pkl.size());
      meta.commit();
    }
    dir->commit();
  });
  if (!committed) {
    summary["rank"] = group->rank();
    return summary;
  }

  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary["chunk_decodes"] = decoded.decodes();
  summary["seconds"] = secs;
  summary["gb_per_s"] = secs > 0 ? static_cast<double>(plan.total_bytes) / secs / 1e9 : 0.0;
  summary["peak_rss_bytes"] = peak_rss_bytes();
  return summary;
}

}  // namespace dcpctl
