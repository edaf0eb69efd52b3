#include "write/executor.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>

#include "plan/format.h"
#include "plan/memory.h"
#include "util/crc32.h"
#include "util/numeric.h"
#include "util/parallel.h"
#include "write/shared_reads.h"
#include "write/stream.h"
#include "write/torch_save.h"

namespace dcpctl {

namespace {

// Window `p` (n source bytes) cast when needed; returns what to write.
const uint8_t* cast_window(DType src, DType dst, const uint8_t* p, uint64_t n, std::vector<uint8_t>& conv) {
  if (src == dst) return p;
  uint64_t elems = n / itemsize(src);
  conv.resize(elems * itemsize(dst));
  cast_elements(src, dst, p, conv.data(), elems);
  return conv.data();
}

// Where a streaming record's pieces lie in the .distcp files, in order; nullopt when some chunk
// cannot be read in place after all (a saved view that is not contiguous: known only once its
// item's data.pkl is read), and the record is assembled instead. That is safe here (unlike in a
// .pt, whose streaming must match the plan on every launcher) because one thread writes the whole
// rank file and records where each blob landed.
std::optional<std::vector<FileRun>> in_place_runs(ChunkSource& src, const TensorMeta& t, const Record& r) {
  if (!r.streams) return std::nullopt;
  std::vector<FileRun> runs;
  for (const Piece& p : r.pieces) {
    std::optional<DirectRun> run = src.in_place(t, p.chunk);
    if (!run) return std::nullopt;
    runs.push_back({run->file, run->offset + p.from, p.bytes, t.fqn});
  }
  return runs;
}

}  // namespace

void Executor::rank_file_record(size_t ri, OutputFile& out, WorkerBuffers& scratch, StreamWindow& win) {
  const Record& r = plan.records[ri];
  const PlannedTensor& pt = plan.tensors[r.tensor];
  uint64_t n = r.box.numel();
  if (std::optional<std::vector<FileRun>> runs = in_place_runs(src, *pt.t, r)) {
    write_tensor_blob_streamed(
        out, pt.dst, r.box.sizes, n * itemsize(pt.dst), [&] { return stream_runs(out, *runs, pt.src, pt.dst, win); },
        part_of(ri));
    return;
  }
  // Everything the record needs, reserved at once (its need): the assembled box, its cast, and
  // what reading a source chunk takes.
  const RecordBuffers need = record_buffers(pt, r);
  const uint64_t raw_bytes = need.raw, conv_bytes = need.cast;
  scratch.prepare(raw_bytes, conv_bytes, need.rest);
  assemble_box(src, *pt.t, r.box, r.pieces, scratch.a());
  if (pt.src != pt.dst) cast_elements(pt.src, pt.dst, scratch.a(), scratch.b(), n);
  write_tensor_blob(out, pt.dst, r.box.sizes, pt.src != pt.dst ? scratch.b() : scratch.a(),
                    pt.src != pt.dst ? conv_bytes : raw_bytes, part_of(ri));
}

void Executor::write(const Deal& deal, int me, FileSink& files) {
  switch (plan.target.format->writing) {
    case Writing::AtOffsets: write_at_offsets(deal.tasks, me, deal.lanes, files); break;
    case Writing::InOrder:
      if (!deal.writer_of.empty() && deal.writer_of[0] == me) write_in_order(deal.tasks, files);
      break;
    case Writing::RankFiles: write_rank_files(deal.files_of(me), files); break;
  }
}

void Executor::write_rank_files(const std::vector<size_t>& dealt, FileSink& sink) {
  std::vector<size_t> files;  // those a stopped run did not finish
  std::copy_if(dealt.begin(), dealt.end(), std::back_inserter(files), [&](size_t f) { return !sink.kept(f); });
  // The uses of chunks that cannot be read in place (zstd), announced up front: a source that
  // decodes one for several target chunks keeps it until the last (item/decoded_chunks.h).
  for (size_t f : files)
    for (size_t ri : plan.files[f].records) {
      const Record& r = plan.records[ri];
      if (r.streams) continue;
      for (const Piece& p : r.pieces)
        if (p.source->storage[p.chunk].transforms != 0) src.expect(*p.source, p.chunk);
    }
  parallel_for(files.size(), std::max(1u, threads), [&](size_t i) {
    WorkerBuffers scratch(gate);  // declared before the file: reservations end after it closes
    StreamWindow win;             // outside the budget
    win.direct_reads = direct_io;
    std::unique_ptr<OutputFile> out = sink.create(files[i]);
    if (direct_io) out->stage_appends(kAppendWindow);
    sink.lead(files[i], *out, win);
    for (size_t ri : plan.files[files[i]].records) {
      uint64_t start = out->appended();
      rank_file_record(ri, *out, scratch, win);
      sink.placed(ri, start, out->appended() - start);
      prog.add(plan.records[ri].out_bytes);
    }
    out->commit();
    sink.written(files[i], *out);
  });
}

void Executor::offsets_task(const Task& task, FileSink& files, WorkerBuffers& scratch) {
  const Record& r = plan.records[task.record];
  const PlannedTensor& pt = plan.tensors[r.tensor];
  const TensorMeta& t = *pt.t;
  OutputFile& out = files.file(r.dest);
  uint64_t base = files.data_start(r.dest) + r.offset;
  if (const HashPart* part = part_of(task.record)) out.hash_part(*part, base, r.out_bytes);
  // A window of the chunk (deal.h: a hashed output's runs): its writes wait their turn at the
  // file's hashed prefix (write/write_hash.h), so no lane runs far ahead of it.
  if (task.bytes && hash_turns) out.take_hash_turns();
  size_t si = itemsize(pt.src), di = itemsize(pt.dst);
  std::vector<uint8_t> conv;
  const std::optional<DirectRun> in_place = task.whole ? std::nullopt : src.in_place(t, task.chunks.front().chunk);
  // Through a pointer: GCC 12 may otherwise warn that the optional's payload is used uninitialized
  // where the code below inlines differently (a unity build), though every use is behind `run &&`.
  const DirectRun* run = in_place ? &*in_place : nullptr;
  uint64_t window = std::min(r.window_elems * si, kDirectWindow);
  // The bytes of the run this task writes: a window, or all of it.
  const uint64_t from = run ? task.from : 0, to = run ? (task.bytes ? task.from + task.bytes : run->bytes) : 0;
  // A run all in the page cache already (a checkpoint just saved or read) is copied there below,
  // in the kernel; any other is read past the cache.
  if (run && pt.src == pt.dst && direct_io && window >= kDirectMinRun &&
      run->file->worth_reading_direct(run->offset, run->bytes)) {
    uint64_t out_off = base + chunk_start(t, task.chunks.front().chunk);
    // The lane's copy window (at most the direct window), kept from one task to the next (a fresh
    // one would fault in its pages each time). Each read's aligned blocks fit in it, and so do its
    // bytes moved to where the output's blocks fall (direct_place), to be written past the cache
    // too; each read but the last ends on an output block boundary.
    scratch.prepare(window, 0, 0);
    uint8_t* buf = scratch.a();
    uint8_t* aligned = align_up(buf);
    uint64_t step = align_down(window - static_cast<uint64_t>(aligned - buf) - 2 * kDirectAlign);
    for (uint64_t done = from; done < to;) {
      uint64_t at = out_off + done, k = std::min(step, to - done);
      if (done + k < to) k = align_down(at + k) - at;
      const uint8_t* p = run->file->read_direct(run->offset + done, k, aligned, t.fqn);
      uint8_t* q = direct_place(aligned, at);
      if (q != p) std::memmove(q, p, k);
      out.pwrite_direct(q, k, at);
      prog.add(k);
      done += k;
    }
    return;
  }
  scratch.release();  // the paths below reserve what they need themselves
  if (task.whole) {
    GateReservation hold(gate, r.need);
    std::vector<uint8_t> full(t.nbytes());
    assemble_box(src, t, r.box, r.pieces, full.data(), 1, task.lane);
    out.pwrite_all(cast_window(pt.src, pt.dst, full.data(), full.size(), conv), r.out_bytes, base);
    prog.add(r.out_bytes);
    return;
  }
  uint32_t c = task.chunks.front().chunk;
  uint64_t out_off = base + chunk_start(t, c) / si * di;
  if (!run && task.from) return;  // not in place after all: the chunk's first window writes it whole
  if (run && pt.src == pt.dst) {
    const uint64_t n = to - from;
    uint64_t win = std::min(n, r.window_elems * si);
    // copy_file_range moves bytes no check sees: a run whose record's CRC-32 is still to be
    // checked (util/crc_ledger.h) is copied through a buffer.
    bool use_cfr = cfr_ok.load() && !run->file->ledger().watching(run->offset + from, n);
    if (use_cfr) {
      // copy_file_range needs no buffer; take one only if it turns out unavailable.
      copy_range(*run->file, run->offset + from, out, out_off + from, n, nullptr, win, use_cfr, out.fd());
      if (use_cfr) {
        prog.add(n);
        return;
      }
      cfr_ok = false;
    }
    GatedBuffer buf(gate, win);
    bool no = false;
    copy_range(*run->file, run->offset + from, out, out_off + from, n, buf.data(), win, no, -1);
    prog.add(n);
  } else if (run) {
    uint64_t n = to / si, elems = std::min(n - from / si, r.window_elems);
    GateReservation hold(gate, elems * (si + di));
    std::vector<uint8_t> in(elems * si);
    for (uint64_t e = from / si; e < n; e += elems) {
      uint64_t k = std::min(elems, n - e);
      run->file->read_at(run->offset + e * si, in.data(), k * si, t.fqn);
      out.pwrite_all(cast_window(pt.src, pt.dst, in.data(), k * si, conv), k * di, out_off + e * di);
      prog.add(k * di);
    }
  } else {
    // Received in windows, or decoded whole here inside the gate (zstd, a view that is not
    // contiguous); each window is cast and written at its place.
    src.read(
        task.lane, t, c,
        [&](const uint8_t* p, uint64_t off, uint64_t n) {
          out.pwrite_all(cast_window(pt.src, pt.dst, p, n, conv), n / si * di, out_off + off / si * di);
          prog.add(n / si * di);
        },
        GateCharge{&gate, whole_chunk_need(t, c)});
  }
}

uint64_t Executor::shared_cost(const Task& task) const {
  if (!task.whole) return 0;
  const Record& r = plan.records[task.record];
  const PlannedTensor& pt = plan.tensors[r.tensor];
  if (r.pieces.empty()) return 0;
  // Every piece a run of an untransformed saved chunk of the record's dtype, the runs tiling the
  // record exactly (the record is then all bytes read, nothing left as assemble_box's zeros).
  const uint64_t raw = r.box.numel() * itemsize(pt.src);
  std::vector<std::pair<uint64_t, uint64_t>> lands;
  uint64_t held = 0;
  for (const Piece& p : r.pieces) {
    if (!p.run || p.frames || !p.source || !p.source->dtype || *p.source->dtype != pt.src ||
        p.chunk >= p.source->storage.size() || p.source->storage[p.chunk].transforms != 0)
      return 0;
    lands.push_back({p.to, p.bytes});
    held += p.bytes + 2 * kDirectAlign;  // its share of a window, and a window's alignment
  }
  std::sort(lands.begin(), lands.end());
  uint64_t at = 0;
  for (const auto& [to, bytes] : lands) {
    if (to != at) return 0;
    at += bytes;
  }
  if (at != raw) return 0;
  // Its place in an output segment (and the segment's alignment), and the record before its cast.
  return held + r.out_bytes + 2 * kDirectAlign + (pt.src != pt.dst ? align_up(raw) : 0);
}

bool Executor::shared_group(const std::vector<Task>& tasks, const std::vector<size_t>& mine, size_t begin, size_t end,
                            FileSink& files, WorkerBuffers& scratch, uint64_t limit) {
  // The chunks the group reads, each where it lies in its file (its record now watched by the
  // file's CRC ledger), and every piece's run of them, task by task, piece by piece.
  struct Source {
    const TensorMeta* t;
    DirectRun run;
  };
  std::vector<Source> sources;
  std::map<std::pair<const TensorMeta*, uint32_t>, uint32_t> key_of;
  std::vector<RunRead> runs;
  uint64_t most_raw = 0;
  for (size_t k = begin; k < end; ++k) {
    const Record& r = plan.records[tasks[mine[k]].record];
    const PlannedTensor& pt = plan.tensors[r.tensor];
    if (pt.src != pt.dst) most_raw = std::max(most_raw, r.box.numel() * itemsize(pt.src));
    for (const Piece& p : r.pieces) {
      auto [it, fresh] = key_of.try_emplace({p.source, p.chunk}, static_cast<uint32_t>(sources.size()));
      if (fresh) {
        std::optional<DirectRun> run = src.in_place(*p.source, p.chunk);
        if (!run) return false;
        sources.push_back({p.source, *run});
      }
      if (p.from > sources[it->second].run.bytes || p.bytes > sources[it->second].run.bytes - p.from) return false;
      runs.push_back({it->second, p.from, p.bytes});
    }
  }
  const JoinedRuns joined = join_runs(runs, limit);
  const std::vector<ReadWindow>& windows = joined.windows;
  // The lane's first buffer: each window from an aligned place (a direct read's blocks around
  // it), then the record a cast is taken from.
  std::vector<uint64_t> slot(windows.size());
  std::vector<bool> direct(windows.size());
  uint64_t a_bytes = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    const DirectRun& run = sources[windows[w].key].run;
    const uint64_t at = run.offset + windows[w].offset, n = windows[w].bytes;
    direct[w] = direct_io && n && run.file->worth_reading_direct(at, n);
    slot[w] = a_bytes;
    a_bytes += direct[w] ? direct_span(at, n) : align_up(n);
  }
  const uint64_t raw_at = a_bytes;
  a_bytes += align_up(most_raw);
  // The second: the segments, records back to back in one file, each placed as in its file
  // (direct_place) so that its blocks can be written past the page cache.
  struct Segment {
    size_t begin, end;
    uint32_t dest;
    uint64_t at, bytes, slot;
  };
  std::vector<Segment> segments;
  uint64_t b_bytes = 0;
  for (size_t k = begin; k < end; ++k) {
    const Record& r = plan.records[tasks[mine[k]].record];
    const uint64_t base = files.data_start(r.dest) + r.offset;
    if (!segments.empty() && segments.back().dest == r.dest && segments.back().at + segments.back().bytes == base) {
      segments.back().end = k + 1;
      segments.back().bytes += r.out_bytes;
      continue;
    }
    segments.push_back({k, k + 1, r.dest, base, r.out_bytes, 0});
  }
  for (Segment& s : segments) {
    s.slot = b_bytes;
    b_bytes += align_up(s.at % kDirectAlign + s.bytes);
  }
  // One buffer of the group limit for both (a_bytes + b_bytes is within it: shared_cost counts
  // every window's and segment's alignment), the same size from group to group and as the direct
  // copy's window (kDirectWindow), so a lane keeps it: a fresh one is a fault and a cleared page
  // per 4 KiB (clear_page was 19 % of a 6.48 GB export's samples with a buffer sized per group).
  scratch.prepare(std::max(limit, a_bytes + b_bytes), 0, 0);
  uint8_t* a = scratch.a();
  uint8_t* b = a + a_bytes;
  std::vector<const uint8_t*> data(windows.size());
  for (size_t w = 0; w < windows.size(); ++w) {
    const Source& s = sources[windows[w].key];
    const uint64_t at = s.run.offset + windows[w].offset, n = windows[w].bytes;
    if (direct[w]) {
      data[w] = s.run.file->read_direct(at, n, a + slot[w], s.t->fqn);
    } else {
      if (n) s.run.file->read_at(at, a + slot[w], n, s.t->fqn);
      data[w] = a + slot[w];
    }
  }
  size_t ri = 0;  // the next piece's run
  for (const Segment& s : segments) {
    OutputFile& out = files.file(s.dest);
    uint8_t* q = direct_place(b + s.slot, s.at);
    for (size_t k = s.begin; k < s.end; ++k) {
      const size_t record = tasks[mine[k]].record;
      const Record& r = plan.records[record];
      const PlannedTensor& pt = plan.tensors[r.tensor];
      uint8_t* place = q + (files.data_start(r.dest) + r.offset - s.at);
      if (const HashPart* part = part_of(record))
        out.hash_part(*part, files.data_start(r.dest) + r.offset, r.out_bytes);
      uint8_t* raw = pt.src != pt.dst ? a + raw_at : place;
      for (const Piece& p : r.pieces) {
        const uint32_t w = joined.window_of[ri];
        if (p.bytes) std::memcpy(raw + p.to, data[w] + (runs[ri].offset - windows[w].offset), p.bytes);
        ++ri;
      }
      if (pt.src != pt.dst) cast_elements(pt.src, pt.dst, raw, place, r.box.numel());
      for (const Piece& p : r.pieces) src.done(*p.source, p.chunk);
    }
    if (direct_io)
      out.pwrite_direct(q, s.bytes, s.at);
    else
      out.pwrite_all(q, s.bytes, s.at);
    prog.add(s.bytes);
  }
  return true;
}

