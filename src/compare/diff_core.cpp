#include "compare/diff_core.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "util/elements.h"

namespace dcpctl {

void DiffAccumulator::merge(const DiffAccumulator& o) {
  differ += o.differ;
  inexact += o.inexact;
  nan_mismatch += o.nan_mismatch;
  max_abs = std::max(max_abs, o.max_abs);
  max_rel = std::max(max_rel, o.max_rel);
  if (o.ulp_known) {
    max_ulp = ulp_known ? std::max(max_ulp, o.max_ulp) : o.max_ulp;
    ulp_known = true;
  }
  first = std::min(first, o.first);
}

std::optional<DType> ulp_dtype(DType a, DType b) {
  bool fa = is_real_float(a), fb = is_real_float(b);
  if (fa && fb) return itemsize(b) < itemsize(a) ? b : a;
  if (fa) return a;
  if (fb) return b;
  return std::nullopt;
}

namespace {

bool is_nan_bits(DType d, const uint8_t* p) {
  if (!is_real_float(d)) return false;
  double v;
  widen(d, p, 1, &v);
  return std::isnan(v);
}

// With equal_nan, two elements whose bits differ are still equal when each differing part is a
// NaN on both sides: the value itself (real floats), or a component (complex: as
// torch.view_as_real compares them, re with re and im with im).
bool equal_as_nan(DType d, const uint8_t* a, const uint8_t* b) {
  if (is_real_float(d)) return is_nan_bits(d, a) && is_nan_bits(d, b);
  if (!info(d).complex) return false;
  double va[2], vb[2];
  widen(d, a, 1, va);
  widen(d, b, 1, vb);
  size_t half = itemsize(d) / 2;
  for (size_t c = 0; c < 2; ++c)
    if (std::memcmp(a + c * half, b + c * half, half) != 0 && !(std::isnan(va[c]) && std::isnan(vb[c]))) return false;
  return true;
}

}  // namespace

void record_difference(DiffAccumulator& acc, uint64_t index, double a, double b, std::optional<DType> ud,
                       const uint8_t* pa, const uint8_t* pb, bool same_dtype) {
  ++acc.differ;
  acc.first = std::min(acc.first, index);
  if (std::isnan(a) || std::isnan(b)) {
    ++acc.nan_mismatch;
    return;
  }
  double d = std::fabs(a - b);
  // a and b are not NaN and differ, so d is finite or +inf (opposite infinities, or inf vs finite).
  acc.max_abs = std::max(acc.max_abs, d);
  double rel = b == 0 ? std::numeric_limits<double>::infinity() : d / std::fabs(b);
  acc.max_rel = std::max(acc.max_rel, rel);
  if (ud) {
    uint64_t u;
    if (same_dtype && pa && pb) {
      int64_t oa = float_ordinal(*ud, pa), ob = float_ordinal(*ud, pb);
      u = oa > ob ? static_cast<uint64_t>(oa) - static_cast<uint64_t>(ob)
                  : static_cast<uint64_t>(ob) - static_cast<uint64_t>(oa);
    } else {
      u = ulp_distance(*ud, a, b);
    }
    if (u != UINT64_MAX) {
      acc.max_ulp = acc.ulp_known ? std::max(acc.max_ulp, u) : u;
      acc.ulp_known = true;
    }
  }
}

void compare_elements(DType da, const uint8_t* pa, DType db, const uint8_t* pb, size_t n, uint64_t start,
                      const DiffRule& rule, double* wa, double* wb, DiffAccumulator& acc) {
  const bool same = da == db;
  std::optional<DType> ud = ulp_dtype(da, db);
  if (rule.exact && same) {
    size_t item = itemsize(da);
    if (std::memcmp(pa, pb, n * item) == 0) return;
    const bool dec = decodable(da);
    const size_t ln = lanes(da);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* a = pa + i * item;
      const uint8_t* b = pb + i * item;
      if (std::memcmp(a, b, item) == 0) continue;
      if (rule.equal_nan && equal_as_nan(da, a, b)) continue;
      double va[2] = {std::numeric_limits<double>::quiet_NaN(), 0}, vb[2] = {va[0], 0};
      if (dec) {
        widen(da, a, 1, va);
        widen(da, b, 1, vb);
      }
      if (ln == 2) {  // complex: measure the larger component difference
        size_t c = std::fabs(va[1] - vb[1]) > std::fabs(va[0] - vb[0]) ? 1 : 0;
        record_difference(acc, start + i, va[c], vb[c], std::nullopt, nullptr, nullptr, true);
      } else {
        record_difference(acc, start + i, va[0], vb[0], ud, a, b, true);
      }
    }
    return;
  }
  const size_t la = lanes(da), lb = lanes(db);
  widen(da, pa, n, wa);
  widen(db, pb, n, wb);
  // A real tensor against a complex one (only with ignore_dtype): imaginary parts of the real
  // side are 0.
  const size_t ln = std::max(la, lb);
  for (size_t i = 0; i < n; ++i) {
    bool close = true;
    size_t worst = 0;
    double worst_d = -1;
    double va[2], vb[2];
    for (size_t c = 0; c < ln; ++c) {
      va[c] = c < la ? wa[i * la + c] : 0.0;
      vb[c] = c < lb ? wb[i * lb + c] : 0.0;
      double a = va[c], b = vb[c];
      bool ok = a == b || (rule.equal_nan && std::isnan(a) && std::isnan(b));
      if (!ok) {
        double d = std::fabs(a - b);
        ok = std::isfinite(d) && d <= rule.atol + rule.rtol * std::fabs(b);
      }
      if (!ok) {
        close = false;
        double d = std::fabs(a - b);
        if (std::isnan(d) || d > worst_d) {
          worst_d = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
          worst = c;
        }
      }
    }
    if (close) continue;
    record_difference(acc, start + i, va[worst], vb[worst], ln == 1 ? ud : std::nullopt,
                      same ? pa + i * itemsize(da) : nullptr, same ? pb + i * itemsize(db) : nullptr, same);
  }
}

}  // namespace dcpctl
