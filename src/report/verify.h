// verify: every structural check on a checkpoint, collecting all problems instead of stopping at
// the first. With `deep`, every item is also decoded and checked against the metadata.
//
// JSON schema, version 1:
// {"schema_version": 1, "checkpoint", "ok": bool, "deep": bool,
//  "checked": {"files", "tensors", "chunks", "bytes_items", "bytes_read"},
//  "problems": [{"code", "file", "offset" (int|null), "key", "message"}],
//  "warnings": [{"code", "file", "offset", "key", "message"}],
//  "checksums": {"<key>": "<sha256 of the full tensor, C order, little-endian>"}   (--checksum),
//  "integrity": {"manifest", "algorithm", "files", "bytes_read"} | null   (megatron-core's
//               integrity.json, checked whenever the directory has one: report/integrity.h)}
// Problem codes: metadata-invalid, missing-file, window-out-of-file, window-overlap,
// chunk-gap, chunk-overlap, chunk-out-of-bounds, missing-storage, orphan-storage,
// duplicate-storage, dangerous-global, unknown-dtype, item-invalid, item-unsupported, io-error,
// crc-mismatch (a record's bytes fail the CRC-32 its writer stored: util/crc_ledger.h),
// integrity-mismatch, integrity-missing, integrity-invalid (report/integrity.h), and what a
// layout's opening found (Checkpoint::incomplete): missing-shard, missing-key, missing-rank,
// replica-mismatch (per-rank torch.save files: item/rank_torch_files.cpp), step-unfinished (a
// trainer's marker). Warnings add integrity-unlisted.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace dcpctl {

struct VerifyOptions {
  bool deep = false;
  bool checksum = false;  // implies deep
  unsigned threads = 0;   // 0 = all cores; with direct_io, at least kDirectReaders
  // --deep reads chunks, and --checksum hashes full tensors, in windows whose buffers (with what
  // the reader decodes or gathers whole: zstd items, non-contiguous views) are charged to this
  // budget; a single need larger than the budget runs alone.
  uint64_t max_memory = 1ull << 30;
  // Direct: a chunk whose bytes lie in place in a local file (untransformed, contiguous, at least
  // kDirectMinRun bytes, not all in the page cache) is read past the page cache (O_DIRECT, where
  // the filesystem allows it) and checked where its bytes land: no copy out of the cache (a third
  // of verify --deep's CPU) and no cache displaced (a training node's memory). Buffered: through
  // the cache, with the kernel's read-ahead, which on the project's VM beats direct's synchronous
  // reads while the checkpoint fits the cache. Auto: direct when the items to read are more than
  // half of available_memory() (MemAvailable, or a cgroup's memory limit where lower: a container's
  // page cache is charged to it) (the cache would only displace itself, and reclaiming it costs the
  // kernel more than the reads: at 16 GB on 24 GiB, 13.4 s buffered against 8.0 s direct),
  // buffered otherwise (docs/performance.md, "With every record's CRC-32 checked").
  enum class Io { Auto, Buffered, Direct };
  Io io = Io::Auto;
};

// Reads past the page cache are synchronous: a worker waits on the disk, not on a core, and the
// disk stays busy only with several in flight. Measured (docs/performance.md): `verify --deep
// --io direct` on 2 cores, 2 / 4 / 8 / 16 threads, 2.4 GB: 1.83-1.98 / 1.42-1.52 / 1.26-1.39 /
// 1.29 s; 16 GB: 10.51 s with 2, 7.39 s with 8.
inline constexpr unsigned kDirectReaders = 8;

// Whether --deep reads past the page cache: `io`, and for Auto whether `item_bytes` are more than
// half of `available` (available_memory(); 0, unknown, reads buffered).
inline bool verify_reads_direct(VerifyOptions::Io io, uint64_t item_bytes, uint64_t available) {
  if (io != VerifyOptions::Io::Auto) return io == VerifyOptions::Io::Direct;
  return available > 0 && item_bytes > available / 2;
}

// Throws IoError only when the directory itself cannot be opened; everything else is a finding.
nlohmann::json verify_checkpoint(const std::string& dir, const VerifyOptions& opts);

}  // namespace dcpctl
