#include "write/reshard.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "item/decoded_chunks.h"
#include "item/item_reader.h"
#include "plan/assemble.h"
#include "plan/checks.h"
#include "plan/geometry.h"
#include "dist/group.h"
#include "util/failpoint.h"
#include "util/memory_gate.h"
#include "util/sha256.h"
#include "util/numeric.h"
#include "util/parallel.h"
#include "write/dcp_metadata.h"
#include "write/output.h"
#include "write/stream.h"
#include "write/torch_save.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// One chunk to write: a box of a tensor, on a target rank.
struct Job {
  uint32_t tensor;  // index into plan tensors
  uint32_t chunk;   // index into that tensor's out chunks
};

struct PlanTensor {
  const TensorMeta* t;
  std::string key;
  DType src, dst;
  std::vector<Box> boxes;       // target chunks
  std::vector<uint32_t> ranks;  // rank of each target chunk
  uint64_t read_need = 0;       // buffers reading one source chunk takes (see source_read_need)
  uint64_t need(size_t c) const {  // everything target chunk c holds at once
    uint64_t n = boxes[c].numel();
    return n * itemsize(src) + (dst != src ? n * itemsize(dst) : 0) + read_need;
  }
};

bool intersect(const Box& a, const Box& b, Box& out) {
  size_t nd = a.offsets.size();
  out.offsets.resize(nd);
  out.sizes.resize(nd);
  for (size_t d = 0; d < nd; ++d) {
    int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return false;
    out.offsets[d] = lo;
    out.sizes[d] = hi - lo;
  }
  return true;
}

// Copies box `in` (global coordinates) from dense buffer `src` holding box `sb` to dense
// buffer `dst` holding box `db`.
void copy_box(const uint8_t* src, const Box& sb, uint8_t* dst, const Box& db, const Box& in, size_t item) {
  size_t nd = in.offsets.size();
  if (nd == 0) {
    std::memcpy(dst, src, item);
    return;
  }
  auto strides = [&](const Box& b) {
    std::vector<uint64_t> s(nd, item);
    for (size_t d = nd; d-- > 1;) s[d - 1] = s[d] * static_cast<uint64_t>(b.sizes[d]);
    return s;
  };
  std::vector<uint64_t> ss = strides(sb), ds = strides(db);
  uint64_t row = static_cast<uint64_t>(in.sizes[nd - 1]) * item;
  std::vector<int64_t> idx(nd - 1, 0);
  while (true) {
    uint64_t so = 0, dof = 0;
    for (size_t d = 0; d < nd; ++d) {
      int64_t g = in.offsets[d] + (d + 1 < nd ? idx[d] : 0);
      so += static_cast<uint64_t>(g - sb.offsets[d]) * ss[d];
      dof += static_cast<uint64_t>(g - db.offsets[d]) * ds[d];
    }
    std::memcpy(dst + dof, src + so, row);
    size_t d = nd - 1;
    while (d-- > 0) {
      if (++idx[d] < in.sizes[d]) break;
      idx[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) break;
  }
}

Box source_box(const TensorMeta& t, size_t c) {
  return {std::vector<int64_t>(t.chunk_offsets(c), t.chunk_offsets(c) + t.ndim()),
          std::vector<int64_t>(t.chunk_sizes(c), t.chunk_sizes(c) + t.ndim())};
}

// A box that spans every dimension after the first fully is one contiguous run of the tensor.
bool is_run(const Box& b, const std::vector<int64_t>& shape) {
  for (size_t d = 1; d < shape.size(); ++d)
    if (b.sizes[d] != shape[d]) return false;
  return true;
}

// Buffers assemble_box takes to read one source chunk of `t` into target boxes `targets`: the
// decoded item when the chunk is stream-transformed (zstd: the chunk's bytes plus the zip around
// them, which the reader's cap allows up to ItemLimits::zip_overhead), plus a dense copy of the
// chunk when its rows are not copied straight into place. Counted at least once, which also
// covers a chunk saved as a non-contiguous view (gathered through a copy of its storage).
uint64_t source_read_need(const TensorMeta& t, const std::vector<Box>& targets) {
  bool runs = t.ndim() > 0;
  for (size_t c = 0; runs && c < t.num_chunks(); ++c) runs = is_run(source_box(t, c), t.shape);
  for (size_t c = 0; runs && c < targets.size(); ++c) runs = is_run(targets[c], t.shape);
  uint64_t need = 0;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    uint64_t bytes = t.chunk_numel(c) * itemsize(*t.dtype);
    bool decoded = t.storage[c].transforms != 0;
    uint64_t copies = (decoded ? 1 : 0) + (runs ? 0 : 1);
    need = std::max(need, bytes * std::max<uint64_t>(copies, 1) + (decoded ? ItemLimits{}.zip_overhead : 0));
  }
  return need;
}

