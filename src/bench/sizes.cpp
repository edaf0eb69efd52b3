#include "bench/sizes.h"

#include <cctype>
#include <cstdio>

#include "util/error.h"

namespace dcpctl::bench {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

[[noreturn]] void bad(const std::string& what, const std::string& text, const std::string& why) {
  throw UsageError(
      Where(), what + " '" + text + "': " + why + " (write e.g. 4MiB, 1GiB, 5GB = 5*10^9 bytes, or a number of bytes)");
}

uint64_t unit_multiplier(const std::string& unit, const std::string& what, const std::string& text) {
  const std::string u = lower(unit);
  if (u.empty() || u == "b") return 1;
  static const struct {
    const char* name;
    uint64_t mult;
  } kUnits[] = {
      {"kb", 1000ull},     {"mb", 1000ull * 1000}, {"gb", 1000ull * 1000 * 1000}, {"tb", 1000ull * 1000 * 1000 * 1000},
      {"kib", 1ull << 10}, {"mib", 1ull << 20},    {"gib", 1ull << 30},           {"tib", 1ull << 40}};
  for (const auto& k : kUnits)
    if (u == k.name) return k.mult;
  if (u == "k" || u == "m" || u == "g" || u == "t")
    bad(what, text, "unit '" + unit + "' is ambiguous: write " + unit + "iB (binary) or " + unit + "B (decimal)");
  bad(what, text, "unknown unit '" + unit + "'");
}

}  // namespace

uint64_t parse_size(const std::string& raw, const std::string& what) {
  const std::string text = trim(raw);
  if (text.empty()) bad(what, raw, "empty");
  size_t i = 0;
  // Whole part and fraction as integers: "1.25" -> whole 1, frac 25, frac_scale 100. Digit
  // counts are capped first so that neither can overflow.
  uint64_t whole = 0, frac = 0, frac_scale = 1;
  size_t whole_digits = 0, frac_digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (++whole_digits > 15) bad(what, raw, "too large");
    whole = whole * 10 + static_cast<uint64_t>(text[i++] - '0');
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (++frac_digits > 6) bad(what, raw, "more than 6 decimals");
      frac = frac * 10 + static_cast<uint64_t>(text[i++] - '0');
      frac_scale *= 10;
    }
    if (frac_digits == 0) bad(what, raw, "no digits after the decimal point");
  }
  if (whole_digits == 0) bad(what, raw, "does not start with a number");
  while (i < text.size() && text[i] == ' ') ++i;
  const uint64_t mult = unit_multiplier(text.substr(i), what, raw);
  // whole < 10^15 and mult <= 2^40: compare before multiplying.
  if (whole > kMaxSize / mult) bad(what, raw, "larger than the 16 TiB limit");
  uint64_t bytes = whole * mult;
  if (frac) {
    // frac < 10^6 and mult <= 2^40, so frac * mult < 2^60: no overflow.
    const uint64_t num = frac * mult;
    if (num % frac_scale != 0) bad(what, raw, "not a whole number of bytes");
    bytes += num / frac_scale;
  }
  if (bytes == 0) bad(what, raw, "must be at least 1 byte");
  if (bytes > kMaxSize) bad(what, raw, "larger than the 16 TiB limit");
  return bytes;
}

std::vector<uint64_t> parse_size_list(const std::vector<std::string>& items, const std::string& what) {
  std::vector<uint64_t> out;
  for (const std::string& item : items) {
    size_t start = 0;
    for (;;) {
      size_t comma = item.find(',', start);
      const std::string part = item.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const uint64_t v = parse_size(part, what);
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
