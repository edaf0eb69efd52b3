#include "compare/stats_core.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dcpctl {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

void StatsAccumulator::add(const double* x, size_t count, uint64_t start) {
  // Blocks small enough to stay in L1 for the second pass.
  constexpr size_t kBlock = 2048;
  for (size_t b = 0; b < count; b += kBlock) {
    size_t m = std::min(kBlock, count - b);
    const double* p = x + b;
    StatsAccumulator s;
    s.n = m;
    // Summing deviations from the block's first value keeps the sum small, so a large common
    // offset (weights near 1e9, or a bias of 1e4 with 1e-3 spread) costs no digits of the mean.
    const double shift = std::isfinite(p[0]) ? p[0] : 0.0;
    double sum = 0, sq = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo, am = 0;
    uint64_t zeros = 0;
    // Fast pass, no per-element branch: a NaN or an infinity makes sum (or sq) non-finite, and
    // only then is the block walked again element by element. Four independent lanes, so the
    // additions do not wait on each other's latency.
    {
      const double inf = std::numeric_limits<double>::infinity();
      double su0 = 0, su1 = 0, su2 = 0, su3 = 0, sq0 = 0, sq1 = 0, sq2 = 0, sq3 = 0;
      double lo0 = inf, lo1 = inf, hi0 = -inf, hi1 = -inf, am0 = 0, am1 = 0;
      uint64_t z0 = 0, z1 = 0;
      size_t i = 0;
      for (; i + 4 <= m; i += 4) {
        double v0 = p[i], v1 = p[i + 1], v2 = p[i + 2], v3 = p[i + 3];
        su0 += v0 - shift, su1 += v1 - shift, su2 += v2 - shift, su3 += v3 - shift;
        sq0 += v0 * v0, sq1 += v1 * v1, sq2 += v2 * v2, sq3 += v3 * v3;
        double l0 = v0 < v1 ? v0 : v1, l1 = v2 < v3 ? v2 : v3, h0 = v0 > v1 ? v0 : v1, h1 = v2 > v3 ? v2 : v3;
        lo0 = l0 < lo0 ? l0 : lo0, lo1 = l1 < lo1 ? l1 : lo1, hi0 = h0 > hi0 ? h0 : hi0, hi1 = h1 > hi1 ? h1 : hi1;
        double a0 = std::fmax(std::fabs(v0), std::fabs(v1)), a1 = std::fmax(std::fabs(v2), std::fabs(v3));
        am0 = a0 > am0 ? a0 : am0, am1 = a1 > am1 ? a1 : am1;
        z0 += (v0 == 0) + (v1 == 0);
        z1 += (v2 == 0) + (v3 == 0);
      }
      for (; i < m; ++i) {
        double v = p[i];
        su0 += v - shift;
        sq0 += v * v;
        lo0 = v < lo0 ? v : lo0;
        hi0 = v > hi0 ? v : hi0;
        am0 = std::fabs(v) > am0 ? std::fabs(v) : am0;
        z0 += v == 0;
      }
      sum = (su0 + su1) + (su2 + su3);
      sq = (sq0 + sq1) + (sq2 + sq3);
      lo = std::min(lo0, lo1), hi = std::max(hi0, hi1), am = std::max(am0, am1);
      zeros = z0 + z1;
    }
    if (!std::isfinite(sum) || !std::isfinite(sq)) {
      sum = sq = 0;
      lo = std::numeric_limits<double>::infinity(), hi = -lo, am = 0;
      for (size_t i = 0; i < m; ++i) {
        double v = p[i];
        sum += v - shift;
        sq += v * v;
        if (!std::isfinite(v)) {
          if (std::isnan(v)) ++s.nan;
          else if (v > 0) ++s.pos_inf;
          else ++s.neg_inf;
          if (s.first_nonfinite == UINT64_MAX) s.first_nonfinite = start + b + i;
          if (std::isnan(v)) continue;
        }
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        am = std::max(am, std::fabs(v));
      }
    }
    s.zeros = zeros;
    s.base = shift;
    s.mean = sum / static_cast<double>(m);
    double m2s[4] = {0, 0, 0, 0};
    {
      size_t i = 0;
      for (; i + 4 <= m; i += 4)
        for (int l = 0; l < 4; ++l) {
          double d = (p[i + l] - shift) - s.mean;
          m2s[l] += d * d;
        }
      for (; i < m; ++i) {
        double d = (p[i] - shift) - s.mean;
        m2s[0] += d * d;
      }
    }
    double m2 = (m2s[0] + m2s[1]) + (m2s[2] + m2s[3]);
    s.m2 = m2;
    s.min = lo;
    s.max = hi;
    s.abs_max = am;
    s.sum_sq = sq;
    merge(s);
  }
}

void StatsAccumulator::merge(const StatsAccumulator& o) {
  if (o.n == 0) return;
  if (n == 0) {
    *this = o;
    return;
  }
  double na = static_cast<double>(n), nb = static_cast<double>(o.n), nn = na + nb;
  double ma = base + mean, mb = o.base + o.mean;
  if (std::isinf(ma) && ma == mb) {
    m2 = std::numeric_limits<double>::quiet_NaN();  // inf - inf: as torch, std of infinities is NaN
  } else {
    double delta = (o.base - base) + (o.mean - mean);
    m2 = m2 + o.m2 + delta * delta * (na * nb / nn);
    mean += delta * (nb / nn);
  }
  bool a_vals = n > nan, b_vals = o.n > o.nan;
  if (a_vals && b_vals) {
    min = std::min(min, o.min);
    max = std::max(max, o.max);
  } else if (b_vals) {
    min = o.min;
    max = o.max;
  }
  abs_max = std::max(abs_max, o.abs_max);
  sum_sq += o.sum_sq;
  n += o.n;
  nan += o.nan;
  pos_inf += o.pos_inf;
  neg_inf += o.neg_inf;
  zeros += o.zeros;
  first_nonfinite = std::min(first_nonfinite, o.first_nonfinite);
}

double StatsAccumulator::min_value() const { return n == 0 || nan ? kNaN : min; }
double StatsAccumulator::max_value() const { return n == 0 || nan ? kNaN : max; }
double StatsAccumulator::mean_value() const { return n == 0 ? kNaN : base + mean; }
double StatsAccumulator::std_value() const {
  if (n < 2 || nan) return kNaN;
  if (pos_inf || neg_inf) return kNaN;
  return std::sqrt(std::max(0.0, m2) / static_cast<double>(n - 1));
}
double StatsAccumulator::abs_max_value() const { return nan ? kNaN : n == 0 ? 0.0 : abs_max; }
double StatsAccumulator::l2_norm() const { return nan ? kNaN : std::sqrt(sum_sq); }

}  // namespace dcpctl