// Fills `dst` (dense, box `tb`, source dtype) from the source chunks that overlap it, one read of
// each (what expect_reads announces to `chunks`).
void assemble_box(DecodedChunks& chunks, const TensorMeta& t, const Box& tb, uint8_t* dst) {
  size_t item = itemsize(*t.dtype);
  if (tb.numel() == 0) return;
  uint64_t row_bytes = item;
  for (size_t d = 1; d < t.ndim(); ++d) row_bytes *= static_cast<uint64_t>(t.shape[d]);
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    if (t.chunk_numel(c) == 0) continue;
    Box sb = source_box(t, c), in;
    if (!intersect(sb, tb, in)) continue;
    if (t.ndim() > 0 && is_run(sb, t.shape) && is_run(tb, t.shape)) {
      // Rows of one run into rows of the other: read just them, from the file or the decoded item.
      uint64_t from = static_cast<uint64_t>(in.offsets[0] - sb.offsets[0]) * row_bytes;
      uint64_t to = static_cast<uint64_t>(in.offsets[0] - tb.offsets[0]) * row_bytes;
      chunks.read(t, c, from, static_cast<uint64_t>(in.sizes[0]) * row_bytes, dst + to);
    } else {
      std::vector<uint8_t> tmp(t.chunk_numel(c) * item);  // counted in the job's reservation
      chunks.read(t, c, 0, tmp.size(), tmp.data());
      copy_box(tmp.data(), sb, dst, tb, in, item);
    }
    chunks.done(t, c);
  }
}

// Tells `chunks` of the reads of transformed (zstd) chunks assemble_box will make for target box
// `tb`; the others are read in place.
void expect_reads(DecodedChunks& chunks, const TensorMeta& t, const Box& tb) {
  if (tb.numel() == 0) return;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    Box in;
    if (t.chunk_numel(c) > 0 && t.storage[c].transforms != 0 && intersect(source_box(t, c), tb, in)) chunks.expect(t, c);
  }
}

// The pieces target box `tb` is made of, in order, when the box and every source chunk it takes
// rows from are row runs whose bytes can be read in place (untransformed items, contiguous views):
// such a chunk streams through a small window instead of being assembled in memory. nullopt when
// any piece needs decoding or gathering.
std::optional<std::vector<Piece>> direct_pieces(const ItemReader& reader, const TensorMeta& t, const Box& tb) {
  if (t.ndim() == 0 || tb.numel() == 0 || !is_run(tb, t.shape)) return std::nullopt;
  size_t item = itemsize(*t.dtype);
  uint64_t row_bytes = item;
  for (size_t d = 1; d < t.ndim(); ++d) row_bytes *= static_cast<uint64_t>(t.shape[d]);
  std::vector<Piece> pieces;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    if (t.chunk_numel(c) == 0) continue;
    Box sb = source_box(t, c), in;
    if (!intersect(sb, tb, in)) continue;
    if (!is_run(sb, t.shape)) return std::nullopt;
    std::optional<DirectRun> run = reader.direct_run(t, c);
    if (!run) return std::nullopt;
    pieces.push_back({run->file, run->offset + static_cast<uint64_t>(in.offsets[0] - sb.offsets[0]) * row_bytes,
                      static_cast<uint64_t>(in.sizes[0]) * row_bytes,
                      static_cast<uint64_t>(in.offsets[0] - tb.offsets[0]) * row_bytes});
  }
  if (!order_pieces(pieces, tb.numel() * item)) return std::nullopt;  // a gap or an overlap: assemble_box
  return pieces;
}

}  // namespace

