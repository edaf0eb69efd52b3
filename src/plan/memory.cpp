#include "plan/memory.h"

#include <algorithm>

#include "item/hash_streams.h"
#include "item/item_reader.h"  // ItemLimits: what decoding a zstd item may take beyond its bytes
#include "plan/deal.h"

namespace dcpctl {

namespace {

uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

}  // namespace

uint64_t chunk_bytes(const TensorMeta& t, size_t c) {
  return t.chunk_numel(c) * itemsize(*t.dtype);
}

uint64_t decoded_item_need(const TensorMeta& t, size_t c) {
  if (t.storage[c].transforms == 0) return 0;
  return sat_add(chunk_bytes(t, c), ItemLimits{}.zip_overhead);
}

uint64_t whole_chunk_need(const TensorMeta& t, size_t c) {
  uint64_t from = t.storage[c].transforms != 0 ? decoded_item_need(t, c) : chunk_bytes(t, c);
  return sat_add(from, chunk_bytes(t, c));
}

uint64_t reader_need(const TensorMeta& t, size_t c, uint64_t view_storage_bytes) {
  if (!t.storage[c].present()) return 0;
  if (t.storage[c].transforms != 0) return decoded_item_need(t, c);
  return view_storage_bytes ? sat_add(view_storage_bytes, chunk_bytes(t, c)) : 0;
}

uint64_t bytes_item_need(const StorageRef& s) {
  ItemLimits lim;
  if (s.transforms == 0) return 2 * s.length;
  return 3 * std::min<uint64_t>(lim.bytes_item_base + s.length * lim.bytes_item_ratio, lim.max_pickle_bytes);
}

uint64_t source_read_need(const std::vector<Record>& records, const std::vector<size_t>& mine) {
  uint64_t need = 0;
  for (size_t r : mine)
    for (const Piece& p : records[r].pieces) {
      const TensorMeta& t = *p.source;
      uint64_t bytes = chunk_bytes(t, p.chunk);
      bool decoded = t.storage[p.chunk].transforms != 0;
      uint64_t copies = (decoded ? 1 : 0) + (p.run ? 0 : 1);
      need = std::max(need, bytes * std::max<uint64_t>(copies, 1) + (decoded ? ItemLimits{}.zip_overhead : 0));
    }
  return need;
}

uint64_t view_read_need(const DerivedTable* derived, const std::vector<Piece>& pieces) {
  uint64_t most = 0;
  if (derived)
    for (const Piece& p : pieces) most = std::max(most, derived->working_bytes(*p.source, p.chunk));
  return most;
}

uint64_t record_need(const PlannedTensor& pt, Record& r, const Target& target, uint64_t read_need,
                     const DerivedTable* derived) {
  const TensorMeta& t = *pt.t;
  const uint64_t cast = pt.dst != pt.src;
  const uint64_t view = view_read_need(derived, r.pieces);
  if (target.rank_files()) {
    // The assembled chunk, its cast, and what reading a source chunk takes.
    uint64_t n = r.box.numel();
    return n * itemsize(pt.src) + cast * n * itemsize(pt.dst) + read_need + view;
  }
  // A whole tensor into a consolidated file (and, for a safetensors run read in place, its copy
  // window).
  uint64_t max_chunk = 0;
  for (const Piece& p : r.pieces) max_chunk = std::max(max_chunk, p.source->chunk_numel(p.chunk) * itemsize(pt.src));
  // The copy window of a run read in place: source elements and their cast, smaller than
  // Target::window when that would not fit --max-memory.
  uint64_t si = itemsize(pt.src), per = si + cast * itemsize(pt.dst);
  uint64_t elems = std::min(max_chunk, target.window) / si;
  if (target.max_memory && elems * per > target.max_memory) elems = std::max<uint64_t>(1, target.max_memory / per);
  r.window_elems = std::max<uint64_t>(1, elems);
  const bool parts = pt.mapped && !pt.renamed;  // a key map's output assembled from parts
  if (target.in_order() || !r.runs || parts) {
    // The whole tensor (and its cast), plus per chunk read in flight the decoded item (zstd) and
    // the dense copy a chunk that is not a run (or gives a key map's output several pieces) is
    // placed from; the .pt writer reads its chunks on all threads at once.
    uint64_t reads = target.in_order()
                         ? std::min<uint64_t>(std::max(1u, target.threads), parts ? r.pieces.size() : t.num_chunks())
                         : 1;
    uint64_t copies = (pt.transformed ? 1 : 0) + (r.runs && !parts ? 0 : 1);
    return t.nbytes() + cast * r.out_bytes + reads * (copies * max_chunk + view);
  }
  // Runs: a zstd chunk is decoded whole (the decoded item, the chunk, its cast); an untransformed
  // one (a record may hold both) goes through the copy window; a derived chunk computed for it.
  if (pt.transformed) return std::max(max_chunk * (2 + cast), elems * per) + view;
  return elems * per + view;
}

RecordBuffers record_buffers(const PlannedTensor& pt, const Record& r) {
  uint64_t n = r.box.numel();
  RecordBuffers b;
  b.raw = n * itemsize(pt.src);
  b.cast = pt.src != pt.dst ? n * itemsize(pt.dst) : 0;
  b.rest = r.need > b.raw + b.cast ? r.need - b.raw - b.cast : 0;
  return b;
}

uint64_t memory_budget(uint64_t max_memory, uint64_t largest_need) {
  return max_memory ? max_memory : std::max<uint64_t>(largest_need, 1ull << 30);
}

nlohmann::json ProcessMemory::describe() const {
  return {{"buffers", buffers}, {"set_aside", set_aside}, {"upload", upload}, {"total", total()}, {"budget", budget}};
}

ProcessMemory process_memory(const WritePlan& plan, const Deal& deal, int rank) {
  ProcessMemory m;
  const size_t r = static_cast<size_t>(rank);
  m.buffers = r < deal.writes.size() && deal.writes[r] ? plan.largest_need : 0;
  m.set_aside = deal.set_aside[r];
  m.upload = deal.part_size[r] * deal.part_buffers[r];
  m.budget = deal.budget;
  return m;
}

uint64_t window_budget(const Metadata& md, uint64_t max_memory) {
  for (const auto& t : md.tensors)
    for (const auto& ref : t.storage)
      if (ref.transforms != 0) return max_memory / 2;
  return max_memory;
}

uint64_t window_elems(uint64_t window_bytes, size_t largest_item, uint64_t budget, unsigned threads,
                      uint64_t per_elem) {
  uint64_t elems = std::min<uint64_t>(window_bytes / std::max<size_t>(largest_item, 1),
                                      budget / (std::max(1u, threads) * per_elem + 1));
  return std::max<uint64_t>(elems, 1);
}

uint64_t verify_window_bytes(uint64_t per_worker, uint64_t decoded, uint64_t largest_chunk, size_t item) {
  constexpr uint64_t kMaxWindow = 32ull << 20;
  uint64_t bytes =
      std::max<uint64_t>(std::min(per_worker > decoded ? (per_worker - decoded) / 2 : 0, kMaxWindow), item);
  if (decoded != 0) bytes = std::max(bytes, largest_chunk);
  return bytes;
}

HashPipeline hash_pipeline(uint64_t budget, unsigned hashers, unsigned readers) {
  constexpr uint64_t kStep = kHugePage;
  HashPipeline p;
  p.hashers = std::max(1u, hashers);
  p.readers = std::max(1u, readers);
  p.slots = 2 * p.hashers + p.readers;
  p.slot_bytes = std::min<uint64_t>(kHashSlotBytes, budget / p.slots / kStep * kStep);
  if (p.slot_bytes < kStep) {
    p.slot_bytes = kStep;
    p.slots = static_cast<unsigned>(std::min<uint64_t>(p.slots, budget / kStep));
    if (p.slots < p.hashers + 1) p.slots = 0;
  }
  return p;
}

}  // namespace dcpctl
