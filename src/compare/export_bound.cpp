#include "compare/export_bound.h"

#include <cmath>
#include <cstring>

#include "util/elements.h"
#include "util/numeric.h"

namespace dcpctl {

void compare_bounded(DType da, const uint8_t* pa, DType db, const uint8_t* pb, size_t n, uint64_t start,
                     const ExportBound& bound, uint8_t* scratch, double* wa, double* wb, DiffAccumulator& acc) {
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
  // Fp8Block: b is the dequantized float32 value.
  const std::vector<float>& scales = *bound.scales;
  for (size_t i = 0; i < n; ++i) {
    double x = wa[i], dq = wb[i];
    if (x == dq || (std::isnan(x) && std::isnan(dq))) continue;
    uint64_t f = start + i;
    int64_t row = static_cast<int64_t>(f / static_cast<uint64_t>(bound.cols)),
            col = static_cast<int64_t>(f % static_cast<uint64_t>(bound.cols));
    size_t si = static_cast<size_t>((row / bound.b0) * bound.grid_cols + col / bound.b1);
    double s = si < scales.size() ? std::fabs(static_cast<double>(scales[si])) : 0;
    double limit = s > 0 ? s * bound.half_step(dq / s) * (1 + 0x1p-10) + std::fabs(x) * 0x1p-20 : 0;
    if (std::isfinite(x) && std::isfinite(dq) && std::fabs(x - dq) <= limit) {
      ++acc.inexact;
      continue;
    }
    record_difference(acc, f, x, dq, ud, nullptr, nullptr, false);
  }
}

}  // namespace dcpctl
