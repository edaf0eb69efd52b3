// The numeric core of diff and stats: float64 widening of every dtype, stable moments, ULP
// distances, the exact and allclose rules, window planning and window reads.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compare/diff_core.h"
#include "compare/stats_core.h"
#include "item/item_reader.h"
#include "item/window.h"
#include "meta/checkpoint.h"
#include "util/elements.h"
#include "util/memory_gate.h"
#include "util/numeric.h"

using namespace dcpctl;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

DiffAccumulator cmp(DType da, const std::vector<uint8_t>& a, DType db, const std::vector<uint8_t>& b,
                    const DiffRule& r) {
  size_t n = a.size() / itemsize(da);
  std::vector<double> wa(2 * n), wb(2 * n);
  DiffAccumulator acc;
  compare_elements(da, a.data(), db, b.data(), n, 0, r, wa.data(), wb.data(), acc);
  return acc;
}
}  // namespace

TEST_CASE("widen decodes narrow floats exactly") {
  double v;
  uint16_t bf = 0x3FC0;  // 1.5
  widen(DType::BFloat16, reinterpret_cast<uint8_t*>(&bf), 1, &v);
  CHECK(v == 1.5);
  uint16_t h = 0x0001;  // smallest fp16 subnormal
  widen(DType::Float16, reinterpret_cast<uint8_t*>(&h), 1, &v);
  CHECK(v == std::ldexp(1.0, -24));
  uint8_t e4 = 0x7E;  // float8_e4m3fn max, 448
  widen(DType::Float8_E4M3FN, &e4, 1, &v);
  CHECK(v == 448.0);
  e4 = 0x7F;
  widen(DType::Float8_E4M3FN, &e4, 1, &v);
  CHECK(std::isnan(v));
  uint8_t e5 = 0x7C;  // float8_e5m2 +inf
  widen(DType::Float8_E5M2, &e5, 1, &v);
  CHECK(v == kInf);
  CHECK(e4m3fnuz_to_f64(0x80) != e4m3fnuz_to_f64(0x80));  // NaN
  CHECK(e4m3fnuz_to_f64(0x7F) == 240.0);                  // torch.finfo(float8_e4m3fnuz).max
  CHECK(e5m2fnuz_to_f64(0x7F) == 57344.0);                // torch.finfo(float8_e5m2fnuz).max
  CHECK(e8m0fnu_to_f64(127) == 1.0);
  uint64_t big = 18446744073709551615ull;
  widen(DType::UInt64, reinterpret_cast<uint8_t*>(&big), 1, &v);
  CHECK(v == 18446744073709551616.0);
  uint8_t b[2] = {0, 7};
  double bv[2];
  widen(DType::Bool, b, 2, bv);
  CHECK((bv[0] == 0 && bv[1] == 1));
}

TEST_CASE("stats: stable moments, Bessel std, torch's NaN/Inf rules") {
  // A large mean with a small spread: a naive sum of squares loses every digit here.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd(0, 1e-3);
  std::vector<double> x(100000);
  for (auto& v : x) v = 1e9 + nd(rng);
  StatsAccumulator s;
  s.add(x.data(), x.size(), 0);
  // The reference in long double (64-bit mantissa), two passes.
  long double lmean = 0;
  for (double v : x) lmean += v;
  lmean /= static_cast<long double>(x.size());
  long double lm2 = 0;
  for (double v : x) lm2 += (v - lmean) * (v - lmean);
  double mean = static_cast<double>(lmean);
  double ref = static_cast<double>(std::sqrt(lm2 / static_cast<long double>(x.size() - 1)));
  CHECK(s.std_value() == Approx(ref).epsilon(1e-9));
  CHECK(s.mean_value() == Approx(mean).epsilon(1e-15));

  // Merging in any split gives the same answer.
  StatsAccumulator p1, p2;
  p1.add(x.data() + 60000, 40000, 60000);
  p2.add(x.data(), 60000, 0);
  p1.merge(p2);
  CHECK(p1.std_value() == Approx(ref).epsilon(1e-9));
  CHECK(p1.n == x.size());

  std::vector<double> y = {1, -2, 0, 0, kInf, 3};
  StatsAccumulator t;
  t.add(y.data(), y.size(), 10);
  CHECK(t.min_value() == -2);
  CHECK(t.max_value() == kInf);
  CHECK(t.mean_value() == kInf);
  CHECK(std::isnan(t.std_value()));
  CHECK(t.zeros == 2);
  CHECK(t.pos_inf == 1);
  CHECK(t.first_nonfinite == 14);
  std::vector<double> z = {1, kNaN, 2};
  StatsAccumulator u;
  u.add(z.data(), z.size(), 0);
  CHECK(std::isnan(u.min_value()));
  CHECK(std::isnan(u.mean_value()));
  CHECK(u.nan == 1);
  StatsAccumulator one;
  double w = 5;
  one.add(&w, 1, 0);
  CHECK(std::isnan(one.std_value()));  // torch.std of one element
  CHECK(one.l2_norm() == 5);
}

