// verify: every structural check on a checkpoint, collecting all problems instead of stopping at
// the first. With `deep`, every item is also decoded and checked against the metadata.
//
// JSON schema, version 1:
// {"schema_version": 1, "checkpoint", "ok": bool, "deep": bool,
//  "checked": {"files", "tensors", "chunks", "bytes_items", "bytes_read"},
//  "problems": [{"code", "file", "offset" (int|null), "key", "message"}],
//  "warnings": [{"code", "file", "offset", "key", "message"}],
//  "notes": [{"code", "file", "offset", "key", "message"}]   (shared-record: keys that read one
//           stored record, a tie or views of one torch.save storage: meta/shared_records.h),
//  "checksums": {"<key>": "<sha256 of the full tensor, C order, little-endian>"}   (--checksum),
//  "integrity": {"manifest", "algorithm", "files", "bytes_read"} | null   (megatron-core's
//               integrity.json, checked whenever the directory has one: report/integrity.h),
//  "manifest": {"path", "algorithm", "files", "bytes_read", "tensors", "tensors_compared", "source",
//               "written_by"} | null   (dcpctl's own manifest, meta/manifest.h: crc32 or sha256)}
// Problem codes: metadata-invalid, missing-file, window-out-of-file, window-overlap,
// chunk-gap, chunk-overlap, chunk-out-of-bounds, missing-storage, orphan-storage,
// duplicate-storage, dangerous-global, unknown-dtype, item-invalid, item-unsupported, io-error,
// crc-mismatch (a record's bytes fail the CRC-32 its writer stored: util/crc_ledger.h),
// integrity-mismatch, integrity-missing, integrity-invalid (report/integrity.h), and what a
// layout's opening found (Checkpoint::incomplete): missing-shard, missing-key, missing-rank,
// replica-mismatch (per-rank torch.save files: item/rank_torch_files.cpp), step-unfinished (a
// trainer's marker), manifest-mismatch, manifest-missing-file, manifest-unlisted-file,
// manifest-invalid, manifest-tensor-mismatch (--checksum; meta/manifest.h). Warnings add
// integrity-unlisted.
// A Hugging Face folder or .safetensors file (layouts hf-safetensors, hf-dcp-shards) is checked by
// check_hf_folder (check/hf_checks.h), whose codes join these (header-invalid, duplicate-key,
// size-mismatch, offsets-gap, key-in-several-files, index-total-size, the config's, the model
// schema's schema-key-unexpected, schema-key-missing, schema-shape-mismatch (check/hf_schema.h),
// sidecar-missing; warnings mtp-layers-absent, tie-not-compared,
// dtype-kept-by-user, keep-dtype-entry-invalid; the note schema-not-checked), and
// the report gains "hf": {"config", "index", "files_audited", "sidecars", "config_checks", "schema"}.
// A GGUF file (layout gguf, one file or a split's shards) adds gguf-offset, gguf-truncated,
// missing-shard, gguf-split (gguf/reader.cpp) and, against its architecture's table
// (gguf/arch_check.h), gguf-tensor-unexpected, gguf-tensor-missing, gguf-shape-mismatch; the note
// gguf-arch-not-checked.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "check/hf_checks.h"

namespace dcpctl {

struct VerifyOptions {
  bool deep = false;
  bool checksum = false;  // implies deep
  // Workers: 0 = all cores; with Io::Direct, at least kDirectReaders. --checksum's pipeline
  // (item/hash_streams.h) hashes on this many threads, at most one a core.
  unsigned threads = 0;
  // --deep reads chunks, and --checksum hashes full tensors, in windows whose buffers (with what
  // the reader decodes or gathers whole: zstd items, non-contiguous views) are charged to this
  // budget; a single need larger than the budget runs alone.
  uint64_t max_memory = 1ull << 30;
  // Direct: a chunk whose bytes lie in place in a local file (untransformed, contiguous, at least
  // kDirectMinRun bytes, not all in the page cache) is read past the page cache (O_DIRECT, where
  // the filesystem allows it) and checked where its bytes land: no copy out of the cache (a third
  // of verify --deep's CPU) and no cache displaced (a training node's memory), each worker reading
  // its next window while it hashes this one. Buffered: through the cache, with the kernel's
  // read-ahead. Direct is the default: measured side by side with free page reporting neutralised
  // (docs/performance.md, "Huge pages and the free page reporting"), it was as fast or faster from
  // 237 MB to 16 GB (2.4 GB: --deep 0.71 s against 0.86 s, --checksum 0.89 s against 1.17 s).
  enum class Io { Buffered, Direct };
  Io io = Io::Direct;
  // A Hugging Face folder or .safetensors file: what check_hf_folder asks of it (check/hf_checks.h).
  HfCheckOptions hf;
};

// Reads past the page cache are synchronous: a worker waits on the disk, not on a core, and the
// disk stays busy only with several in flight. Measured (docs/performance.md): `verify --deep
// --io direct` on 2 cores, 2 / 4 / 8 / 16 threads, 2.4 GB: 1.83-1.98 / 1.42-1.52 / 1.26-1.39 /
// 1.29 s; 16 GB: 10.51 s with 2, 7.39 s with 8.
inline constexpr unsigned kDirectReaders = 8;

// Throws IoError only when the directory itself cannot be opened; everything else is a finding.
nlohmann::json verify_checkpoint(const std::string& dir, const VerifyOptions& opts);

}  // namespace dcpctl
