// The audit's bounds (compare/export_bound.h): an fp8 block export's values are within half an
// e4m3 step of the source's, an fp8 step off is not; a cast export equals the source after the
// same cast, one bf16 ULP off does not.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compare/export_bound.h"
#include "util/numeric.h"

using namespace dcpctl;

namespace {

// A [rows, cols] float32 weight quantized as transformers' FineGrainedFP8 does (per b x b block:
// scale = amax / 448, q = e4m3(x / scale)) and dequantized as torch's reader does (float(q) * scale).
struct Quantized {
  std::vector<float> x, dq;
  ExportBound bound;
};

Quantized quantize(int64_t rows, int64_t cols, int64_t b, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  Quantized q;
  q.x.resize(static_cast<size_t>(rows * cols));
  for (auto& v : q.x) v = dist(rng);
  q.x[5] = 0;  // a zero, and a value tiny beside its block's largest (a subnormal fp8)
  q.x[6] = 1e-7f;
  const int64_t gr = (rows + b - 1) / b, gc = (cols + b - 1) / b;
  auto scales = std::make_shared<std::vector<float>>(static_cast<size_t>(gr * gc));
  for (int64_t br = 0; br < gr; ++br)
    for (int64_t bc = 0; bc < gc; ++bc) {
      float amax = 0;
      for (int64_t r = br * b; r < std::min(rows, (br + 1) * b); ++r)
        for (int64_t c = bc * b; c < std::min(cols, (bc + 1) * b); ++c)
          amax = std::max(amax, std::fabs(q.x[static_cast<size_t>(r * cols + c)]));
      (*scales)[static_cast<size_t>(br * gc + bc)] = amax / 448.0f;
    }
  q.dq.resize(q.x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float s = (*scales)[static_cast<size_t>((r / b) * gc + c / b)];
      size_t i = static_cast<size_t>(r * cols + c);
      q.dq[i] = e4m3fn_to_f32(f32_to_e4m3fn(q.x[i] / s)) * s;
    }
  q.bound.kind = ExportBound::Kind::Fp8Block;
  q.bound.half_step = e4m3_half_ulp;
  q.bound.scales = scales;
  q.bound.cols = cols;
  q.bound.b0 = q.bound.b1 = b;
  q.bound.grid_cols = gc;
  return q;
}

DiffAccumulator compare(const std::vector<float>& a, const std::vector<float>& b, const ExportBound& bound,
                        uint64_t start = 0) {
  DiffAccumulator acc;
  std::vector<double> wa(a.size()), wb(a.size());
  std::vector<uint8_t> scratch(a.size() * 8);
  compare_bounded(DType::Float32, reinterpret_cast<const uint8_t*>(a.data()), DType::Float32,
                  reinterpret_cast<const uint8_t*>(b.data()), a.size(), start, bound, scratch.data(), wa.data(),
                  wb.data(), acc);
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

TEST_CASE("fp8 block export: within the bound, and a step off is not", "[export_bound]") {
  Quantized q = quantize(12, 20, 4, 7);  // partial blocks in neither direction; 3 x 5 blocks
  DiffAccumulator acc = compare(q.x, q.dq, q.bound);
  CHECK(acc.differ == 0);
  CHECK(acc.inexact > 100);  // quantization changed most values
  // A window that starts inside the weight: the flat index finds the right block.
  std::vector<float> xa(q.x.begin() + 37, q.x.end()), da(q.dq.begin() + 37, q.dq.end());
  CHECK(compare(xa, da, q.bound, 37).differ == 0);
  // One element one fp8 step away from what quantizing gives: beyond the bound.
  for (size_t i : {size_t(0), size_t(77), q.x.size() - 1}) {
    std::vector<float> bad = q.dq;
    int64_t r = static_cast<int64_t>(i) / 20, c = static_cast<int64_t>(i) % 20;
    float s = (*q.bound.scales)[static_cast<size_t>((r / 4) * 5 + c / 4)];
    uint8_t code = f32_to_e4m3fn(q.x[i] / s);
    bad[i] = e4m3fn_to_f32(static_cast<uint8_t>(code + ((code & 0x7f) == 0x7e ? -1 : 1))) * s;
    DiffAccumulator d = compare(q.x, bad, q.bound);
    CHECK(d.differ == 1);
    CHECK(d.first == i);
  }
  // A value 10% off: beyond e4m3's relative step (2^-3 a binade, half of it 6.25%) wherever the
  // value is a normal of the format (|x / s| >= 2^-6).
  std::vector<float> off = q.dq;
  off[100] *= 1.1f;
  REQUIRE(std::fabs(q.x[100]) > 0.01f);
  CHECK(compare(q.x, off, q.bound).differ == 1);
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
                    reinterpret_cast<const uint8_t*>(b.data()), x.size(), 0, cast, scratch.data(), wa.data(), wb.data(),
                    acc);
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
