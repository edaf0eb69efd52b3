#include "write/torch_save.h"

#include <exception>

#include "torchlib/torchlib.h"
#include "util/error.h"
#include "util/le.h"

namespace dcpctl {

namespace {

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
  std::unique_ptr<torchlib::ZipWriter> writer;  // PyTorchStreamWriter, in the LibTorch plugin

  // Streamed payloads (write_storage_streamed): the next record's callback and name, and the CRC
  // of each record streamed so far, put into the writes miniz made without it.
  const std::function<uint32_t()>* payload = nullptr;
  std::string payload_record;
  bool await_descriptor = false, central_patched = false;
  std::vector<std::pair<std::string, uint32_t>> crcs;
  bool closing = false;

  // An archive left unfinished (an error while reading what it was to hold) is finalized by
  // PyTorchStreamWriter's destructor: those writes go nowhere (the output is discarded), and the
  // writer goes first, while what sink() reads is still there.
  ~Impl() {
    closing = true;
    writer.reset();
  }

  // Returns true if it wrote `data` itself.
  bool streamed(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    if (payload && !data && n > 0) {
      crcs.emplace_back(payload_record, (*payload)());
      payload = nullptr;
      await_descriptor = true;
      return true;
    }
    if (await_descriptor && data && n >= 8 && le32(p) == kDataDescriptor) {
      std::vector<uint8_t> d(p, p + n);
      put_le32(d.data() + 4, crcs.back().second);
      out->append(d.data(), n);
      await_descriptor = false;
      return true;
    }
    if (!crcs.empty() && data && n >= 46 && le32(p) == kCentralEntry) {  // the whole central directory
      std::vector<uint8_t> cd(p, p + n);
      size_t at = 0, patched = 0;
      while (at + 46 <= n && le32(cd.data() + at) == kCentralEntry) {
        size_t nl = le16(cd.data() + at + 28), xl = le16(cd.data() + at + 30), cl = le16(cd.data() + at + 32);
        if (at + 46 + nl > n) break;
        std::string name(reinterpret_cast<const char*>(cd.data() + at + 46), nl);
        for (const auto& [record, crc] : crcs) {
          std::string tail = "/" + record;
          if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0) {
            put_le32(cd.data() + at + 16, crc);
            ++patched;
          }
        }
        at += 46 + nl + xl + cl;
      }
      if (patched != crcs.size())
        throw IoError(Where(out->final_path()), "writing torch.save archive: the central directory lacks a streamed record");
      out->append(cd.data(), n);
      central_patched = true;
      return true;
    }
    return false;
  }

  // PyTorchStreamWriter calls this through miniz (C): no exception may cross it.
  size_t sink(const void* data, size_t n) {
    // After a failed write the archive is lost anyway: accept (and drop) everything else, so
    // PyTorchStreamWriter's own bookkeeping, and its destructor, never throw; the first error is
    // rethrown by guarded().
    if (error || closing) return n;
    try {
      if (out && (payload || await_descriptor || !crcs.empty()) && streamed(data, n)) return n;
      if (out) out->append(data, n);
      else mem->insert(mem->end(), static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
      return n;
    } catch (...) {
      if (!error) error = std::current_exception();
      return n;
    }
  }

  Where where() const { return Where(out ? out->final_path() : "<memory>"); }

  // The writer's own failure is an IoError; a failure of ours inside sink() wins over it.
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const Error&) {
      if (error) std::rethrow_exception(error);
      throw;
    }
    if (error) std::rethrow_exception(error);
  }

  void start() {
    writer = torchlib::api().zip_writer([this](const void* d, size_t n) { return sink(d, n); }, where());
  }
};

TorchSaveWriter::TorchSaveWriter(OutputFile& out) : impl_(std::make_unique<Impl>()) {
  impl_->out = &out;
  impl_->start();
}

TorchSaveWriter::~TorchSaveWriter() = default;

void TorchSaveWriter::write_pickle(const std::string& data_pkl) {
  impl_->guarded([&] {
    impl_->writer->record("data.pkl", data_pkl.data(), data_pkl.size());
    impl_->writer->record(".format_version", "1", 1);
    impl_->writer->record(".storage_alignment", "64", 2);
    impl_->writer->record("byteorder", "little", 6);
  });
}

void TorchSaveWriter::write_storage(const std::string& key, const void* data, size_t n) {
  impl_->guarded([&] { impl_->writer->record("data/" + key, data, n); });
}

void TorchSaveWriter::write_storage_streamed(const std::string& key, uint64_t n, const std::function<uint32_t()>& payload) {
  if (n == 0) return write_storage(key, nullptr, 0);
  impl_->payload = &payload;
  impl_->payload_record = "data/" + key;
  try {
    impl_->guarded([&] { impl_->writer->record("data/" + key, nullptr, n); });  // metadata only: see streamed()
  } catch (...) {
    impl_->payload = nullptr;
    throw;
  }
}

void TorchSaveWriter::finish() {
  impl_->guarded([&] { impl_->writer->finish(); });
  if (!impl_->crcs.empty() && !impl_->central_patched)
    throw IoError(Where(impl_->out->final_path()), "writing torch.save archive: streamed records were not completed");
}

namespace {

void tensor_archive(TorchSaveWriter::Impl& impl, DType dtype, const std::vector<int64_t>& shape, const void* data, size_t n) {
  impl.start();
  Pickler p(2);
  pickle_tensor(p, dtype, shape, "0");
  p.stop();
  impl.guarded([&] {
    const std::string& pkl = p.data();
    impl.writer->record("data.pkl", pkl.data(), pkl.size());
    impl.writer->record(".format_version", "1", 1);
    impl.writer->record(".storage_alignment", "64", 2);
    impl.writer->record("byteorder", "little", 6);
    impl.writer->record("data/0", data, n);
    impl.writer->finish();
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
  if (!impl.central_patched)
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
