// The numeric core of `dcpctl diff`: comparing two windows of elements.
//
// Rules (a element-wise; B is the reference, as torch.allclose's `other`):
// - Exact (same dtype, no tolerance): bit for bit, NaN payloads and the sign of zero included;
//   with equal_nan any NaN equals any NaN. This is stricter than torch.equal, which calls
//   -0.0 == 0.0 equal and NaN unequal to itself.
// - Tolerance (atol/rtol given, or dtypes compared across with ignore_dtype): values in float64,
//   torch.isclose's rule on .double() inputs: a == b, or both NaN with equal_nan, or
//   |a - b| finite and <= atol + rtol * |b|.
// - Complex elements compare as their (re, im) pairs, as torch.view_as_real shows them: close when
//   both parts are (torch.allclose(view_as_real(a), view_as_real(b))), NaN equal with equal_nan
//   part by part; the differences reported are of the worse part. ULPs are not measured.
// For each differing element the core tracks the largest absolute difference |a - b|, the
// largest relative difference |a - b| / |b| (infinite where b == 0), the largest distance in
// ULPs of the narrower floating dtype, and the first differing flat index. Pairs involving NaN
// count as differing but are left out of the maxima (nan_mismatch counts them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "util/dtype.h"

namespace dcpctl {

struct DiffRule {
  bool exact = true;  // bitwise (requires equal dtypes)
  double atol = 0, rtol = 0;
  bool equal_nan = false;
};

struct DiffAccumulator {
  uint64_t differ = 0;        // elements that differ
  uint64_t nan_mismatch = 0;  // of those, pairs where one or both sides is NaN
  uint64_t inexact = 0;       // equal within an export's bound, not bit for bit (compare/export_bound.h)
  double max_abs = 0, max_rel = 0;
  uint64_t max_ulp = 0;
  bool ulp_known = false;  // some differing finite pair was measured in ULPs
  uint64_t first = UINT64_MAX;
  void merge(const DiffAccumulator& o);
};

// The dtype ULP distances are counted in when comparing `a` with `b`: the narrower real floating
// dtype of the two (a's on a tie), nullopt when neither is floating.
std::optional<DType> ulp_dtype(DType a, DType b);

// Compares n elements: pa (dtype da) against pb (db), the first being flat element `start`.
// `wa`, `wb` are scratch of n * lanes * 8 bytes each (float64 widening) used by the tolerance
// rule and for measuring differing elements.
// Records one differing element at flat `index`: a, b its float64 values (NaN for undecodable
// dtypes); ULPs in `ud` (from the bits when same_dtype and pa, pb are given).
void record_difference(DiffAccumulator& acc, uint64_t index, double a, double b, std::optional<DType> ud,
                       const uint8_t* pa, const uint8_t* pb, bool same_dtype);

void compare_elements(DType da, const uint8_t* pa, DType db, const uint8_t* pb, size_t n, uint64_t start,
                      const DiffRule& rule, double* wa, double* wb, DiffAccumulator& acc);

}  // namespace dcpctl
