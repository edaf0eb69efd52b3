// The cache of decoded chunks (item/decoded_chunks.h) on the zstd fixture, written by real torch
// with ZStandard: several expected uses of one chunk decode it once, within the gate; when the gate
// has no room, every read decodes for itself; every byte equals ItemReader's own read.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "item/decoded_chunks.h"
#include "meta/checkpoint.h"
#include "util/dtype.h"

using namespace dcpctl;

namespace {

const TensorMeta& tensor(const Checkpoint& ck, const std::string& fqn) {
  for (const auto& t : ck.md.tensors)
    if (t.fqn == fqn) return t;
  FAIL("no tensor " << fqn);
  throw;
}

// Reads chunk 0 of `t` in `parts` equal parts through `cache`, each part one use announced
// beforehand (when `announce`); checks the bytes.
void read_in_parts(DecodedChunks& cache, const ItemReader& reader, const TensorMeta& t, size_t parts,
                   bool announce = true) {
  uint64_t total = t.chunk_numel(0) * itemsize(*t.dtype);
  std::vector<uint8_t> want(total), got(total, 0xAB);
  reader.read_chunk(t, 0, want.data());
  if (announce)
    for (size_t p = 0; p < parts; ++p) cache.expect(t, 0);
  uint64_t step = total / parts;
  for (size_t p = 0; p < parts; ++p) {
    uint64_t from = p * step, n = p + 1 == parts ? total - from : step;
    cache.read(t, 0, from, n, got.data() + from);
    cache.done(t, 0);
  }
  CHECK(got == want);
}

}  // namespace

TEST_CASE("decoded chunks: a zstd chunk read in 4 parts is decoded once, inside the gate") {
  Checkpoint ck = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/zstd/ckpt");
  const TensorMeta& t = tensor(ck, "zeros_64x16");
  REQUIRE(t.storage[0].transforms != 0);
  ItemReader reader(ck);
  MemoryGate gate(1 << 20);
  {
    DecodedChunks cache(reader, &gate);
    read_in_parts(cache, reader, t, 4);
    CHECK(cache.decodes() == 1);
    // Everything given back once the last expected read is done: the whole cap fits again.
    CHECK(gate.try_acquire(1 << 20));
    gate.release(1 << 20);
  }
  SECTION("no room in the gate: each read decodes for itself") {
    MemoryGate tiny(16);
    DecodedChunks cache(reader, &tiny);
    read_in_parts(cache, reader, t, 4);
    CHECK(cache.decodes() == 4);
  }
  SECTION("a read nobody announced still reads, and decodes alone") {
    DecodedChunks cache(reader, &gate);
    std::vector<uint8_t> got(64), want(64);
    reader.read_chunk_bytes(t, 0, 128, 64, want.data());
    cache.read(t, 0, 128, 64, got.data());
    CHECK(got == want);
    CHECK(cache.decodes() == 1);
  }
}

TEST_CASE("decoded chunks: an untransformed chunk nobody announced is read in place, not counted as a decode") {
  Checkpoint ck = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/sample/ckpt");
  ItemReader reader(ck);
  MemoryGate gate(1 << 20);
  DecodedChunks cache(reader, &gate);
  for (const auto& t : ck.md.tensors)
    if (t.dtype && t.num_chunks() && t.chunk_numel(0) > 0 && t.storage[0].transforms == 0) {
      read_in_parts(cache, reader, t, 1, false);
      break;
    }
  CHECK(cache.decodes() == 0);
}

TEST_CASE("decoded chunks: an untransformed chunk announced for several reads is read in place, never kept") {
  Checkpoint ck = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/sample/ckpt");
  ItemReader reader(ck);
  MemoryGate gate(1 << 20);
  DecodedChunks cache(reader, &gate);
  bool read = false;
  for (const auto& t : ck.md.tensors)
    if (!read && t.dtype && t.num_chunks() && t.chunk_numel(0) >= 4 && t.storage[0].transforms == 0) {
      REQUIRE(reader.readable_in_place(t, 0));
      read_in_parts(cache, reader, t, 4);
      read = true;
    }
  CHECK(read);
  CHECK(cache.decodes() == 0);
  CHECK(gate.try_acquire(1 << 20));  // nothing was held
}
