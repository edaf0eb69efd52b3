// The executor: carries out a write plan (plan/plan.h) over a ChunkSource (item/chunk_source.h),
// for every way a format writes its files (plan/format.h): records at offsets in files
// with a header (safetensors), in order into one zip (.pt), and into rank files (DCP). execute (write/execute.h) plans,
// sets up the outputs and commits them; what moves bytes from the saved chunks into the outputs, inside the memory gate
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

// The files a format hands the executor to write into; what each method is for depends on how
// the format writes (plan/format.h: Writing).
class FileSink {
 public:
  virtual ~FileSink() = default;
  // AtOffsets, InOrder: planned file `f` as the leader's set-up created it (AtOffsets: its header
  // written, its data section starting at data_start(f)).
  virtual OutputFile& file(size_t f) = 0;
  virtual uint64_t data_start(size_t f) const {
    (void)f;
    return 0;
  }
  // InOrder: the zip's data.pkl, and what is appended after the records (storages of its own:
  // write/lightning_meta.h).
  virtual std::string pickle() { return {}; }
  virtual void after_records(TorchSaveWriter& zip, OutputFile& out) { (void)zip, (void)out; }
  // RankFiles: creates planned file `f` (the calling thread writes and commits it), appends what
  // precedes its records (rank 0's non-tensor items, through `win`), and learns where each record
  // landed.
  virtual std::unique_ptr<OutputFile> create(size_t f) {
    (void)f;
    return nullptr;
  }
  virtual void lead(size_t f, OutputFile& out, StreamWindow& win) { (void)f, (void)out, (void)win; }
  virtual void placed(size_t record, uint64_t offset, uint64_t length) { (void)record, (void)offset, (void)length; }
  // RankFiles: planned file `f` is kept from a stopped run and not written; file `f` was written
  // and committed (write/resume.h).
  virtual bool kept(size_t f) const {
    (void)f;
    return false;
  }
  virtual void written(size_t f, OutputFile& out) { (void)f, (void)out; }
  // AtOffsets: `task` is written (any lane; a journaled output finishes a file after its last).
  virtual void task_done(const Task& task) { (void)task; }

  // AtOffsets into object storage: the files upload their parts through `uploads`, the job's
  // session (store/upload.h), which admits the tasks; for local files (no session) these do nothing.
  // The format sets `uploads` from its job before the executor writes.
  bool admits() const { return uploads != nullptr; }
  void admit_tasks(const std::vector<bool>& mine) {
    if (uploads) uploads->admit_tasks(mine);
  }
  void task_begin(size_t i) {
    if (uploads) uploads->task_begin(i);
  }
  void task_end(size_t i) {
    if (uploads) uploads->task_end(i);
  }
  void fail_tasks(std::exception_ptr cause) {
    if (uploads) uploads->fail_tasks(std::move(cause));
  }
  UploadSession* uploads = nullptr;
};

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
  // While writes are hashed: each record's part of its tensor (write/tensor_hash.h), by record.
  const std::vector<HashPart>* hash_parts = nullptr;
  bool hash_turns = false;  // set by write_at_offsets: windows take turns at the hashed prefix

  // Writes this process's share (`me`, as `deal` says) into `files`, as the plan's format writes
  // (plan/format.h): AtOffsets, every task of writer `me` on the deal's lanes; InOrder,
  // on the writer of the one file, data.pkl then every record in order then what follows them;
  // RankFiles, each rank file dealt to `me`, `threads` at a time, each by one thread.
  void write(const Deal& deal, int me, FileSink& files);

 private:
  void write_at_offsets(const std::vector<Task>& tasks, int me, unsigned lanes, FileSink& files);
  void write_in_order(const std::vector<Task>& tasks, FileSink& files);
  void write_rank_files(const std::vector<size_t>& mine, FileSink& files);
  void offsets_task(const Task& task, FileSink& files, WorkerBuffers& scratch);
  // Shared reads (write/shared_reads.h): what a task holds in a group (0: it cannot share), and a
  // group of this writer's tasks (`mine`: their indices in `tasks`) carried out together, holding
  // at most `limit` bytes; false, with nothing read or written, when a chunk it reads cannot be
  // read in place after all (its tasks then run one by one).
  uint64_t shared_cost(const Task& task) const;
  bool shared_group(const std::vector<Task>& tasks, const std::vector<size_t>& mine, size_t begin, size_t end,
                    FileSink& files, WorkerBuffers& scratch, uint64_t limit);
  void rank_file_record(size_t ri, OutputFile& out, WorkerBuffers& scratch, StreamWindow& win);
  uint64_t task_need(const Task& task) const;  // the most a task holds of the gate at once
  const HashPart* part_of(size_t record) const {
    return hash_parts && !(*hash_parts)[record].tensor.empty() ? &(*hash_parts)[record] : nullptr;
  }
};

}  // namespace dcpctl
