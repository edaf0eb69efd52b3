#include "view/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "util/numeric.h"

namespace dcpctl {

void dequantize_fp8_blocks(DType q_dtype, const uint8_t* q, const Box& box, const float* scale, int64_t scale_cols,
                           const int64_t block[2], float* out) {
  // Every float8 value as float32 (torch's .to(torch.float32)): one table of 256.
  std::array<uint8_t, 256> bytes;
  std::array<float, 256> value;
  for (int i = 0; i < 256; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  cast_elements(q_dtype, DType::Float32, bytes.data(), reinterpret_cast<uint8_t*>(value.data()), 256);
  const int64_t rows = box.sizes[0], cols = box.sizes[1];
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = scale + ((box.offsets[0] + r) / block[0]) * scale_cols;
    const uint8_t* qr = q + r * cols;
    float* o = out + r * cols;
    // Column by column of blocks: one scale each (a product of two floats is rounded once,
    // whatever the compiler: there is nothing to fuse it with).
    for (int64_t c = 0; c < cols;) {
      const int64_t g = (box.offsets[1] + c) / block[1];
      const int64_t end = std::min(cols, (g + 1) * block[1] - box.offsets[1]);
      const float s = srow[g];
      for (; c < end; ++c) o[c] = value[qr[c]] * s;
    }
  }
}

void e8m0_to_float(const uint8_t* e8m0, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i)
    out[i] = e8m0[i] == 0xFF ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, static_cast<int>(e8m0[i]) - 127);
}

