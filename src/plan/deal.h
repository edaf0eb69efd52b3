// The second half of the plan: which process does what. plan_write (plan/plan.h) says what is
// written; deal_work says, for a run of `world` processes (torchrun; 1 without), which process
// writes each output file, the write tasks and the lanes they run on, which process reads and
// pushes each chunk a writer needs, and the memory every process holds. It is a pure function of
// the write plan, the request, and what every rank told every other before it (which data files it
// sees): every rank computes the same deal by construction, and the ranks agree on the digest of
// plan and deal (plan_digest) before a byte moves. `--dry-run --json` prints both.
//
// One rule deals all work: least loaded first, by bytes, ties to the lowest rank (least_loaded).
// It deals output files to writers (a --parallel-write consolidate's safetensors shards, a
// reshard's rank files) and chunks to the ranks that read them (consolidate under torchrun; the
// writer itself when it writes in parallel and sees the chunk's file). Chunks are dealt in task
// order, so the loads a later chunk sees are those of the chunks before it, the same on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/checkpoint.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "store/store.h"

namespace dcpctl {

// A unit of write work for the formats written at offsets or in order (plan/format.h): a
// record (a whole tensor) assembled in a buffer, or one run piece of it written straight to its
// place (at offsets: safetensors), or a record streamed piece by piece (in order: a .pt). (A rank
// file, a DCP checkpoint's, is written by one thread, record by record, and needs no task list.)
struct ChunkRef {
  uint32_t tensor;  // index into Metadata::tensors
  uint32_t chunk;
  bool operator<(const ChunkRef& o) const { return tensor != o.tensor ? tensor < o.tensor : chunk < o.chunk; }
  bool operator==(const ChunkRef& o) const { return tensor == o.tensor && chunk == o.chunk; }
};

struct Task {
  size_t record;
  std::vector<ChunkRef> chunks;  // in the order the writer consumes them (each once)
  bool whole;                    // assembled in a buffer (else each chunk goes straight out)
  int writer = 0;                // the process that writes it
  unsigned lane = 0;             // and its lane there
  // A window of its one chunk's bytes (as saved): [from, from + bytes); bytes 0: the whole chunk.
  // Dealt while the output is hashed as written (DealRequest::hash_window).
  uint64_t from = 0, bytes = 0;
};

// One chunk moved from the process that reads it (owner) to the one that writes it, on a lane.
struct Transfer {
  uint32_t tensor;  // index into Metadata::tensors
  uint32_t chunk;
  int owner, writer;
  uint32_t lane;
};

// Which data files each process can read: every one, except under --local-files, where each
// rank reads its own directory (dist/exchange.h: gather_visibility).
struct Visibility {
  std::vector<std::vector<bool>> sees;  // [rank][file]
  static Visibility everything(int world, size_t files) {
    return {std::vector<std::vector<bool>>(static_cast<size_t>(world), std::vector<bool>(files, true))};
  }
  bool can_read(int rank, uint32_t file) const { return sees[static_cast<size_t>(rank)][file]; }
};

// The rank with the least `load` among those `eligible` accepts, ties to the lowest; -1 if none.
// Adds `bytes` to its load.
template <class Eligible>
int least_loaded(std::vector<uint64_t>& load, uint64_t bytes, Eligible&& eligible) {
  int best = -1;
  for (size_t r = 0; r < load.size(); ++r)
    if (eligible(static_cast<int>(r)) && (best < 0 || load[r] < load[static_cast<size_t>(best)]))
      best = static_cast<int>(r);
  if (best >= 0) load[static_cast<size_t>(best)] += bytes;
  return best;
}

struct DealRequest {
  int world = 1;                // processes
  unsigned lanes = 1;           // writing threads of a writer at offsets (under torchrun one exchange lane each)
  bool parallel_write = false;  // consolidate under torchrun: every rank writes files (else rank 0 writes all)
  bool exchange = false;        // consolidate under torchrun: chunks move from their readers to the writer
  bool budget_given = false;    // --max-memory was given (else the budget rises to the largest need)
  const Visibility* visibility = nullptr;  // with `exchange`; null: every rank reads every file
  // The output is in object storage (store/upload.h): every writer holds part buffers of its
  // uploads, set aside from the budget (`part_rules`: the store's; `threads`: --threads).
  bool upload = false;
  store::PartRules part_rules;
  unsigned threads = 1;
  std::string output;  // for messages
  // The output is hashed as it is written (write/write_hash.h): a chunk written straight to its
  // place (a run) is dealt as consecutive windows of this many bytes, lane after lane, so that every
  // lane writes near the hashed prefix of the file and nothing is read back. 0: whole chunks.
  uint64_t hash_window = 0;
};

// The window a hashed output's runs are dealt in: a quarter of what the file hashes may keep
// (kHeldBudget, 64 MiB) for four lanes, as large as the direct window the copies read in.
constexpr uint64_t kHashDealWindow = 16ull << 20;

struct Deal {
  int world = 1;
  unsigned lanes = 1;
  std::vector<int> writer_of;       // per planned file: the process that writes it
  std::vector<Task> tasks;          // at offsets, in order: writer by writer, each writer's in the order written
  std::vector<uint8_t> writes;      // per process: 1 when it writes a file or runs a task
  std::vector<Transfer> transfers;  // with an exchange: every chunk a task needs, in task order
  std::vector<uint64_t> set_aside;  // per process: bytes of zstd chunks it decodes whole to push them
  // Per process, uploading into object storage: the part size and how many part buffers it holds
  // (0 without an upload), set aside from its budget (with the automatic budget, the budget rises
  // by the most any process holds).
  std::vector<uint64_t> part_size;
  std::vector<unsigned> part_buffers;
  uint64_t budget = 0;                // every process's --max-memory
  std::vector<ProcessMemory> memory;  // per process: what it holds at most (plan/memory.h)

  uint64_t upload_bytes(int rank) const {
    return part_size[static_cast<size_t>(rank)] * part_buffers[static_cast<size_t>(rank)];
  }

  // The planned files process `rank` writes.
  std::vector<size_t> files_of(int rank) const;
  // The memory gate of process `rank`: its budget less what it sets aside (zstd chunks it pushes,
  // part buffers).
  uint64_t gate_bytes(int rank) const { return budget - set_aside[static_cast<size_t>(rank)] - upload_bytes(rank); }
  nlohmann::json describe() const;
};

// Deals the plan out (see the top of this file). Throws UsageError when a process's memory need
// (its largest buffer, what it sets aside, the fewest part buffers its uploads work with) exceeds a
// given --max-memory, FormatError naming a data file no process can read.
Deal deal_work(const Checkpoint& ck, const WritePlan& plan, const DealRequest& rq);

// SHA-256 of everything that decides the output's bytes and who writes them: the plan's records,
// files and budget, and the deal. Every process computes it from its own plan; they must agree.
std::string plan_digest(const WritePlan& plan, const Deal& deal);

}  // namespace dcpctl
