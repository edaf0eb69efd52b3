// The audit's bounds (compare/export_bound.h, view/codecs/bound.h): an fp8 block export's values
// are within half an e4m3 step of the source's, an fp8 step off is not; an NVFP4 export's within
// half an E2M1 step of block scale and global scale in the direction each form defines
// (compressed-tensors divides by weight_global_scale, ModelOpt multiplies by weight_scale_2), a
// step off or the other direction is not; the scales are read a window's rows at a time; a cast
// export equals the source after the same cast, one bf16 ULP off does not.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compare/export_bound.h"
#include "util/numeric.h"

using namespace dcpctl;

namespace {

// Tensors in memory, each one chunk, read as a view's inputs are (TensorReads).
class MemReads final : public TensorReads {
 public:
  std::map<std::string, std::vector<uint8_t>> bytes;
  mutable size_t reads = 0;
  void read(const TensorMeta& t, size_t, uint64_t from, uint64_t n, void* dst) const override {
    const std::vector<uint8_t>& b = bytes.at(t.fqn);
    if (n == UINT64_MAX) n = b.size() - from;
    REQUIRE(from + n <= b.size());
    std::memcpy(dst, b.data() + from, n);
    ++reads;
  }
  std::vector<uint8_t> read_whole(const TensorMeta& t) const override { return bytes.at(t.fqn); }
};

TensorMeta meta(const std::string& name, DType d, std::vector<int64_t> shape) {
  TensorMeta t;
  t.fqn = name;
  t.dtype = d;
  t.dtype_name = torch_name(d);
  t.shape = shape;
  t.chunk_dims.assign(shape.size(), 0);
  t.chunk_dims.insert(t.chunk_dims.end(), shape.begin(), shape.end());
  t.storage.resize(1);
  return t;
}

template <class T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A quantized [rows, cols] weight: its float32 values, their decoded values, its bound and the
// saved tensors the bound reads.
struct Quantized {
  std::vector<float> x, dq;
  std::shared_ptr<ElementBound> bound;
  MemReads saved;
  int64_t rows = 0, cols = 0;
  // The scale each element sees, as ElementBound::scales gives it for rows [r0, r0 + n).
  std::vector<float> scales(int64_t r0, int64_t n) const {
    std::vector<float> out;
    bound->scales(saved, r0, n, out);
    return out;
  }
};

std::vector<float> normal_weight(int64_t rows, int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (auto& v : x) v = dist(rng);
  x[5] = 0;  // a zero, and a value tiny beside its block's largest (a subnormal fp8)
  x[6] = 1e-7f;
  return x;
}

// Per b x b block: scale = amax / 448, q = e4m3(x / scale), dq = float(q) * scale (transformers'
// FineGrainedFP8 and torch's reader).
Quantized fp8_block(int64_t rows, int64_t cols, int64_t b, unsigned seed) {
  Quantized q;
  q.rows = rows, q.cols = cols;
  q.x = normal_weight(rows, cols, seed);
  const int64_t gr = (rows + b - 1) / b, gc = (cols + b - 1) / b;
  std::vector<float> scales(static_cast<size_t>(gr * gc));
  for (int64_t br = 0; br < gr; ++br)
    for (int64_t bc = 0; bc < gc; ++bc) {
      float amax = 0;
      for (int64_t r = br * b; r < std::min(rows, (br + 1) * b); ++r)
        for (int64_t c = bc * b; c < std::min(cols, (bc + 1) * b); ++c)
          amax = std::max(amax, std::fabs(q.x[static_cast<size_t>(r * cols + c)]));
      scales[static_cast<size_t>(br * gc + bc)] = amax / 448.0f;
    }
  q.dq.resize(q.x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float s = scales[static_cast<size_t>((r / b) * gc + c / b)];
      size_t i = static_cast<size_t>(r * cols + c);
      q.dq[i] = e4m3fn_to_f32(f32_to_e4m3fn(q.x[i] / s)) * s;
    }
  TensorMeta st = meta("w.weight_scale_inv", DType::Float32, {gr, gc});
  q.saved.bytes[st.fqn] = raw(scales);
  q.bound = std::make_shared<ElementBound>("ckpt", fp8_block_codec(), meta("w.weight", DType::Float32, {rows, cols}),
                                           scale_grid(st, b, b), e4m3_half_ulp, 0.0, 0.0, "s = weight_scale_inv");
  return q;
}

// E2M1 to nearest (ties to even codes), saturating at 6.
float e2m1_round(float v) {
  static const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  const float m = std::fabs(v);
  float best = 6;
  for (int k = 0; k < 7; ++k) {
    const float mid = (grid[k] + grid[k + 1]) / 2;
    if (m < mid || (m == mid && k % 2 == 0)) {
      best = grid[k];
      break;
    }
  }
  return v < 0 ? -best : best;
}

// NVFP4 per 16 values with a global scale (compressed-tensors' weight_global_scale g = 2688 / amax;
// ModelOpt's weight_scale_2 = 1 / g): block scale e4m3(amax16 / 6 * g), each element's scale that
// over g. `modelopt`: the bound reads weight_scale_2 and multiplies.
Quantized nvfp4(int64_t rows, int64_t cols, bool modelopt, unsigned seed, int tiny_rows = 0) {
  Quantized q;
  q.rows = rows, q.cols = cols;
  q.x = normal_weight(rows, cols, seed);
  // The first `tiny_rows` rows 10^-5 of the rest: their blocks' e4m3 scales are subnormals.
  for (size_t i = 0; i < static_cast<size_t>(tiny_rows * cols); ++i)
    q.x[i] *= 1e-5f * (1 + static_cast<float>(i / cols));
  float amax = 0;
  for (float v : q.x) amax = std::max(amax, std::fabs(v));
  const float g = 2688.0f / amax;
  const int64_t gc = cols / 16;
  std::vector<uint8_t> block(static_cast<size_t>(rows * gc));
  q.dq.resize(q.x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t bc = 0; bc < gc; ++bc) {
      float a16 = 0;
      for (int64_t c = bc * 16; c < bc * 16 + 16; ++c)
        a16 = std::max(a16, std::fabs(q.x[static_cast<size_t>(r * cols + c)]));
      uint8_t sb = f32_to_e4m3fn(a16 / 6 * g);
      if (e4m3fn_to_f32(sb) == 0) sb = f32_to_e4m3fn(0.125f);
      block[static_cast<size_t>(r * gc + bc)] = sb;
      const float s = e4m3fn_to_f32(sb) / g;
      for (int64_t c = bc * 16; c < bc * 16 + 16; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        q.dq[i] = e2m1_round(q.x[i] / s) * s;
      }
    }
  TensorMeta st = meta("w.weight_scale", DType::Float8_E4M3FN, {rows, gc});
  q.saved.bytes[st.fqn] = block;
  ScaleGrid grid = scale_grid(st, 1, 16);
  if (modelopt) {
    grid.global = meta("w.weight_scale_2", DType::Float32, {});
    q.saved.bytes[grid.global->fqn] = raw(std::vector<float>{1.0f / g});
  } else {
    grid.global = meta("w.weight_global_scale", DType::Float32, {1});
    grid.divide_by_global = true;
    q.saved.bytes[grid.global->fqn] = raw(std::vector<float>{g});
  }
  q.bound = std::make_shared<ElementBound>("ckpt", modelopt ? mo_nvfp4_codec() : ct_nvfp4_codec(),
                                           meta("w.weight", DType::Float32, {rows, cols}), std::move(grid),
                                           e2m1_half_step, 0.0, 0.0, "s = weight_scale * global");
  return q;
}

// Elements [start, start + n) of q's weight, `dq` for its decoded values, compared under its bound.
DiffAccumulator compare(const Quantized& q, const std::vector<float>& dq, uint64_t start = 0, uint64_t n = UINT64_MAX) {
  if (n == UINT64_MAX) n = q.x.size() - start;
  DiffAccumulator acc;
  std::vector<double> wa(n), wb(n);
  std::vector<uint8_t> scratch(n * 8);
  const int64_t r0 = static_cast<int64_t>(start / static_cast<uint64_t>(q.cols)),
                r1 = static_cast<int64_t>((start + n - 1) / static_cast<uint64_t>(q.cols)) + 1;
  const std::vector<float> s = q.scales(r0, r1 - r0);
  ExportBound bound;
  bound.kind = ExportBound::Kind::Codec;
  bound.codec = q.bound;
  compare_bounded(DType::Float32, reinterpret_cast<const uint8_t*>(q.x.data() + start), DType::Float32,
                  reinterpret_cast<const uint8_t*>(dq.data() + start), n, start, bound, ScaleWindow{s.data(), r0},
                  scratch.data(), wa.data(), wb.data(), acc);
  return acc;
}

}  // namespace

