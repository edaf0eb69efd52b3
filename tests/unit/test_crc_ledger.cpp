// The CRC ledger (util/crc_ledger.h): a record's CRC-32 checked from reads that come in any
// pieces, order, overlap and thread; a mismatch named; nothing checked twice or left behind.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "random_bytes.h"
#include "util/crc32.h"
#include "util/crc_ledger.h"
#include "util/error.h"

using namespace dcpctl;

TEST_CASE("crc32_combine joins the CRCs of two pieces") {
  auto d = random_bytes(5000, 1);
  for (size_t cut : {0, 1, 64, 4095, 5000}) {
    uint32_t a = crc32_update(0, d.data(), cut), b = crc32_update(0, d.data() + cut, d.size() - cut);
    CHECK(crc32_combine(a, b, d.size() - cut) == crc32_update(0, d.data(), d.size()));
  }
}

TEST_CASE("ledger: a record read in shuffled, overlapping pieces is checked once, when covered") {
  auto file = random_bytes(10000, 2);
  const uint64_t off = 1000, n = 7000;
  CrcLedger l;
  l.watch("f", off, n, crc32_update(0, file.data() + off, n), "k", "data/0");
  CHECK(l.watching(off, 1));
  CHECK(l.watching(0, off + 1));
  CHECK_FALSE(l.watching(0, off));
  // Reads that start before the record, end after it, repeat bytes, and arrive out of order.
  std::vector<std::pair<uint64_t, uint64_t>> reads = {{5000, 3500}, {0, 1500}, {1200, 100}, {2400, 2800}, {1400, 1100}};
  for (auto [a, k] : reads) {
    CHECK(l.checked() == 0);
    l.saw("f", a, file.data() + a, k);
  }
  CHECK(l.checked() == 1);
  CHECK_FALSE(l.watching(off, n));          // gone once checked
  l.saw("f", 0, file.data(), file.size());  // later reads cost nothing and find nothing
  CHECK(l.checked() == 1);
}

TEST_CASE("ledger: one flipped bit anywhere fails, naming file, record offset and key") {
  auto file = random_bytes(4096, 3);
  for (uint64_t bit : {0ull, 7ull, 2048ull * 8 + 3, 4095ull * 8 + 7}) {
    CrcLedger l;
    l.watch("ckpt/__0_0.distcp", 0, file.size(), crc32_update(0, file.data(), file.size()), "model.w", "data/3");
    auto bad = file;
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    l.saw("ckpt/__0_0.distcp", 0, bad.data(), 1000);
    try {
      l.saw("ckpt/__0_0.distcp", 1000, bad.data() + 1000, bad.size() - 1000);
      FAIL("no error");
    } catch (const CorruptError& e) {
      CHECK(e.where().file == "ckpt/__0_0.distcp");
      CHECK(e.where().offset == std::optional<uint64_t>(0));
      CHECK(e.where().key == "model.w");
      CHECK(e.detail().find("data/3") != std::string::npos);
      CHECK(e.exit_code() == ExitCode::invalid);
    }
  }
}

TEST_CASE("ledger: several records, read by several threads in small pieces") {
  auto file = random_bytes(1 << 20, 4);
  CrcLedger l;
  std::vector<std::pair<uint64_t, uint64_t>> recs;  // records of varied sizes, with gaps between
  for (uint64_t at = 100; at + 5000 < file.size(); at += 9000) recs.push_back({at, 1000 + at % 4000});
  for (auto [a, n] : recs) l.watch("f", a, n, crc32_update(0, file.data() + a, n), "k", "r");
  std::vector<std::pair<uint64_t, uint64_t>> reads;
  for (uint64_t a = 0; a < file.size(); a += 777) reads.push_back({a, std::min<uint64_t>(1500, file.size() - a)});
  std::shuffle(reads.begin(), reads.end(), std::mt19937(5));
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (size_t i = t; i < reads.size(); i += 4)
        l.saw("f", reads[i].first, file.data() + reads[i].first, reads[i].second);
    });
  for (auto& t : ts) t.join();
  CHECK(l.checked() == recs.size());
}

TEST_CASE("ledger: overlapping records are refused, an empty record must store CRC 0") {
  CrcLedger l;
  l.watch("f", 100, 50, 1, "k", "a");
  l.watch("f", 100, 50, 1, "k", "a");  // the same record again: fine
  CHECK_THROWS_AS(l.watch("f", 120, 50, 1, "k", "b"), FormatError);
  CHECK_THROWS_AS(l.watch("f", 60, 41, 1, "k", "b"), FormatError);
  l.watch("f", 150, 10, 1, "k", "c");  // adjacent: fine
  l.watch("f", 10, 0, 0, "k", "empty");
  CHECK_THROWS_AS(l.watch("f", 10, 0, 5, "k", "empty"), CorruptError);
}
