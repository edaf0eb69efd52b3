#include "store/source.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "util/crc32.h"
#include "util/crc_ledger.h"

namespace dcpctl {

void FileWindow::read(uint64_t pos, void* buf, size_t n) const {
  if (pos > length_ || n > length_ - pos)
    throw FormatError(Where(file_.path(), base_ + pos, key_),
                      "read of " + std::to_string(n) + " bytes runs past the item's end (item is " +
                          std::to_string(length_) + " bytes at offset " + std::to_string(base_) + ")");
  file_.read_near(base_ + pos, buf, n, base_, base_ + length_, key_);
}

void ByteSource::watch_crc(uint64_t pos, uint64_t n, uint32_t crc, const Where& where,
                           const std::string& record) const {
  std::vector<uint8_t> buf(std::min<uint64_t>(n, 1 << 20));
  uint32_t got = 0;
  for (uint64_t done = 0; done < n;) {
    size_t k = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - done));
    read(pos + done, buf.data(), k);
    got = crc32_update(got, buf.data(), k);
    done += k;
  }
  if (got != crc) throw_crc_mismatch(where, record, n, crc, got);
}

void FileWindow::watch_crc(uint64_t pos, uint64_t n, uint32_t crc, const Where& where,
                           const std::string& record) const {
  if (pos > length_ || n > length_ - pos) throw FormatError(where, "record '" + record + "' runs past the item's end");
  file_.ledger().watch(file_.path(), base_ + pos, n, crc, where.key, record);
}

std::pair<uint8_t*, size_t> MemorySource::spare() {
  if (blocks_.empty() || size_ == blocks_.back().start + blocks_.back().capacity) {
    size_t cap = blocks_.empty() ? kFirstBlock : std::min(kMaxBlock, blocks_.back().capacity * 2);
    blocks_.push_back({std::unique_ptr<uint8_t[]>(new uint8_t[cap]), size_, cap});
  }
  const Block& b = blocks_.back();
  size_t used = static_cast<size_t>(size_ - b.start);
  return {b.data.get() + used, b.capacity - used};
}

void MemorySource::append(const uint8_t* p, size_t n) {
  while (n) {
    auto [dst, room] = spare();
    size_t k = std::min(room, n);
    std::memcpy(dst, p, k);
    grow(k);
    p += k;
    n -= k;
  }
}

void MemorySource::read(uint64_t pos, void* buf, size_t n) const {
  if (pos > size_ || n > size_ - pos)
    throw FormatError(Where(), "read of " + std::to_string(n) + " bytes at " + std::to_string(pos) +
                                   " runs past the decoded item (" + std::to_string(size_) + " bytes)");
  if (n == 0) return;
  auto* out = static_cast<uint8_t*>(buf);
  // First block holding pos: blocks are in order of start.
  auto it =
      std::upper_bound(blocks_.begin(), blocks_.end(), pos, [](uint64_t p, const Block& b) { return p < b.start; });
  for (--it; n; ++it) {
    size_t off = static_cast<size_t>(pos - it->start);
    size_t k = std::min(n, it->capacity - off);
    std::memcpy(out, it->data.get() + off, k);
    out += k;
    pos += k;
    n -= k;
  }
}

}  // namespace dcpctl
