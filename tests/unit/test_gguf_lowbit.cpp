// The converter's low-bit sources (gguf/lowbit.h): which tensors dequant_model pairs and drops,
// what it refuses, and NVFP4's repack into ggml's block (every value where ggml's layout reads it).
// tests/interop/gguf_lowbit_test.py checks the files against the converter byte for byte.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "gguf/lowbit.h"
#include "util/error.h"

using namespace dcpctl;
using namespace dcpctl::gguf;
using nlohmann::json;

namespace {

json config(json qc) {
  return json{{"quantization_config", std::move(qc)}};
}

}  // namespace

TEST_CASE("gguf lowbit: fp8 blocks pair X with X_scale_inv and drop the scales") {
  std::vector<SourceTensor> t{{"a.weight", DType::Float8_E4M3FN, {100, 70}},
                              {"a.weight_scale_inv", DType::Float32, {4, 3}},
                              {"a.activation_scale", DType::Float32, {}},
                              {"n.weight", DType::BFloat16, {70}}};
  LowBitSources s = converter_dequant(config({{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}}), t, "cfg");
  REQUIRE(s.fp8.size() == 1);
  CHECK(s.fp8.at(0).scale == 1);
  CHECK(s.fp8.at(0).block[0] == 32);
  CHECK(s.fp8.at(0).block[1] == 32);
  CHECK(s.dropped == std::vector<bool>{false, true, true, false});
  // A scale that is not the weight's blocks: refused, naming the weight.
  t[1].shape = {4, 2};
  CHECK_THROWS_AS(converter_dequant(config({{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}}), t, "cfg"),
                  UnsupportedError);
}

TEST_CASE("gguf lowbit: compressed-tensors FP8 per channel; strategy tensor and other formats refused") {
  std::vector<SourceTensor> t{{"a.weight", DType::Float8_E4M3FN, {8, 64}}, {"a.weight_scale", DType::BFloat16, {8, 1}}};
  json qc{{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups", {{"group_0", {{"weights", {{"strategy", "channel"}, {"group_size", nullptr}}}}}}}};
  LowBitSources s = converter_dequant(config(qc), t, "cfg");
  REQUIRE(s.fp8.size() == 1);
  CHECK(s.fp8.at(0).block[0] == 1);
  CHECK(s.fp8.at(0).block[1] == 64);
  qc["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  CHECK_THROWS_WITH(converter_dequant(config(qc), t, "cfg"), Catch::Contains("strategy 'tensor'"));
  qc["format"] = "pack-quantized";
  CHECK_THROWS_WITH(converter_dequant(config(qc), t, "cfg"), Catch::Contains("pack-quantized"));
  CHECK(converter_dequant(json::object(), t, "cfg").fp8.empty());
}

TEST_CASE("gguf lowbit: compressed-tensors NVFP4 is passed through with its global scales") {
  std::vector<SourceTensor> t{{"a.weight_global_scale", DType::Float32, {1}},
                              {"a.weight_packed", DType::UInt8, {4, 32}},
                              {"a.weight_scale", DType::Float8_E4M3FN, {4, 4}}};
  json qc{
      {"quant_method", "compressed-tensors"}, {"format", "nvfp4-pack-quantized"}, {"config_groups", json::object()}};
  CHECK(nvfp4_config(config(qc)));
  LowBitSources s = converter_dequant(config(qc), t, "cfg");
  REQUIRE(s.fp4.size() == 1);
  CHECK(s.fp4.at(1).scale == 2);
  CHECK(s.fp4.at(1).scale2 == std::optional<size_t>(0));
  CHECK(s.fp4.at(1).reciprocal);
  CHECK(s.dropped == std::vector<bool>{true, false, true});
  t[1].shape = {4, 24};  // 48 columns: not whole 64-value super-blocks
  t[2].shape = {4, 3};
  CHECK_THROWS_AS(converter_dequant(config(qc), t, "cfg"), UnsupportedError);
}

TEST_CASE("gguf lowbit: nvfp4_pack puts every value where ggml's block_nvfp4 reads it") {
  const int64_t rows = 2, cols = 128;
  std::vector<uint8_t> packed(rows * cols / 2), scale(rows * cols / 16);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = static_cast<uint8_t>(0x80 | (i * 5));  // sign bits set
  const std::vector<uint8_t> out = nvfp4_pack(packed.data(), scale.data(), rows, cols);
  REQUIRE(out.size() == static_cast<size_t>(rows * cols / 64 * 36));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      // The source: value c of row r is nibble c % 2 of byte c / 2; ggml: super-block c / 64, its
      // sub-block (c % 64) / 16, byte (c % 16) % 8 of that sub-block's 8, low nibble for c % 16 < 8.
      const uint8_t want = (packed[r * cols / 2 + c / 2] >> (4 * (c % 2))) & 0x0F;
      const uint8_t* sb = out.data() + (r * (cols / 64) + c / 64) * 36;
      const int64_t in_sb = c % 64, sub = in_sb / 16, k = in_sb % 16;
      const uint8_t got = (sb[4 + sub * 8 + k % 8] >> (k < 8 ? 0 : 4)) & 0x0F;
      REQUIRE(got == want);
      CHECK(sb[sub] == (scale[r * cols / 16 + c / 16] & 0x7F));
    }
}
