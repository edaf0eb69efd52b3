#include "item/item_reader.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "item/dequantize.h"
#include "item/torch_zip.h"
#include "item/transforms.h"
#include "meta/geometry.h"
#include "meta/pieces.h"
#include "pickle/vm.h"
#include "store/file.h"
#include "util/numeric.h"

namespace dcpctl {

struct ItemReader::Opened {
  Where where;
  std::shared_ptr<const ByteSource> src;
  std::unique_ptr<TorchZip> zip;
};

ItemReader::ItemReader(const Checkpoint& ck, ItemLimits limits)
    : ck_(ck), limits_(limits), files_(ck.md.files.size()), records_(ck.md.files.size()) {
  for (const Checkpoint::RecordCrc& r : ck.record_crcs)
    if (r.file < records_.size()) records_[r.file][r.offset] = r.size;
  for (size_t i = 0; i < ck.dequant.weights.size(); ++i) scaled_.emplace(ck.dequant.weights[i].weight.fqn, i);
  for (size_t i = 0; i < ck.dequant.mxfp4.size(); ++i) mxfp4_.emplace(ck.dequant.mxfp4[i].blocks.fqn, i);
  for (size_t i = 0; i < ck.lora.merged.size(); ++i) merged_.emplace(ck.lora.merged[i].fqn, i);
}

ItemReader::~ItemReader() = default;

void ItemReader::provide(const StorageRef& ref, std::shared_ptr<const ByteSource> raw) {
  std::lock_guard<std::mutex> lock(mu_);
  provided_[{ref.file, ref.offset}] = std::move(raw);
}

void ItemReader::expect(const std::vector<StorageRef>& items) {
  if (!is_remote_path(ck_.dir)) return;
  std::lock_guard<std::mutex> lock(mu_);
  expected_.assign(files_.size(), {});
  for (const StorageRef& r : items)
    if (r.present() && r.file < expected_.size()) expected_[r.file].emplace_back(r.offset, r.length);
}

const ReadFile& ItemReader::file(uint32_t index, const Where& where) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!files_.at(index)) {
    const DataFileInfo& fi = ck_.files.at(index);
    // A referenced file that is not there makes the checkpoint incomplete (3), as verify says;
    // one that is there but cannot be read is an I/O error (4).
    if (!fi.size && fi.missing)
      throw FormatError(Where(ck_.path_of(index), std::nullopt, where.key), "data file missing: the checkpoint is incomplete (" + fi.error + ")");
    if (!fi.size) throw IoError(Where(ck_.path_of(index), std::nullopt, where.key), "data file unavailable: " + fi.error);
    files_[index] = std::make_unique<ReadFile>(ck_.path_of(index));
    if (index < expected_.size()) files_[index]->expect(std::move(expected_[index]));
    for (const Checkpoint::RecordCrc& r : ck_.record_crcs)
      if (r.file == index) files_[index]->ledger().watch(files_[index]->path(), r.offset, r.size, r.crc, r.key, r.record);
  }
  return *files_[index];
}

ItemReader::Opened ItemReader::open(const StorageRef& ref, const std::string& key, uint64_t max_decoded) const {
  if (!ref.present()) throw FormatError(Where(ck_.metadata_path, std::nullopt, key), "no storage_data entry");
  Opened o;
  o.where = Where(ck_.path_of(ref.file), ref.offset, key);
  std::shared_ptr<const ByteSource> provided;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = provided_.find({ref.file, ref.offset}); it != provided_.end()) provided = it->second;
  }
  if (provided) {
    o.src = ref.transforms == 0 ? provided
                                : undo_transforms(*provided, ck_.md.transform_sets.at(ref.transforms), max_decoded, o.where);
  } else {
    const ReadFile& f = file(ref.file, o.where);
    if (ref.offset > f.size() || ref.length > f.size() - ref.offset)
      throw FormatError(o.where, "item of " + std::to_string(ref.length) + " bytes runs past the end of the file (" +
                                     std::to_string(f.size()) + " bytes)");
    if (ref.transforms == 0) {
      if (ref.format == ItemFormat::Raw) read_rest_of_record(f, ref, key);
      o.src = std::make_shared<FileWindow>(f, ref.offset, ref.length, key);
    } else {
      FileWindow encoded(f, ref.offset, ref.length, key);
      o.src = undo_transforms(encoded, ck_.md.transform_sets.at(ref.transforms), max_decoded, o.where);
    }
  }
  if (ref.format == ItemFormat::TorchSave) o.zip = std::make_unique<TorchZip>(o.src, o.where);
  return o;
}

