// The error a decoded weight is held to when an export is compared with its source (diff's audit of
// an export, compare/export_bound.h). For each element, x the source's value and dq the export's
// value as its codec decodes it:
//
//   |x - dq| <= s * half_step(dq / s) * (1 + 2^-10) + rounding * (|x| + |dq|) + 2^-20 |x| + floor
//
//   s          the scale as the element sees it: its block's stored scale decoded (a float dtype
//              as it is; an E8M0 byte as 2^(byte - 127)), times or divided by the weight's global
//              scale as the format defines it (ModelOpt's NVFP4 weight_scale_2 multiplies,
//              compressed-tensors' weight_global_scale divides: the one is the other's reciprocal)
//   half_step  half a step of the element grid at q (the codec's, meta/codecs/codecs.h: e4m3's half
//              ULP, E2M1's half gap; at the top code what the producer's scale rule lets saturate)
//   rounding   the relative rounding the producer and the decoder do in a narrower float than
//              float32 (compressed-tensors divides x by s in the model's dtype and decodes NVFP4
//              and MX in bfloat16: 2^-8 for bfloat16); 2^-20 |x| covers float32's
//   floor      an absolute room a producer's own rule needs (torchao's MXFP4 of a group whose amax
//              is below 2^-124, quantized with a scale twice the one it stores); 0 elsewhere
//
// A value one step of the element grid off, away from the source's value, is beyond it; so is a
// block whose scale changed. Each codec's decode (view/codecs/*.cpp, DecodedTensor::bound) builds
// its weight's bound from the scale's geometry (ScaleGrid); the scales are read lazily, only the
// rows one window of the weight needs, so comparing a model holds a window's scales, not its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meta/codecs/codecs.h"
#include "meta/derived.h"
#include "meta/metadata.h"

namespace dcpctl {

// Where a weight's scales are and how one reads as a float. The weight (as decoded) is [..., R, C]:
// its flat rows are the leading dims times R; the stored scale is [..., ceil(R / block_rows),
// ceil(C / block_cols)] (the same leading dims), or one value for the whole weight.
struct ScaleGrid {
  TensorMeta scale;
  int64_t block_rows = 1, block_cols = 1;  // the elements one scale covers
  bool e8m0 = false;                       // a biased power of two (uint8 or float8_e8m0fnu) rather than a float
  std::optional<TensorMeta> global;        // a float32 scale of the whole weight
  bool divide_by_global = false;           // s = scale / global (compressed-tensors), not scale * global
};

// The grid of `scale`, one value a `rows` x `cols` block of the weight.
inline ScaleGrid scale_grid(const TensorMeta& scale, int64_t rows, int64_t cols) {
  ScaleGrid g;
  g.scale = scale;
  g.block_rows = rows;
  g.block_cols = cols;
  return g;
}

class ElementBound {
 public:
  // `weight`: the decoded weight's meta (its shape); `rule`: what the scale is, for --json and text
  // ("weight_scale / weight_global_scale per 16 values"). FormatError at `path`, naming the scale,
  // when its shape is not the weight's grid.
  ElementBound(const std::string& path, const Codec& codec, const TensorMeta& weight, ScaleGrid grid,
               double (*half_step)(double), double rounding, double floor, std::string rule);

  const Codec& codec() const { return *codec_; }
  const std::string& rule() const { return rule_; }
  int64_t cols() const { return cols_; }
  // The scales one row of the weight has: ceil(cols / block_cols).
  int64_t groups() const { return groups_; }
  int64_t block_cols() const { return grid_.block_cols; }

  // The scale each element of the weight's flat rows [r0, r0 + rows) sees, into `out` ([rows,
  // groups()]: element (r, c)'s at (r - r0) * groups() + c / block_cols()), read through `saved`
  // (the export's saved tensors) from only the stored rows those rows need.
  void scales(const TensorReads& saved, int64_t r0, int64_t rows, std::vector<float>& out) const;
  // What scales() of `rows` rows holds: its output and the stored rows read.
  uint64_t scale_bytes(int64_t rows) const;

  // A codec whose block scale is itself rounded to a narrow float (NVFP4's e4m3 scale per 16
  // values): an element the encoder saturated at the grid's `top` code may lie beyond it by what
  // that rounding took from its block's scale, at most `extra` times s (for e4m3: its subnormal
  // scales, 2^-9 to 2^-6, round by up to 2^-10, half the smallest; so top / 2). Only the element
  // decoded at the top code (within the decoder's rounding), with the source beyond it on the same
  // side, gets the room: a code moved down from the top, or up to it, is held to the grid's half
  // step as before.
  void saturating(double top, double extra) { top_ = top, top_extra_ = extra; }

  // The bound of one element: x the source's value, dq the decoded one, s its scale.
  double limit(double x, double dq, double s) const {
    const double ax = x < 0 ? -x : x, ad = dq < 0 ? -dq : dq;
    double l = rounding_ * (ax + ad) + ax * 0x1p-20 + floor_;
    if (s > 0) {
      l += s * half_step_(dq / s) * (1 + 0x1p-10);
      if (top_ > 0 && ad >= top_ * s * (1 - 2 * rounding_ - 0x1p-20) && ax > ad && (x < 0) == (dq < 0))
        l += top_extra_ * s;
    }
    return l;
  }

 private:
  const Codec* codec_;
  ScaleGrid grid_;
  double (*half_step_)(double);
  double rounding_, floor_;
  double top_ = 0, top_extra_ = 0;  // saturating()
  std::string rule_;
  int64_t cols_ = 1, rows_per_stack_ = 1, groups_ = 1, stack_scale_rows_ = 1;
};

// The relative rounding of a float dtype `d` narrower than float32 (bfloat16 2^-8, float16 2^-11;
// 0 for float32 and wider): what `rounding` is for a producer or decoder computing in `d`.
double narrow_rounding(DType d);

}  // namespace dcpctl
