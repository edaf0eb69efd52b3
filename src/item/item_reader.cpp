#include "item/item_reader.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "item/raw_values.h"
#include "item/torch_zip.h"
#include "item/transforms.h"
#include "meta/derived.h"
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
      throw FormatError(Where(ck_.path_of(index), std::nullopt, where.key),
                        "data file missing: the checkpoint is incomplete (" + fi.error + ")");
    if (!fi.size)
      throw IoError(Where(ck_.path_of(index), std::nullopt, where.key), "data file unavailable: " + fi.error);
    files_[index] = std::make_unique<ReadFile>(ck_.path_of(index));
    if (!readahead_) files_[index]->no_readahead();
    if (index < expected_.size()) files_[index]->expect(std::move(expected_[index]));
    for (const Checkpoint::RecordCrc& r : ck_.record_crcs)
      if (r.file == index)
        files_[index]->ledger().watch(files_[index]->path(), r.offset, r.size, r.crc, r.key, r.record);
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
    o.src = ref.transforms == 0
                ? provided
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
  if (ref.offset == rec && ref.length == size) return;                            // the view is the record
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
      throw FormatError(o.where, "chunk " + std::to_string(chunk) + " needs " +
                                     std::to_string(b.numel() * itemsize(b.dtype)) + " bytes but its item holds " +
                                     std::to_string(o.src->size()));
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
    throw FormatError(o.where, "chunk " + std::to_string(chunk) + " holds shape " +
                                   dims_text(b.size.data(), b.size.size()) + " but .metadata says " +
                                   dims_text(t.chunk_sizes(chunk), t.ndim()));
  return b;
}

TensorBlob ItemReader::describe_chunk(const TensorMeta& t, size_t chunk) const {
  return describe_in(ck_.derived.get(), t, chunk);
}

namespace {

// Whether chunk `chunk` of `t` is, in place and size, chunk `chunk` of `f`.
bool chunk_followed(const TensorMeta& t, const TensorMeta& f, size_t chunk) {
  const size_t nd = t.ndim();
  return chunk < f.num_chunks() && f.ndim() == nd &&
         std::equal(t.chunk_sizes(chunk), t.chunk_sizes(chunk) + nd, f.chunk_sizes(chunk)) &&
         std::equal(t.chunk_offsets(chunk), t.chunk_offsets(chunk) + nd, f.chunk_offsets(chunk));
}

}  // namespace

TensorBlob ItemReader::describe_in(const DerivedTable* table, const TensorMeta& t, size_t chunk) const {
  if (table)
    if (const DerivedTable::Entry* e = table->find(t.fqn)) {
      const TensorMeta& f = e->tensor->follows();
      if (chunk_followed(t, f, chunk)) return describe_in(e->inputs.get(), f, chunk);
      // A chunk of its own: computed dense, in C order.
      if (!t.dtype || chunk >= t.num_chunks())
        throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, t.fqn),
                               "chunk " + std::to_string(chunk) + " of a derived tensor cannot be described");
      TensorBlob b;
      b.dtype = *t.dtype;
      b.size.assign(t.chunk_sizes(chunk), t.chunk_sizes(chunk) + t.ndim());
      b.stride.assign(t.ndim(), 1);
      for (size_t d = t.ndim(); d-- > 1;) b.stride[d - 1] = b.stride[d] * std::max<int64_t>(b.size[d], 1);
      b.storage_bytes = t.chunk_numel(chunk) * itemsize(b.dtype);
      return b;
    }
  Opened o = open_chunk(t, chunk);
  return check_blob(o, t, chunk);
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
    for (uint64_t at = a; at < z; at += buf.size())
      o.src->read(rec.offset + at, buf.data(), std::min<uint64_t>(buf.size(), z - at));
  };
  if (from > 0) read_span(0, from);
  if (to < rec.size) read_span(to, rec.size);
  return rec;
}

void ItemReader::read_chunk(const TensorMeta& t, size_t chunk, void* dst) const {
  read_chunk_bytes(t, chunk, 0, UINT64_MAX, dst);
}

// What a derived tensor reads its inputs through: the tensors of one table, each computed by the
// table's DerivedTensor or read as saved.
class ItemReader::TableReads final : public TensorReads {
 public:
  TableReads(const ItemReader& reader, const DerivedTable* table) : reader_(reader), table_(table) {}
  void read(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    reader_.read_in(table_, t, chunk, from, n, dst);
  }
  // Assembled from its chunks (a scale, an adapter's A and B): one chunk in flight besides it.
  std::vector<uint8_t> read_whole(const TensorMeta& t) const override {
    if (!t.dtype)
      throw UnsupportedError(Where(reader_.ck_.metadata_path, std::nullopt, t.fqn),
                             "tensor of unknown dtype " + t.dtype_name);
    const size_t item = itemsize(*t.dtype);
    std::vector<uint8_t> out(t.numel() * item);
    Box whole = whole_box(t);
    for (size_t c = 0; c < t.num_chunks(); ++c) {
      std::vector<uint8_t> part(t.chunk_numel(c) * item);
      read(t, c, 0, part.size(), part.data());
      Box cb = chunk_box(t, c);
      copy_box(part.data(), cb, out.data(), whole, cb, item);
    }
    return out;
  }

 private:
  const ItemReader& reader_;
  const DerivedTable* table_;
};

void ItemReader::read_in(const DerivedTable* table, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n,
                         void* dst) const {
  if (table)
    if (const DerivedTable::Entry* e = table->find(t.fqn))
      return e->tensor->read(TableReads(*this, e->inputs.get()), chunk, from, n, dst);
  read_raw(t, chunk, from, n, dst);
}

void ItemReader::read_chunk_bytes(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, void* dst) const {
  read_in(ck_.derived.get(), t, chunk, from, n, dst);
}

void ItemReader::read_raw(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, void* dst) const {
  if (!t.dtype)
    throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, t.fqn), "tensor of unknown dtype " + t.dtype_name);
  Opened o = open_chunk(t, chunk);
  TensorBlob b = check_blob(o, t, chunk);
  size_t item = itemsize(b.dtype);
  uint64_t numel = b.numel();
  uint64_t bytes = numel * item;
  n = checked_range(o.where, "chunk " + std::to_string(chunk), bytes, from, n);
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

std::optional<DirectRun> ItemReader::direct_run(const TensorMeta& t, size_t chunk) const {
  return find_run(t, chunk, true);
}

bool ItemReader::readable_in_place(const TensorMeta& t, size_t chunk) const {
  return find_run(t, chunk, false).has_value();
}

std::optional<DirectRun> ItemReader::find_run(const TensorMeta& t, size_t chunk, bool watch) const {
  // A derived tensor is computed, never copied.
  if (!t.dtype || (ck_.derived && ck_.derived->find(t.fqn))) return std::nullopt;
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
  if (ref.format == ItemFormat::Raw) {  // the value's own bytes: torch_checkpointing's JSON and raw items
    if (o.src->size() > limits_.max_pickle_bytes)
      throw UnsupportedError(o.where, "a non-tensor item of " + std::to_string(o.src->size()) +
                                          " bytes, more than dcpctl decodes (" +
                                          std::to_string(limits_.max_pickle_bytes) + ")");
    std::string bytes(static_cast<size_t>(o.src->size()), '\0');
    o.src->read(0, bytes.data(), bytes.size());
    return raw::value_tree(bytes, raw::json_file(ck_.md.files.at(ref.file)), o.where);
  }
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
