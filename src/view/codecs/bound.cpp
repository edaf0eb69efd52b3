#include "view/codecs/bound.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "meta/geometry.h"
#include "util/error.h"
#include "view/codecs/quantized.h"
#include "view/codecs/rows.h"

namespace dcpctl {

ElementBound::ElementBound(const std::string& path, const Codec& codec, const TensorMeta& weight, ScaleGrid grid,
                           double (*half_step)(double), double rounding, double floor, std::string rule)
    : codec_(&codec),
      grid_(std::move(grid)),
      half_step_(half_step),
      rounding_(rounding),
      floor_(floor),
      rule_(std::move(rule)) {
  const std::vector<int64_t>& w = weight.shape;
  const TensorMeta& s = grid_.scale;
  if (w.size() < 2 || grid_.block_rows < 1 || grid_.block_cols < 1)
    throw std::logic_error("ElementBound: a weight of 2 or more dimensions and blocks of at least one element");
  cols_ = std::max<int64_t>(1, w.back());
  rows_per_stack_ = std::max<int64_t>(1, w[w.size() - 2]);
  groups_ = ceil_blocks(cols_, grid_.block_cols);
  stack_scale_rows_ = ceil_blocks(rows_per_stack_, grid_.block_rows);
  const uint64_t stacks = weight.numel() / static_cast<uint64_t>(cols_ * rows_per_stack_);
  const uint64_t want = stacks * static_cast<uint64_t>(stack_scale_rows_ * groups_);
  bool fits = s.dtype && s.numel() == want;
  if (fits && s.ndim() >= 2)
    fits = s.shape.back() == groups_ && s.shape[s.ndim() - 2] == stack_scale_rows_;
  else if (fits)
    fits = stacks * static_cast<uint64_t>(stack_scale_rows_) == 1;  // one row of scales (or one scale)
  if (!fits)
    throw FormatError(Where(path, std::nullopt, s.fqn),
                      s.dtype_name + " " + dims_text(s.shape) + " is not the scale grid of '" + weight.fqn + "' " +
                          dims_text(w) + " (one a " + std::to_string(grid_.block_rows) + "x" +
                          std::to_string(grid_.block_cols) + " block: " + std::to_string(want) + " values)");
  if (grid_.global && (grid_.global->dtype != DType::Float32 || grid_.global->numel() != 1))
    throw FormatError(Where(path, std::nullopt, grid_.global->fqn),
                      grid_.global->dtype_name + " " + dims_text(grid_.global->shape) +
                          " is not the float32 scale of the whole weight '" + weight.fqn + "'");
}

void ElementBound::scales(const TensorReads& saved, int64_t r0, int64_t rows, std::vector<float>& out) const {
  out.resize(static_cast<size_t>(rows * groups_));
  if (rows <= 0) return;
  const TensorMeta& s = grid_.scale;
  const int64_t R = rows_per_stack_, SR = stack_scale_rows_, G = groups_;
  auto scale_row = [&](int64_t r) { return (r / R) * SR + (r % R) / grid_.block_rows; };
  const int64_t a = scale_row(r0), b = scale_row(r0 + rows - 1);
  // The stored rows [a, b] as bytes, C order.
  std::vector<uint8_t> bytes;
  const size_t item = itemsize(*s.dtype);
  if (s.ndim() < 2) {
    bytes = saved.read_whole(s);
  } else {
    bytes.resize(static_cast<size_t>((b - a + 1) * G) * item);
    const std::vector<int64_t> lead(s.shape.begin(), s.shape.end() - 2);
    for (int64_t e = a / SR; e <= b / SR; ++e) {
      const int64_t lo = std::max(a, e * SR) - e * SR, hi = std::min(b, e * SR + SR - 1) - e * SR;
      Box box;
      box.offsets.assign(lead.size(), 0);
      for (size_t d = lead.size(), rest = static_cast<size_t>(e); d-- > 0;) {  // e as an index of the leading dims
        box.offsets[d] = static_cast<int64_t>(rest % static_cast<size_t>(lead[d]));
        rest /= static_cast<size_t>(lead[d]);
      }
      box.sizes.assign(lead.size(), 1);
      box.offsets.insert(box.offsets.end(), {lo, 0});
      box.sizes.insert(box.sizes.end(), {hi - lo + 1, G});
      std::vector<uint8_t> part = read_box(saved, s, box);
      std::copy(part.begin(), part.end(), bytes.begin() + static_cast<std::ptrdiff_t>((e * SR + lo - a) * G) * item);
    }
  }
  double global = 1;
  if (grid_.global) {
    std::vector<uint8_t> g = saved.read_whole(*grid_.global);
    global = float_at(g, DType::Float32, 0);
  }
  std::vector<float> stored(static_cast<size_t>((b - a + 1) * G));
  for (size_t i = 0; i < stored.size(); ++i) {
    double v = grid_.e8m0 ? (bytes[i] == 255 ? NAN : std::ldexp(1.0, static_cast<int>(bytes[i]) - 127))
                          : static_cast<double>(float_at(bytes, *s.dtype, static_cast<int64_t>(i)));
    if (grid_.global) v = grid_.divide_by_global ? v / global : v * global;
    stored[i] = static_cast<float>(v);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* from = stored.data() + (scale_row(r0 + r) - a) * G;
    std::copy(from, from + G, out.data() + r * G);
  }
}

uint64_t ElementBound::scale_bytes(int64_t rows) const {
  const uint64_t g = static_cast<uint64_t>(groups_);
  const uint64_t stored_rows = static_cast<uint64_t>(rows / grid_.block_rows + 2);
  return static_cast<uint64_t>(rows) * g * 4 + stored_rows * g * (4 + itemsize(*grid_.scale.dtype) * 2);
}

double narrow_rounding(DType d) {
  if (d == DType::BFloat16) return 0x1p-8;
  if (d == DType::Float16) return 0x1p-11;
  return 0;
}

}  // namespace dcpctl
