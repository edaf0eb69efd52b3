// --quantize fp8-dynamic: compressed-tensors' FP8_DYNAMIC preset as llm-compressor's model_free_ptq
// writes it (compressed-tensors 0.20.0, format `float-quantized`): each quantized Linear weight X.weight
// [N, K] as float8_e4m3fn beside X.weight_scale [N, 1] in the weight's own dtype (the model's:
// compressed-tensors keeps a scale in the dtype of the weight it observed), one scale per output
// channel, symmetric; the activations quantized per token at run time (dynamic: nothing to
// calibrate). The arithmetic is compressed-tensors' own (calculate_qparams and _quantize, in the
// weight's dtype D): scale = round_D(amax(|row|) / 448) (D's machine epsilon where that is 0), q =
// e4m3(clamp(round_D(x / scale), -448, 448)), rounded to nearest even (view/codecs/ct_fp8_dynamic.cpp).
// config.json's quantization_config is what model_free_ptq writes for the preset (ct_written_config:
// one config_group_0 targeting Linear, `ignore` the modules kept, version "0.20.0", the format the
// folder holds). Read back by the compressed-tensors codec (compressed_tensors.cpp).
#include "meta/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

namespace {

std::string fp8dyn_summary(const int64_t*) {
  return " (compressed-tensors float-quantized: e4m3 beside a weight_scale per output channel in the weight's dtype; "
         "activations quantized per token at run time)";
}

json fp8dyn_config(const CodecRow&, const int64_t*, const json& ignore) {
  const json weights = {{"dynamic", false},      {"group_size", nullptr}, {"num_bits", 8},
                        {"strategy", "channel"}, {"symmetric", true},     {"type", "float"}};
  const json input = {{"dynamic", true},     {"group_size", nullptr}, {"num_bits", 8},
                      {"strategy", "token"}, {"symmetric", true},     {"type", "float"}};
  return ct_written_config("float-quantized", weights, input, ignore);
}

}  // namespace

const Codec& ct_fp8_dynamic_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "fp8-dynamic";
    c.quant_method = "compressed-tensors";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    // The scale's dtype is the weight's (bfloat16 here; float16 and float32 models get theirs).
    c.rows = {{"compressed-tensors fp8 channel", "", "", D::Float8_E4M3FN, D::BFloat16, true}};
    c.explains = explained_by_reader;  // the compressed-tensors codec reads it
    c.quantize_word = "fp8-dynamic";
    c.quantize_help =
        "compressed-tensors' FP8_DYNAMIC (llm-compressor's model_free_ptq): float8_e4m3fn and a weight_scale per "
        "output channel in the weight's dtype, activations per token at run time";
    c.quantize_brief = "compressed-tensors e4m3, a scale per output channel";
    c.block_refusal = "--quantize-block goes with fp8-block: fp8-dynamic has one scale per output channel";
    c.written_summary = fp8dyn_summary;
    c.written_config = fp8dyn_config;
    c.half_step = e4m3_half_ulp;
    c.display = "channel-scaled float8";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