void ItemReader::read_rest_of_record(const ReadFile& f, const StorageRef& ref, const std::string& key) const {
  if (ref.file >= records_.size() || records_[ref.file].empty()) return;
  const auto& recs = records_[ref.file];
  auto it = recs.upper_bound(ref.offset);
  if (it == recs.begin()) return;
  --it;
  uint64_t rec = it->first, size = it->second;
  if (ref.offset - rec > size || ref.length > size - (ref.offset - rec)) return;  // not inside this record
  if (ref.offset == rec && ref.length == size) return;                          // the view is the record
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!rest_read_.insert({ref.file, rec}).second) return;
  }
  constexpr uint64_t kBlock = 1 << 20;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kBlock, size)));
  auto read = [&](uint64_t from, uint64_t to) {
    for (uint64_t p = from; p < to;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, to - p));
      f.read_at(p, buf.data(), n, key);
      p += n;
    }
  };
  read(rec, ref.offset);
  read(ref.offset + ref.length, rec + size);
}

ItemReader::Opened ItemReader::open_chunk(const TensorMeta& t, size_t chunk) const {
  uint64_t cap = UINT64_MAX;
  if (t.dtype) {
    uint64_t bytes = t.chunk_numel(chunk) * itemsize(*t.dtype);
    cap = bytes > UINT64_MAX - limits_.zip_overhead ? UINT64_MAX : bytes + limits_.zip_overhead;
  }
  return open(t.storage.at(chunk), t.fqn, cap);
}

TensorBlob ItemReader::check_blob(Opened& o, const TensorMeta& t, size_t chunk) const {
  if (!o.zip) {  // ItemFormat::Raw: the item is the chunk's dense bytes, as the header said
    if (!t.dtype) throw UnsupportedError(o.where, "tensor of unknown dtype " + t.dtype_name);
    TensorBlob b;
    b.dtype = *t.dtype;
    b.size.assign(t.chunk_sizes(chunk), t.chunk_sizes(chunk) + t.ndim());
    b.stride.assign(t.ndim(), 1);
    for (size_t d = t.ndim(); d-- > 1;) b.stride[d - 1] = b.stride[d] * std::max<int64_t>(b.size[d], 1);
    b.storage_bytes = o.src->size();
    if (b.numel() * itemsize(b.dtype) != o.src->size())
      throw FormatError(o.where, "chunk " + std::to_string(chunk) + " needs " + std::to_string(b.numel() * itemsize(b.dtype)) +
                                     " bytes but its item holds " + std::to_string(o.src->size()));
    return b;
  }
  if (o.zip->has("byteorder")) {
    std::vector<uint8_t> bo = o.zip->read_small("byteorder", 64);
    if (std::string(bo.begin(), bo.end()) != "little")
      throw UnsupportedError(o.where, "tensor saved in byte order '" + std::string(bo.begin(), bo.end()) + "'");
  }
  std::vector<uint8_t> pkl = o.zip->read_small("data.pkl", limits_.max_pickle_bytes);
  pickle::ParseOptions po;
  po.source = o.where.file;
  po.base_offset = o.where.offset.value_or(0);
  std::unique_ptr<pickle::Tree> tree;
  try {
    tree = pickle::parse(ByteSpan(pkl.data(), pkl.size()), po);
  } catch (const FormatError& e) {
    throw FormatError(o.where, "data.pkl: " + e.detail());
  }
  TensorBlob b = interpret_tensor_pickle(tree->root, o.where);
  if (t.dtype && b.dtype != *t.dtype)
    throw FormatError(o.where, std::string("chunk ") + std::to_string(chunk) + " holds " + torch_name(b.dtype) +
                                   " but .metadata says " + t.dtype_name);
  if (b.size.size() != t.ndim() || !std::equal(b.size.begin(), b.size.end(), t.chunk_sizes(chunk)))
    throw FormatError(o.where, "chunk " + std::to_string(chunk) + " holds shape " + dims_text(b.size.data(), b.size.size()) +
                                   " but .metadata says " + dims_text(t.chunk_sizes(chunk), t.ndim()));
  return b;
}

TensorBlob ItemReader::describe_chunk(const TensorMeta& t, size_t chunk) const {
  auto sw = scaled_.find(t.fqn);
  auto mw = mxfp4_.find(t.fqn);
  auto lw = merged_.find(t.fqn);
  const TensorMeta& saved = sw != scaled_.end() ? ck_.dequant.weights[sw->second].weight
                            : mw != mxfp4_.end() ? ck_.dequant.mxfp4[mw->second].blocks
                            : lw != merged_.end() ? ck_.lora.merged[lw->second].base
                                                 : t;
  Opened o = open_chunk(saved, chunk);
  return check_blob(o, saved, chunk);
}