json reshard(const Checkpoint& ck, const ReshardOptions& o) {
  require_complete(ck);
  auto t0 = std::chrono::steady_clock::now();
  const Metadata& md = ck.md;
  std::vector<SelectedItem> items = select_items(md, o.selection);

  // Target world size.
  int world = o.world_size;
  if (o.layout == Layout::Keep) {
    world = 1;
    for (const auto& f : md.files)
      if (auto r = rank_of_file(f)) world = std::max(world, *r + 1);
  }
  if (world < 1 || world > 1 << 20) throw UsageError(Where(), "--world-size must be between 1 and 1048576");

  // ---- plan ----
  ItemReader reader(ck);
  std::vector<PlanTensor> tensors;
  std::vector<const SelectedItem*> bytes_items;
  std::vector<uint64_t> rank_bytes(static_cast<size_t>(world), 0);
  CoverageCheck coverage;
  CastChoice cast(o.cast);
  uint64_t total = 0, largest_need = 0;
  for (const auto& it : items) {
    if (!it.tensor) {
      bytes_items.push_back(&it);
      continue;
    }
    const TensorMeta& t = md.tensors[it.index];
    if (!t.dtype) throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn), "dtype " + t.dtype_name + " is unknown to dcpctl");
    if (!coverage.covered(t)) continue;
    PlanTensor pt;
    pt.t = &t;
    pt.key = it.key;
    pt.src = *t.dtype;
    pt.dst = cast.target(pt.src, it.key);
    size_t di = itemsize(pt.dst);
    auto least_loaded = [&] {
      return static_cast<uint32_t>(std::min_element(rank_bytes.begin(), rank_bytes.end()) - rank_bytes.begin());
    };
    if (o.layout == Layout::Keep) {
      for (size_t c = 0; c < t.num_chunks(); ++c) {
        pt.boxes.push_back(source_box(t, c));
        auto r = t.storage[c].present() ? rank_of_file(md.files[t.storage[c].file]) : std::nullopt;
        pt.ranks.push_back(static_cast<uint32_t>(r.value_or(0)));
      }
    } else if (t.ndim() == 0 || t.shape[0] == 0) {
      pt.boxes.push_back({std::vector<int64_t>(t.ndim(), 0), t.shape});
      pt.ranks.push_back(least_loaded());
    } else {
      int64_t n = t.shape[0];
      int64_t cs = (n + world - 1) / world;
      bool empty_done = false;
      for (int r = 0; r < world; ++r) {
        Box b{std::vector<int64_t>(t.ndim(), 0), t.shape};
        int64_t start = static_cast<int64_t>(r) * cs;
        if (start >= n) {
          if (empty_done) continue;  // DCP records one empty shard per tensor
          empty_done = true;
          b.offsets[0] = n;
          b.sizes[0] = 0;
        } else {
          b.offsets[0] = start;
          b.sizes[0] = std::min(cs, n - start);
        }
        pt.boxes.push_back(b);
        pt.ranks.push_back(static_cast<uint32_t>(r));
      }
    }
    pt.read_need = source_read_need(t, pt.boxes);
    for (size_t c = 0; c < pt.boxes.size(); ++c) {
      uint64_t nb = pt.boxes[c].numel() * di;
      rank_bytes[pt.ranks[c]] += nb;
      total += nb;
      // A target chunk whose pieces can be read in place streams through the 1 MiB windows
      // (write_files) and holds no buffer: it needs nothing from the budget. Probed only when its
      // worst case would not fit a given --max-memory (the probe reads each source item's
      // data.pkl); an item that cannot be read counts in full here and fails when written.
      uint64_t need = pt.need(c);
      if (o.max_memory && need > o.max_memory) {
        try {
          if (direct_pieces(reader, t, pt.boxes[c])) need = 0;
        } catch (const Error&) {
        }
      }
      largest_need = std::max(largest_need, need);
    }
    tensors.push_back(std::move(pt));
  }
  coverage.refuse_if_incomplete(Where(ck.dir), "reshard");
  uint64_t budget = memory_budget(o.max_memory, largest_need);
  if (largest_need > budget)
    throw UsageError(Where(ck.dir), "a chunk needs " + std::to_string(largest_need) + " bytes of buffers, more than --max-memory " +
                                        std::to_string(budget) + "; raise it or use more target ranks");

  // Jobs per rank, in checkpoint order.
  std::vector<std::vector<Job>> jobs(static_cast<size_t>(world));
  for (uint32_t i = 0; i < tensors.size(); ++i)
    for (uint32_t c = 0; c < tensors[i].boxes.size(); ++c) jobs[tensors[i].ranks[c]].push_back({i, c});

  json summary;
  summary["schema_version"] = 1;
  summary["checkpoint"] = ck.dir;
  summary["output"] = o.output;
  summary["layout"] = o.layout == Layout::Keep ? "keep" : "fsdp";
  summary["world_size"] = world;
  summary["tensors"] = tensors.size();
  summary["non_tensor_items"] = bytes_items.size();
  summary["tensor_bytes"] = total;
  summary["cast"] = cast.summary();
  json ranks = json::array();
  for (int r = 0; r < world; ++r) {
    uint64_t n = jobs[static_cast<size_t>(r)].size();
    ranks.push_back({{"rank", r}, {"file", "__" + std::to_string(r) + "_0.distcp"}, {"chunks", n},
                     {"tensor_bytes", rank_bytes[static_cast<size_t>(r)]}, {"non_tensor_items", r == 0 ? bytes_items.size() : 0}});
  }
  summary["ranks"] = ranks;
  summary["dry_run"] = o.dry_run;
  summary["max_memory"] = budget;
  Group* group = o.group;
  bool leader = !group || group->rank() == 0;
  if (o.dry_run) {
    // What the real run would refuse, the dry run refuses too (exists without --force, inside
    // the checkpoint).
    if (leader) check_output_path(o.output, o.force, ck.dir);
    return summary;
  }

  // ---- write ----
  if (group) {
    std::string save_id = md.storage_meta && md.storage_meta->save_id ? *md.storage_meta->save_id : "";
    group->agree("reshard", Sha256::of(summary.dump() + "|" + std::to_string(ck.metadata_bytes) + "|" + save_id));
  }
  std::unique_ptr<OutputDir> dir;
  std::string dir_path;  // the temporary directory every process writes into
  {
    std::string err;
    try {
      if (leader) {
        check_output_path(o.output, o.force, ck.dir);
        dir = std::make_unique<OutputDir>(o.output);
        dir_path = dir->temp_path();
        if (group) group->publish("outdir", dir_path);
      }
    } catch (const std::exception& e) {
      if (group) group->announce("setup", e.what(), exit_code_of(e));
      throw;
    }
    if (group) {
      if (leader) group->announce("setup", "", ExitCode::ok);
      group->await("setup");
      if (!leader) dir_path = group->fetch("outdir");
    }
  }
  MemoryGate gate(budget);
  std::atomic<uint64_t> done{0};

  MetadataOut mo;
  mo.save_id = uuid4();
  mo.checkpoint_id = o.output;
  for (int r = 0; r < world; ++r) mo.files.push_back("__" + std::to_string(r) + "_0.distcp");
  mo.tensors.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    MetaTensorOut& mt = mo.tensors[i];
    mt.fqn = tensors[i].key;
    mt.dtype_name = torch_name(tensors[i].dst);
    mt.requires_grad = tensors[i].t->requires_grad;
    mt.shape = tensors[i].t->shape;
    mt.chunks.resize(tensors[i].boxes.size());
    for (size_t c = 0; c < tensors[i].boxes.size(); ++c) {
      mt.chunks[c].offsets = tensors[i].boxes[c].offsets;
      mt.chunks[c].sizes = tensors[i].boxes[c].sizes;
      mt.chunks[c].file = tensors[i].ranks[c];
    }
  }
  mo.bytes.resize(bytes_items.size());
  {
    size_t ti = 0, bi = 0;
    for (const auto& it : items) {
      if (it.tensor) {
        if (ti < tensors.size() && tensors[ti].key == it.key) mo.order.emplace_back(true, static_cast<uint32_t>(ti++));
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
  for (size_t r : targets)
    for (const Job& j : jobs[r]) expect_reads(decoded, *tensors[j.tensor].t, tensors[j.tensor].boxes[j.chunk]);

  auto write_files = [&] {
    parallel_for(targets.size(), std::max(1u, o.threads), [&](size_t ti) {
      size_t r = targets[ti];
      WorkerBuffers scratch(gate);  // declared before `out`: reservations end after the file closes
      // Windows for streamed chunks: 1 MiB of source elements (and their cast), outside the budget.
      constexpr uint64_t kWindowBytes = 1 << 20;
      std::unique_ptr<uint8_t[]> win_in(new uint8_t[kWindowBytes]), win_out(new uint8_t[kWindowBytes * 16]);
      OutputFile out(dir_path + "/" + mo.files[r]);
      if (r == 0) {
        // Non-tensor items first, as DCP writes them: their bytes (and transforms) unchanged.
        for (size_t b = 0; b < bytes_items.size(); ++b) {
          const BytesMeta& bm = md.bytes[bytes_items[b]->index];
          MetaBytesOut& mb = mo.bytes[b];
          mb.fqn = bytes_items[b]->key;
          mb.file = 0;
          mb.offset = out.appended();
          mb.length = bm.storage.length;
          mb.transforms = md.transform_sets.at(bm.storage.transforms);
          // Copied as they are (still encoded), a window at a time: a large non-tensor item
          // costs no more memory than a small one.
          const ReadFile in(ck.path_of(bm.storage.file));
          for (uint64_t pos = 0; pos < bm.storage.length; pos += kWindowBytes) {
            uint64_t k = std::min<uint64_t>(kWindowBytes, bm.storage.length - pos);
            in.read_at(bm.storage.offset + pos, win_in.get(), k, bm.fqn);
            out.append(win_in.get(), k);
          }
        }
      }
      for (const Job& j : jobs[r]) {
        const PlanTensor& pt = tensors[j.tensor];
        const Box& b = pt.boxes[j.chunk];
        uint64_t n = b.numel();
        uint64_t start = out.appended();
        if (std::optional<std::vector<Piece>> pieces = direct_pieces(reader, *pt.t, b)) {
          uint64_t window_elems = kWindowBytes / itemsize(pt.src);
          write_tensor_blob_streamed(out, pt.dst, b.sizes, n * itemsize(pt.dst), [&] {
            return stream_pieces(out, *pieces, pt.src, pt.dst, win_in.get(), win_out.get(), window_elems);
          });
        } else {
          // Everything this chunk needs, reserved at once (pt.need): the assembled chunk, its
          // cast, and what reading a source chunk takes.
          uint64_t raw_bytes = n * itemsize(pt.src), conv_bytes = pt.src != pt.dst ? n * itemsize(pt.dst) : 0;
          scratch.prepare(raw_bytes, conv_bytes, pt.read_need);
          assemble_box(decoded, *pt.t, b, scratch.a());
          if (pt.src != pt.dst) cast_elements(pt.src, pt.dst, scratch.a(), scratch.b(), n);
          write_tensor_blob(out, pt.dst, b.sizes, pt.src != pt.dst ? scratch.b() : scratch.a(), pt.src != pt.dst ? conv_bytes : raw_bytes);
        }
        MetaChunkOut& mc = mo.tensors[j.tensor].chunks[j.chunk];
        mc.offset = start;
        mc.length = out.appended() - start;
        uint64_t d = done.fetch_add(n * itemsize(pt.dst)) + n * itemsize(pt.dst);
        if (o.progress) o.progress(d, total);
      }
      out.commit();
    });
  };

  if (!group) {
    write_files();
  } else {
    try {
      failpoint("reshard-write", group->rank());
      write_files();
      if (!leader) {
        // Tell rank 0 where this process's chunks landed: [tensor, chunk, offset, length].
        json locs = json::array();
        for (size_t r : targets)
          for (const Job& j : jobs[r]) {
            const MetaChunkOut& mc = mo.tensors[j.tensor].chunks[j.chunk];
            locs.push_back({j.tensor, j.chunk, mc.offset, mc.length});
          }
        group->publish("locs/" + std::to_string(group->rank()), locs.dump());
      }
    } catch (const std::exception& e) {
      group->report("write", e.what(), exit_code_of(e));
      if (leader) group->announce("commit", std::string("rank 0 failed: ") + e.what(), exit_code_of(e));
      throw;
    }
    group->report("write", "", ExitCode::ok);
    if (!leader) {
      group->await("commit");
      summary["rank"] = group->rank();
      return summary;
    }
    try {
      group->collect("write");
      for (int p = 1; p < group->size(); ++p)
        for (const auto& l : json::parse(group->fetch("locs/" + std::to_string(p)))) {
          MetaChunkOut& mc = mo.tensors.at(l[0].get<size_t>()).chunks.at(l[1].get<size_t>());
          mc.offset = l[2].get<uint64_t>();
          mc.length = l[3].get<uint64_t>();
        }
    } catch (const std::exception& e) {
      group->announce("commit", e.what(), exit_code_of(e));
      throw;
    }
  }

  // .metadata last: a checkpoint without it is visibly incomplete.
  try {
    std::string pkl = metadata_pickle(mo);
    {
      OutputFile meta(dir_path + "/.metadata");
      meta.append(pkl.data(), pkl.size());
      meta.commit();
    }
    dir->commit();
  } catch (const std::exception& e) {
    if (group) group->announce("commit", e.what(), exit_code_of(e));
    throw;
  }
  if (group) group->announce("commit", "", ExitCode::ok);

  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary["chunk_decodes"] = decoded.decodes();
  summary["seconds"] = secs;
  summary["gb_per_s"] = secs > 0 ? static_cast<double>(total) / secs / 1e9 : 0.0;
  summary["peak_rss_bytes"] = peak_rss_bytes();
  return summary;
}

}  // namespace dcpctl
