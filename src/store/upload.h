// Outputs in object storage (`s3://bucket/key`, `gs://bucket/name`): multipart uploads behind OutputFile and OutputDir
// (write/output.h), so the formats and the executor write an object exactly as they write a file.
//
// An object store has no temporary name and no rename: an object appears, whole, when its
// multipart upload completes (or its single PUT) succeeds, and not before. So:
//   - every output file is one upload, completed by OutputFile::commit() and never earlier; a file
//     that ends before its first part filled is sent by one PUT at commit;
//   - an output folder (`s3://bucket/prefix/`, an HF folder or a DCP checkpoint) has no temporary
//     directory: its files are completed one by one, and the file that makes it look complete is
//     completed last (the DCP `.metadata`; the HF index, after the config and tokenizer files);
//   - a run that fails aborts every upload it started and deletes every object it completed
//     (UploadSession::discard), so nothing it wrote is left; a SIGINT/SIGTERM/SIGHUP does the same from a
//     thread of its own (the signal handler cannot make requests) before the process dies of the
//     signal: no new upload starts and none completes once the signal is in, and the handler waits
//     for those already in flight to settle before aborting and deleting;
//   - `--force` on a folder deletes the old objects under the prefix before the first new one is
//     written (replacing a single object is atomic: CompleteMultipartUpload replaces it). Unlike a
//     local folder, which is swapped in whole, the old output does not survive a failed run.
//
// Parts. S3 wants parts of at least 5 MiB (the last excepted) and at most 10,000 of them: the part
// size comes from the largest file the process writes (upload_part_size; GCS: store/gcs.h). Two ways of writing:
//   - appends (a .pt, a DCP rank file, an index, .metadata): parts are cut in order; while one is
//     uploaded in the background the next fills (two buffers; one when memory is short);
//   - writes at offsets (safetensors files, whose records are placed by offset by several lanes
//     at once): the file's size is known up front (OutputFile::reserve), so its parts are fixed
//     ranges; each part's buffer is taken on its first write and, as soon as every byte of it is in,
//     sent on a thread of its own while the lane that completed it writes on (parts in flight are
//     bounded by the buffers, not the lanes: bench/link.sh); its buffer returns when the request
//     ends. A failed part stops the lanes and is rethrown by the next write and by commit, and an
//     abort waits for the parts still in flight to settle (a part landing after it would be left). A task (a record, or
//     one run of it) starts only fewer than `buffers / 2 - 1` tasks past the earliest unfinished one (task_begin), and
//     waits for that before it takes any memory of the gate. Tasks lie in file order and each is
//     written front to back, so a part stays unfinished only where it holds a boundary between a
//     written task and one not yet written: at most two per task under way, and memory stays
//     within the pool. (A first design let a part open only inside a window of parts counted from
//     the oldest one not yet uploaded, waiting inside the write: it deadlocked at a tight
//     --max-memory, the lanes waiting on the window holding the gate memory the earliest task's
//     lane needed.) Writes made before the lanes start (the safetensors headers, written at set
//     up) are kept aside until a lane opens their part (start_part_window).
// Every part buffer comes from the session's pool of `buffers` buffers of the part size, which the deal
// (plan/deal.h) sets aside from --max-memory before the lanes take theirs.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "store/store.h"

namespace dcpctl {

// True for an object-storage (`s3://`, `gs://`) output or input.
bool is_remote(const std::string& path);

// The part size for files of at most `largest_file_bytes` under `rules`: 8 MiB, or more so that
// such a file needs at most 90% of the allowed parts (the margin covers estimates of .pt and DCP
// rank files).
uint64_t upload_part_size(uint64_t largest_file_bytes, const store::PartRules& rules = {});

// The uploads of one job: its part buffers, the admission of its writes at offsets, and every
// upload it started and object it completed, until the job keeps them (it committed) or discards
// them (it failed). execute() (write/execute.h) makes one for an object-storage output; its
// outputs (write/output.h) upload through it. While it lives it is the process's session that a
// SIGINT/SIGTERM/SIGHUP cleans up after (one at a time).
class UploadSession {
 public:
  // `buffers` part buffers of `part_size` bytes (the deal's figures, plan/deal.h).
  UploadSession(uint64_t part_size, unsigned buffers);
  ~UploadSession();  // discards what was neither kept nor discarded
  UploadSession(const UploadSession&) = delete;
  UploadSession& operator=(const UploadSession&) = delete;
  uint64_t part_bytes() const;

