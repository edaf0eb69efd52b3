// SHA-256 of many byte streams read from local files, with the hashing and the reading apart.
//
// `verify --checksum` hashes each full tensor in C order: for a tensor sharded along dimension 0
// (FSDP) or whole, its chunks' bytes in place, one after another (a stream of runs). A tensor's
// SHA-256 is one sequential computation, so the streams are what can run in parallel, and the
// largest sets the floor: 524 MB of `tok_embeddings` takes 0.26 s of a core. When every worker
// read and hashed its own tensors, 8 workers (as many reads in flight as the disk needs) shared 2
// cores and the largest tensor got a quarter of one: it ended last, at 0.91 s of a 0.99 s run.
//
// Here `hashers` threads (one a core) hash, each its own lanes of streams dealt largest first to
// the least loaded, so the lanes end together: two lanes a hasher where Sha256::pairs() (SHA-NI:
// two streams interleaved on one core hash ~1.25x faster than one, util/sha256.h), a window of
// each hashed at once as far as the shorter goes, else one; `readers` threads read ahead for all of them into
// a pool of `slots` buffers of `slot_bytes` (IoBuffers: O_DIRECT-aligned, on huge pages), always
// for the hasher with the fewest bytes read ahead, so the disk has reads in flight whenever a
// buffer is free and no hasher waits while another has plenty. A buffer goes back to the pool as
// soon as it is hashed. Each file's CRC ledger checks the records' CRC-32 as their bytes are read
// (on the readers). A run is read past the page cache where its `past_cache` says so
// (ReadFile::read_direct), else through it (read_at); every read after a run's first starts on a
// kDirectAlign block, so no block is read twice.
//
// Memory: slots * slot_bytes, taken from the caller's gate for the whole call (the size comes from
// plan/memory.h's hash_pipeline). Windows are cut from a cursor as slots free up, so the
// bookkeeping is one record per window in flight, not per window or chunk of the checkpoint (a
// 2,048-rank FSDP checkpoint has millions); the caller's streams hold one HashRun per chunk.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "item/item_reader.h"
#include "util/memory_gate.h"

namespace dcpctl {

struct HashRun {
  DirectRun run;
  bool past_cache = false;  // read with O_DIRECT (where the filesystem allows it)
};

struct HashStream {
  std::string key;  // named in errors
  std::vector<HashRun> runs;
  uint64_t bytes() const;
};

// The read-ahead pool's slot, and how many readers fill the pool (plan/memory.h sizes it).
constexpr uint64_t kHashSlotBytes = 16ull << 20;
constexpr unsigned kHashReaders = 4;

struct HashPipeline {
  unsigned hashers = 1, readers = 1;
  unsigned slots = 2;
  uint64_t slot_bytes = 0;  // a multiple of kDirectAlign, more than 2 * kDirectAlign
  bool crc = false;         // each stream's CRC-32 too (StreamDigest::crc)
};

// One per stream: its SHA-256 as lower-case hex, or the error (an Error: IoError, FormatError,
// CorruptError) that stopped it; the other streams go on. Any other exception (out of memory)
// stops everything and is rethrown.
struct StreamDigest {
  std::string hex;
  uint32_t crc = 0;  // with HashPipeline::crc, the stream's CRC-32 (a CRC-32 manifest's tensor digest, meta/manifest.h)
  std::exception_ptr error;
};

std::vector<StreamDigest> hash_streams(const std::vector<HashStream>& streams, const HashPipeline& p, MemoryGate& gate);

}  // namespace dcpctl
