#include "write/torch_save.h"

#include <stdexcept>

#include "write/torch_zip_writer.h"

namespace dcpctl {

struct TorchSaveWriter::Impl {
  OutputFile* out = nullptr;
  std::vector<uint8_t>* mem = nullptr;
  TorchZipWriter zip;

  explicit Impl(OutputFile& o) : out(&o), zip([this](const void* d, size_t n) { out->append(d, n); }) {}
  explicit Impl(std::vector<uint8_t>& m)
      : mem(&m), zip([this](const void* d, size_t n) {
          mem->insert(mem->end(), static_cast<const uint8_t*>(d), static_cast<const uint8_t*>(d) + n);
        }) {}

  // A record whose bytes `payload()` appends to `out` itself.
  void streamed(const std::string& name, uint64_t n, const std::function<uint32_t()>& payload) {
    zip.record_streamed(name, n, [&] {
      const uint64_t before = out->appended();
      uint32_t crc = payload();
      if (out->appended() - before != n)
        throw std::logic_error("torch.save archive: record " + name + " was to stream " + std::to_string(n) +
                               " bytes, not " + std::to_string(out->appended() - before));
      return crc;
    });
  }

  // The next record's bytes are part `p` of a tensor (write/tensor_hash.h).
  void hash_next(const HashPart* p) {
    if (!p || !out) return;
    zip.at_data = [this, p](const std::string&, uint64_t n) { out->hash_part(*p, out->appended(), n); };
  }

  // torch.save's first records, in its order.
  void header(const std::string& data_pkl) {
    zip.record("data.pkl", data_pkl.data(), data_pkl.size());
    zip.record(".format_version", "1", 1);
    zip.record(".storage_alignment", "64", 2);
    zip.record("byteorder", "little", 6);
  }
};

TorchSaveWriter::TorchSaveWriter(OutputFile& out) : impl_(std::make_unique<Impl>(out)) {}

TorchSaveWriter::~TorchSaveWriter() = default;

void TorchSaveWriter::write_pickle(const std::string& data_pkl) {
  impl_->header(data_pkl);
}

void TorchSaveWriter::write_storage(const std::string& key, const void* data, size_t n, const HashPart* part) {
  impl_->hash_next(part);
  impl_->zip.record("data/" + key, data, n);
}

void TorchSaveWriter::write_storage_streamed(const std::string& key, uint64_t n,
                                             const std::function<uint32_t()>& payload, const HashPart* part) {
  impl_->hash_next(part);
  impl_->streamed("data/" + key, n, payload);
}

void TorchSaveWriter::finish() {
  impl_->zip.finish();
}

namespace {

std::string tensor_pickle(DType dtype, const std::vector<int64_t>& shape) {
  Pickler p(2);
  pickle_tensor(p, dtype, shape, "0");
  p.stop();
  return p.data();
}

}  // namespace

void write_tensor_blob_streamed(OutputFile& out, DType dtype, const std::vector<int64_t>& shape, uint64_t n,
                                const std::function<uint32_t()>& payload, const HashPart* part) {
  TorchSaveWriter::Impl impl(out);
  impl.header(tensor_pickle(dtype, shape));
  impl.hash_next(part);
  impl.streamed("data/0", n, payload);
  impl.zip.finish();
}

std::vector<uint8_t> torch_save_tensor_blob(DType dtype, const std::vector<int64_t>& shape, const void* data,
                                            size_t n) {
  std::vector<uint8_t> blob;
  TorchSaveWriter::Impl impl(blob);
  impl.header(tensor_pickle(dtype, shape));
  impl.zip.record("data/0", data, n);
  impl.zip.finish();
  return blob;
}

std::vector<uint8_t> torch_save_object_blob(const std::string& data_pkl) {
  std::vector<uint8_t> blob;
  TorchSaveWriter::Impl impl(blob);
  impl.header(data_pkl);
  impl.zip.finish();
  return blob;
}

void write_tensor_blob(OutputFile& out, DType dtype, const std::vector<int64_t>& shape, const void* data, size_t n,
                       const HashPart* part) {
  TorchSaveWriter::Impl impl(out);
  impl.header(tensor_pickle(dtype, shape));
  impl.hash_next(part);
  impl.zip.record("data/0", data, n);
  impl.zip.finish();
}

}  // namespace dcpctl
