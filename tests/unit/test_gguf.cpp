// GGUF v3 (gguf/gguf.h): the header's bytes and the tensor types' arithmetic, each against what
// gguf-py 0.19.0 (the gguf-py llama-cpp-python 0.3.36's sdist carries, the same as PyPI's gguf
// 0.19.0) writes for the same input: GGUFWriter for the file, quants.quantize for Q8_0, BF16 and
// F16. The expected bytes were produced by that code (the recipe is in docs/gguf.md).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"

using namespace dcpctl;
using namespace dcpctl::gguf;

namespace {

std::string hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) s += {d[c >> 4], d[c & 15]};
  return s;
}

std::vector<uint8_t> encoded(TensorType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(tensor_bytes(t, x.size(), x.size()));
  encode(t, x.data(), x.size(), out.data());
  return out;
}

}  // namespace

TEST_CASE("gguf: Q8_0 is ggml's quantize_row_q8_0_ref, as gguf-py's Q8_0 computes it") {
  // Block 1: small values of both signs; block 2: amax 127 so d = 1 and x * (1/d) lands on halves
  // (rounded away from zero: 2.5 -> 3, -3.5 -> -4, 126.5 -> 127); block 3: zeros (d = 0, 1/d = 0).
  std::vector<float> x{0x0.0p+0f,       0x1.d9fa02p-8f,  0x1.4b6d0ep-6f,  0x1.2580a6p-5f,  0x1.97e9acp-5f,
                       0x1.d87c6ap-5f,  0x1.c8c852p-5f,  0x1.57700ep-8f,  0x1.d96c1ap-9f,  -0x1.703c7ep-8f,
                       -0x1.5b3bc0p-6f, -0x1.47f400p-5f, -0x1.d965eap-5f, -0x1.1d5aecp-4f, -0x1.2480b6p-7f,
                       -0x1.b697d2p-7f, -0x1.5d3a7cp-7f, 0x1.1dd3a4p-12f, 0x1.2d6eeap-6f,  0x1.4de44ep-5f,
                       0x1.01ad76p-4f,  0x1.46866ep-7f,  0x1.3a5e32p-6f,  0x1.857e6ap-6f,  0x1.53a044p-6f,
                       0x1.1ce68ap-7f,  -0x1.7d6386p-7f, -0x1.3322eap-5f, -0x1.07b1b8p-7f, -0x1.3c3132p-6f,
                       -0x1.e8d7aep-6f, -0x1.237d4cp-5f};
  for (float v : {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f, -126.5f}) x.push_back(v);
  for (int i = 0; i < 24; ++i) x.push_back(0.25f * static_cast<float>(i));
  for (int i = 0; i < 32; ++i) x.push_back(0.0f);
  CHECK(tensor_bytes(TensorType::Q8_0, 96, 96) == 3 * 34);
  CHECK(hex(encoded(TensorType::Q8_0, x)) ==
        "7e10000d25415b69660a07f6d9b79781f0e8ed00224a7312232b2610ebbcf1ddcabf003c7f03fc01ff027f810000010101010202020203"
        "0303030404040405050505060600000000000000000000000000000000000000000000000000000000000000000000");
  CHECK(fits(TensorType::Q8_0, 64));
  CHECK_FALSE(fits(TensorType::Q8_0, 48));
  CHECK(fits(TensorType::F16, 3));
}

TEST_CASE("gguf: BF16 rounds to nearest even and quiets a NaN as gguf-py does; F16 is IEEE's") {
  std::vector<float> x{1.0f, 1.00390625f, 1.01171875f, -2.5e-3f, INFINITY, 3.4e38f};
  CHECK(hex(encoded(TensorType::F16, {x.begin(), x.begin() + 4})) == "003c043c0c3c1f99");
  uint32_t nan_bits = 0x7fa00001u;  // a signalling NaN: gguf-py keeps its top half and sets the quiet bit
  float nan;
  std::memcpy(&nan, &nan_bits, 4);
  x.push_back(nan);
  CHECK(hex(encoded(TensorType::BF16, x)) == "803f803f823f24bb807f807fe07f");
}

