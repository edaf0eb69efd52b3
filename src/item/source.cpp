#include "item/source.h"

#include <cstring>

namespace dcpctl {

void FileWindow::read(uint64_t pos, void* buf, size_t n) const {
  if (pos > length_ || n > length_ - pos)
    throw FormatError(Where(file_.path(), base_ + pos, key_),
                      "read of " + std::to_string(n) + " bytes runs past the item's end (item is " +
                          std::to_string(length_) + " bytes at offset " + std::to_string(base_) + ")");
  file_.read_at(base_ + pos, buf, n, key_);
}

void MemorySource::read(uint64_t pos, void* buf, size_t n) const {
  if (pos > bytes_.size() || n > bytes_.size() - pos)
    throw FormatError(Where(), "read of " + std::to_string(n) + " bytes at " + std::to_string(pos) +
                                   " runs past the decoded item (" + std::to_string(bytes_.size()) + " bytes)");
  if (n) std::memcpy(buf, bytes_.data() + pos, n);
}

}  // namespace dcpctl