namespace {

bool same_double(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 8) == 0;
}

// Every field bit for bit (NaN equal to NaN).
bool same_acc(const StatsAccumulator& a, const StatsAccumulator& b) {
  return a.n == b.n && a.nan == b.nan && a.pos_inf == b.pos_inf && a.neg_inf == b.neg_inf && a.zeros == b.zeros &&
         a.first_nonfinite == b.first_nonfinite && same_double(a.base, b.base) && same_double(a.mean, b.mean) &&
         same_double(a.m2, b.m2) && same_double(a.min, b.min) && same_double(a.max, b.max) &&
         same_double(a.abs_max, b.abs_max) && same_double(a.sum_sq, b.sum_sq);
}

std::vector<StatsIsa> isas() {
  std::vector<StatsIsa> v = {StatsIsa::Baseline};
  if (stats_isa_available(StatsIsa::Avx2)) v.push_back(StatsIsa::Avx2);
  return v;
}

}  // namespace

TEST_CASE("stats kernel: every bf16/fp16/fp8 bit pattern decodes as widen() does, on every SIMD path") {
  struct Case {
    DType d;
    uint32_t patterns;
  };
  for (Case c : {Case{DType::BFloat16, 65536}, Case{DType::Float16, 65536}, Case{DType::Float8_E4M3FN, 256},
                 Case{DType::Float8_E5M2, 256}, Case{DType::Float8_E4M3FNUZ, 256}, Case{DType::Float8_E5M2FNUZ, 256},
                 Case{DType::Float8_E8M0FNU, 256}, Case{DType::Int8, 256}, Case{DType::UInt8, 256},
                 Case{DType::Int16, 65536}, Case{DType::UInt16, 65536}}) {
    size_t item = itemsize(c.d);
    std::vector<uint8_t> raw(c.patterns * item);
    for (uint32_t i = 0; i < c.patterns; ++i) std::memcpy(raw.data() + i * item, &i, item);  // little-endian
    std::vector<double> wide(c.patterns);
    widen(c.d, raw.data(), c.patterns, wide.data());
    for (StatsIsa isa : isas()) {
      INFO("dtype " << info(c.d).torch_name << " isa " << static_cast<int>(isa));
      // Groups of 8 (the vector body) and of 3 (the scalar tail): one value's decode differing
      // from widen() changes the group's sums, extremes or counts.
      bool all = true;
      for (size_t g : {size_t{8}, size_t{3}})
        for (uint32_t i = 0; i < c.patterns; i += static_cast<uint32_t>(g)) {
          size_t n = std::min<size_t>(g, c.patterns - i);
          StatsAccumulator a, b;
          stats_add_raw(a, isa, c.d, raw.data() + i * item, n, i);
          b.add(wide.data() + i, n, i);
          all = all && same_acc(a, b);
          if (!same_acc(a, b)) {
            UNSCOPED_INFO("patterns from " << i);
            break;
          }
        }
      CHECK(all);
    }
  }
  // float16 subnormals, infinities and NaN payloads by the bit path, one at a time against f16_to_f32
  for (uint32_t h : {0x0001u, 0x03FFu, 0x8001u, 0x7C00u, 0xFC00u, 0x7E00u, 0x7C01u, 0xFFFFu, 0x8000u}) {
    std::vector<uint16_t> v(8, static_cast<uint16_t>(h));
    for (StatsIsa isa : isas()) {
      StatsAccumulator a;
      stats_add_raw(a, isa, DType::Float16, reinterpret_cast<const uint8_t*>(v.data()), 8, 0);
      double ref = f16_to_f32(static_cast<uint16_t>(h));
      if (std::isnan(ref))
        CHECK(a.nan == 8);
      else
        CHECK((a.min == ref && a.max == ref));
    }
  }
}

