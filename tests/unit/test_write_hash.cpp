// write/write_hash: an output's SHA-256 computed as it is written, whatever order the writes come
// in. The digest must be the file's as it ends up in every case (in order, out of order, from
// several threads, with ranges no write showed, with a range written twice), and what is read
// back from the file must be only what the writes could not give (the point of hashing them).
#include <catch2/catch.hpp>

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
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
  std::string sha256;  // the digest, in the run's algorithm
  uint64_t read_back;
};
Recorded commit_and_look(OutputFile& out, const std::string& path) {
  out.commit();
  std::optional<WrittenDigest> d = written_digest(path);
  REQUIRE(d);
  return {d->digest.hex, d->read_back};
}

}  // namespace

TEST_CASE("write hash: appends in order are hashed as written", "[write_hash]") {
  TempDir dir;
  HashWrites on(true, ManifestAlgorithm::Sha256);
  const std::vector<uint8_t> bytes = random_bytes(3 << 20, 11);
  const std::string path = dir.path + "/a.bin";
  OutputFile out(path);
  for (size_t at = 0; at < bytes.size(); at += 100003)
    out.append(bytes.data() + at, std::min<size_t>(100003, bytes.size() - at));
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == file_sha256(path));
  CHECK(r.read_back == 0);
}

TEST_CASE("write hash: staged appends past the page cache are hashed as written", "[write_hash]") {
  TempDir dir;
  HashWrites on(true, ManifestAlgorithm::Sha256);
  const std::vector<uint8_t> bytes = random_bytes((5 << 20) + 77, 12);
  const std::string path = dir.path + "/s.bin";
  OutputFile out(path);
  out.append(bytes.data(), 1000);
  out.stage_appends(1 << 20);
  for (size_t at = 1000; at < bytes.size(); at += 65537)
    out.append(bytes.data() + at, std::min<size_t>(65537, bytes.size() - at));
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == file_sha256(path));
  CHECK(r.read_back == 0);
}

TEST_CASE("write hash: writes out of order are kept until the prefix reaches them", "[write_hash]") {
  TempDir dir;
  HashWrites on(true, ManifestAlgorithm::Sha256);
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
  HashWrites on(true, ManifestAlgorithm::Sha256);
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
        uint8_t* q =
            direct_place(reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.data()) + kDirectAlign - 1) /
                                                    kDirectAlign * kDirectAlign),
                         at);
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
  HashWrites on(true, ManifestAlgorithm::Sha256);
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
  HashWrites on(true, ManifestAlgorithm::Sha256);
  std::vector<uint8_t> bytes = random_bytes(1 << 20, 16);
  const std::string path = dir.path + "/w.bin";
  OutputFile out(path);
  // Checked in each section (Catch2's --warn NoAssertions wants every leaf section to assert).
  auto whole_file_read_back = [&] {
    Recorded r = commit_and_look(out, path);
    CHECK(r.sha256 == file_sha256(path));
    CHECK(r.read_back == bytes.size());
  };
  SECTION("after it was hashed") {
    out.pwrite_all(bytes.data(), bytes.size(), 0);
    bytes[1000] ^= 0xff;
    out.pwrite_all(bytes.data() + 1000, 1, 1000);
    whole_file_read_back();
  }
  SECTION("while it was kept") {
    out.pwrite_all(bytes.data() + 4096, bytes.size() - 4096, 4096);
    bytes[5000] ^= 0xff;
    out.pwrite_all(bytes.data() + 5000, 10, 5000);
    out.pwrite_all(bytes.data(), 4096, 0);
    whole_file_read_back();
  }
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

