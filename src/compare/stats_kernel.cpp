// The hot loop of `dcpctl stats`: raw tensor bytes of any dtype -> per-block statistics.
//
// Elements are decoded a block (kBlock values, 32 KiB of float64: it stays in L1) at a time into
// a float64 buffer, and each block is summarised by branch-free loops over 8 lanes written with
// GCC vector extensions, so the compiler emits SIMD for any target: 2 x 128-bit SSE2 on the
// baseline, 256-bit AVX2 where the CPU has it (picked once at run time). The two paths compute
// the same operations lane for lane in the same order (no FMA: contraction would round
// differently), so the statistics do not depend on the machine.
//
// Per block: pass 1 sums (x - shift) and x^2, tracks min, max and the zero count; abs max is
// max(|min|, |max|). If the sums come out non-finite the block holds a NaN or an infinity (or
// squares overflowing float64), and only then it is walked again element by element to count
// them and find the first one. Pass 2 sums squared deviations from the block mean (the data is
// still in L1). Blocks are merged by StatsAccumulator::merge (Chan's update).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "compare/stats_core.h"
#include "util/elements.h"
#include "util/numeric.h"

namespace dcpctl {

namespace {

constexpr size_t kBlock = 4096;
constexpr size_t kLanes = 8;  // value i of a block is summed in lane i % 8, on every target

#define DCPCTL_INLINE inline __attribute__((always_inline))

// Every function taking or returning a vector is inlined (internal linkage, always_inline), so
// GCC's note that such an ABI differs between targets concerns no call that exists.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// Native vectors: 2 doubles (SSE2) or 4 (AVX2); kLanes / width of them make the 8 lanes. Wider
// generic vectors are lowered lane by lane through the stack for ?:, so they are not used.
using V2 = double __attribute__((vector_size(16)));
using V4 = double __attribute__((vector_size(32)));

template <class To, class From>
DCPCTL_INLINE To bits_as(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}

template <class T>
DCPCTL_INLINE T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// --- decoding: n values (n <= kBlock) of a real dtype into float64, exactly as widen() ---------
// Plain loops the vectoriser turns into SIMD (this file is compiled with -ftree-vectorize).

template <class T>
DCPCTL_INLINE void decode_as(const uint8_t* s, size_t n, double* d) {
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<double>(load<T>(s + i * sizeof(T)));
}

DCPCTL_INLINE void decode_bf16(const uint8_t* s, size_t n, double* d) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(load<uint16_t>(s + 2 * i)) << 16;  // bfloat16 is float32's top half
    d[i] = static_cast<double>(bits_as<float>(u));
  }
}

// float16 -> float32 by bits: exponent and mantissa shifted into place read as a float32 are the
// value times 2^-112 (for subnormals too, as float32 subnormals), so one exact multiply by 2^112
// rebuilds it; exponent 31 (inf, NaN with its payload) maps to float32's exponent 255.
DCPCTL_INLINE void decode_f16(const uint8_t* s, size_t n, double* d) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t h = load<uint16_t>(s + 2 * i);
    uint32_t em = (h & 0x7FFFu) << 13;
    uint32_t scaled = bits_as<uint32_t>(bits_as<float>(em) * 0x1p112f);
    uint32_t bits = (em >= (0x7C00u << 13) ? (em | 0x7F800000u) : scaled) | ((h & 0x8000u) << 16);
    d[i] = static_cast<double>(bits_as<float>(bits));
  }
}
// Every value of a float8 format, decoded once by the exact scalar decoders.
struct Table8 {
  double v[256];
  template <class F>
  explicit Table8(F f) {
    for (int i = 0; i < 256; ++i) v[i] = static_cast<double>(f(static_cast<uint8_t>(i)));
  }
};

const double* table8(DType d) {
  static const Table8 e4m3fn(e4m3fn_to_f32), e5m2(e5m2_to_f32), e4m3fnuz(e4m3fnuz_to_f64), e5m2fnuz(e5m2fnuz_to_f64),
      e8m0(e8m0fnu_to_f64);
  switch (d) {
    case DType::Float8_E4M3FN: return e4m3fn.v;
    case DType::Float8_E5M2: return e5m2.v;
    case DType::Float8_E4M3FNUZ: return e4m3fnuz.v;
    case DType::Float8_E5M2FNUZ: return e5m2fnuz.v;
    default: return e8m0.v;
  }
}