// Copies a strided view out of `base` (its storage) into dense C order.
static void gather(const uint8_t* base, const TensorBlob& b, size_t item, uint8_t* dst) {
  size_t nd = b.size.size();
  std::vector<int64_t> idx(nd, 0);
  uint64_t n = b.numel();
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t off = static_cast<uint64_t>(b.storage_offset);
    for (size_t d = 0; d < nd; ++d) off += static_cast<uint64_t>(idx[d] * b.stride[d]);
    std::memcpy(dst + i * item, base + off * item, item);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < b.size[d]) break;
      idx[d] = 0;
    }
  }
}

void ItemReader::check_extent(const Opened& o, const TensorBlob& b, size_t chunk, const RecordLocation& rec) const {
  uint64_t extent = b.extent(), item = itemsize(b.dtype);
  if (extent == UINT64_MAX || extent > rec.size / item)
    throw FormatError(o.where, "chunk " + std::to_string(chunk) + ": the tensor view needs " + std::to_string(extent) +
                                   " elements but its storage record holds " + std::to_string(rec.size / item));
}

// The chunk's storage record, its CRC-32 watched (ByteSource::watch_crc) before any of its bytes are
// read. A record's CRC covers all its bytes, so those the view does not use (a saved slice of a
// larger storage; never in what DCP writes, which saves each chunk's own storage) are read now:
// the view's own reads, however they are split, then complete the record.
RecordLocation ItemReader::watch_storage(Opened& o, const TensorBlob& b, size_t chunk) const {
  RecordLocation rec = o.zip->watch("data/" + b.storage_key);
  check_extent(o, b, chunk, rec);
  uint64_t item = itemsize(b.dtype);
  uint64_t from = b.contiguous() ? static_cast<uint64_t>(b.storage_offset) * item : 0;
  uint64_t to = b.contiguous() ? from + b.numel() * item : b.extent() * item;
  if (b.numel() == 0) from = to = 0;
  std::vector<uint8_t> buf;
  auto read_span = [&](uint64_t a, uint64_t z) {
    buf.resize(std::min<uint64_t>(z - a, 1 << 20));
    for (uint64_t at = a; at < z; at += buf.size()) o.src->read(rec.offset + at, buf.data(), std::min<uint64_t>(buf.size(), z - at));
  };
  if (from > 0) read_span(0, from);
  if (to < rec.size) read_span(to, rec.size);
  return rec;
}

void ItemReader::read_chunk(const TensorMeta& t, size_t chunk, void* dst) const {
  read_chunk_bytes(t, chunk, 0, UINT64_MAX, dst);
}

// A whole saved tensor (a dequantized view's scale), assembled from its chunks as saved.
std::vector<uint8_t> ItemReader::read_whole(const TensorMeta& t) const {
  const size_t item = itemsize(*t.dtype);
  std::vector<uint8_t> out(t.numel() * item);
  Box whole = whole_box(t);
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    std::vector<uint8_t> part(t.chunk_numel(c) * item);
    read_raw(t, c, 0, part.size(), part.data());
    Box cb = chunk_box(t, c);
    copy_box(part.data(), cb, out.data(), whole, cb, item);
  }
  return out;
}

// Bytes [from, from + n) of a dequantized view's chunk of `values` float32s (n = UINT64_MAX: to
// its end), which `compute` writes whole; `saved` names it in messages.
void ItemReader::read_computed(const TensorMeta& saved, size_t chunk, uint64_t values, uint64_t from, uint64_t n, void* dst,
                               const std::function<void(float*)>& compute) const {
  const uint64_t bytes = values * 4;
  if (n == UINT64_MAX) n = bytes - std::min(from, bytes);
  if (from > bytes || n > bytes - from)
    throw FormatError(Where(ck_.metadata_path, std::nullopt, saved.fqn), "chunk " + std::to_string(chunk) + ": bytes [" + std::to_string(from) +
                                                                            ", +" + std::to_string(n) + ") asked of a chunk of " + std::to_string(bytes) + " bytes");
  if (n == 0) return;
  std::vector<float> own(from == 0 && n == bytes ? 0 : values);
  compute(own.empty() ? static_cast<float*>(dst) : own.data());
  if (!own.empty()) std::memcpy(dst, reinterpret_cast<const uint8_t*>(own.data()) + from, n);
}