void dequantize_mxfp4(const uint8_t* packed, const Box& box, const uint8_t* scales,
                      const std::vector<int64_t>& scale_shape, float* out) {
  static constexpr double kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const size_t nd = box.sizes.size();  // >= 2: [..., G, B]
  const int64_t bytes = box.sizes[nd - 1];
  // The groups of the box, in C order: their index in the whole scales is that of their offset.
  const size_t gd = nd - 1;
  std::vector<int64_t> idx(gd, 0);
  uint64_t groups = 1;
  for (size_t d = 0; d < gd; ++d) groups *= static_cast<uint64_t>(box.sizes[d]);
  for (uint64_t g = 0; g < groups; ++g) {
    uint64_t at = 0;
    for (size_t d = 0; d < gd; ++d)
      at = at * static_cast<uint64_t>(scale_shape[d]) + static_cast<uint64_t>(box.offsets[d] + idx[d]);
    // torch: ldexp(value, scale - 127), exact and rounded once to float32 (0.5 * 2^128 is 2^127,
    // 0 * 2^128 is 0, 4 * 2^128 overflows to inf): the product in double is exact.
    const double power = std::ldexp(1.0, static_cast<int>(scales[at]) - 127);
    const uint8_t* in = packed + g * static_cast<uint64_t>(bytes);
    float* o = out + g * static_cast<uint64_t>(bytes) * 2;
    for (int64_t k = 0; k < bytes; ++k) {
      o[2 * k] = static_cast<float>(kE2M1[in[k] & 0x0F] * power);
      o[2 * k + 1] = static_cast<float>(kE2M1[in[k] >> 4] * power);
    }
    for (size_t d = gd; d-- > 0;) {
      if (++idx[d] < box.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

namespace {

// d[j] = fma(x[j * stride], y, d[j]) for j < n: one step k of B·A for a row of the box, each
// element's sum taken in the same order (k = 0, 1, ...) whichever way the row is walked. With the
// FMA instructions (most x86-64 CPUs since 2013) the loop is fused in registers and vectorised;
// without them std::fmaf is exact too, one call an element.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("fma"))) void fma_row_hw(float* d, const float* x, int64_t stride, float y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) d[j] = __builtin_fmaf(x[j * stride], y, d[j]);
}
bool cpu_has_fma() {
  static const bool has = __builtin_cpu_supports("fma");
  return has;
}
#endif

void fma_row(float* d, const float* x, int64_t stride, float y, int64_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (cpu_has_fma()) return fma_row_hw(d, x, stride, y, n);
#endif
  for (int64_t j = 0; j < n; ++j) d[j] = std::fmaf(x[j * stride], y, d[j]);
}

}  // namespace

void add_lora_delta(float* w, const Box& box, const float* a, int64_t a_cols, const float* b, int64_t rank, float scale,
                    bool transposed, DType delta_dtype) {
  const int64_t rows = box.sizes[0], cols = box.sizes[1], r0 = box.offsets[0], c0 = box.offsets[1];
  std::vector<float> d(static_cast<size_t>(cols));
  std::vector<uint8_t> narrow(delta_dtype == DType::Float32 ? 0 : static_cast<size_t>(cols) * itemsize(delta_dtype));
  for (int64_t i = 0; i < rows; ++i) {
    // Row i of the box: (B·A)[r0 + i][c0 + j] = sum over k of B[r0 + i][k]·A[k][c0 + j], or for the
    // transpose (B·A)[c0 + j][r0 + i] = sum over k of B[c0 + j][k]·A[k][r0 + i]; k outermost, so
    // each element is the fused multiply-add chain PEFT's sgemm computes, from 0 (view/kernels.h).
    std::fill(d.begin(), d.end(), 0.0f);
    for (int64_t k = 0; k < rank; ++k) {
      if (transposed)
        fma_row(d.data(), b + c0 * rank + k, rank, a[k * a_cols + r0 + i], cols);
      else
        fma_row(d.data(), a + k * a_cols + c0, 1, b[(r0 + i) * rank + k], cols);
    }
    for (float& x : d) x *= scale;
    if (!narrow.empty()) {
      cast_elements(DType::Float32, delta_dtype, reinterpret_cast<const uint8_t*>(d.data()), narrow.data(), d.size());
      cast_elements(delta_dtype, DType::Float32, narrow.data(), reinterpret_cast<uint8_t*>(d.data()), d.size());
    }
    float* row = w + i * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] += d[static_cast<size_t>(j)];
  }
}

DType lora_delta_dtype(DType b_dtype) {
  return b_dtype == DType::BFloat16 || b_dtype == DType::Float16 ? b_dtype : DType::Float32;
}

void add_lora_expert_deltas(float* w, const Box& box, const float* a, int64_t a_cols, const float* b, int64_t b_rows,
                            int64_t rank, int64_t experts, float scale, bool transposed, DType delta_dtype) {
  const Box inner{{box.offsets[1], box.offsets[2]}, {box.sizes[1], box.sizes[2]}};
  const int64_t stride = box.sizes[1] * box.sizes[2];
  std::vector<float> be(static_cast<size_t>(b_rows * rank));
  for (int64_t i = 0; i < box.sizes[0]; ++i) {
    const int64_t e = box.offsets[0] + i;
    for (int64_t o = 0; o < b_rows; ++o)
      for (int64_t k = 0; k < rank; ++k)
        be[static_cast<size_t>(o * rank + k)] = b[o * rank * experts + k * experts + e];
    add_lora_delta(w + i * stride, inner, a + e * rank * a_cols, a_cols, be.data(), rank, scale, transposed,
                   delta_dtype);
  }
}

void DoraNorm::add(const float* x, int64_t col0, int64_t n, int64_t row_len) {
  const int64_t main = row_len - row_len % kLanes;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t c = col0 + j;
    const float sq = x[j] * x[j];  // rounded, then added: torch's Vectorized mul and add
    if (c < main)
      lanes[c % kLanes] += sq;
    else
      tail[c - main] = sq;
  }
}

float DoraNorm::finish(int64_t row_len) const {
  float sum = lanes[0];
  for (int l = 1; l < kLanes; ++l) sum += lanes[l];
  for (int64_t t = 0; t < row_len % kLanes; ++t) sum += tail[t];
  return std::sqrt(sum);
}

void round_to(float* v, size_t n, DType dtype) {
  if (dtype == DType::Float32 || n == 0) return;
  std::vector<uint8_t> narrow(n * itemsize(dtype));
  cast_elements(DType::Float32, dtype, reinterpret_cast<const uint8_t*>(v), narrow.data(), n);
  cast_elements(dtype, DType::Float32, narrow.data(), reinterpret_cast<uint8_t*>(v), n);
}

void dora_scale_rows(float* v, int64_t rows, int64_t cols, const float* magnitude, const float* norm, DType dtype) {
  std::vector<float> factor(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) factor[static_cast<size_t>(i)] = magnitude[i] / norm[i];
  round_to(factor.data(), factor.size(), dtype);
  for (int64_t i = 0; i < rows; ++i) {
    float* row = v + i * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] = factor[static_cast<size_t>(i)] * row[j];
    round_to(row, static_cast<size_t>(cols), dtype);
  }
}

void add_lora_bias(float* bias, int64_t off, int64_t n, const float* b, float scale, DType delta_dtype) {
  std::vector<float> d(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) d[static_cast<size_t>(i)] = b[off + i] * scale;
  round_to(d.data(), d.size(), delta_dtype);
  for (int64_t i = 0; i < n; ++i) bias[i] += d[static_cast<size_t>(i)];
}

}  // namespace dcpctl

namespace dcpctl {

namespace {
constexpr float kFp8Max = 448.0f;  // torch.finfo(torch.float8_e4m3fn).max
}

void fp8_block_scales(const float* x, int64_t rows, int64_t cols, int64_t bm, int64_t bn, float* scale) {
  const int64_t rb = (rows + bm - 1) / bm, cb = (cols + bn - 1) / bn;
  std::vector<float> amax(static_cast<size_t>(rb * cb), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* m = amax.data() + (r / bm) * cb;
    const float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      // torch's amax propagates NaN; transformers then takes a block whose amax is not > 0 (zero
      // or NaN) at scale 1, so its NaNs stay NaN and nothing else in the block is scaled.
      const float a = std::fabs(row[c]);
      float& slot = m[c / bn];
      if (a != a) slot = a;
      else if (a > slot) slot = a;
    }
  }
  // transformers writes `_FP8_MAX / safe_max_abs`, which torch computes as Tensor.__rtruediv__:
  // reciprocal() * 448, two float32 roundings (measured: a single division differs in ~5% of
  // scales).
  for (size_t i = 0; i < amax.size(); ++i) scale[i] = amax[i] > 0.0f ? (1.0f / amax[i]) * kFp8Max : 1.0f;
}

