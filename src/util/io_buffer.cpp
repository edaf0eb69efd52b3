#include "util/io_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace dcpctl {

void IoBufferFree::operator()(uint8_t* p) const {
  if (mapped)
    ::munmap(p, mapped);
  else
    std::free(p);
}

IoBuffer make_io_buffer(uint64_t n) {
  if (n == 0) return IoBuffer(nullptr, IoBufferFree{0});
  if (n < kHugePage || !kHugeIoBuffers) {
    void* p = std::aligned_alloc(kIoBufferAlign, (n + kIoBufferAlign - 1) / kIoBufferAlign * kIoBufferAlign);
    if (!p) throw std::bad_alloc();
    return IoBuffer(static_cast<uint8_t*>(p), IoBufferFree{0});
  }
  // mmap aligns on a page only: map one huge page more and unmap what lies outside the aligned
  // part (the kernel places huge pages only on 2 MiB boundaries).
  const uint64_t len = (n + kHugePage - 1) / kHugePage * kHugePage, span = len + kHugePage;
  void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(m);
  const uintptr_t at = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (at > start) ::munmap(m, at - start);
  if (start + span > at + len) ::munmap(reinterpret_cast<void*>(at + len), start + span - (at + len));
  // Advisory: refused (no THP in this kernel, or THP off) the mapping is plain 4 KiB pages.
  ::madvise(reinterpret_cast<void*>(at), len, MADV_HUGEPAGE);
  return IoBuffer(reinterpret_cast<uint8_t*>(at), IoBufferFree{len});
}

}  // namespace dcpctl