// A dequantized view's fp8 weight (meta/quantized.h): its chunk and the whole scale, read as saved,
// dequantized to float32.
void ItemReader::read_dequantized(const ScaledWeight& sw, size_t chunk, uint64_t from, uint64_t n, void* dst) const {
  const TensorMeta& w = sw.weight;
  const uint64_t numel = w.chunk_numel(chunk);
  read_computed(w, chunk, numel, from, n, dst, [&](float* out) {
    std::vector<uint8_t> q(numel);
    read_raw(w, chunk, 0, numel, q.data());
    std::vector<uint8_t> scale = read_whole(sw.scale);
    dequantize_fp8_blocks(*w.dtype, q.data(), chunk_box(w, chunk), reinterpret_cast<const float*>(scale.data()), sw.scale.shape[1], sw.block, out);
  });
}

// A dequantized view's MXFP4 weight: its chunk of blocks and the whole scales, read as saved,
// dequantized to float32 (two values a byte).
void ItemReader::read_mxfp4(const Mxfp4Weight& mw, size_t chunk, uint64_t from, uint64_t n, void* dst) const {
  const TensorMeta& b = mw.blocks;
  const uint64_t q = b.chunk_numel(chunk);
  read_computed(b, chunk, q * 2, from, n, dst, [&](float* out) {
    std::vector<uint8_t> packed(q);
    read_raw(b, chunk, 0, q, packed.data());
    std::vector<uint8_t> scales = read_whole(mw.scales);
    dequantize_mxfp4(packed.data(), chunk_box(b, chunk), scales.data(), mw.scales.shape, out);
  });
}

// A LoRA view's merged weight (meta/lora.h): its base chunk, and the whole A and B read as saved,
// merged as PEFT's merge_and_unload merges (item/dequantize.h), in the base's dtype.
void ItemReader::read_lora_merged(const LoraMergedWeight& mw, size_t chunk, uint64_t from, uint64_t n, void* dst) const {
  const TensorMeta& w = mw.base;
  const DType dt = *w.dtype;
  const uint64_t numel = w.chunk_numel(chunk), bytes = numel * itemsize(dt);
  if (n == UINT64_MAX) n = bytes - std::min(from, bytes);
  if (from > bytes || n > bytes - from)
    throw FormatError(Where(ck_.metadata_path, std::nullopt, w.fqn), "chunk " + std::to_string(chunk) + ": bytes [" + std::to_string(from) +
                                                                       ", +" + std::to_string(n) + ") asked of a chunk of " + std::to_string(bytes) + " bytes");
  if (n == 0) return;
  auto as_float = [&](const TensorMeta& t) {
    std::vector<uint8_t> raw = read_whole(t);
    std::vector<float> out(t.numel());
    cast_elements(*t.dtype, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(out.data()), out.size());
    return out;
  };
  // The whole chunk is computed: into dst when that is what is asked (a float32 base in place).
  std::vector<uint8_t> own(from == 0 && n == bytes ? 0 : bytes);
  uint8_t* out = own.empty() ? static_cast<uint8_t*>(dst) : own.data();
  read_raw(w, chunk, 0, bytes, out);
  std::vector<float> a = as_float(mw.a), b = as_float(mw.b);
  const DType bt = *mw.b.dtype;
  const DType delta = bt == DType::BFloat16 || bt == DType::Float16 ? bt : DType::Float32;
  const Box box = chunk_box(w, chunk);
  const float scale = static_cast<float>(mw.scale);
  if (dt == DType::Float32) {
    add_lora_delta(reinterpret_cast<float*>(out), box, a.data(), mw.a.shape[1], b.data(), mw.a.shape[0], scale, mw.transposed, delta);
  } else {
    std::vector<float> values(numel);
    cast_elements(dt, DType::Float32, out, reinterpret_cast<uint8_t*>(values.data()), numel);
    add_lora_delta(values.data(), box, a.data(), mw.a.shape[1], b.data(), mw.a.shape[0], scale, mw.transposed, delta);
    cast_elements(DType::Float32, dt, reinterpret_cast<const uint8_t*>(values.data()), out, numel);
  }
  if (!own.empty()) std::memcpy(dst, own.data() + from, n);
}

void ItemReader::read_chunk_bytes(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, void* dst) const {
  if (!merged_.empty())
    if (auto it = merged_.find(t.fqn); it != merged_.end()) return read_lora_merged(ck_.lora.merged[it->second], chunk, from, n, dst);
  if (!scaled_.empty())
    if (auto it = scaled_.find(t.fqn); it != scaled_.end()) return read_dequantized(ck_.dequant.weights[it->second], chunk, from, n, dst);
  if (!mxfp4_.empty())
    if (auto it = mxfp4_.find(t.fqn); it != mxfp4_.end()) return read_mxfp4(ck_.dequant.mxfp4[it->second], chunk, from, n, dst);
  read_raw(t, chunk, from, n, dst);
}

