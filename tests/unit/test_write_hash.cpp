// write/write_hash: an output's SHA-256 computed as it is written, whatever order the writes come
// in. The digest must be the file's as it ends up in every case (in order, out of order, from
// several threads, with ranges no write showed, with a range written twice), and what is read
// back from the file must be only what the writes could not give (the point of hashing them).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "random_bytes.h"
#include "store/file.h"
#include "util/sha256.h"
#include "write/output.h"
#include "write/write_hash.h"

using namespace dcpctl;

namespace {

std::string file_sha256(const std::string& path) {
  ReadFile f(path);
  std::vector<uint8_t> v(f.size());
  if (!v.empty()) f.read_at(0, v.data(), v.size());
  Sha256 h;
  h.update(v.data(), v.size());
  return h.hex();
}

struct TempDir {
  std::string path;
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/dcpctl-write-hash-XXXXXX";
    REQUIRE(::mkdtemp(path.data()));
  }
  ~TempDir() { remove_tree(path); }
};

// Writes `bytes` into `out` as pieces of `piece` bytes in the order `order` gives.
void write_pieces(OutputFile& out, const std::vector<uint8_t>& bytes, size_t piece, const std::vector<size_t>& order) {
  for (size_t i : order) {
    const size_t at = i * piece, n = std::min(piece, bytes.size() - at);
    out.pwrite_all(bytes.data() + at, n, at);
  }
}

std::vector<size_t> pieces_of(size_t bytes, size_t piece) {
  std::vector<size_t> order((bytes + piece - 1) / piece);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  return order;
}

// The digest recorded for the committed file at `path`, and what it read back.
struct Recorded {
  std::string sha256;
  uint64_t read_back;
};
Recorded commit_and_look(OutputFile& out, const std::string& path) {
  out.commit();
  std::optional<WrittenDigest> d = written_digest(path);
  REQUIRE(d);
  return {d->digest.sha256, d->read_back};
}

}  // namespace

TEST_CASE("write hash: appends in order are hashed as written", "[write_hash]") {
  TempDir dir;
  HashWrites on(true);
  const std::vector<uint8_t> bytes = random_bytes(3 << 20, 11);
  const std::string path = dir.path + "/a.bin";
  OutputFile out(path);
  for (size_t at = 0; at < bytes.size(); at += 100003) out.append(bytes.data() + at, std::min<size_t>(100003, bytes.size() - at));
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == file_sha256(path));
  CHECK(r.read_back == 0);
}

TEST_CASE("write hash: staged appends past the page cache are hashed as written", "[write_hash]") {
  TempDir dir;
  HashWrites on(true);
  const std::vector<uint8_t> bytes = random_bytes((5 << 20) + 77, 12);
  const std::string path = dir.path + "/s.bin";
  OutputFile out(path);
  out.append(bytes.data(), 1000);
  out.stage_appends(1 << 20);
  for (size_t at = 1000; at < bytes.size(); at += 65537) out.append(bytes.data() + at, std::min<size_t>(65537, bytes.size() - at));
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == file_sha256(path));
  CHECK(r.read_back == 0);
}

TEST_CASE("write hash: writes out of order are kept until the prefix reaches them", "[write_hash]") {
  TempDir dir;
  HashWrites on(true);
  const std::vector<uint8_t> bytes = random_bytes(4 << 20, 13);
  const std::string path = dir.path + "/o.bin";
  OutputFile out(path);
  std::vector<size_t> order = pieces_of(bytes.size(), 40961);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  write_pieces(out, bytes, 40961, order);
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == file_sha256(path));
  CHECK(r.read_back == 0);
}

TEST_CASE("write hash: direct writes from several threads", "[write_hash]") {
  TempDir dir;
  HashWrites on(true);
  const size_t piece = 1 << 20;
  const std::vector<uint8_t> bytes = random_bytes(24 * piece + 4097, 14);
  const std::string path = dir.path + "/t.bin";
  OutputFile out(path);
  std::vector<std::thread> lanes;
  for (size_t lane = 0; lane < 3; ++lane)
    lanes.emplace_back([&, lane] {
      std::vector<uint8_t> buf(piece + 2 * kDirectAlign);
      for (size_t i = lane; i * piece < bytes.size(); i += 3) {
        const size_t at = i * piece, n = std::min(piece, bytes.size() - at);
        uint8_t* q = direct_place(reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.data()) + kDirectAlign - 1) / kDirectAlign * kDirectAlign), at);
        std::copy(bytes.begin() + at, bytes.begin() + at + n, q);
        out.pwrite_direct(q, n, at);
      }
    });
  for (std::thread& t : lanes) t.join();
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == file_sha256(path));
  CHECK(r.read_back == 0);
}

TEST_CASE("write hash: ranges no write showed are read back, and only those", "[write_hash]") {
  TempDir dir;
  HashWrites on(true);
  const std::vector<uint8_t> bytes = random_bytes(2 << 20, 15);
  const std::string path = dir.path + "/g.bin";
  OutputFile out(path);
  // [300000, 700000) written behind the hash's back, as copy_file_range writes in the kernel.
  const size_t a = 300000, b = 700000;
  out.pwrite_all(bytes.data() + b, bytes.size() - b, b);
  REQUIRE(::pwrite(out.fd(), bytes.data() + a, b - a, static_cast<off_t>(a)) == static_cast<ssize_t>(b - a));
  out.pwrite_all(bytes.data(), a, 0);
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == file_sha256(path));
  CHECK(r.read_back == b - a);
}

TEST_CASE("write hash: a range written twice makes the whole file read back", "[write_hash]") {
  TempDir dir;
  HashWrites on(true);
  std::vector<uint8_t> bytes = random_bytes(1 << 20, 16);
  const std::string path = dir.path + "/w.bin";
  OutputFile out(path);
  SECTION("after it was hashed") {
    out.pwrite_all(bytes.data(), bytes.size(), 0);
    bytes[1000] ^= 0xff;
    out.pwrite_all(bytes.data() + 1000, 1, 1000);
  }
  SECTION("while it was kept") {
    out.pwrite_all(bytes.data() + 4096, bytes.size() - 4096, 4096);
    bytes[5000] ^= 0xff;
    out.pwrite_all(bytes.data() + 5000, 10, 5000);
    out.pwrite_all(bytes.data(), 4096, 0);
  }
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == file_sha256(path));
  CHECK(r.read_back == bytes.size());
}

TEST_CASE("write hash: none recorded unless writes are hashed", "[write_hash]") {
  TempDir dir;
  const std::vector<uint8_t> bytes = random_bytes(4096, 17);
  const std::string path = dir.path + "/n.bin";
  OutputFile out(path);
  out.append(bytes.data(), bytes.size());
  out.commit();
  CHECK_FALSE(written_digest(path));
}