// write/tensor_hash: a tensor written as parts in two files, its digest (the parts in order) from
// the files' hashed prefixes, the later part shown first (kept), with no byte read back; a file
// written twice, or a part past the budget, read back, and the digest still the tensor's.
namespace {

std::string sha_of(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  Sha256 h;
  h.update(a.data(), a.size());
  h.update(b.data(), b.size());
  return h.hex();
}

// Part 0 (`p0`) at 100 of a.bin, part 1 (`p1`) at 50 of b.bin, b.bin written first; `twice`: a
// range of a.bin written again. Returns the digest and what was read back to finish it.
std::pair<std::string, uint64_t> two_part_tensor(const TempDir& dir, const std::vector<uint8_t>& p0,
                                                 const std::vector<uint8_t>& p1, bool twice) {
  declare_tensor("w", {p0.size(), p1.size()});
  const std::vector<uint8_t> head = random_bytes(100, 3);
  OutputFile a(dir.path + "/a.bin"), b(dir.path + "/b.bin");
  b.hash_part({"w", 1}, 50, p1.size());
  b.pwrite_all(head.data(), 50, 0);
  b.pwrite_all(p1.data(), p1.size(), 50);
  b.commit();
  a.hash_part({"w", 0}, 100, p0.size());
  a.pwrite_all(head.data(), head.size(), 0);
  a.pwrite_all(p0.data(), p0.size(), 100);
  if (twice) a.pwrite_all(p0.data(), 10, 100);
  a.commit();
  uint64_t read = 0;
  std::optional<std::string> d = declared_tensor_digest("w", read);
  REQUIRE(d);
  return {*d, read};
}

}  // namespace

TEST_CASE("tensor hash: parts in two files, shown out of order, hashed as written", "[write_hash]") {
  TempDir dir;
  HashWrites on(true, ManifestAlgorithm::Sha256);
  const std::vector<uint8_t> p0 = random_bytes(300000, 5), p1 = random_bytes(200000, 6);
  auto [digest, read] = two_part_tensor(dir, p0, p1, false);
  CHECK(digest == sha_of(p0, p1));
  CHECK(read == 0);
}

TEST_CASE("tensor hash: a file written twice, or a part past the budget, is read back", "[write_hash]") {
  const std::vector<uint8_t> p0 = random_bytes(300000, 5), p1 = random_bytes(200000, 6);
  {
    TempDir dir;
    HashWrites on(true, ManifestAlgorithm::Sha256);
    auto [digest, read] = two_part_tensor(dir, p0, p1, true);
    CHECK(digest == sha_of(p0, p1));
    CHECK(read == p0.size() + p1.size());
  }
  {
    TempDir dir;
    HashWrites on(true, ManifestAlgorithm::Sha256);
    REQUIRE(hold_bytes(kHeldBudget - 1000));  // the budget nearly spent: part 1 cannot be kept
    auto [digest, read] = two_part_tensor(dir, p0, p1, false);
    release_bytes(kHeldBudget - 1000);
    CHECK(digest == sha_of(p0, p1));
    CHECK(read == p1.size());
  }
  {
    TempDir dir;
    HashWrites on(true, ManifestAlgorithm::Sha256);
    uint64_t read = 0;
    CHECK_FALSE(declared_tensor_digest("w", read));  // an earlier run's declarations are forgotten
  }
}

TEST_CASE("write hash: a write let go is read back as soon as the prefix reaches it, and the prefix goes on",
          "[write_hash]") {
  TempDir dir;
  HashWrites on(true, ManifestAlgorithm::Sha256);
  const std::vector<uint8_t> bytes = random_bytes(3 << 20, 21);
  const std::string path = dir.path + "/a.bin";
  REQUIRE(hold_bytes(kHeldBudget - 1000));  // nothing can be kept: a write ahead of the prefix is let go
  uint64_t read_back = 0;
  std::string digest;
  {
    OutputFile out(path);
    const uint64_t piece = 1 << 20;
    out.pwrite_all(bytes.data() + piece, piece, piece);  // ahead: let go
    out.pwrite_all(bytes.data(), piece, 0);              // the prefix, then the piece let go, read back
    out.pwrite_all(bytes.data() + 2 * piece, bytes.size() - 2 * piece, 2 * piece);  // continues the prefix
    Recorded r = commit_and_look(out, path);
    digest = r.sha256;
    read_back = r.read_back;
  }
  release_bytes(kHeldBudget - 1000);
  CHECK(digest == file_sha256(path));
  CHECK(read_back == 1 << 20);  // the piece let go, not what followed it
}