TEST_CASE("stats kernel: SIMD paths agree bit for bit, non-finite values located across blocks") {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(3, 2);
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{20011}}) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    if (n > 9000) {
      x[9000] = std::numeric_limits<float>::quiet_NaN();
      x[n - 1] = -std::numeric_limits<float>::infinity();
    }
    std::vector<StatsAccumulator> r;
    for (StatsIsa isa : isas()) {
      StatsAccumulator a;
      stats_add_raw(a, isa, DType::Float32, reinterpret_cast<const uint8_t*>(x.data()), n, 100);
      r.push_back(a);
    }
    for (const auto& a : r) CHECK(same_acc(a, r[0]));
    // and the same as widening first
    std::vector<double> w(x.begin(), x.end());
    StatsAccumulator b;
    b.add(w.data(), n, 100);
    CHECK(same_acc(r[0], b));
    if (n > 9000) {
      CHECK(std::isnan(r[0].mean_value()));
      CHECK(r[0].nan == 1);
      CHECK(r[0].neg_inf == 1);
      CHECK(r[0].first_nonfinite == 9100);
    }
  }
  // An infinity in an early block is the mean after any number of finite blocks (as torch's
  // mean), and +inf with -inf in different blocks is NaN; std is NaN either way.
  for (StatsIsa isa : isas()) {
    std::vector<double> y(3 * 4096 + 5, 0.5);
    y[10] = kInf;
    StatsAccumulator a;
    stats_add_raw(a, isa, DType::Float64, reinterpret_cast<const uint8_t*>(y.data()), y.size(), 0);
    CHECK(a.mean_value() == kInf);
    CHECK(std::isnan(a.std_value()));
    CHECK(a.max_value() == kInf);
    CHECK(a.min_value() == 0.5);
    y[3 * 4096 + 1] = -kInf;
    StatsAccumulator b;
    stats_add_raw(b, isa, DType::Float64, reinterpret_cast<const uint8_t*>(y.data()), y.size(), 0);
    CHECK(std::isnan(b.mean_value()));
    CHECK(b.first_nonfinite == 10);
  }
  // complex: (re, im) values, value indices (view_as_real): element 5's imaginary part is value 11
  std::vector<float> c(2 * 3000, 1.0f);
  c[2 * 2500 + 1] = std::numeric_limits<float>::infinity();
  StatsAccumulator a;
  a.add_raw(DType::Complex64, reinterpret_cast<const uint8_t*>(c.data()), 3000, 7);
  CHECK(a.n == 6000);
  CHECK(a.pos_inf == 1);
  CHECK(a.first_nonfinite == 2 * (7 + 2500) + 1);
}

TEST_CASE("ULP distances count representable values") {
  float a = 1.0f, b = std::nextafter(std::nextafter(1.0f, 2.0f), 2.0f);
  CHECK(float_ordinal(DType::Float32, reinterpret_cast<uint8_t*>(&b)) -
            float_ordinal(DType::Float32, reinterpret_cast<uint8_t*>(&a)) ==
        2);
  float nz = -0.0f, pz = 0.0f;
  CHECK(float_ordinal(DType::Float32, reinterpret_cast<uint8_t*>(&nz)) ==
        float_ordinal(DType::Float32, reinterpret_cast<uint8_t*>(&pz)));
  CHECK(ulp_distance(DType::BFloat16, 1.0, 1.0078125) == 1);  // bf16 spacing at 1 is 2^-7
  CHECK(ulp_distance(DType::BFloat16, -1e-40, 1e-40) > 0);
  CHECK(ulp_distance(DType::Float64, 1.0, std::nextafter(1.0, 2.0)) == 1);
  CHECK(ulp_distance(DType::Float16, kNaN, 1.0) == UINT64_MAX);
  CHECK(ulp_dtype(DType::Float32, DType::BFloat16) == DType::BFloat16);
  CHECK(ulp_dtype(DType::Int64, DType::Float16) == DType::Float16);
  CHECK(!ulp_dtype(DType::Int8, DType::Int16));
}

