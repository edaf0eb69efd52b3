// The numeric core of `dcpctl stats`: summary statistics of a stream of float64 values.
//
// Accumulation is in float64 and numerically stable in one pass over the data: values come in
// blocks of 4096 (compare/stats_kernel.cpp, vectorised); each block's mean and sum of squared
// deviations are computed as a two-pass over the block (it is in L1), and blocks are merged with Chan et al.'s
// pairwise update (delta = mean_b - mean_a; M2 = M2_a + M2_b + delta^2 n_a n_b / n). Unlike a
// running sum of squares this does not cancel catastrophically when the mean dwarfs the spread.
//
// NaN and infinity follow torch: a NaN makes min, max, mean, std, abs max and the L2 norm NaN;
// an infinity makes the mean infinite (or NaN for +inf and -inf) and std NaN. The counts say why.
// std is Bessel-corrected (n - 1), as torch.std; NaN for fewer than two elements.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/dtype.h"

namespace dcpctl {

struct StatsAccumulator {
  uint64_t n = 0;
  // The mean is kept as base + mean: base is the first finite value seen (0 if none) and mean the
  // small offset from it, so merging blocks whose means agree to 1e-12 relative (weights around a
  // large common value) keeps the digits that tell them apart.
  double base = 0, mean = 0, m2 = 0;
  double min = 0, max = 0;  // over the non-NaN values; meaningful when n > nan
  double abs_max = 0;       // over the non-NaN values
  double sum_sq = 0;        // for the L2 norm (accumulated per block, then summed)
  uint64_t nan = 0, pos_inf = 0, neg_inf = 0, zeros = 0;
  uint64_t first_nonfinite = UINT64_MAX;  // flat index of the first NaN or Inf

  // Adds values x[0..count) whose first one is flat element `start`.
  void add(const double* x, size_t count, uint64_t start);
  // Adds `count` elements of dtype d (any decodable dtype, little-endian) at src, the first being
  // flat element `start`, decoded exactly to float64 (compare/stats_kernel.cpp). A complex
  // element is two values, its real and imaginary parts, as torch.view_as_real shows them:
  // 2 * count values, the first being value 2 * start (first_nonfinite indexes those values).
  void add_raw(DType d, const uint8_t* src, size_t count, uint64_t start);
  // Merges statistics of other elements (in any order: the result does not depend on it beyond
  // rounding; first_nonfinite takes the smaller index).
  void merge(const StatsAccumulator& o);

  double min_value() const;  // NaN when any NaN or no element
  double max_value() const;
  double mean_value() const;  // NaN when no element
  double std_value() const;   // Bessel; NaN for n < 2
  double abs_max_value() const;
  double l2_norm() const;
  uint64_t nonfinite() const { return nan + pos_inf + neg_inf; }
};

// The SIMD paths stats_kernel.cpp compiles; add_raw uses the best the CPU has. They give
// bit-identical results (tests run each).
enum class StatsIsa { Baseline, Avx2 };
bool stats_isa_available(StatsIsa isa);
void stats_add_raw(StatsAccumulator& acc, StatsIsa isa, DType d, const uint8_t* src, size_t count, uint64_t start);

}  // namespace dcpctl
