// --quantize mxfp8 --quantize-format modelopt: MXFP8 weights in NVIDIA ModelOpt's Hugging Face
// form, as nvidia-modelopt 0.47.0's export_hf_checkpoint writes mtq.MXFP8_DEFAULT_CFG (quant_algo
// MXFP8; the activations are quantized by the server at run time, per 32 values, from no
// calibration): each quantized Linear weight X.weight [N, K] becomes X.weight float8_e4m3fn [N, K]
// beside X.weight_scale uint8 [N, K / 32], a biased power of two (E8M0) per 32 values.
//
// ModelOpt's exponent rule is not compressed-tensors' (meta/codecs/ct_mx.cpp) nor OCP's: per group,
// e = clamp(ceil(log2(amax / 448)), -127, 127) + 127 (MXFP8QTensor._compute_e8m0_exponent, in
// float32: amax.float() / 448, torch.log2, ceil; -127 for a group of zeros), and q =
// e4m3(clamp(x * 2^(127 - e), +-448)) (quantize_with_scale: the product in float32). log2 is taken
// in float32 as torch does: a quotient a few float32 steps above a power of two has a log2 that
// rounds to the integer, and ceil keeps it (its values then saturate at 448). Checked byte for
// byte against ModelOpt 0.47.0's own export of a dense Qwen3 (codecs-read); read back by the
// modelopt codec (meta/codecs/modelopt.cpp).
//
// config.json's quantization_config is ModelOpt's for MXFP8 (ignore, quant_algo, producer,
// quant_method: no config_groups), and hf_quant_config.json beside it (group_size 32).
#include "meta/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

namespace {

std::string mo_mxfp8_summary(const int64_t*) {
  return " (ModelOpt MXFP8: e4m3 weight beside a uint8 E8M0 weight_scale per 32 values, ModelOpt's exponent rule; "
         "hf_quant_config.json beside config.json)";
}

json mo_mxfp8_config(const CodecRow&, const int64_t*, const json& ignore) {
  return {{"ignore", modelopt_written_ignore(ignore)},
          {"quant_algo", "MXFP8"},
          {"producer", {{"name", "modelopt"}, {"version", "0.47.0"}}},
          {"quant_method", "modelopt"}};
}

std::vector<std::pair<std::string, std::string>> mo_mxfp8_files(const json& config) {
  return modelopt_written_files(config, 32);
}

}  // namespace

const Codec& mo_mxfp8_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "mxfp8 (modelopt)";
    c.quant_method = "modelopt";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    c.rows = {{"modelopt MXFP8", "", "", D::Float8_E4M3FN, D::UInt8, true}};
    c.explains = explained_by_reader;  // the modelopt codec reads it
    c.quantize_word = "mxfp8";
    c.quantize_help =
        "ModelOpt's MXFP8: float8_e4m3fn weight beside a uint8 E8M0 weight_scale per 32 values (ModelOpt's exponent "
        "rule, ceil(log2(amax / 448))), and hf_quant_config.json";
    c.quantize_brief = "MXFP8 weights, ModelOpt's form";
    c.block_refusal = "--quantize-block goes with fp8-block: MX groups are 32 values";
    c.written_summary = mo_mxfp8_summary;
    c.written_config = mo_mxfp8_config;
    c.written_files = mo_mxfp8_files;
    c.half_step = e4m3_half_ulp;  // ModelOpt's exponent, ceil(log2(amax / 448)), leaves nothing to saturate
    c.display = "MXFP8";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