// The deal of a hashed output (plan/deal.h: hash_window): four lanes write consecutive windows of
// one file, lane after lane, and take turns at its hashed prefix. With nothing to spare in the
// budget (no write could be kept), every window is still hashed as written, by the lane that
// wrote it, into the file's digest and its tensor's, and nothing is read back.
TEST_CASE("write hash: lanes writing consecutive windows take turns, nothing kept or read back", "[write_hash]") {
  TempDir dir;
  HashWrites on(true, ManifestAlgorithm::Sha256);
  const size_t window = 64 << 10;
  const std::vector<uint64_t> sizes = {300000, 1 << 20, 5 * window + 17};
  const std::vector<uint8_t> head = random_bytes(4096, 30);
  std::vector<std::vector<uint8_t>> tensors;
  for (size_t i = 0; i < sizes.size(); ++i) tensors.push_back(random_bytes(sizes[i], 31 + static_cast<int>(i)));
  const std::string path = dir.path + "/lanes.bin";
  OutputFile out(path);
  out.pwrite_all(head.data(), head.size(), 0);
  struct Window {
    size_t tensor;
    uint64_t at, from, n;  // its place in the file, in its tensor, and length
  };
  std::vector<Window> windows;
  uint64_t at = head.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string key = "t" + std::to_string(i);
    declare_tensor(key, {sizes[i]});
    out.hash_part({key, 0}, at, sizes[i]);
    for (uint64_t from = 0; from < sizes[i]; from += window)
      windows.push_back({i, at + from, from, std::min<uint64_t>(window, sizes[i] - from)});
    at += sizes[i];
  }
  out.take_hash_turns();
  REQUIRE(hold_bytes(kHeldBudget - 1000));  // the budget spent: a write ahead of its turn is let go
  std::vector<std::thread> lanes;
  for (size_t lane = 0; lane < 4; ++lane)
    lanes.emplace_back([&, lane] {
      for (size_t w = lane; w < windows.size(); w += 4) {
        const Window& x = windows[w];
        out.pwrite_all(tensors[x.tensor].data() + x.from, x.n, x.at);
      }
    });
  for (std::thread& t : lanes) t.join();
  release_bytes(kHeldBudget - 1000);
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == file_sha256(path));
  CHECK(r.read_back == 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    uint64_t read = 0;
    std::optional<std::string> d = declared_tensor_digest("t" + std::to_string(i), read);
    REQUIRE(d);
    CHECK(*d == Sha256::of(std::string(tensors[i].begin(), tensors[i].end())));
    CHECK(read == 0);
  }
}

// Rank files written side by side (reshard -w 2): part 0 of a tensor in one file, part 1 in the
// other, each file appended in order by its own thread. With nothing to spare in the budget, the
// thread of part 1 waits for part 0 (being written) and hashes part 1 from its own buffer: nothing
// is read back.
TEST_CASE("tensor hash: a part past the budget waits for the parts before it being written", "[write_hash]") {
  TempDir dir;
  HashWrites on(true, ManifestAlgorithm::Sha256);
  const std::vector<uint8_t> p0 = random_bytes(600000, 7), p1 = random_bytes(500000, 8);
  declare_tensor("w", {p0.size(), p1.size()});
  OutputFile a(dir.path + "/a.bin"), b(dir.path + "/b.bin");
  a.hash_part({"w", 0}, 0, p0.size());
  b.hash_part({"w", 1}, 0, p1.size());
  REQUIRE(hold_bytes(kHeldBudget - 1000));  // part 1 cannot be kept
  std::thread ta([&] {
    for (size_t at = 0; at < p0.size(); at += 65536) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // behind part 1's writer
      a.append(p0.data() + at, std::min<size_t>(65536, p0.size() - at));
    }
  });
  std::thread tb([&] { b.append(p1.data(), p1.size()); });
  ta.join();
  tb.join();
  release_bytes(kHeldBudget - 1000);
  a.commit();
  b.commit();
  uint64_t read = 0;
  std::optional<std::string> d = declared_tensor_digest("w", read);
  REQUIRE(d);
  CHECK(*d == sha_of(p0, p1));
  CHECK(read == 0);
}

