// The hash pipeline (item/hash_streams.h): each stream's SHA-256 is hashlib's over its runs'
// bytes in order, whatever the hashers, readers, slots and window size, past the page cache or
// through it; a stream that fails to read (past the end, a CRC-32 mismatch) gets its error and
// the others their digests; the pool is taken from the gate.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "item/hash_streams.h"
#include "plan/memory.h"
#include "random_bytes.h"
#include "store/file.h"
#include "temp_file.h"
#include "util/crc32.h"
#include "util/error.h"
#include "util/sha256.h"

using namespace dcpctl;

namespace {

// The SHA-256 of the runs' bytes, concatenated, from the file's own copy.
std::string expected(const TempFile& f, const std::vector<std::pair<uint64_t, uint64_t>>& runs) {
  Sha256 h;
  for (auto [off, n] : runs) h.update(f.bytes.data() + off, n);
  return h.hex();
}

HashStream stream(const std::string& key, const ReadFile& rf, const std::vector<std::pair<uint64_t, uint64_t>>& runs,
                  bool past_cache) {
  HashStream s{key, {}};
  for (auto [off, n] : runs) s.runs.push_back({DirectRun{&rf, off, n}, past_cache});
  return s;
}

}  // namespace

TEST_CASE("hash_streams: every stream's digest is hashlib's over its runs, for any pipeline shape") {
  const size_t size = 5 * 1024 * 1024 + 777;
  TempFile a(".", size, 21), b(".", size / 3, 22);
  ReadFile ra(a.path), rb(b.path);
  // Runs at odd offsets and lengths, one spanning most of a file, a stream of one byte, an empty one.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> runs = {
      {{1, 3 * 1024 * 1024}, {3 * 1024 * 1024 + 5, 1024 * 1024 + 3}},
      {{0, size}},
      {{4095, 1}},
      {{size - 100000, 100000}, {17, 4096 * 3 + 1}, {4096, 4096}},
      {},
      {{5, 0}, {100, 0}, {9000, 5000}, {7, 0}, {20000, 3}, {1, 0}},  // empty runs first, between, last
  };
  // Many small runs: far more windows than slots, each cut only when a slot is free.
  runs.emplace_back();
  for (uint64_t i = 0; i < 3000; ++i) runs.back().emplace_back((i * 7919) % (size - 600), 1 + i % 600);
  std::vector<std::pair<uint64_t, uint64_t>> in_b = {{3, b.bytes.size() - 3}};
  // Two lanes a hasher, hashed in pairs (the SHA-NI kernel, where the CPU has it), and one.
  const bool pairs = GENERATE(true, false);
  Sha256::use_native_for_testing(pairs);
  CAPTURE(Sha256::pairs());
  for (bool past_cache : {true, false}) {
    for (HashPipeline p : {HashPipeline{1, 1, 1, 3 * kDirectAlign}, HashPipeline{2, 4, 8, 5 * kDirectAlign},
                           HashPipeline{3, 2, 2, 64 * kDirectAlign}, HashPipeline{2, 4, 8, 16ull << 20}}) {
      CAPTURE(past_cache, p.hashers, p.readers, p.slots, p.slot_bytes);
      std::vector<HashStream> streams;
      for (size_t i = 0; i < runs.size(); ++i)
        streams.push_back(stream("s" + std::to_string(i), ra, runs[i], past_cache));
      streams.push_back(stream("b", rb, in_b, past_cache));
      MemoryGate gate(p.slots * p.slot_bytes);
      std::vector<StreamDigest> got = hash_streams(streams, p, gate);
      REQUIRE(got.size() == streams.size());
      for (size_t i = 0; i < runs.size(); ++i) {
        CAPTURE(i);
        CHECK_FALSE(got[i].error);
        CHECK(got[i].hex == expected(a, runs[i]));
      }
      CHECK(got.back().hex == expected(b, in_b));
      // The pool went back to the gate.
      CHECK(gate.try_acquire(p.slots * p.slot_bytes));
    }
  }
  Sha256::use_native_for_testing(true);
}

