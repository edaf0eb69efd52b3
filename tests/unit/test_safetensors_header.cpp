// The safetensors header reader (src/meta/safetensors_header.h): what real files hold parses,
// and every lie a hostile header can tell is a FormatError, never a crash or a huge allocation.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "meta/safetensors_header.h"

using namespace dcpctl;

namespace {

// A file image: u64 little-endian header length, the header text, `data` bytes of data section.
std::vector<uint8_t> image(const std::string& header, size_t data) {
  std::vector<uint8_t> out(8 + header.size() + data, 0);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

SafetensorsHeader parse(const std::string& header, size_t data) {
  std::vector<uint8_t> b = image(header, data);
  return parse_safetensors_header(ByteSpan(b.data(), b.size()), "t.safetensors");
}

std::string error_of(const std::string& header, size_t data) {
  try {
    parse(header, data);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors header: entries, metadata and DCP sharding info as torch writes them") {
  // As HuggingFaceStorageWriter writes a rank's shard (keys in any order, __metadata__ anywhere).
  std::string h =
      R"({"__metadata__":{"format":"pt","DCP_VERSION":"1.0","DCP_SHARDING_INFO":"{\"a.w\": {\"saved_offsets\": [4, 0]}, \"b\": {\"saved_offsets\": []}}"},)"
      R"("a.w":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,12]},"b":{"dtype":"I64","shape":[],"data_offsets":[12,20]},)"
      R"("m":{"dtype":"BOOL","shape":[0,5],"data_offsets":[20,20]}})";
  SafetensorsHeader s = parse(h + "    ", 20);
  REQUIRE(s.tensors.size() == 3);
  CHECK(s.data_start == 8 + h.size() + 4);
  CHECK(s.tensors[0].key == "a.w");
  CHECK(s.tensors[0].dtype == DType::BFloat16);
  CHECK(s.tensors[0].shape == std::vector<int64_t>{3, 2});
  CHECK(s.tensors[1].dtype == DType::Int64);
  CHECK(s.tensors[1].shape.empty());
  CHECK(s.tensors[2].dtype == DType::Bool);
  CHECK(s.metadata.at("format") == "pt");
  auto info = dcp_sharding_info(s, "t.safetensors");
  CHECK(info.at("a.w") == std::vector<int64_t>{4, 0});
  CHECK(info.at("b").empty());
  CHECK(s.find("m") != nullptr);
  CHECK(s.find("nope") == nullptr);
}

TEST_CASE("safetensors header: every safetensors dtype maps to torch's") {
  CHECK(dtype_from_safetensors_name("F8_E4M3") == DType::Float8_E4M3FN);
  CHECK(dtype_from_safetensors_name("F8_E5M2") == DType::Float8_E5M2);
  CHECK(dtype_from_safetensors_name("U16") == DType::UInt16);
  CHECK(dtype_from_safetensors_name("C64") == DType::Complex64);
  CHECK(dtype_from_safetensors_name("F4") == DType::Float4_E2M1FN_X2);
  CHECK_FALSE(dtype_from_safetensors_name("F6_E2M3").has_value());
  // F4 counts 4-bit elements: torch's float4_e2m1fn_x2 has half the last dimension; an odd one is refused.
  SafetensorsHeader f4 = parse(R"({"x":{"dtype":"F4","shape":[3,8],"data_offsets":[0,12]}})", 12);
  CHECK(f4.tensors[0].dtype == DType::Float4_E2M1FN_X2);
  CHECK(f4.tensors[0].shape == std::vector<int64_t>{3, 4});
  CHECK_THAT(error_of(R"({"x":{"dtype":"F4","shape":[3,7],"data_offsets":[0,11]}})", 11),
             Catch::Contains("must be even"));
  CHECK_THAT(error_of(R"({"x":{"dtype":"F4","shape":[3,8],"data_offsets":[0,24]}})", 24),
             Catch::Contains("F4 of its shape needs 12"));
  // An unknown dtype is kept by name (the reader refuses to decode it later, exit 5).
  SafetensorsHeader s = parse(R"({"x":{"dtype":"Q9","shape":[2],"data_offsets":[0,7]}})", 7);
  CHECK(s.tensors[0].dtype_name == "Q9");
  CHECK_FALSE(s.tensors[0].dtype.has_value());
}

TEST_CASE("safetensors header: hostile headers are refused with a reason") {
  CHECK_THAT(error_of(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
             Catch::Contains("outside the data section"));
  CHECK_THAT(error_of(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), Catch::Contains("needs 12"));
  CHECK_THAT(error_of(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), Catch::Contains("outside"));
  CHECK_THAT(error_of(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), Catch::Contains("negative"));
  CHECK_THAT(error_of(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8),
             Catch::Contains("overflows"));
  CHECK_THAT(error_of(R"({"x":{"dtype":"F32","shape":[2]}})", 8), Catch::Contains("lacks"));
  CHECK_THAT(error_of(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8),
             Catch::Contains("more than two"));
  CHECK_THAT(error_of(R"({"x":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", 8),
             Catch::Contains("unexpected array"));
  CHECK_THAT(
      error_of(
          R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
          8),
      Catch::Contains("twice"));
  CHECK_THAT(error_of(R"([1,2,3])", 0), Catch::Contains("unexpected array"));
  CHECK_THAT(error_of(R"({"x":)", 0), Catch::Contains("JSON error"));
  CHECK_THAT(error_of(R"({"__metadata__":{"k":1}})", 0), Catch::Contains("unexpected number"));
  CHECK_THAT(error_of(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} trailing)", 8),
             Catch::Contains("JSON error"));

  // Lengths that lie: past the end, past the 100 MB cap, too short to hold the length itself.
  std::vector<uint8_t> b = image("{}", 0);
  b[0] = 0xff;
  CHECK_THROWS_AS(parse_safetensors_header(ByteSpan(b.data(), b.size()), "t"), FormatError);
  std::vector<uint8_t> huge(8, 0);
  huge[7] = 0x80;  // 2^63
  CHECK_THROWS_AS(parse_safetensors_header(ByteSpan(huge.data(), huge.size()), "t"), FormatError);
  CHECK_THROWS_AS(parse_safetensors_header(ByteSpan(huge.data(), 5), "t"), FormatError);

  // DCP_SHARDING_INFO that is not what torch writes.
  SafetensorsHeader s = parse(R"({"__metadata__":{"DCP_SHARDING_INFO":"{\"x\": {\"saved_offsets\": [-1]}}"}})", 0);
  CHECK_THROWS_AS(dcp_sharding_info(s, "t"), FormatError);
  s = parse(R"({"__metadata__":{"DCP_SHARDING_INFO":"not json"}})", 0);
  CHECK_THROWS_AS(dcp_sharding_info(s, "t"), FormatError);
}

TEST_CASE("safetensors header: one parser, strict for the reader and lenient for the audit") {
  const std::string twice = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("__metadata__":{"format":"pt"},"x":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})";
  SafetensorsEntries strict = decode_safetensors_json(twice, false);
  CHECK_THAT(strict.error, Catch::Contains("'x' appears twice"));
  CHECK(strict.tensors.empty());
  SafetensorsEntries lenient = decode_safetensors_json(twice, true);
  CHECK(lenient.error.empty());
  CHECK(lenient.duplicates == std::vector<std::string>{"x"});
  REQUIRE(lenient.tensors.size() == 2);  // both entries as written, in order
  CHECK(lenient.tensors[0].dtype_name == "F32");
  CHECK(lenient.tensors[1].dtype_name == "F16");
  CHECK(lenient.metadata.at("format") == "pt");
  // What is not the format's shape stops both modes.
  for (bool mode : {false, true}) {
    CHECK_THAT(
        decode_safetensors_json(R"({"x":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", mode).error,
        Catch::Contains("two dtypes"));
    CHECK_THAT(decode_safetensors_json(R"({"__metadata__":{"k":1}})", mode).error,
               Catch::Contains("unexpected number"));
  }
}