TEST_CASE("e4m3 half ULP", "[export_bound]") {
  CHECK(e4m3_half_ulp(448) == 16);      // [256, 512): ulp 32
  CHECK(e4m3_half_ulp(1.0) == 0.0625);  // [1, 2): ulp 1/8
  CHECK(e4m3_half_ulp(-1.9) == 0.0625);
  CHECK(e4m3_half_ulp(0x1p-6) == 0x1p-10);  // the smallest normal: ulp 2^-9, as the subnormals
  CHECK(e4m3_half_ulp(0.001) == 0x1p-10);
  CHECK(e4m3_half_ulp(0) == 0x1p-10);
}

TEST_CASE("E2M1 half steps", "[export_bound]") {
  CHECK(e2m1_half_step(0) == 0.25);
  CHECK(e2m1_half_step(-1.5) == 0.25);  // values in [1.25, 1.75] round to 1.5
  CHECK(e2m1_half_step(2) == 0.5);      // (1.75, 2.5]
  CHECK(e2m1_half_step(3) == 0.5);
  CHECK(e2m1_half_step(4) == 1);   // [3.5, 5]
  CHECK(e2m1_half_step(-6) == 1);  // (5, 6.4]: an e4m3 block scale of amax / 6 saturates that little
}

TEST_CASE("fp8 block export: within the bound, and a step off is not", "[export_bound]") {
  Quantized q = fp8_block(12, 20, 4, 7);  // partial blocks in neither direction; 3 x 5 blocks
  DiffAccumulator acc = compare(q, q.dq);
  CHECK(acc.differ == 0);
  CHECK(acc.inexact > 100);  // quantization changed most values
  // A window that starts inside the weight: the flat index finds the right block, and only the
  // scale rows of the window's rows are read.
  CHECK(compare(q, q.dq, 37).differ == 0);
  CHECK(compare(q, q.dq, 45, 30).differ == 0);
  const std::vector<float> s = q.scales(4, 3);  // rows 4..6: block row 1
  REQUIRE(s.size() == 15);
  CHECK(s[0] == q.scales(5, 1)[0]);
  // One element one fp8 step away from what quantizing gives: beyond the bound.
  for (size_t i : {size_t(0), size_t(77), q.x.size() - 1}) {
    std::vector<float> bad = q.dq;
    const float si = q.scales(static_cast<int64_t>(i) / 20, 1)[(i % 20) / 4];
    uint8_t code = f32_to_e4m3fn(q.x[i] / si);
    bad[i] = e4m3fn_to_f32(static_cast<uint8_t>(code + ((code & 0x7f) == 0x7e ? -1 : 1))) * si;
    DiffAccumulator d = compare(q, bad);
    CHECK(d.differ == 1);
    CHECK(d.first == i);
  }
  // A value 10% off: beyond e4m3's relative step (2^-3 a binade, half of it 6.25%) wherever the
  // value is a normal of the format (|x / s| >= 2^-6).
  std::vector<float> off = q.dq;
  off[100] *= 1.1f;
  REQUIRE(std::fabs(q.x[100]) > 0.01f);
  CHECK(compare(q, off).differ == 1);
}

