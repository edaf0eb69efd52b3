#include "compare/export_bound.h"

#include <cmath>
#include <cstring>

#include "util/elements.h"
#include "util/numeric.h"

namespace dcpctl {

void compare_bounded(DType da, const uint8_t* pa, DType db, const uint8_t* pb, size_t n, uint64_t start,
                     const ExportBound& bound, const ScaleWindow& sw, uint8_t* scratch, double* wa, double* wb,
                     DiffAccumulator& acc) {
  std::optional<DType> ud = ulp_dtype(da, db);
  widen(da, pa, n, wa);
  widen(db, pb, n, wb);
  if (bound.kind == ExportBound::Kind::Cast) {
    const size_t ib = itemsize(db);
    cast_elements(da, db, pa, scratch, n);
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(scratch + i * ib, pb + i * ib, ib) == 0) {
        if (!(wa[i] == wb[i]) && !(std::isnan(wa[i]) && std::isnan(wb[i]))) ++acc.inexact;
        continue;
      }
      record_difference(acc, start + i, wa[i], wb[i], ud, nullptr, nullptr, false);
    }
    return;
  }
  // Codec: b is the decoded float32 value.
  const ElementBound& eb = *bound.codec;
  const uint64_t cols = static_cast<uint64_t>(eb.cols());
  const int64_t groups = eb.groups(), bw = eb.block_cols();
  for (size_t i = 0; i < n; ++i) {
    double x = wa[i], dq = wb[i];
    if (x == dq || (std::isnan(x) && std::isnan(dq))) continue;
    const uint64_t f = start + i;
    const int64_t row = static_cast<int64_t>(f / cols), col = static_cast<int64_t>(f % cols);
    const double s = std::fabs(static_cast<double>(sw.scales[(row - sw.first_row) * groups + col / bw]));
    if (std::isfinite(x) && std::isfinite(dq) && std::fabs(x - dq) <= eb.limit(x, dq, s)) {
      ++acc.inexact;
      continue;
    }
    record_difference(acc, f, x, dq, ud, nullptr, nullptr, false);
  }
}

}  // namespace dcpctl
