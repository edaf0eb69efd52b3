// The executor: carries out a write plan (plan/plan.h) over a ChunkSource (item/chunk_source.h),
// for every target the planner plans: a safetensors file or HF directory, a torch zip (.pt), and
// the rank files of a DCP checkpoint. execute (write/execute.h) plans, sets up the outputs and
// commits them; what moves bytes from the saved chunks into the outputs, inside the memory gate
// and with progress, is here, once. The tasks (plan/deal.h) say which records a writer writes and on
// which lane.
//
// The source is this process's own reads (LocalChunks), or under torchrun the chunk exchange
// (dist/exchange.h: the ranks that can read each chunk push it to the rank that writes it). A
// record the plan says streams is copied or streamed from where its chunks lie; any other is
// assembled in a buffer the size of its need (assemble_box). So the same records are written the
// same way whichever source feeds them, which keeps a torchrun output byte-identical to a
// single-process one.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "item/chunk_source.h"
#include "plan/deal.h"
#include "plan/plan.h"
#include "util/memory_gate.h"
#include "write/output.h"
#include "write/run.h"

namespace dcpctl {

class TorchSaveWriter;

struct Executor {
  const WritePlan& plan;
  ChunkSource& src;
  MemoryGate& gate;
  WriteProgress& prog;
  unsigned threads;  // readers of one assembled record (a source that is not ordered), or rank files written at once
  // --io direct: bulk bytes move past the page cache, where it costs the kernel more than the disk
  // does. A safetensors run read in place and not cast (FSDP's dim-0 shards: nearly every byte) is
  // read (ReadFile::read_direct) through each lane's copy window and written
  // (OutputFile::pwrite_direct) instead of copy_file_range, unless all of it is in the page cache
  // already; a streamed run into a .pt or a DCP rank file is read likewise through the direct
  // stream window, and those files are appended through the append window
  // (OutputFile::stage_appends). --io buffered turns it all off.
  bool direct_io = false;
  std::atomic<bool> cfr_ok{true};  // copy_file_range works between these files

  // safetensors / HF directory: every task of writer `me`, on `lanes` lanes, into `outs` (one per
  // planned file, already holding its header `headers[f]`).
  void write_safetensors(const std::vector<Task>& tasks, const std::vector<std::string>& headers, int me, unsigned lanes,
                         std::vector<std::unique_ptr<OutputFile>>& outs);
  // .pt: data.pkl (`pickle`), then every task in order, then what `more` appends (storages of
  // its own: write/lightning_meta.h), into `out`.
  using MoreFn = std::function<void(TorchSaveWriter&, OutputFile&)>;
  void write_pt(const std::vector<Task>& tasks, const std::string& pickle, OutputFile& out, const MoreFn& more = nullptr);

  // DCP: the planned rank files `files`, `threads` at a time, each by one thread: `open` creates
  // the file, `lead` appends what precedes its chunks (rank 0's non-tensor items, through `win`),
  // then each record is appended as one torch.save blob and `placed(record, offset, length)` says
  // where; the file is committed after its last record.
  using OpenFn = std::function<std::unique_ptr<OutputFile>(size_t file)>;
  using LeadFn = std::function<void(size_t file, OutputFile& out, StreamWindow& win)>;
  using PlacedFn = std::function<void(size_t record, uint64_t offset, uint64_t length)>;
  void write_dcp(const std::vector<size_t>& files, const OpenFn& open, const LeadFn& lead, const PlacedFn& placed);

 private:
  void safetensors_task(const Task& task, const std::vector<std::string>& headers, OutputFile& out, WorkerBuffers& scratch);
  void dcp_record(size_t ri, OutputFile& out, WorkerBuffers& scratch, StreamWindow& win);
};

}  // namespace dcpctl