TEST_CASE("NVFP4 export: block scale and global scale in each form's direction", "[export_bound]") {
  for (bool modelopt : {false, true}) {
    Quantized q = nvfp4(8, 64, modelopt, 11);
    DiffAccumulator acc = compare(q, q.dq);
    CHECK(acc.differ == 0);
    CHECK(acc.inexact > 300);
    CHECK(compare(q, q.dq, 70, 100).differ == 0);
    // The scales as the elements see them: block scale over the global scale either way.
    const std::vector<float> s = q.scales(0, 1);
    REQUIRE(s.size() == 4);
    CHECK(s[0] > 0);
    CHECK(s[0] < 0.05f);  // amax16 / 6 of values ~0.05: not the global scale's 2688 / amax times it
    // An element moved one E2M1 step away from its source value (toward zero from a value at or
    // beyond it): beyond the bound. A whole block's scale doubled: beyond it.
    size_t moved = 0;
    for (size_t i = 0; i < q.x.size() && moved < 3; ++i) {
      const float si = q.scales(static_cast<int64_t>(i) / 64, 1)[(i % 64) / 16];
      const float code = q.dq[i] / si;
      if (std::fabs(code) < 1 || std::fabs(q.x[i]) < std::fabs(q.dq[i])) continue;
      std::vector<float> bad = q.dq;
      bad[i] = e2m1_round(code - (code > 0 ? 0.5f : -0.5f)) * si;
      if (bad[i] == q.dq[i]) bad[i] = (code > 0 ? code - 1 : code + 1) * si;
      DiffAccumulator d = compare(q, bad);
      CHECK(d.differ == 1);
      CHECK(d.first == i);
      ++moved;
    }
    CHECK(moved == 3);
    std::vector<float> doubled = q.dq;
    for (size_t c = 16; c < 32; ++c) doubled[c] *= 2;
    CHECK(compare(q, doubled).differ >= 1);
  }
  // The direction inverted (ModelOpt's weight_scale_2 divided, as if compressed-tensors'): the
  // scale is g^2 times too large, and a step off is within it. What the codec defines matters.
  Quantized q = nvfp4(8, 64, true, 11);
  ScaleGrid wrong = scale_grid(meta("w.weight_scale", DType::Float8_E4M3FN, {8, 4}), 1, 16);
  wrong.global = meta("w.weight_scale_2", DType::Float32, {});
  wrong.divide_by_global = true;
  q.bound = std::make_shared<ElementBound>("ckpt", mo_nvfp4_codec(), meta("w.weight", DType::Float32, {8, 64}),
                                           std::move(wrong), e2m1_half_step, 0.0, 0.0, "inverted");
  std::vector<float> bad = q.dq;
  bad[3] += 0.01f;
  CHECK(compare(q, bad).differ == 0);
}