uint64_t Executor::task_need(const Task& task) const {
  const Record& r = plan.records[task.record];
  if (task.whole) return r.need;
  const PlannedTensor& pt = plan.tensors[r.tensor];
  const uint32_t c = task.chunks.front().chunk;
  if (pt.t->storage[c].transforms != 0) return whole_chunk_need(*pt.t, c);  // decoded whole
  const uint64_t si = itemsize(pt.src), bytes = task.bytes ? task.bytes : chunk_bytes(*pt.t, c);
  return std::max(bytes / si * (si + itemsize(pt.dst)), kDirectWindow);
}

// Every task of `me` (its writer), on `lanes` lanes: each lane its own tasks in order when the
// source is ordered, else all threads share them.
void Executor::write_at_offsets(const std::vector<Task>& tasks, int me, unsigned lanes, FileSink& files) {
  // An object-storage output (the sink's uploads): a task starts only a few tasks past the earliest unfinished
  // one, and waits for that before it takes any memory (so the lane the earliest task needs is never
  // short of memory held by lanes that wait); the parts left unfinished stay within the pool.
  const bool admit =
      files.admits() && std::any_of(tasks.begin(), tasks.end(), [&](const Task& t) { return t.writer == me; });
  if (admit) {
    std::vector<bool> mine(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) mine[i] = tasks[i].writer == me;
    files.admit_tasks(mine);
  }
  auto one = [&](size_t i, WorkerBuffers& scratch) {
    const Task& task = tasks[i];
    if (admit) {
      scratch.release();
      files.task_begin(i);
    }
    offsets_task(task, files, scratch);
    if (admit) files.task_end(i);
    files.task_done(task);
  };
  // Lanes take turns at a hashed file's prefix only where every lane can hold its largest buffer at
  // once: a lane waiting its turn holds its buffer, and the lane whose turn it is must not wait for
  // memory (else it waits out kTurnWait, and the write is kept or read back).
  uint64_t most = 0;
  bool windows = false;
  for (const Task& t : tasks) {
    if (t.writer != me) continue;
    windows = windows || t.bytes;
    most = std::max(most, task_need(t));
  }
  hash_turns = windows && most <= gate.cap() / std::max(1u, lanes);
  // Where any lane may take any task: this writer's tasks in groups, those that read neighbouring
  // runs of the same chunks carried out together (write/shared_reads.h), each group within a lane's
  // share of the budget. An upload admits its tasks one by one: each runs alone there.
  std::vector<size_t> mine;
  std::vector<TaskGroup> groups;
  const uint64_t limit = std::min(kDirectWindow, gate.cap() / std::max(1u, lanes));
  if (!src.ordered()) {
    std::vector<uint64_t> cost;
    for (size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i].writer == me) {
        mine.push_back(i);
        cost.push_back(admit ? 0 : shared_cost(tasks[i]));
      }
    groups = group_tasks(cost, limit, kSharedMaxTasks);
  }
  // Each lane keeps its scratch (the copy window) across its tasks; a failed lane stops the rest.
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  parallel_for(lanes, lanes, [&](size_t lane) {
    WorkerBuffers scratch(gate);
    try {
      if (!src.ordered()) {
        for (size_t g; !failed && (g = next++) < groups.size();) {
          const TaskGroup& group = groups[g];
          if (group.shared && shared_group(tasks, mine, group.begin, group.end, files, scratch, limit)) {
            for (size_t k = group.begin; k < group.end; ++k) files.task_done(tasks[mine[k]]);
            continue;
          }
          for (size_t k = group.begin; k < group.end && !failed; ++k) one(mine[k], scratch);
        }
        return;
      }
      for (size_t i = 0; i < tasks.size(); ++i)
        if (tasks[i].writer == me && tasks[i].lane == lane) one(i, scratch);
    } catch (...) {
      failed = true;
      files.fail_tasks(std::current_exception());  // lanes waiting for parts this lane would have written
      src.fail(std::current_exception());
      throw;
    }
  });
}

