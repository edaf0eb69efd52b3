#include "item/torch_zip.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <c10/util/Exception.h>

namespace dcpctl {
namespace {

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

}  // namespace

struct TorchZip::Impl {
  std::shared_ptr<Adapter> adapter;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
};

template <class F>
static auto guarded(const std::shared_ptr<Adapter>& a, const Where& w, const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    if (a) a->rethrow();
    std::string msg = e.what_without_backtrace();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    throw FormatError(w, std::string(what) + ": " + msg);
  }
}

TorchZip::TorchZip(std::shared_ptr<const ByteSource> src, Where where)
    : src_(std::move(src)), where_(std::move(where)), impl_(std::make_unique<Impl>()) {
  impl_->adapter = std::make_shared<Adapter>(src_);
  guarded(impl_->adapter, where_, "item is not a readable torch.save archive", [&] {
    impl_->reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(impl_->adapter);
    return 0;
  });
}

TorchZip::~TorchZip() = default;

std::vector<std::string> TorchZip::records() {
  return guarded(impl_->adapter, where_, "cannot list the item's records", [&] { return impl_->reader->getAllRecords(); });
}

bool TorchZip::has(const std::string& name) {
  return guarded(impl_->adapter, where_, "cannot list the item's records", [&] { return impl_->reader->hasRecord(name); });
}

std::vector<uint8_t> TorchZip::read_small(const std::string& name, uint64_t max_bytes) {
  return guarded(impl_->adapter, where_, ("cannot read record " + name).c_str(), [&] {
    if (!impl_->reader->hasRecord(name)) throw FormatError(where_, "item has no record '" + name + "'");
    size_t n = impl_->reader->getRecordSize(name);
    if (n > max_bytes)
      throw FormatError(where_, "record '" + name + "' is " + std::to_string(n) + " bytes, more than the " +
                                    std::to_string(max_bytes) + " allowed");
    RecordLocation loc = locate(name);
    std::vector<uint8_t> out(n);
    src_->read(loc.offset, out.data(), n);
    return out;
  });
}

RecordLocation TorchZip::locate(const std::string& name) {
  return guarded(impl_->adapter, where_, ("cannot locate record " + name).c_str(), [&] {
    if (!impl_->reader->hasRecord(name)) throw FormatError(where_, "item has no record '" + name + "'");
    RecordLocation loc;
    loc.size = impl_->reader->getRecordSize(name);
    uint64_t header = impl_->reader->getRecordHeaderOffset(name);
    // Local file header: signature PK\3\4, then version(2) flags(2) method(2) ...
    uint8_t h[10];
    if (header > src_->size() || src_->size() - header < sizeof h)
      throw FormatError(where_, "record '" + name + "' has its zip header outside the item");
    src_->read(header, h, sizeof h);
    if (h[0] != 'P' || h[1] != 'K' || h[2] != 3 || h[3] != 4)
      throw FormatError(where_, "record '" + name + "' has a damaged zip local header");
    uint16_t method = static_cast<uint16_t>(h[8] | (h[9] << 8));
    if (method != 0)
      throw UnsupportedError(where_, "record '" + name + "' is compressed (zip method " + std::to_string(method) +
                                         "); torch.save never compresses");
    loc.offset = impl_->reader->getRecordOffset(name);
    if (loc.offset > src_->size() || loc.size > src_->size() - loc.offset)
      throw FormatError(where_, "record '" + name + "' (" + std::to_string(loc.size) + " bytes at " +
                                    std::to_string(loc.offset) + ") runs past the item's end (" +
                                    std::to_string(src_->size()) + " bytes)");
    return loc;
  });
}

}  // namespace dcpctl
