// Buffers for bulk I/O (util/io_buffer.h): aligned for O_DIRECT at every size, and from one huge
// page on a 2 MiB-aligned mapping advised for transparent huge pages, so that a direct read or
// write into it reaches the device in requests of megabytes (the segments are 2 MiB each).
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "store/file.h"
#include "util/io_buffer.h"
#include "util/memory_gate.h"

using dcpctl::IoBuffer;
using dcpctl::kHugePage;
using dcpctl::kIoBufferAlign;
using dcpctl::make_io_buffer;

namespace {

// The mapping of /proc/self/smaps that holds `p`: its range and its VmFlags line ("" if none).
struct Mapping {
  uintptr_t lo = 0, hi = 0;
  std::string flags;
};
Mapping mapping_of(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  Mapping m;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    // A mapping's first line: "lo-hi perms offset dev inode path"; the others are "Name: value".
    if (std::sscanf(line.c_str(), "%lx%c%lx ", &lo, &dash, &hi) == 3 && dash == '-') {
      inside = addr >= lo && addr < hi;
      if (inside) m.lo = lo, m.hi = hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) m.flags = line;
  }
  return m;
}

bool has_flag(const std::string& vm_flags, const std::string& flag) {
  std::istringstream words(vm_flags);
  for (std::string w; words >> w;)
    if (w == flag) return true;
  return false;
}

bool kernel_has_thp() {
  struct stat st;
  return ::stat("/sys/kernel/mm/transparent_hugepage/enabled", &st) == 0;
}

}  // namespace

TEST_CASE("io buffer: every size is aligned for O_DIRECT and writable to its last byte") {
  for (uint64_t n : {uint64_t{1}, uint64_t{4095}, uint64_t{4096}, uint64_t{1} << 20, kHugePage - 1, kHugePage,
                     kHugePage + 1, (uint64_t{16} << 20) + 2 * 4096}) {
    INFO("n = " << n);
    IoBuffer b = make_io_buffer(n);
    REQUIRE(b);
    CHECK(reinterpret_cast<uintptr_t>(b.get()) % kIoBufferAlign == 0);
    CHECK(reinterpret_cast<uintptr_t>(b.get()) % dcpctl::kDirectAlign == 0);
    if (n >= kHugePage && dcpctl::kHugeIoBuffers) {
      CHECK(reinterpret_cast<uintptr_t>(b.get()) % kHugePage == 0);
      CHECK(b.get_deleter().mapped == (n + kHugePage - 1) / kHugePage * kHugePage);
    } else {
      CHECK(b.get_deleter().mapped == 0);
    }
    std::memset(b.get(), 0xA5, n);
    CHECK(b[0] == 0xA5);
    CHECK(b[n - 1] == 0xA5);
  }
  CHECK(!make_io_buffer(0));
}

TEST_CASE("io buffer: from one huge page on, the mapping is advised for huge pages and is the buffer alone") {
  IoBuffer b = make_io_buffer(3 * kHugePage + 5);
  if (!dcpctl::kHugeIoBuffers) {  // AddressSanitizer: a heap block, whose bounds it checks
    CHECK(b.get_deleter().mapped == 0);
    CHECK(!has_flag(mapping_of(b.get()).flags, "hg"));
    return;
  }
  const Mapping m = mapping_of(b.get());
  REQUIRE(!m.flags.empty());
  // MADV_HUGEPAGE shows as "hg" (a kernel without THP refuses the advice: plain pages, no flag).
  // The advice keeps the mapping apart from its neighbours, so its range is the buffer's: the
  // over-allocation made for the alignment was given back on both sides.
  if (kernel_has_thp()) {
    CHECK(has_flag(m.flags, "hg"));
    CHECK(m.lo == reinterpret_cast<uintptr_t>(b.get()));
    CHECK(m.hi == reinterpret_cast<uintptr_t>(b.get()) + 4 * kHugePage);
  }
  // Below one huge page: plain heap memory, not advised.
  IoBuffer small = make_io_buffer(kHugePage - 4096);
  CHECK(!has_flag(mapping_of(small.get()).flags, "hg"));
}

TEST_CASE("io buffer: a worker's scratch buffers are I/O buffers") {
  dcpctl::MemoryGate g(64ull << 20);
  dcpctl::WorkerBuffers w(g);
  w.prepare(16ull << 20, 4096, 0);
  CHECK(reinterpret_cast<uintptr_t>(w.b()) % kIoBufferAlign == 0);
  if (!dcpctl::kHugeIoBuffers) return;  // AddressSanitizer: heap blocks (the case above checks them)
  CHECK(reinterpret_cast<uintptr_t>(w.a()) % kHugePage == 0);
  if (kernel_has_thp()) CHECK(has_flag(mapping_of(w.a()).flags, "hg"));
}
