// write/output's writes past the page cache: OutputFile::pwrite_direct (aligned blocks direct,
// edges buffered, several threads writing neighbouring ranges of one file) and stage_appends (a
// sequential writer's appends collected into aligned blocks and written in the background). The
// file must hold exactly the bytes written, at every alignment, on a filesystem where O_DIRECT
// bypasses the page cache (the build tree's) and on tmpfs (which refuses O_DIRECT before Linux
// 6.6 and is the page cache after); where O_DIRECT bypasses the cache the blocks
// written direct must not be in the page cache (else the direct path was not the one tested: the
// build tree is on ext4 in CI); and
// a write that fails in the background must surface as an error, not be lost.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "random_bytes.h"
#include "store/file.h"
#include "util/error.h"
#include "write/leftovers.h"
#include "write/output.h"

using namespace dcpctl;

namespace {

std::vector<uint8_t> slurp(const std::string& path) {
  ReadFile f(path);
  std::vector<uint8_t> v(f.size());
  if (!v.empty()) f.read_at(0, v.data(), v.size());
  return v;
}

// The first offset where `got` and `want` differ (their sizes equal), or -1: a failure names a
// place instead of printing megabytes.
long first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  auto m = std::mismatch(got.begin(), got.end(), want.begin());
  return m.first == got.end() ? -1 : static_cast<long>(m.first - got.begin());
}

struct Aligned {
  std::unique_ptr<uint8_t, decltype(&std::free)> p{nullptr, &std::free};
  explicit Aligned(size_t n) {
    p.reset(
        static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, (n + kDirectAlign - 1) / kDirectAlign * kDirectAlign)));
  }
};

// Whether an O_DIRECT write in `dir` leaves the page cache alone (ext4, xfs; not tmpfs, which
// takes O_DIRECT since Linux 6.6 but is the page cache). Only there can a test tell that a write
// went past the cache.
bool bypasses_cache(const std::string& dir) {
  std::string p = dir + "/dcpctl-test-probe-XXXXXX";
  int fd = ::mkstemp(p.data());
  REQUIRE(fd >= 0);
  ::close(fd);
  fd = ::open(p.c_str(), O_WRONLY | O_DIRECT);
  bool ok = fd >= 0;
  if (ok) {
    Aligned b(kDirectAlign);
    std::memset(b.p.get(), 0, kDirectAlign);
    ok = ::pwrite(fd, b.p.get(), kDirectAlign, 0) == static_cast<ssize_t>(kDirectAlign);
    ::close(fd);
    ok = ok && !ReadFile(p).cached(0, kDirectAlign);
  }
  std::remove(p.c_str());
  if (!ok) WARN("O_DIRECT writes in " << dir << " go through the page cache: not checking that they bypass it");
  return ok;
}

// How many of the blocks wholly inside [offset, offset + n) of `path` are in the page cache.
size_t cached_blocks(const std::string& path, uint64_t offset, uint64_t n) {
  ReadFile f(path);
  size_t count = 0;
  for (uint64_t b = (offset + kDirectAlign - 1) / kDirectAlign * kDirectAlign; b + kDirectAlign <= offset + n;
       b += kDirectAlign)
    count += f.cached(b, kDirectAlign);
  return count;
}

// A file cut into neighbouring ranges at unaligned places (and some aligned ones), written by 4
// threads at once with pwrite_direct, each range's bytes placed (direct_place) or, every third
// range, not placed (written buffered instead).
void check_pwrite_direct(const std::string& dir) {
  CAPTURE(dir);
  const size_t size = 9 * 1024 * 1024 + 777;
  std::vector<uint8_t> want = random_bytes(size, 3);
  std::mt19937 rng(5);
  std::vector<uint64_t> cuts = {0, 1, 4095, 4096, 4097, 8192, 100000};
  while (cuts.back() < size) cuts.push_back(std::min<uint64_t>(size, cuts.back() + 1 + rng() % (1024 * 1024)));
  std::string path = dir + "/dcpctl-test-out.bin";
  std::remove(path.c_str());
  {
    OutputFile out(path);
    out.reserve(size);  // as the safetensors writer does
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < 4; ++t)
      ts.emplace_back([&, t] {
        for (size_t i = t; i + 1 < cuts.size(); i += 4) {
          uint64_t at = cuts[i], n = cuts[i + 1] - at;
          Aligned buf(n + 2 * kDirectAlign);
          uint8_t* q = i % 3 == 2 ? buf.p.get() + (at + 1) % kDirectAlign : direct_place(buf.p.get(), at);
          std::memcpy(q, want.data() + at, n);
          out.pwrite_direct(q, n, at);
        }
      });
    for (auto& t : ts) t.join();
    out.commit();
  }
  std::vector<uint8_t> got = slurp(path);
  REQUIRE(got.size() == size);
  CHECK(first_difference(got, want) == -1);
  if (bypasses_cache(dir)) {
    // The largest placed range: its inner blocks went past the cache (slurp above read through
    // it, so rewrite and look before reading).
    std::remove(path.c_str());
    OutputFile out(path);
    uint64_t at = 4096 * 3 + 123, n = 2 * 1024 * 1024 + 5;
    Aligned buf(n + 2 * kDirectAlign);
    uint8_t* q = direct_place(buf.p.get(), at);
    std::memcpy(q, want.data(), n);
    out.pwrite_direct(q, n, at);
    out.commit();
    CHECK(cached_blocks(path, at, n) == 0);
  }
  std::remove(path.c_str());
}

