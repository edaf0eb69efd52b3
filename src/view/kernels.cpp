#include "view/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "util/numeric.h"
#include "util/scalar.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
    out[i] =
        e8m0[i] == 0xFF ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, static_cast<int>(e8m0[i]) - 127);
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

namespace {

// f32_to_e4m3fn (util/numeric.h, c10's fp8e4m3fn_from_fp32_value) of a value clamped to [-448,
// 448] (NaN kept), without a branch: both of its roundings (subnormal and normal) are computed
// and one is selected, so a loop of these vectorises. Below 2^-6 the float add rounds the value to a
// multiple of 2^-9 (nearest even) and its low bits are the code; above, the mantissa is rounded to 3
// bits, nearest even, by adding 0x7FFFF plus the kept bit. |v| <= 448 never reaches the saturating
// branch (464 would): only NaN does, as 0x7F with its sign.
inline uint8_t e4m3fn_clamped(float v) {
  const uint32_t u = f32_bits(v), sign = u & 0x80000000u, whole = u ^ sign;
  // torch.clamp(-448, 448), which keeps NaN: on the magnitude's bits (448 is 0x43E00000).
  const uint32_t over = 0u - static_cast<uint32_t>((whole > 0x43E00000u) & (whole <= 0x7F800000u));
  const uint32_t a = (whole & ~over) | (0x43E00000u & over);
  const uint32_t sub = f32_bits(bits_f32(a) + 16384.0f) - (141u << 23);
  const uint32_t norm = (a - (120u << 23) + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
  // Selected by masks, not `?:`: GCC would move the float add under a branch of its own.
  const uint32_t small = 0u - static_cast<uint32_t>(a < (121u << 23)),
                 nan = 0u - static_cast<uint32_t>(a > 0x7F800000u);
  const uint32_t r = (((sub & small) | (norm & ~small)) & ~nan) | (0x7Fu & nan);
  return static_cast<uint8_t>(r | (sign >> 24));
}

}  // namespace

void fp8_block_scales(const float* x, int64_t rows, int64_t cols, int64_t bm, int64_t bn, float* scale) {
  const int64_t rb = (rows + bm - 1) / bm, cb = (cols + bn - 1) / bn;
  // Each block's amax as the bits of |x|: for non-negative floats the integer order is the float
  // order and every NaN lies above infinity, so an integer max (a vectorised loop, no branch) gives
  // the amax, or a NaN where the block holds one (torch's amax propagates NaN; transformers then
  // takes a block whose amax is not > 0, zero or NaN, at scale 1, so its NaNs stay NaN and nothing
  // else in the block is scaled).
  std::vector<uint32_t> amax(static_cast<size_t>(rb * cb), 0u);
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t* m = amax.data() + (r / bm) * cb;
    const float* row = x + r * cols;
    for (int64_t j = 0; j < cb; ++j) {
      const int64_t c0 = j * bn, c1 = std::min(cols, c0 + bn);
      uint32_t most = m[j];
      for (int64_t c = c0; c < c1; ++c) {
        const uint32_t a = f32_bits(row[c]) & 0x7FFFFFFFu;
        most = a > most ? a : most;
      }
      m[j] = most;
    }
  }
  // transformers writes `_FP8_MAX / safe_max_abs`, which torch computes as Tensor.__rtruediv__:
  // reciprocal() * 448, two float32 roundings (measured: a single division differs in ~5% of
  // scales).
  for (size_t i = 0; i < amax.size(); ++i) {
    const float a = bits_f32(amax[i]);
    scale[i] = a > 0.0f ? (1.0f / a) * kFp8Max : 1.0f;
  }
}

void fp8_inverse_scales(const float* scale, size_t n, float* inv) {
  for (size_t i = 0; i < n; ++i) inv[i] = 1.0f / scale[i];
}

void quantize_fp8_box(const float* x, int64_t cols, int64_t bm, int64_t bn, const float* scale, int64_t r0, int64_t r1,
                      int64_t c0, int64_t c1, uint8_t* q) {
  const int64_t cb = (cols + bn - 1) / bn, w = c1 - c0;
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * cols;
    const float* s = scale + (r / bm) * cb;
    uint8_t* out = q + (r - r0) * w - c0;
    // Block column by block column: one scale each, then a plain loop (multiply, clamp, round)
    // the vectoriser takes.
    for (int64_t j = c0 / bn; j * bn < c1; ++j) {
      const int64_t a = std::max(c0, j * bn), b = std::min(c1, (j + 1) * bn);
      const float sj = s[j];
      for (int64_t c = a; c < b; ++c) {
        out[c] = e4m3fn_clamped(row[c] * sj);
      }
    }
  }
}

}  // namespace dcpctl

