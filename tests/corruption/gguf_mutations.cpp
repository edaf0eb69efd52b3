// Corruption test for the GGUF reader (gguf/reader.cpp), which parses files from the internet:
// real GGUF files (tests/corruption/gguf_corruption.py hands them over: one written by gguf-py's
// GGUFWriter, the writer llama.cpp's converter writes with, and the converter's own vocabulary
// files from the llama-cpp-python sdist) cut at every length, each byte of the header, the keys
// and the tensor infos mutated, and seeded random mutations anywhere before the data. Each damaged
// file goes through the reader (gguf::open_gguf), and what opens through verify's architecture
// check and inspect's report, as `inspect` and `verify` would take it. The rules:
//   - a cut before the end of the last tensor's data never reads clean: a FormatError naming the
//     file and the byte offset where the file broke, or a checkpoint whose incomplete findings or
//     problems say what is missing (verify's exit 3 either way);
//   - a mutation may open (a string's character changed is still a valid file) and may be refused
//     as unsupported (a type id changed to one dcpctl does not know: exit 5), but never with an
//     exception other than dcpctl's FormatError or UnsupportedError, each naming the file; never a
//     crash (ASan and UBSan in the sanitizer tree), an allocation above kMaxAlloc, or more than
//     kMaxCpuSeconds of CPU for one file.
// --stride N keeps every N-th cut and every N-th mutated byte before the data (and the last cut);
// --data-stride N every N-th cut inside the tensor data (default 4099: past the infos a cut only
// moves which tensor is short); --random N seeded random mutations of up to 8 bytes each, before
// the data; --header-bytes N mutates only the first N bytes (a vocabulary file is all keys).
//
// usage: corruption_gguf FILE... [--stride N] [--data-stride N] [--random N] [--seed S] [--header-bytes N]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

#include "gguf/arch_check.h"
#include "gguf/reader.h"
#include "meta/checkpoint.h"
#include "report/inspect.h"
#include "util/error.h"

// --- the largest single allocation, to catch "allocate what the file claims" bugs ------------
namespace {
std::atomic<size_t> g_max_alloc{0};
void* checked_malloc(size_t n) {
  size_t cur = g_max_alloc.load(std::memory_order_relaxed);
  while (n > cur && !g_max_alloc.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
  }
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

using namespace dcpctl;

// The reader walks the header through a 1 MiB window and keeps each key's value as text (an array
// of more than 8 as its length and type); a damaged count may not make it allocate more.
constexpr size_t kMaxAlloc = 16u << 20;
constexpr double kMaxCpuSeconds = 10;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "corruption_gguf: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Sweep {
  std::string path;  // where each damaged copy is written (NAME.gguf in a directory of its own)
  uint64_t runs = 0, refused = 0, opened = 0, unsupported = 0, failures = 0;

  void fail(const std::string& what, const std::string& why) {
    if (++failures <= 20) std::fprintf(stderr, "FAIL %s: %s\n", what.c_str(), why.c_str());
  }

  // One damaged file. `must_fail`: a cut before the data's end, which may not read clean.
  void run(const std::vector<uint8_t>& bytes, size_t size, const std::string& what, bool must_fail) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(size));
    }
    ++runs;
    g_max_alloc = 0;
    const double t0 = cpu_seconds();
    try {
      Checkpoint ck = gguf::open_gguf(path);
      LayoutFindings arch = check_gguf_arch(ck);
      InspectOptions io;
      io.chunks = true;
      inspect_report(ck, io);
      ++opened;
      if (must_fail && ck.incomplete.empty() && ck.md.problems.empty())
        fail(what, "read clean: " + std::to_string(ck.md.tensors.size()) + " tensors, nothing incomplete");
      (void)arch;
    } catch (const FormatError& e) {
      ++refused;
      if (e.where().file != path) fail(what, std::string("a FormatError not naming the file: ") + e.what());
      if (must_fail && !e.where().offset) fail(what, std::string("a FormatError naming no offset: ") + e.what());
    } catch (const UnsupportedError& e) {
      ++unsupported;
      if (must_fail) fail(what, std::string("a cut file called unsupported: ") + e.what());
      if (e.where().file != path) fail(what, std::string("an UnsupportedError not naming the file: ") + e.what());
    } catch (const std::exception& e) {
      fail(what, std::string(typeid(e).name()) + ": " + e.what());
    }
    if (g_max_alloc > kMaxAlloc) fail(what, "an allocation of " + std::to_string(g_max_alloc.load()) + " bytes");
    if (cpu_seconds() - t0 > kMaxCpuSeconds) fail(what, "more than " + std::to_string(kMaxCpuSeconds) + " s of CPU");
  }
};

