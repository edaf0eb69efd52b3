#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace dcpctl::bench {

Summary summarize(std::vector<double> s) {
  Summary r;
  if (s.empty()) return r;
  for (double x : s)
    if (!std::isfinite(x) || x < 0) throw std::invalid_argument("summarize: samples must be finite and non-negative");
  std::sort(s.begin(), s.end());
  r.n = s.size();
  r.min = s.front();
  r.max = s.back();
  r.median = r.n % 2 ? s[r.n / 2] : (s[r.n / 2 - 1] + s[r.n / 2]) / 2;
  double sum = 0;
  for (double x : s) sum += x;
  r.mean = sum / static_cast<double>(r.n);
  return r;
}

std::optional<double> gb_per_s(uint64_t bytes, double seconds) {
  if (!(seconds > 0)) return std::nullopt;
  return static_cast<double>(bytes) / seconds / 1e9;
}

RateSummary rates(uint64_t bytes, const Summary& t) {
  RateSummary r;
  if (t.n == 0) return r;
  r.median = gb_per_s(bytes, t.median);
  r.min = gb_per_s(bytes, t.max);
  r.max = gb_per_s(bytes, t.min);
  return r;
}

std::optional<double> seconds_per_gib(uint64_t bytes, double seconds) {
  if (bytes == 0) return std::nullopt;
  return seconds / (static_cast<double>(bytes) / static_cast<double>(uint64_t(1) << 30));
}

}  // namespace dcpctl::bench
