// --quantize fp8-block --quantize-format compressed-tensors: compressed-tensors' FP8_BLOCK preset as
// llm-compressor's model_free_ptq writes it (compressed-tensors 0.20.0, format `float-quantized`,
// strategy `block`, block_structure [128, 128]): each quantized Linear weight X.weight [N, K] as
// float8_e4m3fn beside X.weight_scale [ceil(N / 128), ceil(K / 128)] in the weight's own dtype D
// (not transformers' float32 weight_scale_inv: the scale multiplies), one per 128 x 128 block (a
// block at the edge by its own amax); activations quantized per group of 128 at run time. The
// arithmetic is compressed-tensors' (calculate_qparams, _quantize, in D): scale = round_D(amax /
// 448) (D's machine epsilon where that is 0), q = e4m3(clamp(round_D(x / scale), -448, 448))
// (view/codecs/ct_fp8_block.cpp). Read back by the compressed-tensors codec.
#include "meta/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

namespace {

std::string ctblock_summary(const int64_t*) {
  return " (compressed-tensors float-quantized: e4m3 beside a weight_scale per 128x128 block in the weight's dtype; "
         "activations quantized per group of 128 at run time)";
}

json ctblock_config(const CodecRow&, const int64_t*, const json& ignore) {
  const json weights = {{"block_structure", {128, 128}}, {"dynamic", false},  {"group_size", nullptr}, {"num_bits", 8},
                        {"strategy", "block"},           {"symmetric", true}, {"type", "float"}};
  const json input = {{"dynamic", true},     {"group_size", 128}, {"num_bits", 8},
                      {"strategy", "group"}, {"symmetric", true}, {"type", "float"}};
  return ct_written_config("float-quantized", weights, input, ignore);
}

}  // namespace

const Codec& ct_fp8_block_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "fp8-block (compressed-tensors)";
    c.quant_method = "compressed-tensors";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    // The scale's dtype is the weight's (bfloat16 here; float16 and float32 models get theirs).
    c.rows = {{"compressed-tensors fp8 block", "", "", D::Float8_E4M3FN, D::BFloat16, true}};
    c.explains = explained_by_reader;  // the compressed-tensors codec reads it
    c.quantize_word = "fp8-block";
    c.quantize_help =
        "compressed-tensors' FP8_BLOCK (llm-compressor's model_free_ptq): float8_e4m3fn and a weight_scale per "
        "128x128 block in the weight's dtype";
    c.quantize_brief = "compressed-tensors e4m3, a scale per 128x128 block";
    c.block_refusal = "--quantize-block goes with fp8-block's own form: compressed-tensors' FP8_BLOCK is 128x128";
    c.written_summary = ctblock_summary;
    c.written_config = ctblock_config;
    c.half_step = e4m3_half_ulp;
    c.display = "block-scaled float8";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
