// Float conversions (util/numeric). Expected bits were computed by real torch 2.14.1 on the CPU
// (Tensor.to() from float32 bit patterns made with torch.tensor([...], dtype=torch.int32)
// .view(torch.float32)); the command is quoted where a value is not obvious.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "util/numeric.h"

using namespace dcpctl;

namespace {

// cast_elements over float32 bit patterns, as consolidate --dtype does; T is the target's width.
template <class T>
std::vector<T> cast_bits(DType to, const std::vector<uint32_t>& in) {
  std::vector<T> out(in.size());
  cast_elements(DType::Float32, to, reinterpret_cast<const uint8_t*>(in.data()), reinterpret_cast<uint8_t*>(out.data()),
                in.size());
  return out;
}
std::vector<uint16_t> cast16(DType to, const std::vector<uint32_t>& in) {
  return cast_bits<uint16_t>(to, in);
}
std::vector<uint8_t> cast8(DType to, const std::vector<uint32_t>& in) {
  return cast_bits<uint8_t>(to, in);
}

// The inputs, and what torch.to() gave for each:
//   sNaN 0x7F800001, -NaN 0xFFC12345, qNaN 0x7FC00001, 1+2^-8 (tie, even below), 1+3*2^-8 (tie,
//   odd below: up), just above a tie, 65520 (fp16 tie at the top: to inf), just below it,
//   2^-25 (fp16 tie with 0: to 0), just above it (to the least subnormal), FLT_MAX, 448, 464, 480.
const std::vector<uint32_t> kIn = {0x7F800001, 0xFFC12345, 0x7FC00001, 0x3F808000, 0x3F818000, 0x3F808001, 0x477FF000,
                                   0x477FEFFF, 0x33000000, 0x33000001, 0x7F7FFFFF, 0x43E00000, 0x43E80000, 0x43F00000};

}  // namespace

TEST_CASE("fp32 -> bf16 rounds to nearest even, NaN as torch's CPU kernel writes it") {
  // torch: float32 tensors go through the vectorized kernel, which writes every NaN as 0xFFFF.
  CHECK(cast16(DType::BFloat16, kIn) == std::vector<uint16_t>{0xFFFF, 0xFFFF, 0xFFFF, 0x3F80, 0x3F82, 0x3F81, 0x4780,
                                                              0x4780, 0x3300, 0x3300, 0x7F80, 0x43E0, 0x43E8, 0x43F0});
  // The scalar conversion (c10::BFloat16) writes the canonical quiet NaN.
  CHECK(f32_to_bf16(bits_f32(0x7FC00001)) == 0x7FC0);
  CHECK(f32_to_bf16(-0.0f) == 0x8000);
  CHECK(f32_to_bf16(bits_f32(0x7F7FFFFF)) == 0x7F80);  // FLT_MAX rounds up into inf
  CHECK(f32_bits(bf16_to_f32(0x3F82)) == 0x3F820000u);
}