void fp8_inverse_scales(const float* scale, size_t n, float* inv) {
  for (size_t i = 0; i < n; ++i) inv[i] = 1.0f / scale[i];
}

void quantize_fp8_box(const float* x, int64_t cols, int64_t bm, int64_t bn, const float* scale, int64_t r0, int64_t r1, int64_t c0,
                      int64_t c1, uint8_t* q) {
  const int64_t cb = (cols + bn - 1) / bn, w = c1 - c0;
  std::vector<float> scaled(static_cast<size_t>(w));
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * cols;
    const float* s = scale + (r / bm) * cb;
    for (int64_t c = c0; c < c1; ++c) {
      float v = row[c] * s[c / bn];
      scaled[static_cast<size_t>(c - c0)] = v < -kFp8Max ? -kFp8Max : (v > kFp8Max ? kFp8Max : v);  // torch.clamp keeps NaN
    }
    cast_elements(DType::Float32, DType::Float8_E4M3FN, reinterpret_cast<const uint8_t*>(scaled.data()), q + (r - r0) * w,
                  static_cast<size_t>(w));
  }
}

}  // namespace dcpctl

namespace dcpctl {

uint8_t e2m1_nibble(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const uint8_t sign = (bits >> 31) ? 0x8 : 0x0;
  const float a = std::fabs(v);
  // The codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; between two neighbours the midpoint goes to the
  // one whose code is even (its mantissa bit 0), as round-to-nearest-even does. The code is the
  // number of midpoints a lies above (a tie counting where the code above it is even): those
  // midpoints are a prefix of the rising list, so the count needs no branch (NaN counts none).
  static constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  int code = 0;
  for (int c = 0; c < 7; ++c) code += static_cast<int>(a > kMid[c]) | (static_cast<int>(a == kMid[c]) & (c & 1));
  return static_cast<uint8_t>(sign | code);
}

uint8_t mxfp4_scale_byte(float amax) {
  constexpr int kEmaxE2M1 = 2;
  uint32_t bits;
  std::memcpy(&bits, &amax, 4);
  return static_cast<uint8_t>(std::clamp(static_cast<int>((bits >> 23) & 0xFF) - 127 - kEmaxE2M1, -127, 128) + 127);
}

void quantize_mxfp4(const float* x, size_t groups, uint8_t* packed, uint8_t* scales) {
  constexpr int kBlock = 32;
  for (size_t g = 0; g < groups; ++g) {
    const float* v = x + g * kBlock;
    float amax = 0.0f;
    for (int k = 0; k < kBlock; ++k) amax = std::max(amax, std::fabs(v[k]));
    const uint8_t biased = mxfp4_scale_byte(amax);
    scales[g] = biased;
    // torchao: the scale as float32 from its bits (biased << 23), at least 2^-126 (the smallest
    // normal). A power of two between 2^-126 and 2^126 (an amax's exponent field is at most 255):
    // multiplying by its reciprocal (exact, normal) rounds once to the same float32 as dividing.
    const float inv = biased == 0 ? std::ldexp(1.0f, 126) : std::ldexp(1.0f, 127 - static_cast<int>(biased));
    uint8_t* out = packed + g * (kBlock / 2);
    for (int k = 0; k < kBlock; k += 2)
      out[k / 2] = static_cast<uint8_t>(e2m1_nibble(v[k] * inv) | (e2m1_nibble(v[k + 1] * inv) << 4));
  }
}

void mxfp4_column_scales(const float* x, int64_t rows, int64_t cols, uint8_t* scales) {
  constexpr int64_t kBlock = 32;
  const int64_t groups = rows / kBlock;
  std::vector<float> amax(static_cast<size_t>(cols));
  for (int64_t g = 0; g < groups; ++g) {
    std::fill(amax.begin(), amax.end(), 0.0f);
    for (int64_t r = g * kBlock; r < (g + 1) * kBlock; ++r) {
      const float* row = x + r * cols;
      for (int64_t c = 0; c < cols; ++c) amax[static_cast<size_t>(c)] = std::max(amax[static_cast<size_t>(c)], std::fabs(row[c]));
    }
    for (int64_t c = 0; c < cols; ++c) scales[c * groups + g] = mxfp4_scale_byte(amax[static_cast<size_t>(c)]);
  }
}

}  // namespace dcpctl
