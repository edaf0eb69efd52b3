// The vectorised encodings (gguf/simd.h) against the scalar ones, byte for byte: F16 and BF16 over
// a sweep of float bit patterns and the special values (signed zeros, subnormals, the halves'
// overflow and rounding boundaries, infinities, quiet and signalling NaNs with payloads), Q8_0 over
// blocks of random magnitudes and the same specials; and the parallel encoding equal to the serial
// one. Where the CPU has no AVX2 + F16C the vector cases cannot run and say so. CTest also runs this
// file, test_gguf_quants', test_gguf's and test_ct_kernels' with DCPCTL_SCALAR=1
// (unit:scalar-paths), where encode() and the --quantize kernels take the scalar paths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/simd.h"
#include "util/numeric.h"

using namespace dcpctl::gguf;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<uint8_t> via(EncodeIsa isa, TensorType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(tensor_bytes(t, x.size(), x.size()), 0xAA);
  encode_via(isa, t, x.data(), x.size(), out.data());
  return out;
}

// The first element (or block) where the vector path's bytes are not the scalar's, or -1.
long first_difference(TensorType t, const std::vector<float>& x) {
  const std::vector<uint8_t> s = via(EncodeIsa::Scalar, t, x), v = via(EncodeIsa::Avx2, t, x);
  const uint64_t bs = block_size(t), bb = tensor_bytes(t, bs, bs);
  for (size_t b = 0; b < s.size() / bb; ++b)
    if (std::memcmp(s.data() + b * bb, v.data() + b * bb, bb) != 0) return static_cast<long>(b);
  return -1;
}

std::vector<float> specials() {
  std::vector<uint32_t> bits{0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu,
                             0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffa00001u, 0x7fbfffffu,
                             0x7fe12345u, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x387fe000u, 0x38800000u, 0x477fe000u,
                             0x477fefffu, 0x477ff000u, 0xc77ff000u, 0x3f801000u, 0x3f803000u, 0x3f800fffu, 0x3f808000u,
                             0x3f818000u, 0x3f817fffu, 0x7f7f8000u, 0x7f7f7fffu};
  std::vector<float> x;
  for (uint32_t b : bits) x.push_back(from_bits(b));
  return x;
}

}  // namespace

TEST_CASE("gguf_simd: F16 and BF16 of every kind of float are the scalar path's") {
  if (!encode_isa_available(EncodeIsa::Avx2)) {
    WARN("no AVX2 + F16C on this CPU: the vector path cannot run here");
    CHECK_FALSE(best_encode_isa() == EncodeIsa::Avx2);
    return;
  }
  // Every 4,099th bit pattern (about a million, every exponent and sign, NaNs among them), then
  // the specials in every lane position of a group of 8 and 16, with a tail that is not one.
  std::vector<float> x;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) x.push_back(from_bits(static_cast<uint32_t>(u)));
  const std::vector<float> sp = specials();
  for (size_t shift = 0; shift < 16; ++shift)
    for (size_t i = 0; i < sp.size(); ++i) x.push_back(sp[(i + shift) % sp.size()]);
  x.resize(x.size() + 5, 1.5f);
  REQUIRE(x.size() % 8 != 0);
  for (TensorType t : {TensorType::F16, TensorType::BF16}) {
    CAPTURE(type_name(t));
    CHECK(first_difference(t, x) == -1);
    // Each length up to 40: the tails alone.
    for (size_t n = 1; n <= 40; ++n)
      CHECK(first_difference(t, std::vector<float>(sp.begin(), sp.begin() + static_cast<long>(n % sp.size()) + 1)) ==
            -1);
  }
}

TEST_CASE("gguf_simd: Q8_0 of blocks of every magnitude and of specials is the scalar path's") {
  if (!encode_isa_available(EncodeIsa::Avx2)) {
    WARN("no AVX2 + F16C on this CPU: the vector path cannot run here");
    return;
  }
  std::mt19937 rng(82);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-140, 120);
  std::vector<float> x;
  for (int b = 0; b < 4096; ++b) {  // a scale per block: d from subnormal (1/d infinite) to near overflow
    const float s = std::ldexp(1.0f, exponent(rng));
    for (int j = 0; j < 32; ++j) x.push_back(normal(rng) * s);
  }
  // Halves of integers after the scale (127 and 2.5: d = 1), zeros, and each special in a block of ones.
  for (int j = 0; j < 32; ++j) x.push_back(j == 0 ? 127.0f : static_cast<float>(j) - 15.5f);
  for (int j = 0; j < 32; ++j) x.push_back(j % 2 ? 0.0f : -0.0f);
  for (float s : specials())
    for (int j = 0; j < 32; ++j) x.push_back(j == 7 ? s : 1.0f);
  CHECK(first_difference(TensorType::Q8_0, x) == -1);
}

TEST_CASE("gguf_simd: Q4_K, Q5_K and Q6_K with the AVX2 fits are the scalar path's") {
  if (!encode_isa_available(EncodeIsa::Avx2)) {
    WARN("no AVX2 on this CPU: the vector path cannot run here");
    return;
  }
  std::mt19937 rng(256);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-130, 100), kind(0, 7);
  std::vector<float> x;
  for (int b = 0; b < 1024; ++b) {  // super-blocks of random scales; sub-blocks flat, positive, sparse or spiky
    const float s = std::ldexp(1.0f, exponent(rng));
    for (int j = 0; j < 8; ++j) {
      const int k = kind(rng);
      for (int i = 0; i < 32; ++i) {
        const float v = normal(rng) * s;
        x.push_back(k == 0   ? -s
                    : k == 1 ? 0.0f
                    : k == 2 ? std::fabs(v)
                    : k == 3 ? (i == 5 ? 100 * s : 0.0f)
                    : k == 4 ? s
                             : v);
      }
    }
  }
  // A super-block of each special in a sub-block of ones.
  for (float sp : specials())
    for (int i = 0; i < 256; ++i) x.push_back(i == 40 ? sp : (i < 64 ? 1.0f : 0.5f * static_cast<float>(i % 7)));
  for (TensorType t : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    CAPTURE(type_name(t));
    CHECK(first_difference(t, x) == -1);
  }
}