TEST_CASE("gguf: the header and the data offsets are GGUFWriter's") {
  Header h;
  h.add_string("general.architecture", "llama");
  h.add_u32("llama.block_count", 2);
  h.add_f32("llama.rope.freq_base", 10000.0f);
  h.add_bool("b", true);
  h.add_strings("tokenizer.ggml.tokens", {"a", "bc"});
  h.add_i32s("tokenizer.ggml.token_type", {1, 3});
  CHECK(h.add_tensor("t.weight", {2, 3}, TensorType::F32) == 0);
  CHECK(h.add_tensor("q.weight", {2, 32}, TensorType::Q8_0) == 32);  // 24 bytes padded to 32
  CHECK(h.data_bytes() == 32 + 96);                                  // 68 bytes padded to 96
  std::vector<uint8_t> file = h.bytes();
  std::vector<float> t{0, 1, 2, 3, 4, 5};
  std::vector<uint8_t> data(h.data_bytes(), 0);
  encode(TensorType::F32, t.data(), t.size(), data.data());
  std::vector<float> q;
  for (int i = 0; i < 64; ++i) q.push_back(static_cast<float>(i));
  encode(TensorType::Q8_0, q.data(), q.size(), data.data() + 32);
  file.insert(file.end(), data.begin(), data.end());
  CHECK(hex(file) ==
        "474755460300000002000000000000000600000000000000140000000000000067656e6572616c2e617263686974656374757265080000"
        "0005000000000000006c6c616d6111000000000000006c6c616d612e626c6f636b5f636f756e7404000000020000001400000000000000"
        "6c6c616d612e726f70652e667265715f626173650600000000401c4601000000000000006207000000011500000000000000746f6b656e"
        "697a65722e67676d6c2e746f6b656e73090000000800000002000000000000000100000000000000610200000000000000626319000000"
        "00000000746f6b656e697a65722e67676d6c2e746f6b656e5f747970650900000005000000020000000000000001000000030000000800"
        "000000000000742e7765696768740200000003000000000000000200000000000000000000000000000000000000080000000000000071"
        "2e776569676874020000002000000000000000020000000000000008000000200000000000000000000000000000000000000000000000"
        "0000000000803f0000004000004040000080400000a0400000000000000000d0330004080c1014191d2125292d3135393d42464a4e5256"
        "5a5e62666b6f73777b7ff03741434547494b4d4f51535557595b5d5f61636567696b6d6f71737577797b7d7f0000000000000000000000"
        "0000000000000000000000000000000000");
}

TEST_CASE("gguf: split shards, names and sizes as gguf-py's GGUFWriter and the converter make them") {
  // A shard takes a tensor unless it holds one already and is at its count or would pass the size.
  CHECK(split_shards({10, 10, 10, 10, 10}, 2, 0) == std::vector<size_t>{0, 0, 1, 1, 2});
  CHECK(split_shards({10, 10, 10, 10, 10}, 0, 25) == std::vector<size_t>{0, 0, 1, 1, 2});
  CHECK(split_shards({10, 10, 10}, 0, 20) == std::vector<size_t>{0, 0, 1});         // equal to the size: stays
  CHECK(split_shards({100, 5, 100, 5}, 0, 50) == std::vector<size_t>{0, 1, 2, 3});  // a larger tensor alone
  CHECK(split_shards({1, 1, 100, 1, 1, 1}, 2, 50) == std::vector<size_t>{0, 0, 1, 2, 2, 3});
  CHECK(split_shards({10, 10}, 0, 0) == std::vector<size_t>{0, 0});
  CHECK(shard_path("out/tiny.gguf", 0, 3) == "out/tiny-00001-of-00003.gguf");
  CHECK(shard_path("tiny.gguf", 11, 12) == "tiny-00012-of-00012.gguf");
  CHECK(shard_path("a.b/m.v2.gguf", 1, 2) == "a.b/m.v2-00002-of-00002.gguf");
  CHECK(split_size("500M") == 500'000'000u);
  CHECK(split_size("2G") == 2'000'000'000u);
  CHECK(split_size("7K") == 7000u);
  CHECK(split_size("123") == 123u);
  CHECK(split_size("0") == 0u);
  for (const char* bad : {"", "M", "5X", "2GB", "-1", "1.5G", " 5"}) CHECK_THROWS(split_size(bad));
}
