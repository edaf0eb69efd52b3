// How a value of an export may differ from its source's and still be the same weight: the audit of
// `diff SOURCE EXPORT --map M` (compare/audit.h) compares each mapped tensor under one of these.
//
//   exact      bit for bit (the dtypes equal): what a rename, split, join or RoPE permutation gives
//   cast       the export's dtype differs (--dtype's precision policy): the source's values cast to
//              it as Tensor.to() does (round to nearest even, util/numeric.h) equal the export's bit
//              for bit; an upcast is exact
//   codec      the export holds the weight quantized (fp8 blocks or channels, NVFP4, MXFP8, MXFP4: each
//              codec --quantize writes, and those dcpctl reads that share their grids), read here as
//              its codec decodes it (view/codecs/dequantize.h): each element within its codec's bound,
//              |x - dq| <= s * half_step(dq / s) with the scale s as the element sees it and room for
//              the producer's and decoder's float rounding (view/codecs/bound.h says it exactly).
//              The bound comes with the decoded weight (DecodedTensor::bound), the codec's own; its
//              scales are read lazily, the rows of the window compared (ScaleWindow).
//
// Elements equal bit for bit count in neither `differ` nor `inexact`; within the bound but not bit
// equal: `inexact`; beyond it (or NaN against a number): `differ`, measured as diff_core does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "compare/diff_core.h"
#include "util/dtype.h"
#include "view/codecs/bound.h"

namespace dcpctl {

struct ExportBound {
  enum class Kind { Exact, Cast, Codec } kind = Kind::Exact;
  // Codec: the decoded weight's bound, and the export's saved tensors its scales are read from.
  std::shared_ptr<const ElementBound> codec;
  std::shared_ptr<const TensorReads> saved;
};

// Codec: the scales of the rows a window spans, from row `first_row` on (ElementBound::scales).
struct ScaleWindow {
  const float* scales = nullptr;
  int64_t first_row = 0;
};

// Compares n source elements `pa` (dtype da) with export elements `pb` (db), flat index `start` the
// first, under `bound` (not Exact: that is compare_elements' rule; Codec: its scales in `sw`).
// `scratch` holds n elements of db (the cast source), `wa`/`wb` n doubles each.
void compare_bounded(DType da, const uint8_t* pa, DType db, const uint8_t* pb, size_t n, uint64_t start,
                     const ExportBound& bound, const ScaleWindow& sw, uint8_t* scratch, double* wa, double* wb,
                     DiffAccumulator& acc);

}  // namespace dcpctl
