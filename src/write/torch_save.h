// Writing torch.save zip archives (the `.pt` output, and each item of a DCP checkpoint), record by
// record, straight to an OutputFile, in the layout of torch's own writer (write/torch_zip_writer.h).
//
// Records, in torch.save's order: data.pkl (pickle protocol 2), .format_version ("1"),
// .storage_alignment ("64"), byteorder ("little"), data/<key> for each storage, then version
// and .data/serialization_id (written at the end). Records are stored, 64-byte aligned.
//
// A tensor is pickled as torch.save pickles a contiguous CPU tensor:
//   torch._utils._rebuild_tensor_v2(persid(('storage', torch.<X>Storage, key, 'cpu', numel)),
//                                   0, size, stride, False, OrderedDict())
// and, for dtypes without a legacy storage class (uint16/32/64, float8, ...),
//   torch._utils._rebuild_tensor_v3(persid(('storage', torch.storage.UntypedStorage, key, 'cpu', nbytes)),
//                                   0, size, stride, False, OrderedDict(), torch.<dtype>)
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pickle/pickler.h"
#include "util/dtype.h"
#include "write/output.h"

namespace dcpctl {

// Emits the rebuild call for a contiguous tensor whose bytes are record data/<key>.
void pickle_tensor(Pickler& p, DType dtype, const std::vector<int64_t>& shape, const std::string& key);

class TorchSaveWriter {
 public:
  // Appends the archive to `out` (which must be empty).
  explicit TorchSaveWriter(OutputFile& out);
  ~TorchSaveWriter();
  // data.pkl and the small header records; call first.
  void write_pickle(const std::string& data_pkl);
  // `part`: the record's bytes are that part of a tensor whose digest is hashed as written
  // (write/tensor_hash.h); likewise in the functions below.
  void write_storage(const std::string& key, const void* data, size_t n, const HashPart* part = nullptr);
  // Record data/<key> of `n` bytes that `payload()` appends to the output itself, returning their
  // CRC-32 (see write_tensor_blob_streamed).
  void write_storage_streamed(const std::string& key, uint64_t n, const std::function<uint32_t()>& payload,
                              const HashPart* part = nullptr);
  void finish();

  struct Impl;  // opaque; public so the in-memory blob writer can share it

 private:
  std::unique_ptr<Impl> impl_;
};

// torch.save(tensor) of a contiguous CPU tensor, appended to `out` (a DCP item).
void write_tensor_blob(OutputFile& out, DType dtype, const std::vector<int64_t>& shape, const void* data, size_t n,
                       const HashPart* part = nullptr);

// The same archive with the tensor's `n` bytes streamed rather than handed over in one buffer:
// when the writer reaches them, `payload()` appends exactly `n` bytes to `out` and returns their
// CRC-32, which goes into the record's data descriptor and central directory entry. So a chunk of
// any size costs a window of memory, not a chunk, and the archive is the one torch.save writes.
void write_tensor_blob_streamed(OutputFile& out, DType dtype, const std::vector<int64_t>& shape, uint64_t n,
                                const std::function<uint32_t()>& payload, const HashPart* part = nullptr);

// The same archive in memory.
std::vector<uint8_t> torch_save_tensor_blob(DType dtype, const std::vector<int64_t>& shape, const void* data, size_t n);

// torch.save of an object that holds no tensor (`data_pkl`: its pickle, protocol 2, STOP
// included), in memory: a DCP bytes item such as megatron-core's ShardedObjects.
std::vector<uint8_t> torch_save_object_blob(const std::string& data_pkl);

}  // namespace dcpctl