TEST_CASE("hash_streams: a stream that cannot be read gets its error and the others their digests") {
  const size_t size = 2 * 1024 * 1024;
  TempFile f(".", size, 23);
  ReadFile rf(f.path);
  // A record the ledger watches with a wrong CRC-32, and a run past the end of the file.
  const uint64_t rec = 1024 * 1024 + 10, rec_n = 300000;
  rf.ledger().watch(rf.path(), rec, rec_n, crc32_update(0, f.bytes.data() + rec, rec_n) ^ 1u, "bad.w", "data/0");
  std::vector<std::pair<uint64_t, uint64_t>> good = {{0, 1024 * 1024}}, corrupt = {{rec - 5, rec_n + 100}},
                                             past_end = {{0, 4096}, {size - 10, 11}},
                                             // fails at its first window; the four after it are never read
      fails_first = {{size - 10, 11}, {0, 100000}}, small = {{3, 5000}};
  for (bool past_cache : {true, false}) {
    CAPTURE(past_cache);
    std::vector<HashStream> streams = {stream("good", rf, good, past_cache), stream("bad.w", rf, corrupt, past_cache),
                                       stream("short", rf, past_end, past_cache),
                                       stream("early", rf, fails_first, past_cache),
                                       stream("small", rf, small, past_cache)};
    for (unsigned hashers : {1u, 2u}) {  // one lane: the failed streams' successors still start afresh
      CAPTURE(hashers);
      HashPipeline p{hashers, 2, 3, 8 * kDirectAlign};
      MemoryGate gate(1ull << 30);
      std::vector<StreamDigest> got = hash_streams(streams, p, gate);
      CHECK(got[0].hex == expected(f, good));
      CHECK_FALSE(got[0].error);
      REQUIRE(got[1].error);
      CHECK(got[1].hex.empty());
      CHECK_THROWS_AS(std::rethrow_exception(got[1].error), CorruptError);
      REQUIRE(got[2].error);
      CHECK(got[2].hex.empty());
      CHECK_THROWS_AS(std::rethrow_exception(got[2].error), FormatError);
      REQUIRE(got[3].error);
      CHECK_THROWS_AS(std::rethrow_exception(got[3].error), FormatError);
      CHECK(got[4].hex == expected(f, small));
      CHECK_FALSE(got[4].error);
      // The record is checked once: watch it again for the next pass.
      rf.ledger().watch(rf.path(), rec, rec_n, crc32_update(0, f.bytes.data() + rec, rec_n) ^ 1u, "bad.w", "data/0");
    }
  }
}

TEST_CASE("hash_streams: a slot too small for an aligned read is refused") {
  TempFile f(".", 10000, 24);
  ReadFile rf(f.path);
  MemoryGate gate(1 << 20);
  std::vector<HashStream> streams = {stream("s", rf, {{0, 10000}}, true)};
  CHECK_THROWS_AS(hash_streams(streams, HashPipeline{1, 1, 2, 2 * kDirectAlign}, gate), std::invalid_argument);
  CHECK_THROWS_AS(hash_streams(streams, HashPipeline{1, 1, 2, 3 * kDirectAlign + 1}, gate), std::invalid_argument);
}

TEST_CASE("memory: the hash pipeline fits its budget, or is not used") {
  const uint64_t MiB = 1 << 20;
  HashPipeline p = hash_pipeline(1ull << 30, 2, 4);
  CHECK(p.slots == 8);
  CHECK(p.slot_bytes == kHashSlotBytes);
  p = hash_pipeline(64 * MiB, 2, 4);  // 8 slots of 8 MiB
  CHECK(p.slots == 8);
  CHECK(p.slot_bytes == 8 * MiB);
  p = hash_pipeline(7 * MiB, 2, 4);  // 3 slots of 2 MiB: a huge page each, hashers + 1
  CHECK(p.slots == 3);
  CHECK(p.slot_bytes == 2 * MiB);
  CHECK(hash_pipeline(5 * MiB, 2, 4).slots == 0);
  for (uint64_t budget : {uint64_t{1} << 30, 100 * MiB, 33 * MiB, 9 * MiB})
    for (unsigned h : {1u, 2u, 16u}) {
      HashPipeline q = hash_pipeline(budget, h, 4);
      CAPTURE(budget, h);
      CHECK(uint64_t{q.slots} * q.slot_bytes <= budget);
      if (q.slots) CHECK(q.slots >= q.hashers + 1);
    }
}