// The dtype of each value: a complex dtype's components.
DType component(DType d) {
  switch (d) {
    case DType::Complex32: return DType::Float16;
    case DType::Complex64: return DType::Float32;
    case DType::Complex128: return DType::Float64;
    default: return d;
  }
}

// n values of real dtype d at s as float64: a pointer to them (s itself for aligned float64,
// else buf after decoding).
DCPCTL_INLINE const double* decode(DType d, const uint8_t* s, size_t n, double* buf) {
  switch (d) {
    case DType::Float64:
      if (reinterpret_cast<uintptr_t>(s) % alignof(double) == 0) return reinterpret_cast<const double*>(s);
      std::memcpy(buf, s, n * 8);
      return buf;
    case DType::Float32: decode_as<float>(s, n, buf); return buf;
    case DType::BFloat16: decode_bf16(s, n, buf); return buf;
    case DType::Float16: decode_f16(s, n, buf); return buf;
    case DType::Int8: decode_as<int8_t>(s, n, buf); return buf;
    case DType::UInt8: decode_as<uint8_t>(s, n, buf); return buf;
    case DType::Int16: decode_as<int16_t>(s, n, buf); return buf;
    case DType::UInt16: decode_as<uint16_t>(s, n, buf); return buf;
    case DType::Int32: decode_as<int32_t>(s, n, buf); return buf;
    case DType::UInt32: decode_as<uint32_t>(s, n, buf); return buf;
    case DType::Bool:
      for (size_t i = 0; i < n; ++i) buf[i] = s[i] ? 1.0 : 0.0;
      return buf;
    case DType::Float8_E4M3FN:
    case DType::Float8_E5M2:
    case DType::Float8_E4M3FNUZ:
    case DType::Float8_E5M2FNUZ:
    case DType::Float8_E8M0FNU: {
      const double* t = table8(d);
      for (size_t i = 0; i < n; ++i) buf[i] = t[s[i]];
      return buf;
    }
    default: widen(d, s, n, buf); return buf;  // int64/uint64: scalar conversions
  }
}

// --- one block ---------------------------------------------------------------------------------