namespace dcpctl {

namespace {

// e2m1_nibble without a loop or branch (inlined into loops the vectoriser takes): the count of the
// seven midpoints `a` lies above, a tie counting where the code above it is even (the midpoints
// 0.75, 1.75 and 3.5, whose upper neighbours 1, 2 and 4 have even codes); NaN counts none.
inline uint32_t e2m1_code(float v) {
  const float a = std::fabs(v);
  const uint32_t code = static_cast<uint32_t>(a > 0.25f) + static_cast<uint32_t>(a >= 0.75f) +
                        static_cast<uint32_t>(a > 1.25f) + static_cast<uint32_t>(a >= 1.75f) +
                        static_cast<uint32_t>(a > 2.5f) + static_cast<uint32_t>(a >= 3.5f) +
                        static_cast<uint32_t>(a > 5.0f);
  return code | ((f32_bits(v) >> 28) & 0x8u);
}

// The float32 a group's values are multiplied by for scale byte `biased` (at most 253: an amax's
// exponent field less 2): 2^(127 - biased), and 2^126 for byte 0 (torchao's scale is at least
// 2^-126; see quantize_mxfp4). Its exponent field, selected without a branch.
inline float mxfp4_inverse(uint32_t biased) {
  return bits_f32((biased == 0 ? 253u : 254u - biased) << 23);
}

}  // namespace

uint8_t e2m1_nibble(float v) {
  return static_cast<uint8_t>(e2m1_code(v));
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
    const float inv = mxfp4_inverse(biased);
    uint8_t* out = packed + g * (kBlock / 2);
    for (int k = 0; k < kBlock; k += 2)
      out[k / 2] = static_cast<uint8_t>(e2m1_code(v[k] * inv) | (e2m1_code(v[k + 1] * inv) << 4));
  }
}

void quantize_mxfp4_columns(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales) {
  constexpr int64_t kBlock = 32, kBytes = kBlock / 2;
  const int64_t groups = rows / kBlock;
  const size_t n = static_cast<size_t>(cols);
  std::vector<float> amax(n), inv(n);
  std::vector<uint8_t> tile(static_cast<size_t>(kBytes) * n);  // [16][cols]: byte k of each column's group
  for (int64_t g = 0; g < groups; ++g) {
    const float* top = x + g * kBlock * cols;
    // Each column's amax over the group's 32 rows, row by row (contiguous, vectorised along the
    // columns): std::max as quantize_mxfp4 takes it (a NaN never enters).
    std::fill(amax.begin(), amax.end(), 0.0f);
    for (int64_t r = 0; r < kBlock; ++r) {
      const float* row = top + r * cols;
      for (size_t c = 0; c < n; ++c) amax[c] = std::max(amax[c], std::fabs(row[c]));
    }
    for (size_t c = 0; c < n; ++c) {
      const uint8_t biased = mxfp4_scale_byte(amax[c]);
      scales[c * static_cast<size_t>(groups) + static_cast<size_t>(g)] = biased;
      inv[c] = mxfp4_inverse(biased);
    }
    // Rows 2k and 2k + 1 of the group make byte k of every column's 16, the first in the low nibble.
    for (int64_t k = 0; k < kBytes; ++k) {
      const float *lo = top + 2 * k * cols, *hi = lo + cols;
      uint8_t* t = tile.data() + static_cast<size_t>(k) * n;
      for (size_t c = 0; c < n; ++c)
        t[c] = static_cast<uint8_t>(e2m1_code(lo[c] * inv[c]) | (e2m1_code(hi[c] * inv[c]) << 4));
    }
    // The tile into each column's group: [cols, groups, 16].
    for (size_t c = 0; c < n; ++c) {
      uint8_t* out = packed + (c * static_cast<size_t>(groups) + static_cast<size_t>(g)) * kBytes;
      for (int64_t k = 0; k < kBytes; ++k) out[k] = tile[static_cast<size_t>(k) * n + c];
    }
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
      for (int64_t c = 0; c < cols; ++c)
        amax[static_cast<size_t>(c)] = std::max(amax[static_cast<size_t>(c)], std::fabs(row[c]));
    }
    for (int64_t c = 0; c < cols; ++c) scales[c * groups + g] = mxfp4_scale_byte(amax[static_cast<size_t>(c)]);
  }
}

}  // namespace dcpctl

