// Buffers that bulk reads and writes go through: the windows past the page cache (O_DIRECT) and
// the ones a read or write of megabytes fills through it.
//
// A block device takes a request as a list of physically contiguous segments, at most
// max_segments of them (254 on virtio-blk): with 4 KiB pages a direct read or write of 16 MiB
// from a plain heap buffer is split into requests of about 1 MiB, one per 254 pages, where the
// device's own limit (max_sectors_kb, 4 MiB on virtio-blk, more on NVMe) would have taken it in
// four. An IoBuffer of 2 MiB or more is a mapping aligned on 2 MiB and advised for transparent
// huge pages (MADV_HUGEPAGE; the kernel's default policy, "madvise", grants them only where asked):
// each segment is then 2 MiB, and requests reach the device's limit. On this project's VM that took
// `consolidate` of 2.4 GB from 2.0-2.8 s to 1.3-1.5 s, in a third of the requests
// (docs/performance.md, "Huge pages and the free page reporting"). Where the kernel has no huge pages
// to give, or no THP at all, it is an aligned buffer of 4 KiB pages, as before. Under the default
// defrag policy ("madvise") a first touch may compact memory to find a huge page: the buffers
// are kept from one task to the next (WorkerBuffers, the lanes' windows), so that is paid once per
// buffer. A buffer of 2 MiB or more holds its size rounded up to 2 MiB.
//
// Every IoBuffer is aligned on kIoBufferAlign, a multiple of O_DIRECT's kDirectAlign (store/file.h
// checks it). Its bytes are uninitialised as far as the caller knows (a mapping's are zero, a
// small buffer's are not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace dcpctl {

// How an IoBuffer was allocated, so that it is freed the same way: `mapped` bytes of a mapping,
// or (0) aligned_alloc's.
struct IoBufferFree {
  uint64_t mapped;
  void operator()(uint8_t* p) const;
};
using IoBuffer = std::unique_ptr<uint8_t[], IoBufferFree>;

constexpr uint64_t kIoBufferAlign = 4096;

// The size from which an IoBuffer is a huge-page mapping: one huge page (x86-64, and arm64 with
// 4 KiB pages).
constexpr uint64_t kHugePage = 2ull << 20;

// Whether buffers from kHugePage up are huge-page mappings: not under AddressSanitizer, which
// checks the bounds of heap blocks and not of mappings (the sanitizer pass would stop seeing an
// overrun of the largest windows).
// (GCC says so with __SANITIZE_ADDRESS__, clang with __has_feature.)
#if defined(__SANITIZE_ADDRESS__)
#define DCPCTL_IO_BUFFERS_ON_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DCPCTL_IO_BUFFERS_ON_HEAP 1
#endif
#endif
#ifdef DCPCTL_IO_BUFFERS_ON_HEAP
constexpr bool kHugeIoBuffers = false;
#else
constexpr bool kHugeIoBuffers = true;
#endif

// `n` bytes (rounded up to kIoBufferAlign, or to kHugePage from kHugePage on), aligned; throws
// std::bad_alloc when the memory cannot be had. n == 0 gives an empty IoBuffer.
IoBuffer make_io_buffer(uint64_t n);

}  // namespace dcpctl
