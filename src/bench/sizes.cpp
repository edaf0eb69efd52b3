#include "bench/sizes.h"

#include <cstdio>

#include "util/error.h"
#include "util/size.h"

namespace dcpctl::bench {

uint64_t parse_buffer_size(const std::string& text, const std::string& what) {
  const uint64_t bytes = parse_size(text, what);
  if (bytes > kMaxSize) throw UsageError(Where(), what + " '" + text + "': larger than the 16 TiB limit");
  return bytes;
}

std::vector<uint64_t> parse_size_list(const std::vector<std::string>& items, const std::string& what) {
  std::vector<uint64_t> out;
  for (const std::string& item : items) {
    size_t start = 0;
    for (;;) {
      size_t comma = item.find(',', start);
      const std::string part = item.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const uint64_t v = parse_buffer_size(part, what);
      bool seen = false;
      for (uint64_t x : out) seen = seen || x == v;
      if (!seen) out.push_back(v);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

std::string format_size(uint64_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  uint64_t unit = 1;
  while (u < 5 && n / unit >= 1024) {
    unit *= 1024;
    ++u;
  }
  if (n % unit == 0) return std::to_string(n / unit) + " " + units[u];
  char b[32];
  std::snprintf(b, sizeof b, "%.1f %s", static_cast<double>(n) / static_cast<double>(unit), units[u]);
  return b;
}

}  // namespace dcpctl::bench