TEST_CASE("fp32 -> fp16 rounds to nearest even, overflows to inf, keeps NaN sign and payload") {
  // torch: F16C keeps the sign and the top 10 payload bits and sets the quiet bit.
  CHECK(cast16(DType::Float16, kIn) == std::vector<uint16_t>{0x7E00, 0xFE09, 0x7E00, 0x3C04, 0x3C0C, 0x3C04, 0x7C00,
                                                             0x7BFF, 0x0000, 0x0001, 0x7C00, 0x5F00, 0x5F40, 0x5F80});
  CHECK(f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(f32_to_f16(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_to_f32(0x7BFF) == 65504.0f);
  CHECK(std::isnan(f16_to_f32(0x7E00)));
}

TEST_CASE("fp32 -> float8_e4m3fn saturates to 448 like torch, NaN keeps its sign") {
  // 464 is the tie between 448 and (unrepresentable) 480: saturates, as does inf.
  CHECK(cast8(DType::Float8_E4M3FN, kIn) ==
        std::vector<uint8_t>{0x7F, 0xFF, 0x7F, 0x38, 0x38, 0x38, 0x7E, 0x7E, 0x00, 0x00, 0x7E, 0x7E, 0x7E, 0x7E});
  // python: torch.tensor([449., -1e6, 240., 17., 19., 0.0013671875, 1e-9]).to(torch.float8_e4m3fn)
  CHECK(f32_to_e4m3fn(449.0f) == 0x7E);
  CHECK(f32_to_e4m3fn(-1e6f) == 0xFE);
  CHECK(f32_to_e4m3fn(-std::numeric_limits<float>::infinity()) == 0xFE);
  CHECK(f32_to_e4m3fn(240.0f) == 0x77);
  CHECK(f32_to_e4m3fn(17.0f) == 0x58);          // 17 is a tie between 16 and 18: even (16)
  CHECK(f32_to_e4m3fn(19.0f) == 0x5A);          // tie between 18 and 20: even (20)
  CHECK(f32_to_e4m3fn(0.0013671875f) == 0x01);  // rounds up to the least subnormal 2^-9
  CHECK(f32_to_e4m3fn(1e-9f) == 0x00);
  CHECK(f32_to_e4m3fn(-0.0f) == 0x80);
  CHECK(e4m3fn_to_f32(0x7E) == 448.0f);
  CHECK(std::isnan(e4m3fn_to_f32(0x7F)));
}

TEST_CASE("fp32 -> float8_e5m2 rounds to nearest even and overflows to inf") {
  CHECK(cast8(DType::Float8_E5M2, kIn) ==
        std::vector<uint8_t>{0x7F, 0xFF, 0x7F, 0x3C, 0x3C, 0x3C, 0x7C, 0x7C, 0x00, 0x00, 0x7C, 0x5F, 0x5F, 0x60});
  CHECK(f32_to_e5m2(500.0f) == 0x60);
  CHECK(f32_to_e5m2(1e6f) == 0x7C);
  CHECK(f32_to_e5m2(-1e6f) == 0xFC);
  CHECK(f32_to_e5m2(17.0f) == 0x4C);
  CHECK(f32_to_e5m2(19.0f) == 0x4D);
  CHECK(e5m2_to_f32(0x7B) == 57344.0f);
}

TEST_CASE("widening to float32 is exact and keeps signalling NaN payloads") {
  std::vector<uint16_t> bf = {0x7F81, 0xFFC1, 0x3F82, 0x0001};
  std::vector<uint32_t> out(bf.size());
  cast_elements(DType::BFloat16, DType::Float32, reinterpret_cast<const uint8_t*>(bf.data()),
                reinterpret_cast<uint8_t*>(out.data()), bf.size());
  CHECK(out == std::vector<uint32_t>{0x7F810000, 0xFFC10000, 0x3F820000, 0x00010000});
}

TEST_CASE("bf16 <-> fp32 casts of long runs (the blocks of 16 and their tail) are the element-wise ones") {
  // Every 65,537th float32 bit pattern (NaNs, infinities, subnormals and ties among them), then the
  // torch-checked inputs above in every position of a block: 65,538 + 14 x 17 values, not a multiple of 16.
  std::vector<uint32_t> in;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 65537) in.push_back(static_cast<uint32_t>(u));
  for (int shift = 0; shift < 17; ++shift)
    for (size_t i = 0; i < kIn.size(); ++i) in.push_back(kIn[(i + static_cast<size_t>(shift)) % kIn.size()]);
  REQUIRE(in.size() % 16 != 0);
  const std::vector<uint16_t> bf = cast16(DType::BFloat16, in);
  size_t wrong = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const float f = bits_f32(in[i]);
    wrong += bf[i] != (std::isnan(f) ? 0xFFFF : f32_to_bf16(f));
  }
  CHECK(wrong == 0);
  std::vector<uint32_t> back(bf.size());
  cast_elements(DType::BFloat16, DType::Float32, reinterpret_cast<const uint8_t*>(bf.data()),
                reinterpret_cast<uint8_t*>(back.data()), bf.size());
  wrong = 0;
  for (size_t i = 0; i < bf.size(); ++i) wrong += back[i] != static_cast<uint32_t>(bf[i]) << 16;
  CHECK(wrong == 0);
}