// data.pkl, then every record in order: streamed piece by piece when the plan says so (read in
// place through the stream window, or received / decoded whole inside the gate), else assembled.
void Executor::write_in_order(const std::vector<Task>& tasks, FileSink& files) {
  OutputFile& out = files.file(0);
  if (direct_io) out.stage_appends(kAppendWindow);
  TorchSaveWriter zw(out);
  zw.write_pickle(files.pickle());
  StreamWindow win;  // outside the budget
  win.direct_reads = direct_io;
  std::vector<uint8_t> conv;
  for (const Task& task : tasks) {
    const Record& r = plan.records[task.record];
    const PlannedTensor& pt = plan.tensors[r.tensor];
    const TensorMeta& t = *pt.t;
    std::string key = std::to_string(r.tensor);
    if (!task.whole) {
      zw.write_storage_streamed(
          key, r.out_bytes,
          [&] {
            uint32_t crc = 0;
            for (const Piece& p : r.pieces) {
              if (std::optional<DirectRun> run = src.in_place(t, p.chunk)) {
                crc = stream_runs(out, {{run->file, run->offset + p.from, p.bytes, t.fqn}}, pt.src, pt.dst, win, crc);
                continue;
              }
              src.read(
                  0, t, p.chunk,
                  [&](const uint8_t* data, uint64_t, uint64_t n) {
                    const uint8_t* w = cast_window(pt.src, pt.dst, data, n, conv);
                    uint64_t m = n / itemsize(pt.src) * itemsize(pt.dst);
                    crc = crc32_update(crc, w, m);
                    out.append(w, m);
                  },
                  GateCharge{&gate, whole_chunk_need(t, p.chunk)});
            }
            return crc;
          },
          part_of(task.record));
    } else {
      GateReservation hold(gate, r.need);
      std::vector<uint8_t> full(t.nbytes());
      assemble_box(src, t, r.box, r.pieces, full.data(), threads, task.lane);
      zw.write_storage(key, cast_window(pt.src, pt.dst, full.data(), full.size(), conv), r.out_bytes,
                       part_of(task.record));
    }
    prog.add(r.out_bytes);
  }
  files.after_records(zw, out);
  zw.finish();
}

}  // namespace dcpctl