  // The lanes start: from now on a write at an offset takes its part's buffer from the pool (before
  // this, during set up, it is kept aside until a lane opens the part).
  void start_part_window();
  // Writes at offsets (safetensors): of the executor's task list, those this process runs (`mine`);
  // task_begin(i) waits until task i is fewer than `buffers / 2 - 1` (at least 1) tasks past the
  // earliest unfinished one, task_end(i) says it finished. A lane waits there before it takes any
  // memory of the gate for the task, and nowhere else.
  void admit_tasks(const std::vector<bool>& mine);
  void task_begin(size_t i);
  void task_end(size_t i);
  // A lane failed: tasks waiting to start throw `cause` instead of waiting for tasks that will
  // never end.
  void fail_tasks(std::exception_ptr cause);

  // Before its first multipart upload begins, writes the object `url` (a small JSON record naming
  // `output` and this process), so that a later run finds the uploads this process leaves open if
  // it is killed before it could abort them (SIGKILL, an OOM kill: no handler runs): they are the
  // open uploads under `output`, listed by the store. The record is deleted once no upload is
  // open: at keep(), at discard(), by the signal's cleanup. write/leftovers.h names it, and finds
  // and clears dead runs' records.
  void journal_in(const std::string& url, const std::string& output);

  // The job committed: the objects it completed are its output.
  void keep();
  // The job failed: aborts every upload still open and deletes every object completed since the
  // last keep(). Best effort, on a failure path: returns what it could not undo (an upload left
  // open, an object left behind, each a sentence naming it), for the command to print.
  std::vector<std::string> discard() noexcept;

  struct Impl;
  // Shared with each Upload made in this session: an output file may outlive the session that
  // execute() made (its writer is destroyed after execute() has thrown), and its destructor still
  // returns its buffers to the pool and drops its registry entry.
  std::shared_ptr<Impl> impl() const { return s_; }

 private:
  std::shared_ptr<Impl> s_;
};

// check_output_path (write/output.h) for a remote output or a remote checkpoint: refuses an
// output inside the checkpoint (or holding it), and an existing object or non-empty prefix
// without `force`.
void check_remote_output(const std::string& output, bool force, const std::string& protect);

// One object being written, in a session.
class Upload {
 public:
  Upload(const std::string& url, UploadSession& session);
  ~Upload();  // aborts the upload unless committed
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  // The object will be exactly `size` bytes, written at offsets (write_at), each byte once.
  void expect_size(uint64_t size);
  void write_at(const void* data, size_t n, uint64_t offset);
  void append(const void* data, size_t n);
  // Completes the upload: the object appears. Throws (naming the URL) when a byte was not written.
  void commit();
  const std::string& url() const;

  struct State;

 private:
  std::unique_ptr<State> s_;
};

// A remote output folder: deletes what lies under `url`/ (reached only with --force: the output
// check refused otherwise).
void clear_remote_prefix(const std::string& url);

// The signal handler's part (write/output.cpp), async-signal-safe: true when a session's uploads
// are under way and a thread of their own now aborts them and re-raises `sig` (the handler then
// just returns); false when there is nothing remote to clean up.
bool uploads_take_signal(int sig) noexcept;
// Where that thread says what it could not undo (the command line installs it; by default nothing
// is printed): called with one sentence at a time, from the cleanup thread.
void set_leftover_printer(void (*print)(const char* sentence));

}  // namespace dcpctl
