#include "write/torch_zip_writer.h"

#include <cstdio>
#include <stdexcept>
#include <utility>

#include "util/crc32.h"
#include "util/error.h"
#include "util/le.h"
#include "util/zip_format.h"

namespace dcpctl {

namespace {

constexpr uint64_t kMax32 = 0xFFFFFFFF;
constexpr uint16_t kUtf8 = 0x0800;       // bit 11: UTF-8 names
constexpr uint16_t kDescribed = 0x0008;  // bit 3: CRC and sizes in a data descriptor after the bytes
constexpr uint64_t kAlignment = 64;      // where each record's bytes begin (torch's kFieldAlignment)
constexpr uint16_t kMadeBy64 = 0x031E;   // miniz's zip64 end record: "version made by" Unix, 3.0
constexpr uint16_t kNeeded64 = 0x002D;   // 4.5, zip64

void put_name(std::vector<uint8_t>& b, const std::string& s) {
  b.insert(b.end(), s.begin(), s.end());
}

// c10::hash_combine (boost's).
uint64_t hash_combine(uint64_t seed, uint64_t value) {
  return seed ^ (value + 0x9e3779b9 + (seed << 6) + (seed >> 2));
}

}  // namespace

TorchZipWriter::TorchZipWriter(Put put, std::string folder) : put_(std::move(put)), folder_(std::move(folder)) {}

void TorchZipWriter::put(const void* data, size_t n) {
  put_(data, n);
  pos_ += n;
}

bool TorchZipWriter::begin(const std::string& name, uint64_t n) {
  if (finished_) throw std::logic_error("torch.save archive: record '" + name + "' after the end");
  if (!written_.insert(name).second) throw std::logic_error("torch.save archive: record '" + name + "' written twice");
  const std::string full = folder_ + "/" + name;
  if (full.size() > 0xFFFF)
    throw UnsupportedError(Where(),
                           "torch.save archive: record name longer than a zip allows: " + name.substr(0, 80) + "...");
  const bool big = n >= kMax32, far = pos_ >= kMax32;
  // The padding PyTorchStreamWriter asks for (detail::getPadding): from where the bytes would
  // begin after the header, the name, the zip64 field and the padding field's own 4 bytes.
  uint64_t start = pos_ + zip::kLocal + full.size() + 4;
  std::vector<uint8_t> zip64;
  if (big || far) {
    put_le16(zip64, 1);
    put_le16(zip64, (big ? 16 : 0) + (far ? 8 : 0));
    if (big) put_le64(zip64, n), put_le64(zip64, 0);  // the compressed size is not known yet: 0, as miniz writes
    if (far) put_le64(zip64, pos_);
    start += zip64.size();
  }
  const uint64_t pad = (kAlignment - start % kAlignment) % kAlignment;
  std::vector<uint8_t>& h = buf_;
  h.clear();
  put_le32(h, zip::kLocalSig);
  put_le16(h, 0);                               // version needed
  put_le16(h, n ? kUtf8 | kDescribed : kUtf8);  // an empty record has no descriptor
  put_le16(h, 0);                               // stored
  put_le32(h, 0);                               // time, date
  put_le32(h, 0);                               // CRC and sizes: in the data descriptor
  put_le32(h, 0);
  put_le32(h, 0);
  put_le16(h, full.size());
  put_le16(h, zip64.size() + 4 + pad);
  put_name(h, full);
  h.insert(h.end(), zip64.begin(), zip64.end());
  h.push_back('F');
  h.push_back('B');
  put_le16(h, pad);
  h.insert(h.end(), pad, 'Z');
  entries_.push_back({full, pos_, n, 0});
  put(h);
  return big || far;
}

void TorchZipWriter::end(uint32_t crc, uint64_t n, bool zip64) {
  if (n == 0) return;  // nothing described: CRC 0, and nothing folded into the serialization id
  std::vector<uint8_t>& d = buf_;
  d.clear();
  put_le32(d, zip::kDescriptorSig);
  put_le32(d, crc);
  if (zip64)
    put_le64(d, n), put_le64(d, n);
  else
    put_le32(d, n), put_le32(d, n);
  put(d);
  entries_.back().crc = crc;
  combined_crc_ = hash_combine(combined_crc_, crc);  // PyTorchStreamWriter folds each descriptor's CRC
}

void TorchZipWriter::data_begins(const std::string& name, uint64_t n) {
  if (!at_data) return;
  auto f = std::move(at_data);
  at_data = nullptr;
  f(name, n);
}

void TorchZipWriter::record(const std::string& name, const void* data, size_t n) {
  bool zip64 = begin(name, n);
  data_begins(name, n);
  if (n) put(data, n);
  end(n ? crc32_update(0, data, n) : 0, n, zip64);
}

void TorchZipWriter::record_streamed(const std::string& name, uint64_t n, const std::function<uint32_t()>& payload) {
  bool zip64 = begin(name, n);
  data_begins(name, n);
  uint32_t crc = n ? payload() : 0;
  pos_ += n;
  end(crc, n, zip64);
}

void TorchZipWriter::finish() {
  if (finished_) throw std::logic_error("torch.save archive finished twice");
  if (!written_.count("version") && !written_.count(".data/version")) record("version", "3\n", 2);
  if (!written_.count("byteorder")) record("byteorder", "little", 6);
  if (!written_.count(".data/serialization_id")) {
    uint64_t names = 0;
    for (const std::string& r : written_) names = hash_combine(names, std::hash<std::string>{}(r));
    char id[64];
    std::snprintf(id, sizeof id, "%020llu%020llu", static_cast<unsigned long long>(names),
                  static_cast<unsigned long long>(combined_crc_));
    record(".data/serialization_id", id, 40);
  }
  finished_ = true;

  const uint64_t dir_offset = pos_;
  std::vector<uint8_t> c;
  for (const Entry& e : entries_) {
    const bool big = e.size >= kMax32, far = e.header_offset >= kMax32;
    std::vector<uint8_t> zip64;
    if (big || far) {
      put_le16(zip64, 1);
      put_le16(zip64, (big ? 16 : 0) + (far ? 8 : 0));
      if (big) put_le64(zip64, e.size), put_le64(zip64, e.size);
      if (far) put_le64(zip64, e.header_offset);
    }
    put_le32(c, zip::kCentralSig);
    put_le16(c, 0);  // made by
    put_le16(c, 0);  // needed
    put_le16(c, e.size ? kUtf8 | kDescribed : kUtf8);
    put_le16(c, 0);  // stored
    put_le32(c, 0);  // time, date
    put_le32(c, e.crc);
    put_le32(c, big ? kMax32 : e.size);
    put_le32(c, big ? kMax32 : e.size);
    put_le16(c, e.name.size());
    put_le16(c, zip64.size());
    put_le16(c, 0);  // comment
    put_le16(c, 0);  // disk
    put_le16(c, 0);  // internal attributes
    put_le32(c, 0);  // external attributes
    put_le32(c, far ? kMax32 : e.header_offset);
    put_name(c, e.name);
    c.insert(c.end(), zip64.begin(), zip64.end());
    if (c.size() >= kMax32)
      throw UnsupportedError(Where(), "torch.save archive: more records than a zip directory holds");
  }
  const uint64_t dir_size = c.size(), end64 = dir_offset + dir_size, count = entries_.size();
  put_le32(c, zip::kEnd64Sig);
  put_le64(c, zip::kEnd64 - 12);  // the zip64 end record's size, less its signature and this field
  put_le16(c, kMadeBy64);
  put_le16(c, kNeeded64);
  put_le32(c, 0);
  put_le32(c, 0);
  put_le64(c, count);
  put_le64(c, count);
  put_le64(c, dir_size);
  put_le64(c, dir_offset);
  put_le32(c, zip::kLocator64Sig);
  put_le32(c, 0);
  put_le64(c, end64);
  put_le32(c, 1);
  put_le32(c, zip::kEndSig);
  put_le16(c, 0);
  put_le16(c, 0);
  put_le16(c, count > 0xFFFF ? 0xFFFF : count);
  put_le16(c, count > 0xFFFF ? 0xFFFF : count);
  put_le32(c, dir_size >= kMax32 ? kMax32 : dir_size);
  put_le32(c, dir_offset >= kMax32 ? kMax32 : dir_offset);
  put_le16(c, 0);
  put(c);
}

}  // namespace dcpctl
