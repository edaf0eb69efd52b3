#include "write/torch_save.h"

#include <caffe2/serialize/inline_container.h>
#include <c10/util/Exception.h>

#include <exception>

#include "util/error.h"

namespace dcpctl {

struct TorchSaveWriter::Impl {
  OutputFile* out = nullptr;
  std::vector<uint8_t>* mem = nullptr;
  std::exception_ptr error;
  std::unique_ptr<caffe2::serialize::PyTorchStreamWriter> writer;

  // PyTorchStreamWriter calls this through miniz (C): no exception may cross it.
  size_t sink(const void* data, size_t n) {
    // After a failed write the archive is lost anyway: accept (and drop) everything else, so
    // PyTorchStreamWriter's own bookkeeping, and its destructor, never throw; the first error is
    // rethrown by guarded().
    if (error) return n;
    try {
      if (out) out->append(data, n);
      else mem->insert(mem->end(), static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
      return n;
    } catch (...) {
      if (!error) error = std::current_exception();
      return n;
    }
  }

  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      if (error) std::rethrow_exception(error);
      std::string msg = e.what_without_backtrace();
      if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
      throw IoError(Where(out ? out->final_path() : "<memory>"), "writing torch.save archive: " + msg);
    }
    if (error) std::rethrow_exception(error);
  }

  void start() {
    guarded([&] {
      writer = std::make_unique<caffe2::serialize::PyTorchStreamWriter>(
          [this](const void* d, size_t n) { return sink(d, n); });
    });
  }
};

TorchSaveWriter::TorchSaveWriter(OutputFile& out) : impl_(std::make_unique<Impl>()) {
  impl_->out = &out;
  impl_->start();
}

TorchSaveWriter::~TorchSaveWriter() = default;

void TorchSaveWriter::write_pickle(const std::string& data_pkl) {
  impl_->guarded([&] {
    impl_->writer->writeRecord("data.pkl", data_pkl.data(), data_pkl.size());
    impl_->writer->writeRecord(".format_version", "1", 1);
    impl_->writer->writeRecord(".storage_alignment", "64", 2);
    impl_->writer->writeRecord("byteorder", "little", 6);
  });
}

void TorchSaveWriter::write_storage(const std::string& key, const void* data, size_t n) {
  impl_->guarded([&] { impl_->writer->writeRecord("data/" + key, data, n); });
}

void TorchSaveWriter::finish() {
  impl_->guarded([&] { impl_->writer->writeEndOfFile(); });
}

namespace {

void tensor_archive(TorchSaveWriter::Impl& impl, DType dtype, const std::vector<int64_t>& shape, const void* data, size_t n) {
  impl.start();
  Pickler p(2);
  pickle_tensor(p, dtype, shape, "0");
  p.stop();
  impl.guarded([&] {
    const std::string& pkl = p.data();
    impl.writer->writeRecord("data.pkl", pkl.data(), pkl.size());
    impl.writer->writeRecord(".format_version", "1", 1);
    impl.writer->writeRecord(".storage_alignment", "64", 2);
    impl.writer->writeRecord("byteorder", "little", 6);
    impl.writer->writeRecord("data/0", data, n);
    impl.writer->writeEndOfFile();
  });
}

}  // namespace

std::vector<uint8_t> torch_save_tensor_blob(DType dtype, const std::vector<int64_t>& shape, const void* data, size_t n) {
  std::vector<uint8_t> blob;
  TorchSaveWriter::Impl impl;
  impl.mem = &blob;
  tensor_archive(impl, dtype, shape, data, n);
  return blob;
}

void write_tensor_blob(OutputFile& out, DType dtype, const std::vector<int64_t>& shape, const void* data, size_t n) {
  TorchSaveWriter::Impl impl;
  impl.out = &out;
  tensor_archive(impl, dtype, shape, data, n);
}

}  // namespace dcpctl
