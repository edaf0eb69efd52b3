#include "item/torch_zip.h"

#include <algorithm>

#include "item/zip_directory.h"
#include "util/crc32.h"
#include "util/crc_ledger.h"

namespace dcpctl {

struct TorchZip::Impl {
  explicit Impl(const ByteSource& src, const Where& where) : dir(src, where) {}
  ZipDirectory dir;
};

TorchZip::TorchZip(std::shared_ptr<const ByteSource> src, Where where)
    : src_(std::move(src)), where_(std::move(where)), impl_(std::make_unique<Impl>(*src_, where_)) {}

TorchZip::~TorchZip() = default;

std::vector<std::string> TorchZip::records() {
  return impl_->dir.records();
}

bool TorchZip::has(const std::string& name) {
  return impl_->dir.find(name) != nullptr;
}

namespace {

// A record this small is read in one go with its local header, and its CRC checked at once: one
// read where a ledger entry would cost more than the record (half a million 64-byte chunks are a
// real checkpoint's shape).
constexpr uint64_t kSmallRecord = 64 << 10;

}  // namespace

std::vector<uint8_t> TorchZip::read_small(const std::string& name, uint64_t max_bytes) {
  const ZipEntry* e = impl_->dir.find(name);
  if (!e) throw FormatError(where_, "item has no record '" + name + "'");
  uint64_t n = e->size;
  if (n > max_bytes)
    throw FormatError(where_, "record '" + name + "' is " + std::to_string(n) + " bytes, more than the " +
                                  std::to_string(max_bytes) + " allowed");
  std::vector<uint8_t> out;
  RecordLocation loc = watch(name, &out);
  if (loc.size > kSmallRecord) {  // watched, then checked by the source as it is read
    out.resize(n);
    src_->read(loc.offset, out.data(), n);
  }
  return out;
}

RecordLocation TorchZip::watch(const std::string& name) {
  std::vector<uint8_t> bytes;
  return watch(name, &bytes);
}

RecordLocation TorchZip::watch(const std::string& name, std::vector<uint8_t>* bytes) {
  RecordLocation loc = place(name, bytes);
  if (loc.size > kSmallRecord) src_->watch_crc(loc.offset, loc.size, loc.crc, where_, name);
  return loc;
}

RecordLocation TorchZip::locate(const std::string& name) {
  return place(name, nullptr);
}

RecordLocation TorchZip::place(const std::string& name, std::vector<uint8_t>* bytes) {
  const ZipEntry* e = impl_->dir.find(name);
  if (!e) throw FormatError(where_, "item has no record '" + name + "'");
  if (e->method != 0)
    throw UnsupportedError(where_, "record '" + name + "' is compressed (zip method " + std::to_string(e->method) +
                                       "); torch.save never compresses");
  if (e->flags & 1) throw UnsupportedError(where_, "record '" + name + "' is encrypted; torch.save never encrypts");
  // The directory put the local header and the bytes inside the archive, before the directory.
  // A small record is read with its header in one read (its name and extra field are a few dozen
  // bytes in torch.save's archives; more cost a second read below).
  constexpr uint64_t kPadding = 128;
  const uint64_t size = src_->size(), header = e->header_offset;
  const bool small = bytes && e->size <= kSmallRecord;
  std::vector<uint8_t> span(small ? std::min(size - header, LocalHeader::kSize + e->name.size() + kPadding + e->size)
                                  : LocalHeader::kSize);
  src_->read(header, span.data(), span.size());
  std::optional<LocalHeader> local = parse_local_header(span.data(), header);
  if (!local) throw FormatError(where_, "record '" + name + "' has a damaged zip local header");
  if (local->method != 0)
    throw UnsupportedError(where_, "record '" + name + "' is compressed (zip method " + std::to_string(local->method) +
                                       "); torch.save never compresses");
  RecordLocation loc;
  loc.size = e->size;
  loc.offset = local->data_offset;
  // The CRC-32 the directory records: what miniz checks a record against on extraction (torch
  // builds it with the check off). Without a data descriptor (flag bit 3) the local header holds
  // it too, and must agree.
  loc.crc = e->crc;
  if (!(local->flags & 8) && local->crc != e->crc)
    throw FormatError(where_, "record '" + name + "' has a zip local header whose CRC-32 differs from its directory's");
  if (loc.offset > size || loc.size > size - loc.offset)
    throw FormatError(where_, "record '" + name + "' (" + std::to_string(loc.size) + " bytes at " +
                                  std::to_string(loc.offset) + ") runs past the item's end (" + std::to_string(size) +
                                  " bytes)");
  if (small) {
    if (loc.offset + loc.size <= header + span.size()) {
      bytes->assign(span.begin() + static_cast<std::ptrdiff_t>(loc.offset - header),
                    span.begin() + static_cast<std::ptrdiff_t>(loc.offset + loc.size - header));
    } else {  // a name or extra field longer than torch.save writes
      bytes->resize(loc.size);
      src_->read(loc.offset, bytes->data(), loc.size);
    }
    uint32_t got = crc32_update(0, bytes->data(), bytes->size());
    if (got != loc.crc) {
      Where at = where_;  // the record's own offset in the file, as the ledger names a large one
      if (std::optional<uint64_t> o = src_->file_offset(loc.offset)) at.offset = o;
      throw_crc_mismatch(at, name, loc.size, loc.crc, got);
    }
  }
  return loc;
}

}  // namespace dcpctl
