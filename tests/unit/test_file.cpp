// util/file's reads past the page cache (ReadFile::read_direct): the bytes it returns are the
// bytes read_at returns, for every alignment of offset and length, up to the end of the file, on
// a filesystem that takes O_DIRECT (the build tree's) and on one that refuses it (tmpfs), and
// from several threads opening the O_DIRECT descriptor at once.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "store/file.h"
#include "temp_file.h"
#include "util/error.h"

using namespace dcpctl;

namespace {

// An aligned buffer with room for direct_span(offset, n) bytes.
struct Aligned {
  std::unique_ptr<uint8_t, decltype(&std::free)> p{nullptr, &std::free};
  explicit Aligned(size_t n) {
    p.reset(
        static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, (n + kDirectAlign - 1) / kDirectAlign * kDirectAlign)));
  }
};

void check_reads(const std::string& dir) {
  const size_t size = 3 * 1024 * 1024 + 1234;  // not a multiple of the alignment
  TempFile f(dir, size);
  ReadFile rf(f.path);
  std::mt19937 rng(11);
  std::vector<std::pair<uint64_t, uint64_t>> cases = {{0, size},           {0, 4096},    {1, 4095},
                                                      {4095, 2},           {4096, 8192}, {size - 1, 1},
                                                      {size - 5000, 5000}, {100, 0},     {size, 0}};
  for (int i = 0; i < 200; ++i) {
    uint64_t off = rng() % size, n = rng() % (size - off + 1);
    cases.emplace_back(off, n);
  }
  for (auto [off, n] : cases) {
    CAPTURE(dir, off, n);
    Aligned buf(direct_span(off, n) + kDirectAlign);
    const uint8_t* p = rf.read_direct(off, n, buf.p.get());
    REQUIRE(p >= buf.p.get());
    REQUIRE(p + n <= buf.p.get() + direct_span(off, n) + kDirectAlign);
    CHECK(std::equal(p, p + n, f.bytes.begin() + static_cast<long>(off)));
  }
  // Past the end is refused, naming the file.
  Aligned buf(2 * kDirectAlign);
  CHECK_THROWS_AS(rf.read_direct(size - 10, 11, buf.p.get()), FormatError);
  // Several threads at once (the first opens the O_DIRECT descriptor).
  std::vector<std::thread> ts;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      Aligned b(size + 2 * kDirectAlign);
      uint64_t off = static_cast<uint64_t>(t) * 777;
      const uint8_t* p = rf.read_direct(off, size - off, b.p.get());
      ok[static_cast<size_t>(t)] = std::equal(p, p + (size - off), f.bytes.begin() + static_cast<long>(off));
    });
  for (auto& t : ts) t.join();
  CHECK(ok == std::vector<int>(4, 1));
}

}  // namespace

TEST_CASE(
    "file: read_direct returns read_at's bytes at every alignment, where O_DIRECT works and where it is refused") {
  check_reads(".");                                       // the build tree: ext4 here, which takes O_DIRECT
  if (is_directory("/dev/shm")) check_reads("/dev/shm");  // tmpfs refuses O_DIRECT: buffered
}

