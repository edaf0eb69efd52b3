// How a value of an export may differ from its source's and still be the same weight: the audit of
// `diff SOURCE EXPORT --map M` (compare/audit.h) compares each mapped tensor under one of these.
//
//   exact      bit for bit (the dtypes equal): what a rename, split, join or RoPE permutation gives
//   cast       the export's dtype differs (--dtype's precision policy): the source's values cast to
//              it as Tensor.to() does (round to nearest even, util/numeric.h) equal the export's bit
//              for bit; an upcast is exact
//   fp8 block  the export holds the weight as float8_e4m3fn beside a block scale s (read here as
//              float32 dq = fp8 * s, view/dequantize.h): each element's quantization error is at most
//              half an e4m3 ULP of dq / s, times s (|x - dq(q(x))| <= s * ulp(q) / 2, ulp(q) =
//              2^(e - 3) for |q| in [2^e, 2^(e+1)), 2^-9 below 2^-6), with room for float32's
//              rounding of x / s and of fp8 * s (2^-20 |x|). A value one fp8 step off is beyond it.
//
// Elements equal bit for bit count in neither `differ` nor `inexact`; within the bound but not bit
// equal: `inexact`; beyond it (or NaN against a number): `differ`, measured as diff_core does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "compare/diff_core.h"
#include "meta/codecs/codecs.h"
#include "util/dtype.h"

namespace dcpctl {

struct ExportBound {
  enum class Kind { Exact, Cast, Fp8Block } kind = Kind::Exact;
  // Fp8Block: the weight's scales, row-major [ceil(rows / b0), grid_cols]; cols: the weight's;
  // half_step: the codec's bound (meta/codecs/codecs.h: fp8-block's e4m3_half_ulp).
  std::shared_ptr<const std::vector<float>> scales;
  double (*half_step)(double q) = nullptr;
  int64_t cols = 1, b0 = 1, b1 = 1, grid_cols = 1;
};

// Compares n source elements `pa` (dtype da) with export elements `pb` (db), flat index `start` the
// first, under `bound` (not Exact: that is compare_elements' rule). `scratch` holds n elements of db
// (the cast source), `wa`/`wb` n doubles each.
void compare_bounded(DType da, const uint8_t* pa, DType db, const uint8_t* pb, size_t n, uint64_t start,
                     const ExportBound& bound, uint8_t* scratch, double* wa, double* wb, DiffAccumulator& acc);

}  // namespace dcpctl
