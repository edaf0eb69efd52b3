// Corruption test for the `.metadata` parser: every fixture's `.metadata` (written by real torch),
// cut at every length, with every byte inverted, and with thousands of seeded random mutations,
// goes through dcpctl::parse_metadata. Every outcome must be a success or a FormatError /
// UnsupportedError whose message names the source; anything else (another exception type, a
// message without the file name, an allocation beyond kMaxAlloc, a parse using more than
// kMaxCpuSeconds of CPU) fails the test. ASan/UBSan turn crashes and undefined behaviour into failures.
//
// Whatever still parses is also fed to inspect_report (chunk geometry, sharding description,
// JSON building), since that is what consumes a parsed Metadata in `dcpctl inspect`.
//
// --stride N keeps every N-th cut and byte flip (and the last byte), a strided sample for the fast
// test tier (ctest -L fast); the full run (stride 1) is in the slow tier.
//
// usage: corruption_metadata FIXTURES_DIR [--random N] [--seed S] [--only CASE] [--stride N]
#include <dirent.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "meta/checkpoint.h"
#include "meta/metadata.h"
#include "report/inspect.h"

// --- the largest single allocation, to catch "allocate what the file claims" bugs ------------
// Replacing the plain operator new/delete pair is allowed by the standard and coexists with
// ASan (which intercepts the malloc underneath).
namespace {
std::atomic<size_t> g_max_alloc{0};
void note_alloc(size_t n) {
  size_t cur = g_max_alloc.load(std::memory_order_relaxed);
  while (n > cur && !g_max_alloc.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
  }
}
void* checked_malloc(size_t n) {
  note_alloc(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t n) {
  return checked_malloc(n);
}
void* operator new[](size_t n) {
  return checked_malloc(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}

namespace {

using dcpctl::ByteSpan;

constexpr size_t kMaxAlloc = size_t{256} << 20;  // inputs are < 64 KiB; 256 MiB is "huge"
// One parse of a < 64 KiB file, in CPU seconds of this (single-threaded) process: a hang guard that
// a loaded machine cannot trip. Wall clock did: one of 95,559 parses took 2.11 s of wall clock on a
// 2-core CI machine shared with builds, while parses take milliseconds of CPU.
constexpr double kMaxCpuSeconds = 2.0;

// CPU time this process has used (all threads), in seconds.
double cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Tally {
  uint64_t ok = 0, format = 0, unsupported = 0;
  uint64_t other = 0;  // any other exception: a failure
  double max_cpu_seconds = 0;
};

std::vector<std::string> g_failures;  // the first 50, printed at the end
uint64_t g_failure_count = 0;

void fail(const std::string& what) {
  ++g_failure_count;
  if (g_failures.size() < 50) g_failures.push_back(what);
}

std::string hex_prefix(const std::string& bytes) {
  std::string s;
  char b[4];
  for (size_t i = 0; i < bytes.size() && i < 24; ++i) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(bytes[i]));
    s += b;
  }
  return s;
}

// The report of one parse, or the error it ended with (its kind and message).
std::string outcome(const std::string& bytes, const std::string& source, const std::string& dir, bool fold,
                    bool templates = true) {
  dcpctl::Checkpoint ck;
  ck.dir = dir;
  ck.metadata_path = source;
  ck.metadata_bytes = bytes.size();
  dcpctl::MetadataParseOptions po;
  po.fold = fold;
  po.byte_templates = templates;
  ck.md = dcpctl::parse_metadata(ByteSpan(bytes), source, po);
  for (const auto& rel : ck.md.files) {
    dcpctl::DataFileInfo fi;
    fi.relative_path = rel;
    fi.size = 1u << 20;
    ck.files.push_back(fi);
  }
  dcpctl::InspectOptions io;
  io.chunks = true;
  return dcpctl::inspect_report(ck, io).dump();
}

std::string outcome_or_error(const std::string& bytes, const std::string& source, const std::string& dir, bool fold,
                             bool templates = true) {
  try {
    return outcome(bytes, source, dir, fold, templates);
  } catch (const std::exception& e) {
    return std::string(typeid(e).name()) + ": " + e.what();
  }
}

// Feeds one input through the parser (and, on success, through inspect_report). The parser folds
// chunks and storage entries into records as it decodes; the same input parsed without folding
// must give the same report, or fail too. (The expansion budget is charged a little differently
// on the two paths, so its refusal may come on one path only.) The VM's byte templates of flat
// objects only replace the flat path's opcode walk: without them, the same report or the same
// error, always.
void run_one(const std::string& bytes, const std::string& source, const std::string& dir, const std::string& label,
             Tally& t) {
  const double start = cpu_seconds();
  const std::string without = outcome_or_error(bytes, source, dir, true, false);
  auto same_without_templates = [&](const std::string& with) {
    if (with != without)
      fail(label + ": byte templates change the outcome (with: " + with.substr(0, 200) +
           "; without: " + without.substr(0, 200) + ")");
  };
  try {
    std::string folded = outcome(bytes, source, dir, true);
    same_without_templates(folded);
    std::string plain = outcome_or_error(bytes, source, dir, false);
    if (plain != folded && plain.find("refusing to expand it") == std::string::npos)
      fail(label + ": folded and generic parses differ (generic: " + plain.substr(0, 300) + ")");
    ++t.ok;
  } catch (const dcpctl::FormatError& e) {
    same_without_templates(std::string(typeid(e).name()) + ": " + e.what());
    ++t.format;
    if (std::string(e.what()).find(source) == std::string::npos)
      fail(label + ": FormatError does not name the source: " + e.what());
    // Both paths must refuse (they may notice different faults first: a second BUILD on a folded
    // record is refused at once, while the generic path overwrites the state and goes on).
    std::string plain = outcome_or_error(bytes, source, dir, false);
    if (plain.rfind(typeid(dcpctl::FormatError).name(), 0) != 0 &&
        plain.rfind(typeid(dcpctl::UnsupportedError).name(), 0) != 0)
      fail(label + ": folded parse failed with \"" + e.what() + "\", generic succeeded");
  } catch (const dcpctl::UnsupportedError& e) {
    same_without_templates(std::string(typeid(e).name()) + ": " + e.what());
    ++t.unsupported;
    if (std::string(e.what()).find(source) == std::string::npos)
      fail(label + ": UnsupportedError does not name the source: " + e.what());
  } catch (const dcpctl::Error& e) {
    same_without_templates(std::string(typeid(e).name()) + ": " + e.what());
    ++t.other;
    fail(label + ": unexpected dcpctl::Error subclass: " + e.what());
  } catch (const std::exception& e) {
    ++t.other;
    fail(label + ": non-dcpctl exception " + typeid(e).name() + ": " + e.what() + " (input starts " +
         hex_prefix(bytes) + ")");
  }
  const double secs = cpu_seconds() - start;
  t.max_cpu_seconds = std::max(t.max_cpu_seconds, secs);
  if (secs > kMaxCpuSeconds) {
    fail(label + ": took " + std::to_string(secs) + " s of CPU");
  }
  size_t peak = g_max_alloc.exchange(0);
  if (peak > kMaxAlloc) {
    fail(label + ": allocated " + std::to_string(peak) + " bytes at once");
  }
}

// Values that tend to break length and index arithmetic.
constexpr uint64_t kInteresting[] = {0,          1,          0x7f,       0x80,       0xff,       0x100,
                                     0x7fff,     0xffff,     0x7fffffff, 0x80000000, 0xffffffff, 1ull << 32,
                                     1ull << 40, 1ull << 62, 1ull << 63, ~0ull};

// The opcodes a torch `.metadata` uses, plus a few it does not; swapping one for another keeps
// the stream plausible enough to reach deep into the VM.
constexpr uint8_t kOpcodes[] = {0x80, 0x95, 0x8c, 0x94, 0x93, ')', 0x81, '}',  '(',  'u',  'b',  0x85, 0x86, 0x87,
                                't',  'R',  'h',  'j',  'K',  'M', 'J',  0x89, 0x88, 'N',  ']',  'a',  'e',  '.',
                                'X',  0x8a, 0x8d, 's',  'q',  'r', 'g',  'p',  'c',  0x92, 0x8f, 0x90, 0x91, '0',
                                '1',  '2',  'Q',  'P',  'l',  'd', 'o',  'i',  0x82, 0x97, 0x8e, 0x96, 'C'};

std::string mutate(const std::string& in, std::mt19937_64& rng) {
  std::string s = in;
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int rounds = 1 + static_cast<int>(pick(4));  // single and multi-mutation inputs
  for (int r = 0; r < rounds && !s.empty(); ++r) {
    size_t at = pick(s.size());
    switch (pick(9)) {
      case 0: s[at] = static_cast<char>(s[at] ^ (1 << pick(8))); break;
      case 1: s[at] = static_cast<char>(rng()); break;
      case 2: s[at] = static_cast<char>(kInteresting[pick(5)]); break;
      case 3: {  // a 1/2/4/8-byte little-endian length or index
        size_t w = size_t{1} << pick(4);
        uint64_t v = kInteresting[pick(std::size(kInteresting))];
        for (size_t k = 0; k < w && at + k < s.size(); ++k) s[at + k] = static_cast<char>(v >> (8 * k));
        break;
      }
      case 4: s.erase(at, 1 + pick(16)); break;
      case 5: {
        std::string ins(1 + pick(16), '\0');
        for (auto& c : ins) c = static_cast<char>(rng());
        s.insert(at, ins);
        break;
      }
      case 6: {  // duplicate or move a range from elsewhere in the file
        size_t from = pick(s.size());
        size_t n = std::min<size_t>(1 + pick(64), s.size() - from);
        std::string piece = s.substr(from, n);
        if (rng() & 1)
          s.insert(at, piece);
        else
          s.replace(at, std::min(n, s.size() - at), piece);
        break;
      }
      case 7: s[at] = static_cast<char>(kOpcodes[pick(std::size(kOpcodes))]); break;
      case 8: s.resize(at); break;
    }
  }
  return s;
}

std::vector<std::string> fixture_cases(const std::string& root) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(root.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name[0] == '.') continue;
      std::ifstream probe(root + "/" + name + "/ckpt/.metadata", std::ios::binary);
      if (probe) out.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FIXTURES_DIR [--random N] [--seed S] [--only CASE] [--stride N]\n", argv[0]);
    return 2;
  }
  std::string root = argv[1];
  uint64_t random_per_file = 3000, seed = 20240611, stride = 1;
  std::string only;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--random")
      random_per_file = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--only")
      only = argv[i + 1];
    else if (a == "--stride")
      stride = std::max<uint64_t>(1, std::strtoull(argv[i + 1], nullptr, 10));
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  // Every stride-th position, and the last one (a cut one byte short, the final STOP flipped).
  auto sampled = [stride](size_t i, size_t n) { return i % stride == 0 || i + 1 == n; };