namespace dcpctl {

namespace {

// The kernels' loops, inlined into a baseline and an AVX2 function each (kernels_avx2 below).
#define DCPCTL_BODY inline __attribute__((always_inline))

// |x| as bits, a NaN as 0 (so that an integer max skips it, as std::max(amax, |x|) does).
inline uint32_t abs_bits_no_nan(float v) {
  const uint32_t a = f32_bits(v) & 0x7FFFFFFFu;
  return a & (0u - static_cast<uint32_t>(a <= 0x7F800000u));
}

}  // namespace

namespace {

DCPCTL_BODY void group_abs_max_body(const float* x, int64_t n, int64_t group, float* amax) {
  for (int64_t g = 0; g * group < n; ++g) {
    const float* v = x + g * group;
    uint32_t most = 0;
    for (int64_t k = 0; k < group; ++k) {
      const uint32_t a = abs_bits_no_nan(v[k]);
      most = a > most ? a : most;
    }
    amax[g] = bits_f32(most);
  }
}

DCPCTL_BODY float abs_max_body(const float* x, size_t n) {
  uint32_t most = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = abs_bits_no_nan(x[i]);
    most = a > most ? a : most;
  }
  return bits_f32(most);
}

DCPCTL_BODY void divide_by_groups_body(const float* x, int64_t n, int64_t group, const float* scale, float* q) {
  for (int64_t g = 0; g * group < n; ++g) {
    const float s = scale[g];
    const float* v = x + g * group;
    float* o = q + g * group;
    for (int64_t k = 0; k < group; ++k) o[k] = v[k] / s;
  }
}

}  // namespace

void e4m3fn_saturated(const float* q, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = e4m3fn_clamped(q[i]);
}

namespace {

// fp4_code without a branch: 7 less the count of the bounds |v| lies at or below (a NaN lies
// below none: 7), the sign from a compare.
inline uint32_t fp4_code_bits(float v) {
  const float m = std::fabs(v);
  const uint32_t below = static_cast<uint32_t>(m <= 0.25f) + static_cast<uint32_t>(m < 0.75f) +
                         static_cast<uint32_t>(m <= 1.25f) + static_cast<uint32_t>(m < 1.75f) +
                         static_cast<uint32_t>(m <= 2.5f) + static_cast<uint32_t>(m < 3.5f) +
                         static_cast<uint32_t>(m <= 5.0f);
  return (7u - below) | (static_cast<uint32_t>(v < 0.0f) << 3);
}

}  // namespace

uint8_t fp4_code(float v) {
  return static_cast<uint8_t>(fp4_code_bits(v));
}

namespace {

DCPCTL_BODY void fp4_pairs_body(const float* q, size_t n, uint8_t* out) {
  for (size_t k = 0; k < n / 2; ++k)
    out[k] = static_cast<uint8_t>(fp4_code_bits(q[2 * k]) | (fp4_code_bits(q[2 * k + 1]) << 4));
}

}  // namespace

namespace {

// int4_pairs' code without a branch: NaN as 0, clamped, rounded half to even by adding and taking
// away 1.5 * 2^23 (exact for |v| <= 8 in float32's default rounding), offset by 8.
inline uint32_t int4_code(float v) {
  v = v == v ? v : 0.0f;
  v = std::min(std::max(v, -8.0f), 7.0f);
  const float r = (v + 0x1.8p23f) - 0x1.8p23f;
  return static_cast<uint32_t>(static_cast<int32_t>(r) + 8);
}

}  // namespace

namespace {

DCPCTL_BODY void int4_pairs_body(const float* q, size_t n, uint8_t* out) {
  for (size_t k = 0; k < n / 2; ++k)
    out[k] = static_cast<uint8_t>(int4_code(q[2 * k]) | (int4_code(q[2 * k + 1]) << 4));
}

// group_abs_max, abs_max and divide_by_groups compiled a second time for AVX2 (the vectoriser then
// takes 8 floats a step, not 4), chosen once by the CPU: integer maxima and element-wise
// divisions, no sum and no FMA (no fma target), so each result is the baseline's. (An nvfp4
// export of Qwen3-1.7B's config: 7.4 user-s before, 5.0 after.)
#if defined(__x86_64__)
bool kernels_avx2() {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return !scalar_forced() && __builtin_cpu_supports("avx2") != 0;
  }();
  return avx2;
}
#define DCPCTL_AVX2_TWIN __attribute__((target("avx2")))
DCPCTL_AVX2_TWIN void group_abs_max_avx2(const float* x, int64_t n, int64_t g, float* a) {
  group_abs_max_body(x, n, g, a);
}
DCPCTL_AVX2_TWIN float abs_max_avx2(const float* x, size_t n) {
  return abs_max_body(x, n);
}
DCPCTL_AVX2_TWIN void divide_by_groups_avx2(const float* x, int64_t n, int64_t g, const float* s, float* q) {
  divide_by_groups_body(x, n, g, s, q);
}

