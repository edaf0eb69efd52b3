#include "item/torch_zip.h"

#include <algorithm>

#include "torchlib/torchlib.h"
#include "util/crc32.h"
#include "util/crc_ledger.h"

namespace dcpctl {

struct TorchZip::Impl {
  std::unique_ptr<torchlib::ZipIndex> index;
};

TorchZip::TorchZip(std::shared_ptr<const ByteSource> src, Where where)
    : src_(std::move(src)), where_(std::move(where)), impl_(std::make_unique<Impl>()) {
  impl_->index = torchlib::api().open_zip(src_, where_);
}

TorchZip::~TorchZip() = default;

std::vector<std::string> TorchZip::records() { return impl_->index->records(); }

bool TorchZip::has(const std::string& name) { return impl_->index->has(name); }

namespace {

uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

// A record this small is read in one go with its local header and data descriptor, and its CRC
// checked at once: one read where a ledger entry, and a second read for the descriptor, would
// cost more than the record (half a million 64-byte chunks are a real checkpoint's shape).
constexpr uint64_t kSmallRecord = 64 << 10;

}  // namespace

std::vector<uint8_t> TorchZip::read_small(const std::string& name, uint64_t max_bytes) {
  if (!impl_->index->has(name)) throw FormatError(where_, "item has no record '" + name + "'");
  uint64_t n = impl_->index->size(name);
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
  RecordLocation loc = place(name, true, bytes);
  if (loc.size > kSmallRecord) src_->watch_crc(loc.offset, loc.size, loc.crc, where_, name);
  return loc;
}

RecordLocation TorchZip::locate(const std::string& name) { return place(name, false, nullptr); }

RecordLocation TorchZip::locate_with_crc(const std::string& name) { return place(name, true, nullptr); }

RecordLocation TorchZip::place(const std::string& name, bool crc, std::vector<uint8_t>* bytes) {
  if (!impl_->index->has(name)) throw FormatError(where_, "item has no record '" + name + "'");
  RecordLocation loc;
  loc.size = impl_->index->size(name);
  loc.offset = impl_->index->offset(name);
  uint64_t header = impl_->index->header_offset(name), size = src_->size();
  // Local file header: signature PK\3\4, version(2) flags(2) method(2) time(2) date(2) crc32(4)
  // sizes(4+4) name length(2) extra length(2); the record's bytes follow its name and extra field.
  constexpr uint64_t kHeader = 30;
  if (header > size || size - header < kHeader)
    throw FormatError(where_, "record '" + name + "' has its zip header outside the item");
  if (loc.offset < header + kHeader || loc.offset > size || loc.size > size - loc.offset)
    throw FormatError(where_, "record '" + name + "' (" + std::to_string(loc.size) + " bytes at " +
                                  std::to_string(loc.offset) + ") runs past the item's end (" + std::to_string(size) +
                                  " bytes) or into its header");
  // After the bytes, with flag bit 3, a data descriptor holds the CRC (miniz, and so torch.save,
  // always writes one): its signature PK\7\8 (optional in the format), then crc32 and the sizes.
  uint64_t end = loc.offset + loc.size, tail = std::min<uint64_t>(size - end, 8);
  std::vector<uint8_t> span;
  uint8_t h[kHeader], d[8];
  bool small = bytes && loc.size <= kSmallRecord;
  if (small) {
    span.resize(end + tail - header);
    src_->read(header, span.data(), span.size());
    std::copy_n(span.data(), kHeader, h);
    std::copy_n(span.data() + (end - header), tail, d);
  } else {
    src_->read(header, h, kHeader);
  }
  if (h[0] != 'P' || h[1] != 'K' || h[2] != 3 || h[3] != 4)
    throw FormatError(where_, "record '" + name + "' has a damaged zip local header");
  uint16_t method = static_cast<uint16_t>(h[8] | (h[9] << 8));
  if (method != 0)
    throw UnsupportedError(where_, "record '" + name + "' is compressed (zip method " + std::to_string(method) +
                                       "); torch.save never compresses");
  uint16_t flags = static_cast<uint16_t>(h[6] | (h[7] << 8));
  if (!crc) {
    return loc;
  } else if (!(flags & 8)) {
    loc.crc = le32(h + 14);
  } else {
    if (tail < 4) throw FormatError(where_, "record '" + name + "' has no data descriptor after its bytes (the item is cut short)");
    if (!small) src_->read(end, d, tail);
    bool signed_ = tail == 8 && d[0] == 'P' && d[1] == 'K' && d[2] == 7 && d[3] == 8;
    loc.crc = le32(signed_ ? d + 4 : d);
  }
  if (small) {
    bytes->assign(span.begin() + static_cast<std::ptrdiff_t>(loc.offset - header), span.begin() + static_cast<std::ptrdiff_t>(end - header));
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
