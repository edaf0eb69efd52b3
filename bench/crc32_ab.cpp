// bench/crc32.sh's program: dcpctl's CRC-32 folds (util/crc32.h: VPCLMULQDQ, PCLMULQDQ)
// against zlib's crc32_z, the anchor, on the same buffer in one run, pair by pair in alternating
// order. Prints each path's median GB/s over the rounds and checks every path gives zlib's value.
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "util/crc32.h"

using namespace dcpctl;

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  std::vector<uint8_t> buf(mib << 20);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
    const uint64_t v = rng();
    std::copy_n(reinterpret_cast<const uint8_t*>(&v), 8, buf.data() + i);
  }
  struct Path {
    std::string name;
    std::function<uint32_t()> run;
    std::vector<double> gbps;
  };
  std::vector<Path> paths;
  paths.push_back(
      {"zlib crc32_z (anchor)", [&] { return static_cast<uint32_t>(crc32_z(0, buf.data(), buf.size())); }, {}});
  const Crc32Path best = crc32_best_path();
  for (Crc32Path p : {Crc32Path::Vclmul, Crc32Path::Clmul}) {
    if (p > best) continue;
    const char* name = p == Crc32Path::Vclmul ? "dcpctl vpclmulqdq" : "dcpctl pclmulqdq";
    paths.push_back({name, [&, p] { return crc32_update_via(p, 0, buf.data(), buf.size()); }, {}});
  }
  const uint32_t want = paths[0].run();
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < paths.size(); ++k) {
      Path& p = paths[r % 2 ? paths.size() - 1 - k : k];  // alternate the order round by round
      const auto t0 = std::chrono::steady_clock::now();
      const uint32_t got = p.run();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (got != want) {
        std::fprintf(stderr, "%s: CRC %08x, zlib %08x\n", p.name.c_str(), got, want);
        return 1;
      }
      p.gbps.push_back(buf.size() / s / 1e9);
    }
  std::printf("CRC-32 of %zu MiB, %d rounds, median GB/s (min-max):\n", mib, rounds);
  for (Path& p : paths) {
    std::sort(p.gbps.begin(), p.gbps.end());
    std::printf("  %-24s %6.2f  (%.2f-%.2f)\n", p.name.c_str(), p.gbps[p.gbps.size() / 2], p.gbps.front(),
                p.gbps.back());
  }
  return 0;
}
