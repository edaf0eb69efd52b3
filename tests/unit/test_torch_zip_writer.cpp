// write/torch_zip_writer: dcpctl's own torch.save zip writer, byte for byte against the writer
// torch uses (caffe2's PyTorchStreamWriter over miniz, linked into this binary through the
// plugin's objects: torchlib::api()), and against the archives real torch wrote into the fixtures.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include <unistd.h>

#include "fixture_archives.h"
#include "item/torch_zip.h"
#include "item/zip_directory.h"
#include "meta/checkpoint.h"
#include "torchlib/torchlib.h"
#include "util/crc32.h"
#include "write/output.h"
#include "write/torch_save.h"
#include "write/torch_zip_writer.h"

using namespace dcpctl;
namespace fs = std::filesystem;

namespace {

// A record to write: its bytes, or (streamed) only its size. A streamed record's bytes are left
// out of both writers' output (torch's writer passes a null pointer for them, ours calls the
// payload), so archives of many GiB compare in a few KiB.
struct Rec {
  std::string name;
  uint64_t size = 0;
  bool streamed = false;
};

std::vector<uint8_t> bytes_of(const Rec& r) {
  std::vector<uint8_t> d(r.size);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 7 + r.name.size());
  return d;
}

struct Written {
  std::vector<uint8_t> bytes;                       // streamed payloads left out
  std::vector<std::pair<uint64_t, uint64_t>> gaps;  // (where in the archive, how long) for each left out
};

Written torch_writes(const std::vector<Rec>& recs) {
  Written w;
  uint64_t pos = 0;
  auto z = torchlib::api().zip_writer(
      [&](const void* p, size_t n) {
        if (!p && n)
          w.gaps.emplace_back(pos, n);
        else
          w.bytes.insert(w.bytes.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
        pos += n;
        return n;
      },
      Where("torch"));
  for (const Rec& r : recs) {
    if (r.streamed)
      z->record(r.name, nullptr, r.size);  // miniz writes the metadata, CRC 0
    else {
      std::vector<uint8_t> d = bytes_of(r);
      z->record(r.name, d.data(), d.size());
    }
  }
  z->finish();
  return w;
}

Written own_writes(const std::vector<Rec>& recs) {
  Written w;
  uint64_t pos = 0;
  TorchZipWriter z([&](const void* p, size_t n) {
    w.bytes.insert(w.bytes.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    pos += n;
  });
  for (const Rec& r : recs) {
    if (r.streamed) {
      z.record_streamed(r.name, r.size, [&] {  // not called for an empty record
        w.gaps.emplace_back(pos, r.size);
        pos += r.size;
        return uint32_t{0};  // as torch's writer records a payload it never saw
      });
    } else {
      std::vector<uint8_t> d = bytes_of(r);
      z.record(r.name, d.data(), d.size());
    }
  }
  z.finish();
  CHECK(z.size() == pos);
  return w;
}

void same_bytes(const std::vector<Rec>& recs) {
  Written theirs = torch_writes(recs), ours = own_writes(recs);
  CHECK(ours.gaps == theirs.gaps);
  REQUIRE(ours.bytes.size() == theirs.bytes.size());
  auto diff = std::mismatch(ours.bytes.begin(), ours.bytes.end(), theirs.bytes.begin());
  INFO("first difference at byte " << (diff.first - ours.bytes.begin())
                                   << " (of the archive less its streamed payloads)");
  CHECK(diff.first == ours.bytes.end());
}

}  // namespace

TEST_CASE("torch zip writer: every padding, name length and small size, as torch's writer lays them out") {
  // Names of 1 to 70 bytes and sizes around the 64-byte alignment put every record start at
  // every offset modulo 64; the default and the explicit closing records both occur.
  std::mt19937 rng(35);
  for (int round = 0; round < 40; ++round) {
    std::vector<Rec> recs;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      std::string name = "data/" + std::to_string(i) + std::string(rng() % 66, 'k');
      recs.push_back({name, rng() % 4 == 0 ? rng() % 5000 : rng() % 130, false});
    }
    if (round % 5 == 1) recs.push_back({"version", 2, false});
    if (round % 5 == 2) recs.push_back({".data/version", 3, false});
    if (round % 5 == 3) recs.push_back({"byteorder", 6, false});
    if (round % 7 == 4) recs.push_back({"data/empty", 0, true});
    INFO("round " << round);
    same_bytes(recs);
  }
}

