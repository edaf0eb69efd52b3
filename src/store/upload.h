// Outputs in object storage (`s3://bucket/key`): multipart uploads behind OutputFile and OutputDir
// (write/output.h), so the formats and the executor write an object exactly as they write a file.
//
// An object store has no temporary name and no rename: an object appears, whole, when its
// CompleteMultipartUpload (or its single PUT) succeeds, and not before. So:
//   - every output file is one upload, completed by OutputFile::commit() and never earlier; a file
//     that ends before its first part filled is sent by one PUT at commit;
//   - an output folder (`s3://bucket/prefix/`, an HF folder or a DCP checkpoint) has no temporary
//     directory: its files are completed one by one, and the file that makes it look complete is
//     completed last (the DCP `.metadata`; the HF index, after the config and tokenizer files);
//   - a run that fails aborts every upload it started and deletes every object it completed
//     (discard_uploads), so nothing it wrote is left; a SIGINT/SIGTERM/SIGHUP does the same from a
//     thread of its own (the signal handler cannot make requests) before the process dies of the
//     signal: no new upload starts and none completes once the signal is in, and the handler waits
//     for those already in flight to settle before aborting and deleting;
//   - `--force` on a folder deletes the old objects under the prefix before the first new one is
//     written (replacing a single object is atomic: CompleteMultipartUpload replaces it). Unlike a
//     local folder, which is swapped in whole, the old output does not survive a failed run.
//
// Parts. S3 wants parts of at least 5 MiB (the last excepted) and at most 10,000 of them: the part
// size comes from the largest file the process writes (upload_part_size). Two ways of writing:
//   - appends (a .pt, a DCP rank file, an index, .metadata): parts are cut in order; while one is
//     uploaded in the background the next fills (two buffers; one when memory is short);
//   - writes at offsets (safetensors files, whose records are placed by offset by several lanes
//     at once): the file's size is known up front (OutputFile::reserve), so its parts are fixed
//     ranges; each part's buffer is taken on its first write and uploaded, by the lane whose write
//     completes it, as soon as every byte of it is in. A task (a record, or one run of it) starts
//     only fewer than `buffers / 2 - 1` tasks past the earliest unfinished one (task_begin), and
//     waits for that before it takes any memory of the gate. Tasks lie in file order and each is
//     written front to back, so a part stays unfinished only where it holds a boundary between a
//     written task and one not yet written: at most two per task under way, and memory stays
//     within the pool. (A first design let a part open only inside a window of parts counted from
//     the oldest one not yet uploaded, waiting inside the write: it deadlocked at a tight
//     --max-memory, the lanes waiting on the window holding the gate memory the earliest task's
//     lane needed.) Writes made before the lanes start (the safetensors headers, written at set
//     up) are kept aside until a lane opens their part (start_part_window).
// Every part buffer comes from one pool of `buffers` buffers of the part size, which execute
// (write/execute.h) sets aside from --max-memory before the lanes take theirs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>


namespace dcpctl {

// True for an `s3://` (or `gs://`) output or input.
bool is_remote(const std::string& path);

// The part size for files of at most `largest_file_bytes`: 8 MiB, or more so that such a file
// needs at most 9,000 parts (S3 allows 10,000; the margin covers estimates of .pt and DCP rank files).
uint64_t upload_part_size(uint64_t largest_file_bytes);

// Sets the part size and the number of part buffers every upload of this process shares. Called
// once per run, before the first remote output is created (and again by tests).
void configure_uploads(uint64_t part_size, unsigned buffers);
uint64_t upload_part_bytes();

// The lanes start: from now on a write at an offset takes its part's buffer from the pool (before
// this, during set up, it is kept aside until a lane opens the part).
void start_part_window();
// A lane failed: tasks waiting to start throw instead of waiting for tasks that will never end.
void fail_part_window();
// Writes at offsets (safetensors): of the executor's task list, those this process runs (`mine`);
// task_begin(i) waits until task i is fewer than `buffers / 2 - 1` (at least 1) tasks past the
// earliest unfinished one, task_end(i) says it finished. A lane waits there before it takes any
// memory of the gate for the task, and nowhere else.
void admit_tasks(const std::vector<bool>& mine);
void task_begin(size_t i);
void task_end(size_t i);

// The run committed: the objects it completed are its output.
void keep_uploads();
// The run failed: aborts every upload still open and deletes every object completed since the
// last keep_uploads(). Errors are swallowed (best effort: it runs on a failure path).
void discard_uploads() noexcept;

// check_output_path (write/output.h) for a remote output or a remote checkpoint: refuses an
// output inside the checkpoint (or holding it), and an existing object or non-empty prefix
// without `force`.
void check_remote_output(const std::string& output, bool force, const std::string& protect);

// One object being written.
class Upload {
 public:
  explicit Upload(const std::string& url);
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

// The signal handler's part (write/output.cpp), async-signal-safe: true when remote uploads are
// under way and a thread of their own now aborts them and re-raises `sig` (the handler then just
// returns); false when there is nothing remote to clean up.
bool uploads_take_signal(int sig) noexcept;

}  // namespace dcpctl
