#include "compare/stats_core.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dcpctl {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

void StatsAccumulator::merge(const StatsAccumulator& o) {
  if (o.n == 0) return;
  if (n == 0) {
    *this = o;
    return;
  }
  double na = static_cast<double>(n), nb = static_cast<double>(o.n), nn = na + nb;
  double ma = base + mean, mb = o.base + o.mean;
  if (!std::isfinite(ma) || !std::isfinite(mb)) {
    // An infinity (or NaN) on either side decides the mean as torch's sum would: +inf with
    // finite values stays +inf, +inf with -inf is NaN. The update below would subtract the
    // infinity from itself on the next finite block (inf - inf) and turn it into NaN. std is NaN.
    base = (std::isfinite(ma) ? 0.0 : ma) + (std::isfinite(mb) ? 0.0 : mb);
    mean = 0;
    m2 = std::numeric_limits<double>::quiet_NaN();
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

double StatsAccumulator::min_value() const {
  return n == 0 || nan ? kNaN : min;
}
double StatsAccumulator::max_value() const {
  return n == 0 || nan ? kNaN : max;
}
double StatsAccumulator::mean_value() const {
  return n == 0 ? kNaN : base + mean;
}
double StatsAccumulator::std_value() const {
  if (n < 2 || nan) return kNaN;
  if (pos_inf || neg_inf) return kNaN;
  return std::sqrt(std::max(0.0, m2) / static_cast<double>(n - 1));
}
double StatsAccumulator::abs_max_value() const {
  return nan ? kNaN : n == 0 ? 0.0 : abs_max;
}
double StatsAccumulator::l2_norm() const {
  return nan ? kNaN : std::sqrt(sum_sq);
}

}  // namespace dcpctl
