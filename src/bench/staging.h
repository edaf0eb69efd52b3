// `dcpctl bench staging`: how fast this machine stages checkpoint data from GPU memory into host
// memory, the step of `dcp.async_save` that stalls training, and how fast the staged bytes then
// reach storage.
//
// Method (nvbandwidth's): untimed warm-up iterations, then --iters timed ones summarized by
// median/min/max; copies into page-locked memory are queued behind a gate and timed with CUDA
// events, so the numbers are the copies alone; copies whose cost includes the host (pageable
// memory, allocating per save, one copy per tensor) are timed with the host clock, as a training
// step experiences them. Every measurement checks the copied bytes against a position-dependent
// pattern (bench/pattern.h).
//
// Modes, per size of the sweep:
//   pinned      cached page-locked buffer (cudaHostAlloc once, reused: PyTorch's advice)
//   registered  existing pageable memory pinned in place (cudaHostRegister; DCP's shm stager)
//   pageable    malloc'd memory (the driver copies through its own bounce buffer)
//   cold        cudaHostAlloc + copy + cudaFreeHost every save; the pinning cost is reported
// With a checkpoint: its rank's tensor chunks copied one at a time (per-tensor, as async_save
// does) next to one copy of the same number of bytes (flat). With a directory: the staged bytes
// written to a file, through the page cache (write) and optionally made durable (write-fsync).
//
// Without a usable GPU only host_only runs; without a CUDA driver it uses mlock()ed memory in
// place of page-locked memory and says so in the report.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/cuda_backend.h"
#include "bench/host_memory.h"
#include "bench/layout.h"
#include "bench/pcie.h"
#include "bench/stats.h"

namespace dcpctl::bench {

// In the order they run and print.
extern const std::vector<std::string> kStagingModes;      // pinned, registered, pageable, cold
extern const std::vector<uint64_t> kDefaultStagingSizes;  // 4 MiB, 64 MiB, 256 MiB, 1 GiB

struct StagingOptions {
  std::vector<uint64_t> sizes;     // the sweep; may be empty when `checkpoint` is set
  std::vector<std::string> modes;  // subset of kStagingModes; empty: all
  unsigned iters = 10;
  unsigned warmup = 2;
  unsigned streams = 1;  // CUDA streams (host-only: copy threads)
  uint64_t chunk = 0;    // split copies in pieces of this size; 0: whole, or `streams` pieces
  std::string checkpoint;
  int rank = 0;
  std::string write_to;
  bool fsync = false;
  bool host_only = false;
  int device = 0;
  std::function<void(const std::string&)> progress;  // one line per measurement, may be empty
};

struct Row {
  std::string mode;       // a kStagingModes entry, "per-tensor", "flat", "write", "write-fsync"
  std::string direction;  // "d2h" (device to host), "h2h" (host memcpy), "h2file"
  std::string memory;     // what the destination really was
  std::string label;      // "64 MiB", "rank 0" (table)
  uint64_t bytes = 0;     // payload bytes per iteration
  uint64_t copies = 0;    // copy calls per iteration
  unsigned streams = 1;
  uint64_t chunk_bytes = 0;  // 0: not split
  std::string timing;        // "cuda-events" or "host-clock"
  unsigned iters = 0, warmup = 0;
  Summary seconds;
  std::optional<Summary> pin_seconds;  // allocating/pinning, per occurrence
  uint64_t host_bytes = 0;             // host RAM the mode needs during a save
  uint64_t host_bytes_locked_between_saves = 0;
  std::optional<bool> verified;  // nullopt: not checked (skipped)
  std::string status = "ok";     // "ok", "skipped", "failed"
  std::string reason;            // why skipped or failed, or a caveat
};

struct CheckpointSource {
  std::string path;
  int rank = 0;
  uint64_t chunks = 0, tensors = 0, bytes = 0, span = 0;
  std::vector<int> ranks;
};

struct StagingReport {
  // What ran.
  std::vector<uint64_t> sizes;
  std::vector<std::string> modes;
  unsigned iters = 0, warmup = 0, streams = 1;
  uint64_t chunk = 0;
  bool host_only = false;
  std::optional<CheckpointSource> checkpoint;
  std::string write_to;
  bool fsync = false;
  // Where.
  CudaProbe cuda;
  std::optional<DeviceInfo> device;
  std::optional<PcieLink> pcie;
  HostInfo host;
  std::string pinned_memory;  // "cudaHostAlloc" or "mlock" (the stand-in)
  // Results.
  std::vector<Row> rows;
  std::vector<std::string> notes;

  size_t count(const std::string& status) const;
};

// Throws UsageError (bad options), UnsupportedError (no usable GPU and not host_only), IoError
// (--write-to), Error (CUDA failures). Wrong bytes are reported in the rows (status "failed"), not
// thrown, so the caller can print everything that was measured.
StagingReport run_staging(const StagingOptions& options);

}  // namespace dcpctl::bench