TEST_CASE("file: join_spans joins neighbouring items of an s3:// object into requests of at most kRemoteSpan") {
  using Spans = std::vector<std::pair<uint64_t, uint64_t>>;
  const uint64_t MiB = 1 << 20, size = 100 * MiB;
  // Items back to back (as DCP writes them), given out of order: joined up to the cap.
  Spans items;
  for (uint64_t i = 0; i < 10; ++i) items.emplace_back((9 - i) * 3 * MiB, 3 * MiB);
  CHECK(join_spans(items, size) ==
        Spans{{0, 6 * MiB}, {6 * MiB, 12 * MiB}, {12 * MiB, 18 * MiB}, {18 * MiB, 24 * MiB}, {24 * MiB, 30 * MiB}});
  // A gap under kRemoteGap is fetched to save a request; one at kRemoteGap or more is not.
  CHECK(join_spans({{0, 100}, {100 + kRemoteGap - 1, 10}}, size) == Spans{{0, 100 + kRemoteGap + 9}});
  CHECK(join_spans({{0, 100}, {101 + kRemoteGap, 10}}, size) == Spans{{0, 100}, {101 + kRemoteGap, 111 + kRemoteGap}});
  // An item larger than a span is no span (read a window at a time), and breaks the run.
  CHECK(join_spans({{0, MiB}, {MiB, kRemoteSpan + 1}, {MiB + kRemoteSpan + 1, MiB}}, size) ==
        Spans{{0, MiB}, {MiB + kRemoteSpan + 1, 2 * MiB + kRemoteSpan + 1}});
  // Exactly kRemoteSpan is one span.
  CHECK(join_spans({{0, kRemoteSpan / 2}, {kRemoteSpan / 2, kRemoteSpan / 2}}, size) == Spans{{0, kRemoteSpan}});
  // Empty ranges and ranges past the end (a hostile .metadata) are left out or clipped.
  CHECK(join_spans({{5, 0}, {size, 10}, {size - 10, 100}}, size) == Spans{{size - 10, size}});
  // Overlapping and repeated ranges (chunks sharing an item): never a byte in two spans.
  CHECK(join_spans({{0, 10}, {0, 10}, {5, 20}}, size) == Spans{{0, 25}});
  Spans over = join_spans({{0, kRemoteSpan - 10}, {kRemoteSpan - 20, 100}}, size);
  CHECK(over == Spans{{0, kRemoteSpan - 10}, {kRemoteSpan - 10, kRemoteSpan + 80}});
}

TEST_CASE("file: cached() is true only when every page of the range is in the page cache") {
  const size_t size = 12 * 1024 * 1024 + 100;  // several of cached()'s 4 MiB steps, a partial page at the end
  TempFile f(".", size);
  ReadFile rf(f.path);
  const int fd = rf.fd();
  REQUIRE(::fdatasync(fd) == 0);
  auto drop = [&](uint64_t off, uint64_t n) {
    REQUIRE(::posix_fadvise(fd, static_cast<off_t>(off), static_cast<off_t>(n), POSIX_FADV_DONTNEED) == 0);
  };
  auto load = [&](uint64_t off, uint64_t n) {
    std::vector<uint8_t> b(n);
    rf.read_at(off, b.data(), n);
  };
  load(0, size);
  REQUIRE(rf.cached(0, size));
  drop(0, size);
  if (rf.cached(0, size)) {  // tmpfs: its pages are the file, never dropped
    WARN("this filesystem's pages cannot be dropped (tmpfs?): cached() checked only whole");
    return;
  }
  load(0, size);
  REQUIRE(rf.cached(0, size));
  CHECK(rf.cached(4096 + 3, 100000));
  CHECK_FALSE(rf.cached(0, size + 1));  // past the end
  CHECK_FALSE(rf.cached(0, 0));
  // Pages missing at the start, at the end, in the middle of a later 4 MiB step (2 MiB-aligned
  // ranges: the kernel may cache a file in folios larger than a page, dropped only whole).
  const uint64_t MiB = 1024 * 1024;
  for (auto [off, n] : {std::pair<uint64_t, uint64_t>{0, 2 * MiB}, {10 * MiB, size - 10 * MiB}, {6 * MiB, 2 * MiB}}) {
    CAPTURE(off, n);
    drop(off, n);
    CHECK_FALSE(rf.cached(0, size));
    CHECK_FALSE(rf.cached(off + n / 2, 1));
    if (off > 0) CHECK(rf.cached(0, off));                          // the pages before are still there
    if (off + n < size) CHECK(rf.cached(off + n, size - off - n));  // and after
    load(off, n);
    CHECK(rf.cached(0, size));
  }
  drop(0, size);
  CHECK_FALSE(rf.cached(0, size));
  CHECK_FALSE(rf.cached(5 * 1024 * 1024, 4096));
}