// Appends of every size (one byte, odd sizes, several blocks at once) through stage_appends,
// which is turned on mid-block after some plain appends.
void check_staged_appends(const std::string& dir, uint64_t block) {
  CAPTURE(dir, block);
  const size_t size = 5 * block + 12345;
  std::vector<uint8_t> want = random_bytes(size, 9);
  std::string path = dir + "/dcpctl-test-append.bin";
  std::remove(path.c_str());
  {
    OutputFile out(path);
    out.append(want.data(), 1000);  // what precedes staging (rank 0's non-tensor items)
    out.stage_appends(block);
    std::mt19937 rng(13);
    size_t at = 1000;
    std::vector<size_t> sizes = {1, 4095, 4097, block, 3 * block + 1, 7};
    for (size_t i = 0; at < size; ++i) {
      size_t n = std::min(size - at, i < sizes.size() ? sizes[i] : 1 + rng() % (block / 2));
      out.append(want.data() + at, n);
      at += n;
      REQUIRE(out.appended() == at);
    }
    out.commit();
  }
  std::vector<uint8_t> got = slurp(path);
  REQUIRE(got.size() == size);
  CHECK(first_difference(got, want) == -1);
  std::remove(path.c_str());
  if (bypasses_cache(dir)) {
    OutputFile out(path);
    out.stage_appends(block);
    out.append(want.data(), size);
    out.commit();
    CHECK(cached_blocks(path, 0, size / block * block) == 0);
    std::remove(path.c_str());
  }
}

}  // namespace

TEST_CASE(
    "output: pwrite_direct writes exactly its range from several threads, on the build tree's filesystem and on "
    "tmpfs") {
  check_pwrite_direct(".");  // the build tree: ext4 in CI, where O_DIRECT bypasses the page cache
  if (is_directory("/dev/shm")) check_pwrite_direct("/dev/shm");
}

TEST_CASE("output: staged appends write exactly what was appended, on the build tree's filesystem and on tmpfs") {
  for (uint64_t block : {uint64_t{kDirectAlign}, uint64_t{64 * 1024}, uint64_t{1024 * 1024}}) {
    check_staged_appends(".", block);
    if (is_directory("/dev/shm")) check_staged_appends("/dev/shm", block);
  }
}

TEST_CASE("output: a staged write that fails in the background is an error, not lost") {
  // A child process, because the file-size limit (ulimit -f) is process-wide: appends past a 1 MiB
  // limit must throw an IoError naming the file, and the temporary must be gone. 3 MiB fails in
  // a block written while later ones fill (found by a later append); 1.25 MiB in the last block,
  // found only when commit() waits for it.
  for (size_t total : {size_t{3} << 20, size_t{5} << 18}) {
    CAPTURE(total);
    std::string path = "./dcpctl-test-efbig.bin";
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit rl {
        1 << 20, 1 << 20
      };
      ::setrlimit(RLIMIT_FSIZE, &rl);
      std::vector<uint8_t> bytes = random_bytes(total, 1);
      int code = 1;
      try {
        OutputFile out(path);
        out.stage_appends(256 * 1024);
        for (size_t at = 0; at < bytes.size(); at += 65536)
          out.append(bytes.data() + at, std::min<size_t>(65536, bytes.size() - at));
        out.commit();
      } catch (const IoError& e) {
        code = std::string(e.what()).find("dcpctl-test-efbig.bin") != std::string::npos ? 0 : 2;
      } catch (...) {
        code = 3;
      }
      if (code == 0 && path_exists(temp_name(path))) code = 4;
      ::_exit(code);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK_FALSE(path_exists(path));
    std::remove(path.c_str());
  }
}

