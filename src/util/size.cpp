#include "util/size.h"

#include <cctype>
#include <limits>

#include "util/error.h"
#include "util/text.h"

namespace dcpctl {
namespace {

// Wide enough that a number below 2^64 times the largest unit (2^40) cannot overflow, so sizes
// are computed exactly ("4.1MB" is 4100000 bytes, which a double would make 4099999).
__extension__ typedef unsigned __int128 Wide;
constexpr Wide kMax = std::numeric_limits<uint64_t>::max();

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

[[noreturn]] void bad(const std::string& what, const std::string& text, const std::string& why) {
  throw UsageError(Where(), what + " '" + text + "': " + why +
                                " (write e.g. 5GB = 5*10^9 bytes, 4GiB, 512MiB, or a number of bytes)");
}

uint64_t unit_multiplier(const std::string& unit, const std::string& what, const std::string& text) {
  const std::string u = ascii_lower(unit);
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
  size_t i = 0, digits = 0;
  // Whole part and fraction as integers: "1.25" -> whole 1, frac 25, frac_scale 100.
  Wide whole = 0;
  uint64_t frac = 0, frac_scale = 1;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    whole = whole * 10 + static_cast<unsigned>(text[i++] - '0');
    ++digits;
    if (whole > kMax) bad(what, raw, "too large");
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    for (size_t frac_digits = 0; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++digits) {
      // 10^18 is the largest power of ten a uint64 holds.
      if (++frac_digits > 18) bad(what, raw, "more than 18 decimals");
      frac = frac * 10 + static_cast<uint64_t>(text[i++] - '0');
      frac_scale *= 10;
    }
  }
  if (digits == 0) bad(what, raw, "does not start with a number");
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  const uint64_t mult = unit_multiplier(text.substr(i), what, raw);
  const Wide bytes = whole * mult + Wide(frac) * mult / frac_scale;
  if (bytes == 0) bad(what, raw, "less than one byte");
  if (bytes > kMax) bad(what, raw, "too large");
  return static_cast<uint64_t>(bytes);
}

}  // namespace dcpctl
