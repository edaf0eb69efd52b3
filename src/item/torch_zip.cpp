#include "item/torch_zip.h"

#include "torchlib/torchlib.h"

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

std::vector<uint8_t> TorchZip::read_small(const std::string& name, uint64_t max_bytes) {
  if (!impl_->index->has(name)) throw FormatError(where_, "item has no record '" + name + "'");
  uint64_t n = impl_->index->size(name);
  if (n > max_bytes)
    throw FormatError(where_, "record '" + name + "' is " + std::to_string(n) + " bytes, more than the " +
                                  std::to_string(max_bytes) + " allowed");
  RecordLocation loc = watch(name);
  std::vector<uint8_t> out(n);
  src_->read(loc.offset, out.data(), n);
  return out;
}

RecordLocation TorchZip::watch(const std::string& name) {
  RecordLocation loc = locate(name);
  src_->watch_crc(loc.offset, loc.size, loc.crc, where_, name);
  return loc;
}

RecordLocation TorchZip::locate(const std::string& name) {
  if (!impl_->index->has(name)) throw FormatError(where_, "item has no record '" + name + "'");
  RecordLocation loc;
  loc.size = impl_->index->size(name);
  uint64_t header = impl_->index->header_offset(name);
  // Local file header: signature PK\3\4, version(2) flags(2) method(2) time(2) date(2) crc32(4)
  // sizes(4+4) name length(2) extra length(2).
  uint8_t h[30];
  if (header > src_->size() || src_->size() - header < sizeof h)
    throw FormatError(where_, "record '" + name + "' has its zip header outside the item");
  src_->read(header, h, sizeof h);
  if (h[0] != 'P' || h[1] != 'K' || h[2] != 3 || h[3] != 4)
    throw FormatError(where_, "record '" + name + "' has a damaged zip local header");
  uint16_t method = static_cast<uint16_t>(h[8] | (h[9] << 8));
  if (method != 0)
    throw UnsupportedError(where_, "record '" + name + "' is compressed (zip method " + std::to_string(method) +
                                       "); torch.save never compresses");
  loc.offset = impl_->index->offset(name);
  if (loc.offset > src_->size() || loc.size > src_->size() - loc.offset)
    throw FormatError(where_, "record '" + name + "' (" + std::to_string(loc.size) + " bytes at " +
                                  std::to_string(loc.offset) + ") runs past the item's end (" +
                                  std::to_string(src_->size()) + " bytes)");
  uint16_t flags = static_cast<uint16_t>(h[6] | (h[7] << 8));
  auto le32 = [](const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; };
  if (!(flags & 8)) {
    loc.crc = le32(h + 14);
    return loc;
  }
  // Flag bit 3: the CRC follows the bytes, in a data descriptor (miniz, and so torch.save, always
  // writes one): its signature PK\7\8 (optional in the format), then crc32 and the sizes.
  uint64_t end = loc.offset + loc.size, room = src_->size() - end;
  if (room < 4) throw FormatError(where_, "record '" + name + "' has no data descriptor after its bytes (the item is cut short)");
  uint8_t d[8];
  src_->read(end, d, std::min<uint64_t>(room, 8));
  bool signed_ = room >= 8 && d[0] == 'P' && d[1] == 'K' && d[2] == 7 && d[3] == 8;
  loc.crc = le32(signed_ ? d + 4 : d);
  return loc;
}

}  // namespace dcpctl
