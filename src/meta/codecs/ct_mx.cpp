// --quantize mxfp8, and --quantize mxfp4 --quantize-format compressed-tensors: OCP MX formats for
// every Linear weight in compressed-tensors' form, its MXFP8A16 and MXFP4A16 presets as
// llm-compressor's model_free_ptq writes them (compressed-tensors 0.20.0, strategy `group` 32,
// scale_dtype uint8; activations stay in the model's dtype):
//   mxfp8-quantized       X.weight float8_e4m3fn [N, K] beside X.weight_scale uint8 [N, K / 32]
//   mxfp4-pack-quantized  X.weight_packed uint8 [N, K / 2] (E2M1 pairs, the low nibble first)
//                         beside X.weight_scale uint8 [N, K / 32]
// The scale byte is a biased power of two (E8M0). compressed-tensors' exponent rule
// (quantization/utils/mxfp_utils.py generate_mx_scales) is not OCP's: the group's amax, in the
// weight's dtype D, is rounded to a power of two on its bits -- up when its significand is at least
// 1.25 (round_to_power_2 with E2M1's one mantissa bit, for both formats) -- and the element's emax
// (floor(log2(max)): 2 for E2M1, 8 for E4M3) subtracted: e = clamp(127 + log2(p2) - emax, 0, 255)
// (0 for a group of zeros). OCP MX v1.0 (and torchao's to_mx, what --quantize mxfp4 writes for
// GPT-OSS) takes floor(log2(amax)) - emax, never rounding up; ModelOpt's MXFP8 takes
// ceil(log2(amax / 448)). The values: q = clamp(round_D(x / 2^(e - 127)), +-max) to e4m3 (MXFP8)
// or to E2M1 by compressed-tensors' cast_to_fp4 (MXFP4). view/codecs/ct_mx.cpp computes them.
#include "meta/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

namespace {

std::string mxfp8_summary(const int64_t*) {
  return " (compressed-tensors mxfp8-quantized: e4m3 beside a uint8 E8M0 weight_scale per 32 values)";
}
std::string ctmxfp4_summary(const int64_t*) {
  return " (compressed-tensors mxfp4-pack-quantized: E2M1 pairs in weight_packed beside a uint8 E8M0 weight_scale per "
         "32 "
         "values)";
}

json mx_weights(int bits) {
  return {{"dynamic", false},    {"group_size", 32},  {"num_bits", bits}, {"scale_dtype", "torch.uint8"},
          {"strategy", "group"}, {"symmetric", true}, {"type", "float"}};
}
json mxfp8_config(const CodecRow&, const int64_t*, const json& ignore) {
  return ct_written_config("mxfp8-quantized", mx_weights(8), nullptr, ignore);
}
json ctmxfp4_config(const CodecRow&, const int64_t*, const json& ignore) {
  return ct_written_config("mxfp4-pack-quantized", mx_weights(4), nullptr, ignore);
}

}  // namespace

const Codec& ct_mxfp8_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "mxfp8 (compressed-tensors)";
    c.quant_method = "compressed-tensors";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    c.rows = {{"compressed-tensors mxfp8-quantized", "", "", D::Float8_E4M3FN, D::UInt8, true}};
    c.explains = explained_by_reader;  // the compressed-tensors codec reads it
    c.quantize_word = "mxfp8";
    c.quantize_help =
        "MXFP8 weights, compressed-tensors' MXFP8A16: float8_e4m3fn beside a uint8 E8M0 weight_scale per 32 values "
        "(compressed-tensors' exponent rule)";
    c.quantize_brief = "MXFP8 weights, compressed-tensors' form";
    c.block_refusal = "--quantize-block goes with fp8-block: MX groups are 32 values";
    c.written_summary = mxfp8_summary;
    c.written_config = mxfp8_config;
    c.half_step = e4m3_half_ulp;  // compressed-tensors' exponent keeps |x| / s below 320 of e4m3's 448
    c.display = "MXFP8";
    return c;
  }();
  return codec;
}

const Codec& ct_mxfp4_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "mxfp4 (compressed-tensors)";
    c.quant_method = "compressed-tensors";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    c.rows = {{"compressed-tensors mxfp4-pack-quantized", "", "", D::UInt8, D::UInt8, true}};
    c.explains = explained_by_reader;  // the compressed-tensors codec reads it
    c.quantize_word = "mxfp4";
    c.quantize_help =
        "every Linear as compressed-tensors' MXFP4A16: E2M1 weight_packed beside a uint8 E8M0 weight_scale per 32 "
        "values (compressed-tensors' exponent rule)";
    c.quantize_brief = "MXFP4 for every Linear, compressed-tensors' form";
    c.block_refusal = "--quantize-block goes with fp8-block: MX groups are 32 values";
    c.written_summary = ctmxfp4_summary;
    c.written_config = ctmxfp4_config;
    c.half_step = e2m1_half_step;
    c.display = "MXFP4";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