void ItemReader::read_raw(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, void* dst) const {
  if (!t.dtype) throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, t.fqn), "tensor of unknown dtype " + t.dtype_name);
  Opened o = open_chunk(t, chunk);
  TensorBlob b = check_blob(o, t, chunk);
  size_t item = itemsize(b.dtype);
  uint64_t numel = b.numel();
  uint64_t bytes = numel * item;
  if (n == UINT64_MAX) n = bytes - std::min(from, bytes);
  if (from > bytes || n > bytes - from)
    throw FormatError(o.where, "chunk " + std::to_string(chunk) + ": bytes [" + std::to_string(from) + ", +" + std::to_string(n) +
                                   ") asked of a chunk of " + std::to_string(bytes) + " bytes");
  if (n == 0) return;
  if (!o.zip) {
    o.src->read(from, dst, n);
    return;
  }
  RecordLocation rec = watch_storage(o, b, chunk);
  if (b.contiguous()) {
    o.src->read(rec.offset + static_cast<uint64_t>(b.storage_offset) * item + from, dst, n);
  } else {
    std::vector<uint8_t> storage(b.extent() * item), dense;
    o.src->read(rec.offset, storage.data(), storage.size());
    uint8_t* out = static_cast<uint8_t*>(dst);
    if (from != 0 || n != bytes) {
      dense.resize(bytes);
      out = dense.data();
    }
    gather(storage.data(), b, item, out);
    if (!dense.empty()) std::memcpy(dst, dense.data() + from, n);
  }
}

std::optional<DirectRun> ItemReader::direct_run(const TensorMeta& t, size_t chunk) const { return find_run(t, chunk, true); }

bool ItemReader::readable_in_place(const TensorMeta& t, size_t chunk) const { return find_run(t, chunk, false).has_value(); }

std::optional<DirectRun> ItemReader::find_run(const TensorMeta& t, size_t chunk, bool watch) const {
  // A dequantized or merged weight is computed, never copied.
  if (!t.dtype || scaled_.count(t.fqn) || mxfp4_.count(t.fqn) || merged_.count(t.fqn)) return std::nullopt;
  const StorageRef& ref = t.storage.at(chunk);
  if (ref.transforms != 0) return std::nullopt;
  Opened o = open_chunk(t, chunk);
  TensorBlob b = check_blob(o, t, chunk);
  if (!b.contiguous()) return std::nullopt;
  size_t item = itemsize(b.dtype);
  uint64_t numel = b.numel();
  DirectRun run;
  run.file = &file(ref.file, o.where);
  run.bytes = numel * item;
  if (numel == 0) return run;
  if (!o.zip) {
    run.offset = ref.offset;
    return run;
  }
  RecordLocation rec = watch ? watch_storage(o, b, chunk) : o.zip->locate("data/" + b.storage_key);
  if (!watch) check_extent(o, b, chunk, rec);  // watch_storage checked it
  run.offset = ref.offset + rec.offset + static_cast<uint64_t>(b.storage_offset) * item;
  return run;
}

uint64_t ItemReader::bytes_item_cap(const StorageRef& ref) const {
  return ref.length > (UINT64_MAX - limits_.bytes_item_base) / limits_.bytes_item_ratio
             ? UINT64_MAX
             : limits_.bytes_item_base + ref.length * limits_.bytes_item_ratio;
}

const ReadFile& ItemReader::watched_item_file(const BytesMeta& bm) const {
  Opened o = open(bm.storage, bm.fqn, bytes_item_cap(bm.storage));
  if (o.zip)
    for (const std::string& name : o.zip->records()) o.zip->watch(name);
  return file(bm.storage.file, o.where);
}

std::unique_ptr<pickle::Tree> ItemReader::read_bytes(const BytesMeta& bm) const {
  const StorageRef& ref = bm.storage;
  Opened o = open(ref, bm.fqn, bytes_item_cap(ref));
  if (!o.zip) throw FormatError(o.where, "non-tensor item is not a torch.save archive");
  std::vector<uint8_t> pkl = o.zip->read_small("data.pkl", limits_.max_pickle_bytes);
  pickle::ParseOptions po;
  po.source = o.where.file;
  po.base_offset = o.where.offset.value_or(0);
  try {
    return pickle::parse(ByteSpan(pkl.data(), pkl.size()), po);
  } catch (const FormatError& e) {
    throw FormatError(o.where, "data.pkl: " + e.detail());
  }
}

}  // namespace dcpctl