uint64_t arg_number(int argc, char** argv, int& i) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "corruption_gguf: %s needs a number\n", argv[i]);
    std::exit(2);
  }
  return std::strtoull(argv[++i], nullptr, 10);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  uint64_t stride = 1, data_stride = 4099, random = 0, seed = 1, header_bytes = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--stride")
      stride = std::max<uint64_t>(1, arg_number(argc, argv, i));
    else if (a == "--data-stride")
      data_stride = std::max<uint64_t>(1, arg_number(argc, argv, i));
    else if (a == "--random")
      random = arg_number(argc, argv, i);
    else if (a == "--seed")
      seed = arg_number(argc, argv, i);
    else if (a == "--header-bytes")
      header_bytes = arg_number(argc, argv, i);
    else
      files.push_back(a);
  }
  if (files.empty()) {
    std::fprintf(
        stderr,
        "usage: corruption_gguf FILE... [--stride N] [--data-stride N] [--random N] [--seed S] [--header-bytes N]\n");
    return 2;
  }
  char dir_template[] = "/tmp/dcpctl-gguf-sweep-XXXXXX";
  if (!mkdtemp(dir_template)) {
    std::perror("mkdtemp");
    return 2;
  }
  Sweep s;
  s.path = std::string(dir_template) + "/damaged.gguf";
  std::mt19937_64 rng(seed);
  for (const std::string& file : files) {
    const std::vector<uint8_t> bytes = read_file(file);
    // The intact file must open clean: it is the reference every damage is measured from.
    uint64_t data_end = 0, data_start = bytes.size();
    try {
      Checkpoint ck = gguf::open_gguf(file);
      if (!ck.incomplete.empty() || !ck.md.problems.empty()) {
        std::fprintf(stderr, "corruption_gguf: %s does not read clean as written\n", file.c_str());
        return 1;
      }
      for (const auto& t : ck.md.tensors)
        for (const auto& st : t.storage) {
          data_end = std::max<uint64_t>(data_end, st.offset + st.length);
          data_start = std::min<uint64_t>(data_start, st.offset);
        }
      if (ck.md.tensors.empty()) data_end = data_start = bytes.size();  // a vocabulary file: all header
    } catch (const std::exception& e) {
      std::fprintf(stderr, "corruption_gguf: %s does not open as written: %s\n", file.c_str(), e.what());
      return 1;
    }
    const uint64_t before = s.runs;
    // Every cut (a strict prefix): before the data's end it may not read clean.
    for (uint64_t n = 0; n < bytes.size(); n += n < data_start ? stride : std::max(stride, data_stride))
      s.run(bytes, n, file + " cut at " + std::to_string(n), n < data_end);
    if (bytes.size() > 1 && (bytes.size() - 1) % stride != 0)
      s.run(bytes, bytes.size() - 1, file + " cut at the last byte", bytes.size() - 1 < data_end);
    // Each byte before the data (the header, keys and tensor infos), inverted, zeroed and set to 0xff.
    const uint64_t header = header_bytes ? std::min<uint64_t>(header_bytes, bytes.size()) : data_start;
    std::vector<uint8_t> m = bytes;
    for (uint64_t i = 0; i < header; i += stride) {
      for (uint8_t v :
           {static_cast<uint8_t>(~bytes[i]), uint8_t{0}, uint8_t{0xff}, static_cast<uint8_t>(bytes[i] + 1)}) {
        if (v == bytes[i]) continue;
        m[i] = v;
        s.run(m, m.size(), file + " byte " + std::to_string(i) + " = " + std::to_string(v), false);
      }
      m[i] = bytes[i];
    }
    // Seeded random mutations of 1 to 8 bytes before the data, some with a cut after them.
    for (uint64_t r = 0; r < random && header > 0; ++r) {
      m = bytes;
      const unsigned k = 1 + static_cast<unsigned>(rng() % 8);
      for (unsigned j = 0; j < k; ++j) m[rng() % header] = static_cast<uint8_t>(rng());
      const size_t size = (rng() % 4 == 0) ? static_cast<size_t>(rng() % m.size()) : m.size();
      s.run(m, size, file + " random mutation " + std::to_string(r) + " (seed " + std::to_string(seed) + ")", false);
    }
    std::printf("%s: %zu bytes (data from %llu to %llu), %llu damaged copies read\n", file.c_str(), bytes.size(),
                static_cast<unsigned long long>(data_start), static_cast<unsigned long long>(data_end),
                static_cast<unsigned long long>(s.runs - before));
  }
  std::remove(s.path.c_str());
  rmdir(dir_template);
  std::printf(
      "corruption_gguf: %llu runs: %llu refused as damaged, %llu refused as unsupported, %llu opened; %llu failures\n",
      static_cast<unsigned long long>(s.runs), static_cast<unsigned long long>(s.refused),
      static_cast<unsigned long long>(s.unsupported), static_cast<unsigned long long>(s.opened),
      static_cast<unsigned long long>(s.failures));
  // A sweep that refused nothing checked nothing: the cuts alone refuse most of their runs.
  if (s.refused == 0) {
    std::fprintf(stderr, "corruption_gguf: no damaged copy was refused: the sweep checked nothing\n");
    return 1;
  }
  return s.failures ? 1 : 0;
}
