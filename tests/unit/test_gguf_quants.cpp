// ggml's reference quantizers (gguf/quants.h) against ggml itself: the bytes libggml-base
// (llama-cpp-python 0.3.36's llama.cpp, built by tools/gguf_oracle.py build) writes for the rows of
// tests/fixtures/gguf/quants/input.f32, recorded by tests/fixtures/gguf/make_quants.py (its
// docstring has the recipe and what each row exercises).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/gguf.h"

using namespace dcpctl::gguf;

namespace {

constexpr size_t kRow = 512;

std::vector<uint8_t> fixture(const std::string& name) {
  std::ifstream f(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/gguf/quants/" + name, std::ios::binary);
  REQUIRE(f);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> input() {
  std::vector<uint8_t> b = fixture("input.f32");
  std::vector<float> x(b.size() / 4);
  std::memcpy(x.data(), b.data(), b.size());
  return x;
}

// The first row and block (of the type's block size) where dcpctl's bytes are not ggml's, or "".
std::string first_difference(TensorType t, const std::vector<float>& x, const std::vector<uint8_t>& want) {
  const uint64_t row_bytes = tensor_bytes(t, kRow, kRow), bs = block_size(t);
  const uint64_t block_bytes = tensor_bytes(t, bs, bs);
  std::vector<uint8_t> got(row_bytes);
  for (size_t r = 0; r < x.size() / kRow; ++r) {
    encode(t, x.data() + r * kRow, kRow, got.data());
    for (uint64_t b = 0; b < row_bytes / block_bytes; ++b)
      if (std::memcmp(got.data() + b * block_bytes, want.data() + r * row_bytes + b * block_bytes, block_bytes) != 0)
        return std::string(type_name(t)) + ": row " + std::to_string(r) + ", block " + std::to_string(b);
  }
  return "";
}

}  // namespace

TEST_CASE("gguf_quants: each type's bytes are ggml's, row by row") {
  const std::vector<float> x = input();
  REQUIRE(x.size() % kRow == 0);
  REQUIRE(x.size() / kRow >= 14);
  for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q4_K,
                       TensorType::Q5_K, TensorType::Q6_K}) {
    const std::vector<uint8_t> want = fixture(std::string(type_name(t)) + ".bin");
    REQUIRE(want.size() == tensor_bytes(t, x.size(), kRow));
    CAPTURE(type_name(t));
    CHECK(first_difference(t, x, want) == "");
  }
}

TEST_CASE("gguf_quants: a wrong input is seen (the fixture is not trivially matched)") {
  std::vector<float> x = input();
  x[0] = x[0] * 1.5f + 0.01f;
  for (TensorType t : {TensorType::Q4_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K})
    CHECK(first_difference(t, x, fixture(std::string(type_name(t)) + ".bin")) ==
          std::string(type_name(t)) + ": row 0, block 0");
}

TEST_CASE("gguf_quants: block sizes, sizes and llama-quantize's fallbacks for rows the blocks do not fit") {
  CHECK(tensor_bytes(TensorType::Q4_0, 64, 64) == 36);
  CHECK(tensor_bytes(TensorType::Q4_K, 512, 256) == 288);
  CHECK(tensor_bytes(TensorType::Q5_K, 256, 256) == 176);
  CHECK(tensor_bytes(TensorType::Q6_K, 256, 256) == 210);
  CHECK(row_type(TensorType::Q4_K, 512) == TensorType::Q4_K);
  CHECK(row_type(TensorType::Q4_K, 64) == TensorType::Q5_0);
  CHECK(row_type(TensorType::Q5_K, 96) == TensorType::Q5_1);
  CHECK(row_type(TensorType::Q6_K, 128) == TensorType::Q8_0);
  CHECK(row_type(TensorType::Q6_K, 100) == TensorType::F16);
  CHECK(row_type(TensorType::Q4_0, 48) == TensorType::F16);
  CHECK(row_type(TensorType::Q8_0, 48) == TensorType::F16);
  CHECK(row_type(TensorType::F32, 3) == TensorType::F32);
  CHECK_THROWS(encode(TensorType::Q4_K, std::vector<float>(128).data(), 128, std::vector<uint8_t>(256).data()));
}
