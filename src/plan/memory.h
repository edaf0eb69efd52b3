// What dcpctl holds in memory: one cost model, for the write side and the read side alike.
//
// Every buffer dcpctl allocates for tensor bytes is sized and charged to a memory gate
// (util/memory_gate.h) from the figures here, and every refusal of a --max-memory too small is
// decided from them, before a byte moves:
//
//   reading a derived chunk what a view's DerivedTensor holds to compute it (meta/derived.h: the
//                           saved inputs it reads, whole scales or adapters, float32 working
//                           copies), on top of what the record holds for it (view_read_need)
//   reading a saved chunk   its dense bytes; what the item reader allocates itself to produce them
//                           (a zstd item decoded whole, with the zip around it; a saved view that
//                           is not contiguous, gathered from its storage); both at once for a chunk
//                           read whole (whole_chunk_need)
//   writing a record        the plan's `need` of each record (plan/plan.h): a consolidated tensor
//                           assembled, or a run read in place through its copy window; a DCP target
//                           chunk assembled with its cast and the source chunk read for it; how the
//                           executor splits that need into its buffers (record_buffers)
//   each process            under torchrun the zstd chunks it decodes to push (set aside per lane),
//                           its largest record buffer, its upload part buffers (ProcessMemory); the
//                           automatic budget (memory_budget); `--dry-run --json` prints every rank's
//   the read side           verify's windows and items, and the windows diff and stats walk full
//                           tensors in (item/window.h), within --max-memory over their threads
//
// The executor, the chunk exchange (dist/exchange.h), verify, diff and stats ask only here.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/derived.h"
#include "meta/metadata.h"
#include "plan/plan.h"

namespace dcpctl {

struct Deal;
struct HashPipeline;

// ---- Reading one saved chunk.

// The dense bytes of chunk `c` of `t`.
uint64_t chunk_bytes(const TensorMeta& t, size_t c);
// A zstd item decoded whole: its bytes, and the zip around them the reader's cap allows
// (ItemLimits::zip_overhead). 0 for an untransformed chunk.
uint64_t decoded_item_need(const TensorMeta& t, size_t c);
// A chunk read whole, held at once: what the reader produces it from (the decoded item, or a
// view's storage, counted as the chunk's own size) and the dense chunk. What a chunk source takes
// from its gate while it holds one (item/chunk_source.h) and what a pusher sets aside per lane.
uint64_t whole_chunk_need(const TensorMeta& t, size_t c);
// What the reader allocates itself to read chunk `c` (beside the caller's buffer of its dense
// bytes): a zstd item's decoded_item_need; a saved view that is not contiguous, its storage
// (`view_storage_bytes`, from the item's data.pkl: TensorBlob::extent) and a dense copy; else 0.
uint64_t reader_need(const TensorMeta& t, size_t c, uint64_t view_storage_bytes = 0);
// Decoding a non-tensor (bytes) item: its data.pkl and the VM's copy of what it holds (about
// twice its size); a zstd item, its decoded bytes too, up to the reader's cap.
uint64_t bytes_item_need(const StorageRef& s);

// ---- Writing: a record of a write plan.

// The most a view's read of one of `pieces`' chunks holds besides the chunk (meta/derived.h:
// DerivedTensor::working_bytes); 0 for saved chunks or without a table.
uint64_t view_read_need(const DerivedTable* derived, const std::vector<Piece>& pieces);
// What writing record `r` of tensor `pt` holds at once (Record::need; for a safetensors run read
// in place, sets its copy window, Record::window_elems). `read_need`: for a DCP target chunk, what
// reading a source chunk of the tensor takes (source_read_need); `derived`: the checkpoint's
// derived tensors, whose reads hold view_read_need each.
uint64_t record_need(const PlannedTensor& pt, Record& r, const Target& target, uint64_t read_need,
                     const DerivedTable* derived = nullptr);
// What assembling a DCP target chunk of a tensor takes to read one source chunk of it, over the
// records `mine` of that tensor: the decoded item (zstd) plus a dense copy of the chunk when some
// piece of it is not a run. Counted at least once, which also covers a chunk saved as a
// non-contiguous view (gathered through a copy of its storage).
uint64_t source_read_need(const std::vector<Record>& records, const std::vector<size_t>& mine);

// How the executor holds an assembled record's need: `raw` the assembled box, `cast` its cast (0
// when none), `rest` what reading its chunks takes beside them.
struct RecordBuffers {
  uint64_t raw = 0, cast = 0, rest = 0;
};
RecordBuffers record_buffers(const PlannedTensor& pt, const Record& r);

// The budget of buffers a write may hold at once: --max-memory when given (0: not given), else the
// largest single need or 1 GiB, whichever is more.
uint64_t memory_budget(uint64_t max_memory, uint64_t largest_need);

// ---- Each process of a write.

// What process `rank` of a deal holds at most: its largest record buffer (if it writes), what it
// sets aside (zstd chunks it decodes whole to push them, one per pushing lane), its upload part
// buffers; the budget it runs under. `--dry-run --json` prints it for every rank.
struct ProcessMemory {
  uint64_t buffers = 0, set_aside = 0, upload = 0, budget = 0;
  uint64_t total() const { return buffers + set_aside + upload; }
  nlohmann::json describe() const;
};
ProcessMemory process_memory(const WritePlan& plan, const Deal& deal, int rank);

// ---- The read side: verify, diff and stats walk tensors in windows (item/window.h).

// The part of a --max-memory budget window buffers may use: all of it, or half when some chunk of
// `md` is transformed (zstd), so that decoded chunks shared by several windows fit in the rest.
uint64_t window_budget(const Metadata& md, uint64_t max_memory);
// Elements per window for `threads` threads walking windows at once, each holding `per_elem`
// bytes per element (its windows, their scratch), within `budget`; at most `window_bytes` /
// `largest_item` elements; at least 1.
uint64_t window_elems(uint64_t window_bytes, size_t largest_item, uint64_t budget, unsigned threads, uint64_t per_elem);
// verify: the bytes of one window (a full tensor's, hashed in C order, or a chunk's) of a worker
// with `per_worker` bytes of the budget whose reads allocate up to `decoded` bytes themselves;
// windows of at most 32 MiB (enough to stream at the disk's speed, and a worker's buffers are
// touched once each), at least one element; at least `largest_chunk` when the reader decodes
// chunks whole (a few passes per chunk, not one per window).
uint64_t verify_window_bytes(uint64_t per_worker, uint64_t decoded, uint64_t largest_chunk, size_t item);
// verify --checksum's hash pipeline (item/hash_streams.h) within `budget`: `hashers` hashing and
// `readers` reading ahead, a slot for each and one more per hasher (its next window read while it
// hashes one), of kHashSlotBytes each, shrunk in steps of a huge page (2 MiB) to fit; with fewer
// slots, down to hashers + 1, where even 2 MiB slots do not fit. None (slots 0: the tensors go
// through the workers' windows instead) below that.
HashPipeline hash_pipeline(uint64_t budget, unsigned hashers, unsigned readers);

}  // namespace dcpctl