namespace {

std::string make_temp_dir() {
  char tmpl[] = "/tmp/dcpctl-leftovers-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

void touch(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs("x", f);
  std::fclose(f);
}

// A PID that no process holds now: a child that has exited and been reaped.
long long dead_pid() {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST_CASE("leftovers: a temporary's name records its process, start time and host") {
  std::string t = temp_name("/some/dir/model.safetensors");
  CHECK(t.rfind("/some/dir/.model.safetensors.dcpctl-tmp-" + std::to_string(::getpid()) + "-", 0) == 0);
  CHECK(t.find('@') != std::string::npos);
  CHECK(temp_name("/some/dir/hf/") == temp_name("/some/dir/hf"));
  std::string a = aside_name("/some/dir/hf");
  CHECK(a.find("-old@") != std::string::npos);
}

TEST_CASE("leftovers: only a dead process's temporary of this host, for this output, is removable") {
  std::string dir = make_temp_dir();
  std::string out = dir + "/out.safetensors";
  std::string mine = temp_name(out);  // this process: live
  std::string host = mine.substr(mine.find('@') + 1);
  long long gone = dead_pid();
  std::string dead = dir + "/.out.safetensors.dcpctl-tmp-" + std::to_string(gone) + "-1@" + host;
  std::string dead_dir = dir + "/.out.safetensors.dcpctl-tmp-" + std::to_string(gone) + "-2@" + host;
  std::string dead_manifest =
      dir + "/.out.safetensors.dcpctl-manifest.json.dcpctl-tmp-" + std::to_string(gone) + "-1@" + host;
  // PID 1 runs, but did not start at that tick (317 years after boot): its PID was reused.
  std::string reused = dir + "/.out.safetensors.dcpctl-tmp-1-99999999999@" + host;
  std::string other = dir + "/.out.safetensors.dcpctl-tmp-" + std::to_string(gone) + "-1@another-node";
  std::string legacy = dir + "/.out.safetensors.dcpctl-tmp-" + std::to_string(gone);
  std::string aside = dir + "/.out.safetensors.dcpctl-tmp-" + std::to_string(gone) + "-1-old@" + host;
  std::string someone_else =
      dir + "/.out.safetensors.dcpctl-tmp-" + std::to_string(gone) + "-1@" + host + "/x";  // not a name at all
  std::string not_ours = dir + "/.other.safetensors.dcpctl-tmp-" + std::to_string(gone) + "-1@" + host;
  std::string junk = dir + "/.out.safetensors.dcpctl-tmp-12ab";
  for (const auto& p : {mine, dead, dead_manifest, reused, other, legacy, aside, not_ours, junk}) touch(p);
  REQUIRE(::mkdir(dead_dir.c_str(), 0755) == 0);
  touch(dead_dir + "/shard-1.safetensors");
  REQUIRE(::symlink("/etc/passwd", (dead_dir + "/link").c_str()) == 0);
  (void)someone_else;

  std::vector<Leftover> found = find_leftovers(out);
  std::map<std::string, Leftover::Owner> owner;
  std::map<std::string, bool> removable;
  for (const auto& l : found) {
    owner[l.path] = l.owner;
    removable[l.path] = l.removable();
  }
  CHECK(found.size() == 8);  // not .other..., not the junk name
  CHECK(owner.count(not_ours) == 0);
  CHECK(owner.count(junk) == 0);
  CHECK(owner[mine] == Leftover::Owner::Live);
  CHECK(owner[dead] == Leftover::Owner::Gone);
  CHECK(owner[dead_dir] == Leftover::Owner::Gone);
  CHECK(owner[dead_manifest] == Leftover::Owner::Gone);
  CHECK(owner[reused] == Leftover::Owner::Gone);
  CHECK(owner[other] == Leftover::Owner::OtherHost);
  CHECK(owner[legacy] == Leftover::Owner::Unknown);
  CHECK(owner[aside] == Leftover::Owner::Gone);
  CHECK_FALSE(removable[aside]);
  CHECK_FALSE(removable[mine]);
  CHECK_FALSE(removable[other]);
  CHECK_FALSE(removable[legacy]);

  std::vector<std::string> notes;
  clear_dead_temporaries(out, true, [&](const std::string& s) { notes.push_back(s); });
  CHECK(notes.size() == 8);
  CHECK(path_exists(dead));  // a dry run removes nothing
  notes.clear();
  clear_dead_temporaries(out, false, [&](const std::string& s) { notes.push_back(s); });
  for (const auto& p : {dead, dead_dir, dead_manifest, reused}) CHECK_FALSE(path_exists(p));
  for (const auto& p : {mine, other, legacy, aside, not_ours, junk}) CHECK(path_exists(p));
  CHECK(path_exists("/etc/passwd"));
  size_t said_removed = 0;
  for (const auto& n : notes) said_removed += n.rfind("removed ", 0) == 0;
  CHECK(said_removed == 4);
  // prune's view: every name of the folder
  CHECK(find_leftovers_in(dir).size() == 5);  // mine, other, legacy, aside, not_ours (now removable)
  for (const auto& p : {mine, other, legacy, aside, not_ours, junk}) std::remove(p.c_str());
  ::rmdir(dir.c_str());
}
