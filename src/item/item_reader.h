// Reading items out of a checkpoint's .distcp files.
//
// An item is the byte window [offset, offset + length) of `relative_path` named by its
// storage_data entry; after undoing its stream transforms (if any) it is a torch.save zip
// (torch_zip.h), or for ItemFormat::Raw (safetensors layouts) the chunk's dense bytes. Tensor chunks are read straight
// from the file at their record's offset when the item is untransformed; transformed items are decoded in memory
// (bounded by the item's size). Every check compares what data.pkl says with what `.metadata` says (dtype, shape, byte
// counts) and reports mismatches with file, offset and key. Safe to use from several threads.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "item/tensor_blob.h"
#include "meta/checkpoint.h"
#include "pickle/tree.h"
#include "store/source.h"

namespace dcpctl {

class TorchZip;
struct RecordLocation;

// A chunk whose bytes sit contiguously, untransformed, in one data file (dense C order).
struct DirectRun {
  const ReadFile* file = nullptr;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// A transformed (zstd) item is decoded in memory, so its decoded size is capped by what it can
// legitimately hold: a tensor chunk's bytes plus the zip's small overhead (data.pkl, headers,
// alignment), or for a non-tensor item a fixed allowance plus a ratio of its encoded size. A
// small item that inflates past that is refused as invalid (exit 3) before it costs more memory.
struct ItemLimits {
  uint64_t max_pickle_bytes = 256ull << 20;  // data.pkl of one item
  uint64_t zip_overhead = 1ull << 20;        // allowed beyond a tensor chunk's own bytes
  uint64_t bytes_item_base = 256ull << 20;   // a decoded non-tensor item: this ...
  uint64_t bytes_item_ratio = 64;            // ... plus this many times its encoded length
};

class ItemReader {
 public:
  explicit ItemReader(const Checkpoint& ck, ItemLimits limits = {});
  ~ItemReader();

  // Decodes chunk `chunk` of `t` into dst: C-contiguous, t.chunk_numel(chunk) * itemsize bytes.
  // The reader reads saved items; a tensor some view derived (the checkpoint's DerivedTable,
  // meta/derived.h: a dequantized or merged weight) is computed by its DerivedTensor from the
  // tensors of the table below it, which this reader reads for it the same way. Such a tensor is
  // never readable in place.
  void read_chunk(const TensorMeta& t, size_t chunk, void* dst) const;
  // Bytes [from, from + n) of that dense chunk, read straight from the item when its view is
  // contiguous (a decoded item is not copied whole first).
  void read_chunk_bytes(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, void* dst) const;
  // Parses the chunk's data.pkl and checks it against the metadata, without reading the data. A
  // derived tensor's chunk is that of the tensor it follows chunk for chunk (DerivedTensor::follows),
  // down to the saved item; one whose chunking is its own (a mapped tensor's one chunk, made of
  // parts of several) has no item: it is described as computed, dense in its own dtype and shape.
  TensorBlob describe_chunk(const TensorMeta& t, size_t chunk) const;
  // Where the chunk's bytes lie in its file, when they can be copied without decoding (the
  // item is untransformed and its view contiguous); nullopt otherwise. Validates like read_chunk.
  // The run's record is watched (its CRC-32 checked as the caller reads it: store/source.h), so
  // call it to read the run; readable_in_place() only asks, for a planner.
  std::optional<DirectRun> direct_run(const TensorMeta& t, size_t chunk) const;
  bool readable_in_place(const TensorMeta& t, size_t chunk) const;
  // The object a bytes item holds (torch.save'd by DCP), decoded by the restricted VM.
  std::unique_ptr<pickle::Tree> read_bytes(const BytesMeta& b) const;
  // The file holding bytes item `b`, every zip record of the item watched on it: whoever copies
  // the item's raw bytes from it (reshard keeps non-tensor items as they are) checks them all. A
  // transformed (zstd) item is decoded and checked here.
  const ReadFile& watched_item_file(const BytesMeta& b) const;

  // An s3:// checkpoint (a local one ignores it): the items this process is about to read, so
  // that neighbours in a data file come in one request (ReadFile::expect). Call before reading.
  void expect(const std::vector<StorageRef>& items);

  // The data files opened from now on read without the kernel's readahead (ReadFile::no_readahead):
  // a write under --io direct (write/execute.cpp). Call before the first read.
  void no_readahead() { readahead_ = false; }

  const Checkpoint& checkpoint() const { return ck_; }
  // The raw (still transformed) bytes of the item at `ref`, got elsewhere (another rank read
  // them): later reads of that item use them instead of the file.
  void provide(const StorageRef& ref, std::shared_ptr<const ByteSource> raw);

 private:
  struct Opened;
  // `max_decoded`: the cap on a transformed item's decoded size (see ItemLimits).
  Opened open(const StorageRef& ref, const std::string& key, uint64_t max_decoded) const;
  Opened open_chunk(const TensorMeta& t, size_t chunk) const;
  uint64_t bytes_item_cap(const StorageRef& ref) const;  // a decoded bytes item's cap (ItemLimits)
  TensorBlob check_blob(Opened& o, const TensorMeta& t, size_t chunk) const;
  std::optional<DirectRun> find_run(const TensorMeta& t, size_t chunk, bool watch) const;
  void check_extent(const Opened& o, const TensorBlob& b, size_t chunk, const RecordLocation& rec) const;
  RecordLocation watch_storage(Opened& o, const TensorBlob& b, size_t chunk) const;
  const ReadFile& file(uint32_t index, const Where& where) const;
  // A Raw item that is a view into part of a CRC-watched zip record (a tensor saved as a slice
  // of a larger storage: FSDP2's padded shards in verl's per-rank files): the record's bytes
  // outside the view are read once, through the ledger, so that reading the view completes the
  // record and its CRC-32 is checked.
  void read_rest_of_record(const ReadFile& f, const StorageRef& ref, const std::string& key) const;
  // A tensor of the table `table` (null: the saved tensors): computed by its DerivedTensor when the
  // table has one of that name, else read as saved.
  class TableReads;
  void read_in(const DerivedTable* table, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n,
               void* dst) const;
  TensorBlob describe_in(const DerivedTable* table, const TensorMeta& t, size_t chunk) const;
  // read_chunk_bytes of a tensor as saved.
  void read_raw(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, void* dst) const;

  const Checkpoint& ck_;
  ItemLimits limits_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<ReadFile>> files_;
  bool readahead_ = true;
  mutable std::vector<std::vector<std::pair<uint64_t, uint64_t>>>
      expected_;  // per file, moved out when it is opened (under mu_)
  std::map<std::pair<uint32_t, uint64_t>, std::shared_ptr<const ByteSource>> provided_;  // (file, offset)
  std::vector<std::map<uint64_t, uint64_t>> records_;          // per file: watched record offset -> size
  mutable std::set<std::pair<uint32_t, uint64_t>> rest_read_;  // (file, record offset) done
};

}  // namespace dcpctl