TEST_CASE("gguf_simd: the parallel encoding is the serial one, part for part") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const uint64_t row = 2048;
  std::vector<float> x(row * 300 + 0);  // 600 Ki elements: three parts of whole rows
  for (float& v : x) v = normal(rng);
  for (TensorType t : {TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
    CAPTURE(type_name(t));
    std::vector<uint8_t> serial(tensor_bytes(t, x.size(), row));
    encode(t, x.data(), x.size(), serial.data());
    for (unsigned threads : {1u, 2u, 3u}) {
      std::vector<uint8_t> par(serial.size(), 0xAA);
      encode_parallel(t, x.data(), x.size(), row, par.data(), threads);
      CHECK(par == serial);
    }
  }
}

// cast_encode_parallel (a few rows cast at a time, in the worker's cache) against the whole window
// cast to float32 and encoded: rows shorter than the cast's step (many a step), longer than it (one
// a step, 40,960 elements), a part that ends inside a step, and the specials in the source.
TEST_CASE("gguf_simd: casting as it encodes is casting the window, then encoding it") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (uint64_t row : {uint64_t{256}, uint64_t{2048}, uint64_t{6144}, uint64_t{40960}}) {
    const uint64_t rows = (700 << 10) / row + 3;
    std::vector<float> x(row * rows);
    for (float& v : x) v = normal(rng) * 3.0f;
    const std::vector<float> sp = specials();
    std::copy(sp.begin(), sp.end(), x.begin() + static_cast<long>(row / 2));
    for (dcpctl::DType from : {dcpctl::DType::BFloat16, dcpctl::DType::Float16}) {
      std::vector<uint8_t> src(x.size() * 2);
      dcpctl::cast_elements(dcpctl::DType::Float32, from, reinterpret_cast<const uint8_t*>(x.data()), src.data(),
                            x.size());
      std::vector<float> wide(x.size());
      dcpctl::cast_elements(from, dcpctl::DType::Float32, src.data(), reinterpret_cast<uint8_t*>(wide.data()),
                            x.size());
      for (TensorType t : {TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_K}) {
        CAPTURE(row, type_name(t), dcpctl::torch_name(from));
        std::vector<uint8_t> want(tensor_bytes(t, x.size(), row));
        encode(t, wide.data(), wide.size(), want.data());
        for (unsigned threads : {1u, 2u, 3u}) {
          std::vector<uint8_t> got(want.size(), 0xAA);
          cast_encode_parallel(t, from, src.data(), x.size(), row, got.data(), threads);
          // (the first differing byte, not the vectors: Catch would print megabytes of them)
          const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
          CHECK(diff.first - got.begin() == static_cast<long>(got.size()));
        }
      }
    }
  }
}

TEST_CASE("gguf_simd: DCPCTL_SCALAR=1 makes encode take the scalar path") {
  const char* v = std::getenv("DCPCTL_SCALAR");
  const bool forced = v && *v && std::string(v) != "0";
  if (forced)
    CHECK(best_encode_isa() == EncodeIsa::Scalar);
  else
    CHECK(best_encode_isa() == (encode_isa_available(EncodeIsa::Avx2) ? EncodeIsa::Avx2 : EncodeIsa::Scalar));
  CHECK(encode_isa_available(EncodeIsa::Scalar));
}

// 2^24 consecutive bit patterns around the halves' subnormal / normal boundary (2^-14 and below,
// 0x38000000 on), every one; with DCPCTL_GGUF_EXHAUSTIVE=1 all 2^32 floats (about 20 s a path on
// one core: run it by hand after a change to the F16 or BF16 kernels).
TEST_CASE("gguf_simd: F16 and BF16 of runs of consecutive floats are the scalar path's") {
  if (!encode_isa_available(EncodeIsa::Avx2)) {
    WARN("no AVX2 + F16C on this CPU: the vector path cannot run here");
    return;
  }
  const char* all = std::getenv("DCPCTL_GGUF_EXHAUSTIVE");
  const bool exhaustive = all && std::string(all) == "1";
  const size_t chunk = size_t{1} << 24;
  const uint64_t first = exhaustive ? 0 : 0x38000000u, end = exhaustive ? uint64_t{1} << 32 : first + chunk;
  std::vector<float> x(chunk);
  std::vector<uint8_t> s(2 * chunk), v(2 * chunk);
  for (uint64_t base = first; base < end; base += chunk) {
    for (size_t i = 0; i < chunk; ++i) x[i] = from_bits(static_cast<uint32_t>(base + i));
    for (TensorType t : {TensorType::F16, TensorType::BF16}) {
      encode_via(EncodeIsa::Scalar, t, x.data(), chunk, s.data());
      encode_via(EncodeIsa::Avx2, t, x.data(), chunk, v.data());
      CAPTURE(type_name(t), base);
      REQUIRE(std::memcmp(s.data(), v.data(), s.size()) == 0);
    }
  }
}
