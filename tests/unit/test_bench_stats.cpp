// bench: statistics, sizes, the pattern and layouts (pure C++, no CUDA).
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "bench/layout.h"
#include "bench/pattern.h"
#include "bench/sizes.h"
#include "bench/stats.h"
#include "util/error.h"

using namespace dcpctl;
using namespace dcpctl::bench;

TEST_CASE("bench stats: median, min, max, mean", "[bench]") {
  Summary s = summarize({3.0, 1.0, 2.0});
  CHECK(s.n == 3);
  CHECK(s.median == 2.0);
  CHECK(s.min == 1.0);
  CHECK(s.max == 3.0);
  CHECK(s.mean == Approx(2.0));

  s = summarize({4.0, 1.0, 3.0, 2.0});
  CHECK(s.median == Approx(2.5));  // mean of the two middle samples
  CHECK(s.min == 1.0);
  CHECK(s.max == 4.0);

  s = summarize({0.5});
  CHECK(s.n == 1);
  CHECK(s.median == 0.5);
  CHECK(s.min == 0.5);
  CHECK(s.max == 0.5);

  CHECK(summarize({}).n == 0);
  CHECK_THROWS_AS(summarize({1.0, -1.0}), std::invalid_argument);
}

TEST_CASE("bench stats: GB/s are decimal, min rate from the slowest iteration", "[bench]") {
  CHECK(*gb_per_s(1000000000, 1.0) == Approx(1.0));
  CHECK(*gb_per_s(uint64_t(1) << 30, 0.5) == Approx(2.147483648));
  CHECK_FALSE(gb_per_s(100, 0.0));

  Summary t = summarize({0.1, 0.2, 0.4});
  RateSummary r = rates(1000000000, t);
  CHECK(*r.median == Approx(5.0));
  CHECK(*r.min == Approx(2.5));
  CHECK(*r.max == Approx(10.0));
  CHECK_FALSE(rates(1, Summary{}).median);

  CHECK(*seconds_per_gib(uint64_t(1) << 29, 0.25) == Approx(0.5));
  CHECK_FALSE(seconds_per_gib(0, 1.0));
}

TEST_CASE("bench sizes: read as every SIZE option, within the 16 TiB limit", "[bench]") {
  // The spelling rules themselves: tests/unit/test_size.cpp.
  CHECK(parse_buffer_size("4MiB", "--chunk") == 4u << 20);
  CHECK(parse_buffer_size("5GB", "--chunk") == 5000000000ull);
  CHECK(parse_buffer_size("16TiB", "--chunk") == uint64_t(1) << 44);
  for (const char* bad : {"", "4K", "0", "1XB", "17TiB", "999999999999999999"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_buffer_size(bad, "--chunk"), UsageError);
  }
  try {
    parse_buffer_size("17TiB", "--chunk");
    FAIL("no throw");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("--chunk '17TiB': larger than the 16 TiB limit") != std::string::npos);
  }
  try {
    parse_size_list({"4MiB,4K"}, "--sizes");
    FAIL("no throw");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("--sizes '4K'") != std::string::npos);
    CHECK(std::string(e.what()).find("KiB") != std::string::npos);
  }
}

TEST_CASE("bench sizes: lists and formatting", "[bench]") {
  CHECK(parse_size_list({"4MiB,64MiB", "1GiB", "4MiB"}, "--sizes") ==
        std::vector<uint64_t>{4u << 20, 64u << 20, uint64_t(1) << 30});
  CHECK_THROWS_AS(parse_size_list({"4MiB,,8MiB"}, "--sizes"), UsageError);
  CHECK(parse_size_list({}, "--sizes").empty());

  CHECK(format_size(512) == "512 B");
  CHECK(format_size(4u << 20) == "4 MiB");
  CHECK(format_size(uint64_t(1) << 30) == "1 GiB");
  CHECK(format_size(3ull << 29) == "1.5 GiB");
  CHECK(format_size(5000000000ull) == "4.7 GiB");
  CHECK(format_size(1536) == "1.5 KiB");
}

TEST_CASE("bench pattern: position-dependent, any offset, threaded", "[bench]") {
  std::vector<uint8_t> a(1000 + 7), b(1000);
  fill_pattern(a.data(), 0, a.size());
  fill_pattern(b.data(), 7, b.size());  // the same bytes, seen from offset 7
  CHECK(std::memcmp(a.data() + 7, b.data(), b.size()) == 0);
  CHECK(find_mismatch(a.data(), 0, a.size()) == a.size());
  CHECK(find_mismatch(b.data(), 7, b.size()) == b.size());
  CHECK(find_mismatch(b.data(), 8, b.size()) == 0);  // shifted by a byte: wrong at once
  b[501] ^= 1;
  CHECK(find_mismatch(b.data(), 7, b.size()) == 501);
  CHECK(find_mismatch(b.data(), 7, 0) == 0);

  // Bytes repeat nowhere nearby: a copy of the wrong chunk is caught.
  CHECK(std::memcmp(a.data(), a.data() + 8, 8) != 0);

  const uint64_t n = (uint64_t(64) << 20) * 2 + 13;  // more than one piece per thread
  std::vector<uint8_t> big(n), serial(n);
  fill_pattern(big.data(), 3, n, 4);
  fill_pattern(serial.data(), 3, n, 1);
  CHECK(std::memcmp(big.data(), serial.data(), n) == 0);
  CHECK(find_mismatch(big.data(), 3, n, 4) == n);
  big[n - 1] ^= 0x80;
  big[(uint64_t(64) << 20) + 5] ^= 0x80;
  CHECK(find_mismatch(big.data(), 3, n, 4) == (uint64_t(64) << 20) + 5);  // the first one
}

TEST_CASE("bench layout: chunks and tensor packing", "[bench]") {
  Layout l = contiguous(10, 0);
  REQUIRE(l.segments.size() == 1);
  CHECK(l.segments[0].bytes == 10);
  l = contiguous(10, 4);
  REQUIRE(l.segments.size() == 3);
  CHECK(l.segments[2].offset == 8);
  CHECK(l.segments[2].bytes == 2);
  CHECK(l.payload == 10);
  CHECK(l.span == 10);
  CHECK(contiguous(10, 10).segments.size() == 1);

  l = packed({100, 0, 513, 4}, 512);
  REQUIRE(l.segments.size() == 4);
  CHECK(l.segments[0].offset == 0);
  CHECK(l.segments[1].offset == 512);
  CHECK(l.segments[2].offset == 512);
  CHECK(l.segments[3].offset == 1536);
  CHECK(l.payload == 617);
  CHECK(l.span == 1540);
}
