#include "write/torch_save.h"

#include <caffe2/serialize/inline_container.h>
#include <c10/util/Exception.h>

#include <exception>

#include "util/error.h"

namespace dcpctl {

namespace {

uint32_t le32(const uint8_t* p) { return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24; }
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

constexpr uint32_t kDataDescriptor = 0x08074b50;  // after each stored payload: sig, crc32, sizes
constexpr uint32_t kCentralEntry = 0x02014b50;    // crc32 at +16; name length +28, extra +30, comment +32

}  // namespace

struct TorchSaveWriter::Impl {
  OutputFile* out = nullptr;
  std::vector<uint8_t>* mem = nullptr;
  std::exception_ptr error;
  std::unique_ptr<caffe2::serialize::PyTorchStreamWriter> writer;

  // A streamed payload (write_tensor_blob_streamed): its record's name, the callback, its CRC and
  // where the writer stands (before the payload, waiting for its data descriptor, done).
  const std::function<uint32_t()>* payload = nullptr;
  std::string payload_record;
  uint32_t payload_crc = 0;
  enum { kBefore, kDescriptor, kCentral, kDone } stage = kBefore;

  // Puts the payload's CRC into the writes miniz made without it. Returns true if it wrote `data`.
  bool streamed(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    if (stage == kBefore && !data && n > 0) {
      payload_crc = (*payload)();
      stage = kDescriptor;
      return true;
    }
    if (stage == kDescriptor && data && n >= 8 && le32(p) == kDataDescriptor) {
      std::vector<uint8_t> d(p, p + n);
      put_le32(d.data() + 4, payload_crc);
      out->append(d.data(), n);
      stage = kCentral;
      return true;
    }
    if (stage == kCentral && data && n >= 46 && le32(p) == kCentralEntry) {  // the whole central directory
      std::vector<uint8_t> cd(p, p + n);
      size_t at = 0;
      while (at + 46 <= n && le32(cd.data() + at) == kCentralEntry) {
        size_t nl = le16(cd.data() + at + 28), xl = le16(cd.data() + at + 30), cl = le16(cd.data() + at + 32);
        if (at + 46 + nl > n) break;
        std::string name(reinterpret_cast<const char*>(cd.data() + at + 46), nl);
        if (name.size() >= payload_record.size() + 1 && name.compare(name.size() - payload_record.size() - 1, std::string::npos, "/" + payload_record) == 0) {
          put_le32(cd.data() + at + 16, payload_crc);
          stage = kDone;
        }
        at += 46 + nl + xl + cl;
      }
      if (stage != kDone) throw IoError(Where(out->final_path()), "writing torch.save archive: no central directory entry for " + payload_record);
      out->append(cd.data(), n);
      return true;
    }
    return false;
  }

  // PyTorchStreamWriter calls this through miniz (C): no exception may cross it.
  size_t sink(const void* data, size_t n) {
    // After a failed write the archive is lost anyway: accept (and drop) everything else, so
    // PyTorchStreamWriter's own bookkeeping, and its destructor, never throw; the first error is
    // rethrown by guarded().
    if (error) return n;
    try {
      if (payload && out && streamed(data, n)) return n;
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

void write_tensor_blob_streamed(OutputFile& out, DType dtype, const std::vector<int64_t>& shape, uint64_t n,
                                const std::function<uint32_t()>& payload) {
  if (n == 0) {  // nothing to stream: an ordinary empty record
    write_tensor_blob(out, dtype, shape, nullptr, 0);
    return;
  }
  TorchSaveWriter::Impl impl;
  impl.out = &out;
  impl.payload = &payload;
  impl.payload_record = "data/0";
  tensor_archive(impl, dtype, shape, nullptr, n);  // a null payload: miniz writes the metadata only
  if (impl.stage != TorchSaveWriter::Impl::kDone)
    throw IoError(Where(out.final_path()), "writing torch.save archive: the streamed record was not completed");
}

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