// The 8 lanes of K vectors of width W, each lane summed in the same order on every target.
template <class N, size_t K>
DCPCTL_INLINE double lane_sum(const N (&v)[K]) {
  constexpr size_t W = sizeof(N) / sizeof(double);
  double l[kLanes];
  for (size_t k = 0; k < K; ++k)
    for (size_t w = 0; w < W; ++w) l[k * W + w] = v[k][w];
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

template <class N>
DCPCTL_INLINE StatsAccumulator block_stats(const double* p, size_t m, uint64_t start) {
  constexpr size_t W = sizeof(N) / sizeof(double), K = kLanes / W;
  StatsAccumulator s;
  s.n = m;
  // Summing deviations from the block's first value keeps the sum small, so a large common
  // offset (weights near 1e9, or a bias of 1e4 with 1e-3 spread) costs no digits of the mean.
  const double shift = std::isfinite(p[0]) ? p[0] : 0.0;
  const double inf = std::numeric_limits<double>::infinity();
  const size_t body = m - m % kLanes;
  double sum, sq, lo = inf, hi = -inf;
  {
    const N vshift = N{} + shift, one = N{} + 1.0, zero = N{};
    N su[K], q[K], vlo[K], vhi[K], z[K];
#pragma GCC unroll 4
    for (size_t k = 0; k < K; ++k) su[k] = q[k] = z[k] = zero, vlo[k] = zero + inf, vhi[k] = zero - inf;
    for (size_t i = 0; i < body; i += kLanes) {
#pragma GCC unroll 4
      for (size_t k = 0; k < K; ++k) {
        N v = load<N>(p + i + k * W);
        su[k] += v - vshift;
        q[k] += v * v;
        vlo[k] = v < vlo[k] ? v : vlo[k];
        vhi[k] = v > vhi[k] ? v : vhi[k];
        z[k] += v == zero ? one : zero;
      }
    }
    sum = lane_sum(su);
    sq = lane_sum(q);
    double zeros = lane_sum(z);
    for (size_t k = 0; k < K; ++k)
      for (size_t w = 0; w < W; ++w) {
        lo = vlo[k][w] < lo ? vlo[k][w] : lo;
        hi = vhi[k][w] > hi ? vhi[k][w] : hi;
      }
    for (size_t i = body; i < m; ++i) {
      double v = p[i];
      sum += v - shift;
      sq += v * v;
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
      zeros += v == 0;
    }
    s.zeros = static_cast<uint64_t>(zeros);
  }
  double am = std::max(std::fabs(lo), std::fabs(hi));
  if (!std::isfinite(sum) || !std::isfinite(sq)) {
    // A NaN or an infinity (or squares past float64's range): count and locate them, and keep
    // min, max and abs max over the values that are not NaN.
    sum = sq = 0;
    lo = inf, hi = -inf, am = 0;
    for (size_t i = 0; i < m; ++i) {
      double v = p[i];
      sum += v - shift;
      sq += v * v;
      if (!std::isfinite(v)) {
        if (std::isnan(v))
          ++s.nan;
        else if (v > 0)
          ++s.pos_inf;
        else
          ++s.neg_inf;
        if (s.first_nonfinite == UINT64_MAX) s.first_nonfinite = start + i;
        if (std::isnan(v)) continue;
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      am = std::max(am, std::fabs(v));
    }
  }
  s.base = shift;
  s.mean = sum / static_cast<double>(m);
  {
    const N vshift = N{} + shift, vmean = N{} + s.mean;
    N acc[K];
#pragma GCC unroll 4
    for (size_t k = 0; k < K; ++k) acc[k] = N{};
    for (size_t i = 0; i < body; i += kLanes)
#pragma GCC unroll 4
      for (size_t k = 0; k < K; ++k) {
        N d = (load<N>(p + i + k * W) - vshift) - vmean;
        acc[k] += d * d;
      }
    double m2 = lane_sum(acc);
    for (size_t i = body; i < m; ++i) {
      double d = (p[i] - shift) - s.mean;
      m2 += d * d;
    }
    s.m2 = m2;
  }
  s.min = lo;
  s.max = hi;
  s.abs_max = am;
  s.sum_sq = sq;
  return s;
}

template <class N>
DCPCTL_INLINE void add_blocks(StatsAccumulator& acc, DType d, const uint8_t* src, size_t count, uint64_t start) {
  const size_t ln = lanes(d);
  const DType c = component(d);
  const size_t item = itemsize(c);
  const size_t values = count * ln;
  alignas(64) double buf[kBlock];
  for (size_t b = 0; b < values; b += kBlock) {
    size_t m = std::min(kBlock, values - b);
    const double* p = decode(c, src + b * item, m, buf);
    acc.merge(block_stats<N>(p, m, start * ln + b));
  }
}

// Compiled twice; the CPU picks. Both are the same source, inlined into each.
#if defined(__x86_64__)
__attribute__((target("avx2"))) void add_avx2(StatsAccumulator& acc, DType d, const uint8_t* src, size_t count,
                                              uint64_t start) {
  add_blocks<V4>(acc, d, src, count, start);
}
#endif

void add_baseline(StatsAccumulator& acc, DType d, const uint8_t* src, size_t count, uint64_t start) {
  add_blocks<V2>(acc, d, src, count, start);
}

using AddFn = void (*)(StatsAccumulator&, DType, const uint8_t*, size_t, uint64_t);

AddFn kernel(StatsIsa isa) {
#if defined(__x86_64__)
  if (isa == StatsIsa::Avx2) return add_avx2;
#endif
  (void)isa;
  return add_baseline;
}

}  // namespace

bool stats_isa_available(StatsIsa isa) {
  if (isa == StatsIsa::Baseline) return true;
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

void stats_add_raw(StatsAccumulator& acc, StatsIsa isa, DType d, const uint8_t* src, size_t count, uint64_t start) {
  kernel(isa)(acc, d, src, count, start);
}

void StatsAccumulator::add_raw(DType d, const uint8_t* src, size_t count, uint64_t start) {
  static const AddFn fn = kernel(stats_isa_available(StatsIsa::Avx2) ? StatsIsa::Avx2 : StatsIsa::Baseline);
  fn(*this, d, src, count, start);
}

void StatsAccumulator::add(const double* x, size_t count, uint64_t start) {
  add_raw(DType::Float64, reinterpret_cast<const uint8_t*>(x), count, start);
}

}  // namespace dcpctl
