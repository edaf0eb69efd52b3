#include "item/read_box.h"

#include <algorithm>
#include <map>
#include <vector>

#include "item/chunk_source.h"
#include "meta/pieces.h"
#include "util/error.h"

namespace dcpctl {

namespace {

// The box cut along its first dimension into bands of at most `band_bytes` (at least one row).
std::vector<Box> bands_of(const Box& box, uint64_t item, uint64_t band_bytes) {
  if (box.sizes.empty() || box.sizes[0] <= 1) return {box};
  uint64_t row = item;
  for (size_t d = 1; d < box.sizes.size(); ++d) row *= static_cast<uint64_t>(box.sizes[d]);
  const int64_t rows = static_cast<int64_t>(std::max<uint64_t>(1, band_bytes / std::max<uint64_t>(row, 1)));
  std::vector<Box> out;
  for (int64_t r = 0; r < box.sizes[0]; r += rows) {
    Box b = box;
    b.offsets[0] = box.offsets[0] + r;
    b.sizes[0] = std::min(rows, box.sizes[0] - r);
    out.push_back(std::move(b));
  }
  return out;
}

// Reads chunk `chunk` of `t` whole, window by window, and drops it: its record is then checked.
void read_through(const ItemReader& reader, const TensorMeta& t, size_t chunk, uint64_t window) {
  const uint64_t total = t.chunk_numel(chunk) * itemsize(*t.dtype);
  std::vector<uint8_t> buf(std::min(total, std::max<uint64_t>(window, 1)));
  for (uint64_t at = 0; at < total; at += buf.size()) {
    const uint64_t n = std::min<uint64_t>(buf.size(), total - at);
    reader.read_chunk_bytes(t, chunk, at, n, buf.data());
  }
}

// Whether the chunk's bytes lie in a zip record whose CRC-32 is checked only once all of it is read:
// an untransformed torch.save item (DCP's), or a Raw item inside a torch.save file's record. A
// safetensors tensor carries none; a transformed item is decoded, and checked, whole anyway.
bool needs_whole_record(const Checkpoint& ck, const StorageRef& ref) {
  if (ref.transforms != 0) return false;
  if (ref.format == ItemFormat::TorchSave) return true;
  for (const Checkpoint::RecordCrc& r : ck.record_crcs)
    if (r.file == ref.file && r.offset < ref.offset + ref.length && ref.offset < r.offset + r.size) return true;
  return false;
}

// The bytes of one band: half the budget, at most max_band, at least one byte.
uint64_t band_of(const BoxReadOptions& o) {
  return std::max<uint64_t>(std::min(o.budget / 2, o.max_band), 1);
}

// A transformed (zstd) chunk the box meets is decoded whole beside a band: refused when that
// exceeds the budget, naming the least budget that holds both (a band is half the budget up to
// max_band: chunk + min(chunk, max_band)).
void check_decodes(const ItemReader& reader, const TensorMeta& t, const Box& box, const BoxReadOptions& o) {
  for (const Piece& p : plan_pieces(t, box)) {
    if (p.chunk >= t.storage.size() || t.storage[p.chunk].transforms == 0) continue;
    const StorageRef& ref = t.storage[p.chunk];
    const uint64_t chunk = t.chunk_numel(p.chunk) * itemsize(*t.dtype);
    if (chunk + band_of(o) <= o.budget) continue;
    throw UsageError(Where(reader.checkpoint().path_of(ref.file), ref.offset, t.fqn),
                     "chunk " + std::to_string(p.chunk) + " is zstd-compressed, and decoded whole (" +
                         std::to_string(chunk) + " bytes) beside the read's band for any read of it: more than " +
                         "max_memory (" + std::to_string(o.budget) + "); raise max_memory to at least " +
                         std::to_string(chunk + std::min(chunk, o.max_band)));
  }
}

}  // namespace

void check_box(const TensorMeta& t, const Box& box) {
  if (box.offsets.size() != t.ndim() || box.sizes.size() != t.ndim())
    throw UsageError(Where({}, std::nullopt, t.fqn), "a slice of " + std::to_string(box.offsets.size()) +
                                                         " dimensions of a tensor of " + std::to_string(t.ndim()));
  for (size_t d = 0; d < t.ndim(); ++d)
    if (box.offsets[d] < 0 || box.sizes[d] < 0 || box.offsets[d] > t.shape[d] ||
        box.sizes[d] > t.shape[d] - box.offsets[d])
      throw UsageError(Where({}, std::nullopt, t.fqn),
                       "dimension " + std::to_string(d) + ": [" + std::to_string(box.offsets[d]) + ", +" +
                           std::to_string(box.sizes[d]) + ") is outside its size " + std::to_string(t.shape[d]));
}

BoxReadStats read_box(const ItemReader& reader, const TensorMeta& t, const Box& box, uint8_t* dst,
                      const BoxReadOptions& o) {
  check_box(t, box);
  const uint64_t item = itemsize(*t.dtype);
  BoxReadStats s;
  if (box.numel() == 0) return s;
  check_decodes(reader, t, box, o);
  const uint64_t band = band_of(o);
  LocalChunks src(reader, band);
  std::map<uint32_t, uint64_t> read;  // chunk -> bytes of it read into the box
  uint64_t at = 0;
  for (const Box& b : bands_of(box, item, band)) {
    std::vector<Piece> pieces = plan_pieces(t, b);
    assemble_box(src, t, b, pieces, dst + at, std::max(1u, o.threads));
    for (const Piece& p : pieces) read[p.chunk] += p.bytes;
    at += b.numel() * item;
    ++s.bands;
  }
  s.chunks = read.size();
  if (!o.complete_records) return s;
  for (const auto& [chunk, bytes] : read) {
    if (bytes >= t.chunk_numel(chunk) * item || !needs_whole_record(reader.checkpoint(), t.storage[chunk])) continue;
    read_through(reader, t, chunk, band);
    ++s.completed_chunks;
  }
  return s;
}

}  // namespace dcpctl