// CRC-32 manifests (the default): every write's CRC as it passes, in any order and from any
// thread, joined per file and per tensor; nothing kept, nothing waits; the digest is zlib's CRC-32
// of the file (the tensor's bytes in C order).
namespace {

std::string zlib_crc_hex(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b = {}) {
  uLong c = ::crc32(0L, Z_NULL, 0);
  // (zlib's crc32 of a null buffer is its initial value, 0: an empty piece is left out)
  if (!a.empty()) c = ::crc32(c, a.data(), static_cast<uInt>(a.size()));
  if (!b.empty()) c = ::crc32(c, b.data(), static_cast<uInt>(b.size()));
  return crc32_hex(static_cast<uint32_t>(c));
}

std::string file_crc_hex(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return zlib_crc_hex(all);
}

}  // namespace

TEST_CASE("crc write hash: writes in any order from several threads are joined, and nothing is read back",
          "[write_hash]") {
  TempDir dir;
  HashWrites on(true);  // CRC-32 by default
  REQUIRE(hashing_algorithm() == ManifestAlgorithm::Crc32);
  const std::vector<uint8_t> bytes = random_bytes((5 << 20) + 12345, 21);
  const std::string path = dir.path + "/c.bin";
  OutputFile out(path);
  // Pieces dealt to 4 threads, each writing its own backwards: no write continues another.
  const size_t piece = 77777;
  const std::vector<size_t> all = pieces_of(bytes.size(), piece);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t k = all.size(); k-- > 0;)
        if (k % 4 == t) write_pieces(out, bytes, piece, {k});
    });
  for (auto& th : threads) th.join();
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == zlib_crc_hex(bytes));
  CHECK(r.sha256 == file_crc_hex(path));
  CHECK(r.read_back == 0);
}

TEST_CASE("crc write hash: ranges no write showed are read back, and only those", "[write_hash]") {
  TempDir dir;
  HashWrites on(true, ManifestAlgorithm::Crc32);
  const std::vector<uint8_t> bytes = random_bytes(2 << 20, 22);
  const std::string path = dir.path + "/g.bin";
  OutputFile out(path);
  const size_t a = 300000, b = 700000;  // written behind the hash's back, as copy_file_range does
  out.pwrite_all(bytes.data() + b, bytes.size() - b, b);
  REQUIRE(::pwrite(out.fd(), bytes.data() + a, b - a, static_cast<off_t>(a)) == static_cast<ssize_t>(b - a));
  out.pwrite_all(bytes.data(), a, 0);
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == zlib_crc_hex(bytes));
  CHECK(r.read_back == b - a);
}

TEST_CASE("crc write hash: a range written twice makes the whole file read back", "[write_hash]") {
  TempDir dir;
  HashWrites on(true, ManifestAlgorithm::Crc32);
  std::vector<uint8_t> bytes = random_bytes(1 << 20, 23);
  const std::string path = dir.path + "/w.bin";
  OutputFile out(path);
  out.pwrite_all(bytes.data(), bytes.size(), 0);
  bytes[1000] ^= 0xff;
  out.pwrite_all(bytes.data() + 1000, 1, 1000);
  Recorded r = commit_and_look(out, path);
  CHECK(r.sha256 == zlib_crc_hex(bytes));  // the file as it is, the second write's byte in it
  CHECK(r.read_back == bytes.size());
}

TEST_CASE("crc tensor hash: parts in two files out of order are joined, and a file written twice is read back",
          "[write_hash]") {
  const std::vector<uint8_t> p0 = random_bytes(300000, 5), p1 = random_bytes(200000, 6);
  {
    TempDir dir;
    HashWrites on(true);
    auto [digest, read] = two_part_tensor(dir, p0, p1, false);
    CHECK(digest == zlib_crc_hex(p0, p1));
    CHECK(read == 0);
  }
  {
    TempDir dir;
    HashWrites on(true);
    auto [digest, read] = two_part_tensor(dir, p0, p1, true);
    CHECK(digest == zlib_crc_hex(p0, p1));
    CHECK(read == p0.size() + p1.size());
  }
}
