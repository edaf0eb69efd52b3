// libdcpctl_torch.so: the LibTorch side of torchlib.h. Only caffe2's zip reader and writer are
// here (and, in torchlib/plugin/c10d_group.cpp, c10d's process group); dcpctl's own logic stays out of the plugin.
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "torchlib/torchlib.h"

namespace dcpctl::torchlib {

namespace {

std::string first_line(const c10::Error& e) {
  std::string msg = e.what_without_backtrace();
  if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  return msg;
}

// PyTorchStreamReader reads through miniz, which is C: exceptions must not cross it. A failed
// read is remembered and reported as a short read; the original error is rethrown afterwards.
class Adapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit Adapter(std::shared_ptr<const ByteSource> src) : src_(std::move(src)) {}
  size_t size() const override { return static_cast<size_t>(src_->size()); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    try {
      uint64_t sz = src_->size();
      if (pos >= sz) return 0;
      if (n > sz - pos) n = static_cast<size_t>(sz - pos);
      src_->read(pos, buf, n);
      return n;
    } catch (...) {
      if (!error_) error_ = std::current_exception();
      return 0;
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::shared_ptr<const ByteSource> src_;
  mutable std::exception_ptr error_;
};

class TorchZipIndex final : public ZipIndex {
 public:
  TorchZipIndex(std::shared_ptr<const ByteSource> src, const Where& where)
      : adapter_(std::make_shared<Adapter>(std::move(src))), where_(where) {
    guarded("item is not a readable torch.save archive", [&] {
      reader_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(adapter_);
      return 0;
    });
  }
  std::vector<std::string> records() override {
    return guarded("cannot list the item's records", [&] { return reader_->getAllRecords(); });
  }
  bool has(const std::string& name) override {
    return guarded("cannot list the item's records", [&] { return reader_->hasRecord(name); });
  }
  uint64_t size(const std::string& name) override {
    return guarded("cannot read record " + name, [&] { return uint64_t{reader_->getRecordSize(name)}; });
  }
  uint64_t offset(const std::string& name) override {
    return guarded("cannot locate record " + name, [&] { return uint64_t{reader_->getRecordOffset(name)}; });
  }
  uint64_t header_offset(const std::string& name) override {
    return guarded("cannot locate record " + name, [&] { return local_header(*reader_, name, 0); });
  }

 private:
  template <class F>
  auto guarded(const std::string& what, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const c10::Error& e) {
      adapter_->rethrow();
      throw FormatError(where_, what + ": " + first_line(e));
    }
  }

  // PyTorchStreamReader::getRecordHeaderOffset, where this torch has it (2.7 and later)...
  template <class R>
  static auto local_header(R& r, const std::string& name, int) -> decltype(uint64_t{r.getRecordHeaderOffset(name)}) {
    return r.getRecordHeaderOffset(name);
  }
  // ... else found from the record's data offset: the local header (signature PK\3\4, 30 bytes,
  // then the name and the extra field, whose lengths it gives) ends where the data begins. The
  // extra field torch writes only pads to 64 bytes, so the header is within a few KiB before.
  template <class R>
  uint64_t local_header(R& r, const std::string& name, long) {
    uint64_t data = r.getRecordOffset(name);
    uint64_t span = std::min<uint64_t>(data, 4096 + 30);
    std::vector<uint8_t> b(span);
    adapter_->read(data - span, b.data(), span, "local header");
    adapter_->rethrow();
    for (uint64_t i = span; i-- > 0;) {
      if (span - i < 30) continue;
      const uint8_t* h = b.data() + i;
      if (h[0] != 'P' || h[1] != 'K' || h[2] != 3 || h[3] != 4) continue;
      uint64_t name_len = h[26] | (h[27] << 8), extra_len = h[28] | (h[29] << 8);
      if (i + 30 + name_len + extra_len == span) return data - span + i;
    }
    throw FormatError(where_, "record '" + name + "' has no zip local header before its data");
  }

  std::shared_ptr<Adapter> adapter_;
  Where where_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader_;
};

class TorchZipWriter final : public ZipWriter {
 public:
  TorchZipWriter(Sink sink, const Where& where) : where_(where) {
    guarded([&] { writer_ = std::make_unique<caffe2::serialize::PyTorchStreamWriter>(std::move(sink)); });
  }
  void record(const std::string& name, const void* data, size_t n) override {
    guarded([&] { writer_->writeRecord(name, data, n); });
  }
  void finish() override {
    guarded([&] { writer_->writeEndOfFile(); });
  }

 private:
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      throw IoError(where_, "writing torch.save archive: " + first_line(e));
    }
  }

  Where where_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamWriter> writer_;
};

std::unique_ptr<ZipIndex> open_zip(std::shared_ptr<const ByteSource> src, const Where& where) {
  return std::make_unique<TorchZipIndex>(std::move(src), where);
}

std::unique_ptr<ZipWriter> zip_writer(Sink sink, const Where& where) {
  return std::make_unique<TorchZipWriter>(std::move(sink), where);
}

#ifndef DCPCTL_TORCH_VERSION
#define DCPCTL_TORCH_VERSION "unknown"
#endif

#if DCPCTL_TORCHLIB_NO_GROUP  // the fuzz build links the zip side alone
const Api kApi{kAbiVersion, DCPCTL_TORCH_VERSION, &open_zip, &zip_writer, nullptr};
#else
const Api kApi{kAbiVersion, DCPCTL_TORCH_VERSION, &open_zip, &zip_writer, &connect_store_group};
#endif

}  // namespace

}  // namespace dcpctl::torchlib

extern "C" __attribute__((visibility("default"))) const dcpctl::torchlib::Api* dcpctl_torchlib_api() {
  return &dcpctl::torchlib::kApi;
}