// Four vectors of 8 codes (0 to 15, element 2k and 2k + 1 in a 64-bit lane) as 16 bytes, the
// first of each pair in the low nibble.
// Each pair's byte in the low dword of its 64-bit lane, those four dwords in the low half.
DCPCTL_AVX2_TWIN inline __m128i pair_bytes(__m256i c) {
  const __m256i t = _mm256_and_si256(_mm256_or_si256(c, _mm256_srli_epi64(c, 28)), _mm256_set1_epi64x(0xFF));
  return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)));
}

DCPCTL_AVX2_TWIN void store_pairs(__m256i c0, __m256i c1, __m256i c2, __m256i c3, uint8_t* out) {
  const __m128i lo = _mm_packus_epi32(pair_bytes(c0), pair_bytes(c1)),
                hi = _mm_packus_epi32(pair_bytes(c2), pair_bytes(c3));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(lo, hi));
}

// int4_code of 8 lanes: a NaN 0, std::max(v, -8) and std::min(., 7) (max_ps and min_ps select as
// they do for every value but a NaN, gone by then), the same rounding additions, + 8.
DCPCTL_AVX2_TWIN __m256i int4_codes(const float* q) {
  __m256 v = _mm256_loadu_ps(q);
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-8.0f)), _mm256_set1_ps(7.0f));
  const __m256 magic = _mm256_set1_ps(0x1.8p23f);
  const __m256 r = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
  return _mm256_add_epi32(_mm256_cvttps_epi32(r), _mm256_set1_epi32(8));
}

// -1 where m <= b (le) or m < b (lt), else 0.
DCPCTL_AVX2_TWIN inline __m256i le(__m256 m, float b) {
  return _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(b), _CMP_LE_OQ));
}
DCPCTL_AVX2_TWIN inline __m256i lt(__m256 m, float b) {
  return _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(b), _CMP_LT_OQ));
}

// fp4_code_bits of 8 lanes: 7 plus the compares' masks (each -1 where |v| lies at or below a
// bound; a NaN below none), the sign as bit 3.
DCPCTL_AVX2_TWIN __m256i fp4_codes(const float* q) {
  const __m256 v = _mm256_loadu_ps(q), m = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  __m256i code = _mm256_add_epi32(_mm256_set1_epi32(7), le(m, 0.25f));
  code = _mm256_add_epi32(_mm256_add_epi32(code, lt(m, 0.75f)), le(m, 1.25f));
  code = _mm256_add_epi32(_mm256_add_epi32(code, lt(m, 1.75f)), le(m, 2.5f));
  code = _mm256_add_epi32(_mm256_add_epi32(code, lt(m, 3.5f)), le(m, 5.0f));
  const __m256i neg = _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_or_si256(code, _mm256_and_si256(neg, _mm256_set1_epi32(8)));
}

DCPCTL_AVX2_TWIN void int4_pairs_avx2(const float* q, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    store_pairs(int4_codes(q + i), int4_codes(q + i + 8), int4_codes(q + i + 16), int4_codes(q + i + 24), out + i / 2);
  int4_pairs_body(q + i, n - i, out + i / 2);
}

DCPCTL_AVX2_TWIN void fp4_pairs_avx2(const float* q, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    store_pairs(fp4_codes(q + i), fp4_codes(q + i + 8), fp4_codes(q + i + 16), fp4_codes(q + i + 24), out + i / 2);
  fp4_pairs_body(q + i, n - i, out + i / 2);
}
#define DCPCTL_PICK(name, ...) return kernels_avx2() ? name##_avx2(__VA_ARGS__) : name##_body(__VA_ARGS__)
#else
#define DCPCTL_PICK(name, ...) return name##_body(__VA_ARGS__)
#endif

}  // namespace

void group_abs_max(const float* x, int64_t n, int64_t group, float* amax) {
  DCPCTL_PICK(group_abs_max, x, n, group, amax);
}
float abs_max(const float* x, size_t n) {
  DCPCTL_PICK(abs_max, x, n);
}
void divide_by_groups(const float* x, int64_t n, int64_t group, const float* scale, float* q) {
  DCPCTL_PICK(divide_by_groups, x, n, group, scale, q);
}
// fp4_pairs and int4_pairs: GCC 12 vectorises their selects for neither target, so the AVX2 ones are written out.
void fp4_pairs(const float* q, size_t n, uint8_t* out) {
  DCPCTL_PICK(fp4_pairs, q, n, out);
}
void int4_pairs(const float* q, size_t n, uint8_t* out) {
  DCPCTL_PICK(int4_pairs, q, n, out);
}

}  // namespace dcpctl