  std::vector<std::string> cases = fixture_cases(root);
  if (cases.empty()) {
    std::fprintf(stderr, "no fixtures with ckpt/.metadata under %s\n", root.c_str());
    return 1;
  }
  Tally total;
  uint64_t inputs = 0;
  size_t done = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (const std::string& c : cases) {
    if (!only.empty() && c != only) continue;
    ++done;
    std::string dir = root + "/" + c + "/ckpt";
    std::string path = dir + "/.metadata";
    std::ifstream f(path, std::ios::binary);
    std::string orig((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // The source name is distinctive so that "the message names the source" means something.
    std::string source = "corrupt/" + c + "/.metadata";
    Tally t;

    run_one(orig, source, dir, c + " original", t);
    if (t.ok != 1) fail(c + ": the unmodified fixture does not parse");

    for (size_t n = 0; n < orig.size(); ++n)
      if (sampled(n, orig.size())) run_one(orig.substr(0, n), source, dir, c + " cut at " + std::to_string(n), t);

    std::string flipped = orig;
    for (size_t i = 0; i < orig.size(); ++i) {
      if (!sampled(i, orig.size())) continue;
      flipped[i] = static_cast<char>(orig[i] ^ 0xFF);
      run_one(flipped, source, dir, c + " byte " + std::to_string(i) + " ^ 0xFF", t);
      flipped[i] = orig[i];
    }

    std::mt19937_64 rng(seed ^ std::hash<std::string>{}(c));
    for (uint64_t k = 0; k < random_per_file; ++k)
      run_one(mutate(orig, rng), source, dir,
              c + " random mutation " + std::to_string(k) + " (seed " + std::to_string(seed) + ")", t);

    uint64_t n = t.ok + t.format + t.unsupported + t.other;
    std::printf(
        "%-24s %6zu bytes  %7llu inputs: %6llu ok  %7llu FormatError  %5llu UnsupportedError  %llu other  (slowest "
        "%.3f CPU-s)\n",
        c.c_str(), orig.size(), static_cast<unsigned long long>(n), static_cast<unsigned long long>(t.ok),
        static_cast<unsigned long long>(t.format), static_cast<unsigned long long>(t.unsupported),
        static_cast<unsigned long long>(t.other), t.max_cpu_seconds);
    std::fflush(stdout);
    inputs += n;
    total.ok += t.ok;
    total.format += t.format;
    total.unsupported += t.unsupported;
    total.other += t.other;
    total.max_cpu_seconds = std::max(total.max_cpu_seconds, t.max_cpu_seconds);
  }
  if (done == 0) {
    std::fprintf(stderr, "no fixture named %s under %s\n", only.c_str(), root.c_str());
    return 1;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "total: %llu inputs in %.1f s: %llu ok, %llu FormatError, %llu UnsupportedError, %zu failures; "
      "slowest input %.3f CPU-s; peak RSS %ld MiB\n",
      static_cast<unsigned long long>(inputs), secs, static_cast<unsigned long long>(total.ok),
      static_cast<unsigned long long>(total.format), static_cast<unsigned long long>(total.unsupported),
      static_cast<size_t>(g_failure_count), total.max_cpu_seconds, ru.ru_maxrss / 1024);
  for (const auto& f : g_failures) std::printf("FAIL %s\n", f.c_str());
  // Each input judged is a check: the CTest test's ledger (tests/counted.sh, tests/ledger.py) gets the count.
  if (const char* ledger = std::getenv("DCPCTL_CHECK_LEDGER"); ledger != nullptr && *ledger != '\0')
    std::ofstream(ledger, std::ios::app) << "checks " << inputs << " .metadata inputs judged\n";
  return g_failure_count == 0 ? 0 : 1;
}
