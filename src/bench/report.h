// The two renderings of a staging report: JSON for scripts and a table for people. Pure
// functions of the report, so tests can check them without a GPU.
//
// JSON, schema_version 1 (`dcpctl bench staging --json`; keys are always present, null when
// not applicable; times in seconds, rates in decimal GB/s = 1e9 bytes/s):
//   schema_version 1, benchmark "staging", dcpctl_version (added by the CLI), host_only bool
//   config      {sizes [bytes], modes [names], iters, warmup, streams, chunk_bytes (0: none
//               given), write_to (path|null), fsync}
//   checkpoint  null | {path, rank, chunks, tensors, bytes, span_bytes, ranks [ints]}
//   cuda        {compiled, gate ("spin-kernel"|"host-function"|null), toolkit, runtime_version
//               ("13.0"|null), driver_version ("13.0"|null), device_count, usable, reason}
//   device      null (host-only) | {index, name, pci_bus_id, memory_bytes, compute_capability
//               ("9.0"), copy_engines}
//   pcie        null (not readable) | {bus_id, speed_gts, width, max_speed_gts, max_width,
//               generation, theoretical_gbps, numa_node}
//   host        {cpu_threads, page_size, memory_bytes, memlock_limit_bytes (null: unlimited),
//               memlock_exempt, pinned_memory ("cudaHostAlloc"|"mlock")}
//   results     one object per measurement, in run order:
//               mode ("pinned"|"registered"|"pageable"|"cold"|"per-tensor"|"flat"|"write"|
//               "write-fsync"), direction ("d2h"|"h2h"|"h2file"), memory (what the destination
//               really was), bytes (per iteration), copies (copy calls per iteration), streams,
//               chunk_bytes (0: not split), timing ("cuda-events"|"host-clock"|null), iters,
//               warmup, seconds {n, median, min, max, mean} | null, gbps {median, min, max} |
//               null (min from the slowest iteration), pin_seconds (summary of allocating or
//               pinning) | null, pin_seconds_per_gib | null, host_bytes,
//               host_bytes_locked_between_saves, verified (bool | null when skipped),
//               status ("ok"|"skipped"|"failed"), reason (why skipped/failed, or a caveat; "")
//   notes       [strings]: how to read the numbers (stand-ins, host RAM, checkpoint coverage)
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench/staging.h"

namespace dcpctl::bench {

nlohmann::json staging_json(const StagingReport& r);

// The human report: a header (GPU, PCIe link, CUDA), one line per measurement, then notes.
std::string staging_table(const StagingReport& r);

// "812 us", "4.21 ms", "1.30 s": three significant digits.
std::string format_seconds(double s);

}  // namespace dcpctl::bench