TEST_CASE("torch zip writer: zip64 sizes, offsets and counts, as torch's writer lays them out") {
  const uint64_t G4 = 0xFFFFFFFFull;
  // A record of 5 GiB, one exactly at and one just under the 32-bit limit, records whose headers
  // lie past 4 GiB, and a directory past 4 GiB.
  same_bytes({{"data.pkl", 100}, {"data/0", 5ull << 30, true}, {"data/1", 7}, {"data/2", 0}});
  same_bytes({{"data/0", G4, true}, {"data/1", 1}});
  same_bytes({{"data/0", G4 - 1, true}, {"data/1", 1}});
  same_bytes({{"data/0", G4 - 200, true}, {"data/1", 500}, {"data/2", 1}});
  same_bytes({{"data/0", 3ull << 30, true}, {"data/1", 3ull << 30, true}, {"data/2", 9ull << 30, true}});
  // More records than the end record counts (65,535).
  std::vector<Rec> many;
  for (int i = 0; i < 70000; ++i) many.push_back({"data/" + std::to_string(i), static_cast<uint64_t>(i % 3)});
  same_bytes(many);
}

TEST_CASE(
    "torch zip writer: every torch.save archive of the fixtures, rewritten record for record, is the same bytes") {
  // Each archive real torch wrote (DCP items, .pt files) is read with dcpctl's reader and written
  // again with its records in the same order: the bytes must be torch's, serialization id included.
  std::vector<FixtureArchive> archives = fixture_archives();
  REQUIRE(archives.size() > 200);
  for (const auto& [what, bytes] : archives) {
    INFO(what);
    auto src = std::make_shared<MemorySource>(bytes);
    ZipDirectory dir(*src, Where(what));
    TorchZip zip(src, Where(what));
    std::vector<uint8_t> out;
    std::string folder = dir.folder().substr(0, dir.folder().size() - 1);
    TorchZipWriter w(
        [&](const void* p, size_t n) {
          out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
        },
        folder);
    for (const std::string& name : zip.records()) {
      if (name == ".data/serialization_id") continue;  // computed by the writer, last
      RecordLocation loc = zip.locate(name);
      w.record(name, bytes.data() + loc.offset, loc.size);
    }
    w.finish();
    CHECK(out.size() == bytes.size());
    auto diff = std::mismatch(out.begin(), out.end(), bytes.begin(), bytes.end());
    INFO("first difference at byte " << (diff.first - out.begin()));
    CHECK(diff.first == out.end());
  }
}

TEST_CASE("torch zip writer: a streamed record is checked and read back with its CRC") {
  fs::path dir = fs::temp_directory_path() / ("dcpctl-zipw-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  const uint64_t n = v.size() * sizeof(float);
  {
    OutputFile out((dir / "a.distcp").string());
    write_tensor_blob_streamed(out, DType::Float32, {1000}, n, [&] {
      out.append(v.data(), n);
      return crc32_update(0, v.data(), n);
    });
    out.commit();
  }
  // The same tensor handed over in one buffer: the same archive.
  std::vector<uint8_t> whole = torch_save_tensor_blob(DType::Float32, {1000}, v.data(), n);
  CHECK(slurp((dir / "a.distcp").string(), 0, fs::file_size(dir / "a.distcp")) == whole);
  auto src = std::make_shared<MemorySource>(whole);
  TorchZip zip(src, Where("a"));
  CHECK(zip.locate("data/0").crc == crc32_update(0, v.data(), n));
  // A payload that appends the wrong number of bytes is a bug, not an archive.
  {
    OutputFile out((dir / "b.distcp").string());
    CHECK_THROWS_AS(write_tensor_blob_streamed(out, DType::Float32, {1000}, n,
                                               [&] {
                                                 out.append(v.data(), n - 4);
                                                 return uint32_t{0};
                                               }),
                    std::logic_error);
  }
  TorchZipWriter twice([](const void*, size_t) {});
  twice.record("data/0", "x", 1);
  CHECK_THROWS_AS(twice.record("data/0", "x", 1), std::logic_error);
  fs::remove_all(dir);
}