TEST_CASE("NVFP4 export: an element its block scale's e4m3 rounding saturated is within the bound", "[export_bound]") {
  for (bool modelopt : {false, true}) {
    Quantized q = nvfp4(8, 64, modelopt, 5, 4);
    // Elements the encoder saturated beyond the grid's half step at the top code: a subnormal e4m3
    // block scale rounded down from amax16 / 6.
    std::vector<size_t> saturated;
    for (size_t i = 0; i < q.x.size(); ++i) {
      const float si = q.scales(static_cast<int64_t>(i) / 64, 1)[(i % 64) / 16];
      if (std::fabs(q.dq[i]) == 6 * si && std::fabs(q.x[i]) > 7 * si) saturated.push_back(i);
    }
    REQUIRE(!saturated.empty());
    CHECK(compare(q, q.dq).differ >= 1);  // without the room: a correct export refused
    q.bound->saturating(6, 3);
    CHECK(compare(q, q.dq).differ == 0);
    // The room is the top code's, toward the source: the same element moved down a step is not within it.
    std::vector<float> bad = q.dq;
    const size_t i = saturated.front();
    bad[i] = q.dq[i] / 6 * 4;
    DiffAccumulator d = compare(q, bad);
    CHECK(d.differ == 1);
    CHECK(d.first == i);
  }
}

TEST_CASE("a scale whose shape is not the weight's grid is refused, naming it", "[export_bound]") {
  TensorMeta st = meta("w.weight_scale", DType::Float8_E4M3FN, {8, 3});
  CHECK_THROWS_WITH(ElementBound("ckpt", ct_nvfp4_codec(), meta("w.weight", DType::Float32, {8, 64}),
                                 scale_grid(st, 1, 16), e2m1_half_step, 0.0, 0.0, ""),
                    Catch::Contains("w.weight_scale") && Catch::Contains("scale grid"));
}

TEST_CASE("cast export: equal after the same cast, a ULP off is not", "[export_bound]") {
  std::vector<float> x = {1.0f, 0.1f, -3.14159f, 1e-30f, 65504.5f, 0.0f};
  std::vector<uint16_t> bf(x.size());
  cast_elements(DType::Float32, DType::BFloat16, reinterpret_cast<const uint8_t*>(x.data()),
                reinterpret_cast<uint8_t*>(bf.data()), x.size());
  ExportBound cast;
  cast.kind = ExportBound::Kind::Cast;
  auto run = [&](const std::vector<uint16_t>& b) {
    DiffAccumulator acc;
    std::vector<double> wa(x.size()), wb(x.size());
    std::vector<uint8_t> scratch(x.size() * 2);
    compare_bounded(DType::Float32, reinterpret_cast<const uint8_t*>(x.data()), DType::BFloat16,
                    reinterpret_cast<const uint8_t*>(b.data()), x.size(), 0, cast, ScaleWindow{}, scratch.data(),
                    wa.data(), wb.data(), acc);
    return acc;
  };
  DiffAccumulator ok = run(bf);
  CHECK(ok.differ == 0);
  CHECK(ok.inexact == 4);  // 1.0 and 0.0 are exact in bfloat16
  std::vector<uint16_t> bad = bf;
  bad[1] += 1;
  DiffAccumulator d = run(bad);
  CHECK(d.differ == 1);
  CHECK(d.first == 1);
}