TEST_CASE("exact rule: bit for bit") {
  DiffRule exact;
  std::vector<float> a = {1, 2, -0.0f, 4}, b = {1, 2, 0.0f, 4};
  auto acc = cmp(DType::Float32, bytes_of(a), DType::Float32, bytes_of(b), exact);
  CHECK(acc.differ == 1);  // -0 vs +0: torch.equal says equal, bits differ
  CHECK(acc.first == 2);
  CHECK(acc.max_abs == 0);
  uint32_t n1 = 0x7FC00000, n2 = 0x7FC00001;
  std::vector<uint32_t> na = {n1, n1}, nb = {n1, n2};
  acc = cmp(DType::Float32, bytes_of(na), DType::Float32, bytes_of(nb), exact);
  CHECK(acc.differ == 1);  // NaN payloads differ
  CHECK(acc.nan_mismatch == 1);
  DiffRule en = exact;
  en.equal_nan = true;
  CHECK(cmp(DType::Float32, bytes_of(na), DType::Float32, bytes_of(nb), en).differ == 0);
  std::vector<float> c = {1, 2, 3, 4}, d = {1, 2.5f, 3, 0};
  acc = cmp(DType::Float32, bytes_of(c), DType::Float32, bytes_of(d), exact);
  CHECK(acc.differ == 2);
  CHECK(acc.first == 1);
  CHECK(acc.max_abs == 4);
  CHECK(acc.max_rel == kInf);  // b == 0
  CHECK(acc.ulp_known);
}

TEST_CASE("tolerance rule: torch.isclose on float64") {
  DiffRule r;
  r.exact = false;
  r.atol = 1e-3;
  r.rtol = 1e-2;
  std::vector<double> a = {1.0, 100.0, kInf, kNaN, 0.0}, b = {1.0005, 101.0, kInf, kNaN, 0.002};
  auto acc = cmp(DType::Float64, bytes_of(a), DType::Float64, bytes_of(b), r);
  // 1 vs 1.0005: close; 100 vs 101: |1| <= 1e-3 + 1.01: close; inf == inf; NaN differs; 0 vs 0.002 differs
  CHECK(acc.differ == 2);
  CHECK(acc.nan_mismatch == 1);
  CHECK(acc.first == 3);
  CHECK(acc.max_abs == Approx(0.002));
  r.equal_nan = true;
  CHECK(cmp(DType::Float64, bytes_of(a), DType::Float64, bytes_of(b), r).differ == 1);
  // Across dtypes: bf16 1.5 against float32 1.5 is equal in float64.
  std::vector<uint16_t> bf = {0x3FC0};
  std::vector<float> f = {1.5f};
  DiffRule x;
  x.exact = false;
  CHECK(cmp(DType::BFloat16, bytes_of(bf), DType::Float32, bytes_of(f), x).differ == 0);
  f[0] = 1.50390625f;  // next bf16 after 1.5 is 1.5078125: half a ULP
  auto acc2 = cmp(DType::BFloat16, bytes_of(bf), DType::Float32, bytes_of(f), x);
  CHECK(acc2.differ == 1);
  CHECK(acc2.ulp_known);
}

