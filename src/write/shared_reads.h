// Reads shared by neighbouring records (issue 72 item 5).
//
// A key map's output assembled from parts, an expert unstacked from its stack (view/maps), reads
// one run of a saved chunk per piece, and the records of consecutive experts read consecutive runs
// of the same chunks: at bench/scaling.sh's MODE=kimi shapes a run is 128 x 896 x 4 B = 459 KB and
// a chunk holds 12 experts' runs back to back. Record by record, each run is a buffered pread
// (assemble_box) and each record a buffered pwrite: the page cache copies every byte twice, the
// system time that grew with the size (docs/performance.md, "Item 5, scaling").
//
// So the executor (write/executor.h) takes such tasks in groups of consecutive ones
// (group_tasks), reads the runs of a group that touch or overlap in one chunk as one window
// (join_runs), past the page cache where the window is worth it (ReadFile::worth_reading_direct
// under --io direct), assembles each record from the windows straight into an output buffer where
// the group's records lie back to back in their file, and writes each such segment once (past the
// page cache too under --io direct: OutputFile::pwrite_direct). Every byte still passes its file's
// CRC ledger as it is read (util/crc_ledger.h): a window is part of one chunk's record, never a
// byte outside the runs asked for. A group holds at most `limit` bytes at once (its windows, its
// output segments, their alignment; a lane's share of the budget, at most kDirectWindow), taken
// from the gate like any other task's buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dcpctl {

// One run a record reads: bytes [offset, offset + bytes) of source `key` (the caller's index of a
// saved chunk), as the chunk's dense bytes.
struct RunRead {
  uint32_t key = 0;
  uint64_t offset = 0, bytes = 0;
};

// Bytes [offset, offset + bytes) of source `key`, read at once.
struct ReadWindow {
  uint32_t key = 0;
  uint64_t offset = 0, bytes = 0;
};

struct JoinedRuns {
  std::vector<ReadWindow> windows;  // by key, then offset; disjoint
  std::vector<uint32_t> window_of;  // per run, in the order given: the window that holds it
};

// The windows that read `runs`: runs of one key that overlap or touch are joined while the window
// stays within `max_window` bytes (a byte no run asked for is never read: no gaps); a run longer
// than `max_window` is a window of its own. Runs of 0 bytes get the window of a neighbour or one
// of their own of 0 bytes.
JoinedRuns join_runs(const std::vector<RunRead>& runs, uint64_t max_window);

// Consecutive tasks [begin, end) run together; `shared`: through shared reads (else one task, run
// as before).
struct TaskGroup {
  size_t begin = 0, end = 0;
  bool shared = false;
};

// Groups tasks 0..cost.size()-1 in order: cost[i] the bytes task i holds in a group (its runs, its
// output bytes, their alignment), 0 when it cannot share reads. A task of cost 0 or over `limit`
// runs alone; the others are taken together while the group's cost stays within `limit` and it has
// at most `max_tasks` tasks.
std::vector<TaskGroup> group_tasks(const std::vector<uint64_t>& cost, uint64_t limit, size_t max_tasks);

// The most tasks a group takes (the vectors a lane builds for it stay small).
constexpr size_t kSharedMaxTasks = 512;

}  // namespace dcpctl