TEST_CASE("windows cover a tensor in order, each within budget") {
  for (auto shape : std::vector<std::vector<int64_t>>{{}, {0, 3}, {7}, {5, 3}, {3, 1000}, {2, 3, 4, 5}, {1, 1, 9}}) {
    for (uint64_t max : {1ull, 2ull, 7ull, 12ull, 100ull, 1000000ull}) {
      auto ws = plan_windows(shape, max);
      uint64_t total = 1, next = 0;
      for (auto s : shape) total *= static_cast<uint64_t>(s);
      for (const auto& w : ws) {
        CHECK(w.start == next);
        CHECK(w.numel >= 1);
        CHECK(w.numel <= std::max<uint64_t>(max, 1));
        next += w.numel;
      }
      CHECK(next == total);
    }
  }
  CHECK(unravel({2, 3, 4}, 23) == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("window reader decodes a zstd chunk once for all its windows, within the gate") {
  // tests/fixtures/zstd: 2 ranks, every item a zstd frame, written by torch (FileSystemWriter
  // with ZStandard); zeros_64x16 and rand_9x5 are in 2 chunks of rows each.
  Checkpoint ck = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/zstd/ckpt");
  ItemReader reader(ck);
  for (const std::string key : {"rand_9x5", "zeros_64x16"}) {
    INFO(key);
    const TensorMeta* tp = nullptr;
    for (const auto& t : ck.md.tensors)
      if (t.fqn == key) tp = &t;
    REQUIRE(tp);
    const TensorMeta& t = *tp;
    REQUIRE(t.num_chunks() == 2);
    REQUIRE(t.storage[0].transforms != 0);
    const uint64_t bytes = t.nbytes(), row = static_cast<uint64_t>(t.shape[1]);
    // The reference: the whole tensor in one window, chunk by chunk.
    std::vector<uint8_t> ref(bytes), scratch(bytes);
    WindowReader whole(reader, nullptr);
    whole.fill(t, Window{0, t.numel()}, ref.data(), scratch.data());
    CHECK(whole.decodes() == 2);
    // One window per row: every chunk is needed by several windows.
    std::vector<Window> rows = plan_windows(t.shape, row);
    REQUIRE(rows.size() == static_cast<size_t>(t.shape[0]));
    auto walk = [&](WindowReader& f, unsigned threads) {
      std::vector<uint8_t> out(bytes);
      std::atomic<size_t> next{0};
      std::vector<std::thread> ts;
      for (unsigned i = 0; i < threads; ++i)
        ts.emplace_back([&] {
          std::vector<uint8_t> s(bytes);
          for (size_t w; (w = next++) < rows.size();)
            f.fill(t, rows[w], out.data() + rows[w].start * itemsize(*t.dtype), s.data());
        });
      for (auto& th : ts) th.join();
      return out;
    };
    {
      WindowReader f(reader, nullptr);  // no gate: every window decodes its chunk's item again
      f.expect(t, rows);
      CHECK(walk(f, 1) == ref);
      CHECK(f.decodes() == rows.size());
    }
    for (unsigned threads : {1u, 3u}) {
      MemoryGate gate(1 << 20);
      {
        WindowReader f(reader, &gate);
        f.expect(t, rows);
        CHECK(walk(f, threads) == ref);
        CHECK(f.decodes() == 2);  // once per chunk
      }
      CHECK(gate.try_acquire(1 << 20));  // everything given back
    }
    {
      MemoryGate gate(8);  // no chunk fits: decoded per window, as without a gate
      WindowReader f(reader, &gate);
      f.expect(t, rows);
      CHECK(walk(f, 2) == ref);
      CHECK(f.decodes() == rows.size());
      CHECK(gate.try_acquire(8));
    }
  }
}

TEST_CASE("window reader: windows of 2-d mesh shards hold the tensor's bytes, read in place") {
  // tests/fixtures/dtensor_2d_mesh: 2x2 mesh shards written by torch (blocks of rows and columns,
  // nested row shards, replicas): chunks that are not runs of the tensor, so a window takes a run
  // of each chunk and scatters it, or reads it into place when the window is one row.
  Checkpoint ck = open_checkpoint(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/dtensor_2d_mesh/ckpt");
  ItemReader reader(ck);
  for (const auto& t : ck.md.tensors) {
    INFO(t.fqn);
    const size_t item = itemsize(*t.dtype), nd = t.ndim();
    // The reference: every chunk read whole and placed element by element.
    std::vector<uint8_t> ref(t.nbytes());
    for (size_t c = 0; c < t.num_chunks(); ++c) {
      std::vector<uint8_t> dense(t.chunk_numel(c) * item);
      reader.read_chunk(t, c, dense.data());
      std::vector<int64_t> sizes(t.chunk_sizes(c), t.chunk_sizes(c) + nd);
      for (uint64_t e = 0; e < t.chunk_numel(c); ++e) {
        std::vector<int64_t> idx = unravel(sizes, e);
        uint64_t at = 0;
        for (size_t d = 0; d < nd; ++d)
          at = at * static_cast<uint64_t>(t.shape[d]) + static_cast<uint64_t>(t.chunk_offsets(c)[d] + idx[d]);
        std::memcpy(ref.data() + at * item, dense.data() + e * item, item);
      }
    }
    for (uint64_t max : {1ull, 2ull, 3ull, 5ull, 7ull, 12ull, 1000ull}) {
      INFO("window of " << max);
      std::vector<Window> ws = plan_windows(t.shape, max);
      MemoryGate gate(1 << 20);
      WindowReader f(reader, &gate);
      f.expect(t, ws);
      std::vector<uint8_t> out(t.nbytes(), 0xAB), s(max * item);
      for (const Window& w : ws) f.fill(t, w, out.data() + w.start * item, s.data());
      CHECK(out == ref);
      CHECK(f.decodes() == 0);  // untransformed, contiguous: nothing decoded
    }
  }
}
