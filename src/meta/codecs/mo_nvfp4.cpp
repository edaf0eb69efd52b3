// --quantize nvfp4 --quantize-format modelopt: NVFP4 weights (W4A16: activations stay in the
// model's dtype) in NVIDIA ModelOpt's Hugging Face form, as nvidia-modelopt 0.47.0's
// export_hf_checkpoint writes mtq.W4A16_NVFP4_CFG (quant_algo W4A16_NVFP4, which vLLM loads with
// its ModelOptNvFp4W4A16LinearMethod and SGLang with Marlin): each quantized Linear weight
// X.weight [N, K] becomes X.weight uint8 [N, K / 2] (E2M1 codes, two a byte, the low nibble first)
// beside X.weight_scale float8_e4m3fn [N, K / 16] (one per 16 values) and X.weight_scale_2
// float32 [] (a scalar). weight_scale_2 is amax / (6 * 448), the *reciprocal* of compressed-
// tensors' weight_global_scale, and is shared across each fused group (q/k/v, gate/up, each MoE
// expert's gate/up, DeepSeek's wq_a/wkv_a_with_mqa or q_a_proj/kv_a_proj_with_mqa, and w1/w3: codecs.h
// fused_group), as ModelOpt's export unifies the amax of the Linears that read one input
// (quant_utils.preprocess_linear_fusion) and vLLM keeps one global scale for the fused matrix.
// No input_scale is written: W4A4 (quant_algo NVFP4) needs one calibrated on data and is refused
// (--quantize nvfp4-w4a4, calibrated_schemes()).
//
// The arithmetic is ModelOpt's (NVFP4QTensor.get_weights_scaling_factor_2, get_weights_scaling_factor,
// quantize, _cast_fp4; float32 throughout): weight_scale_2 = f32(amax of the group) / 2688 (1 where
// that is 0: an all-zero group, for which ModelOpt would divide 0 by 0); per 16 values s =
// e4m3(clamp(amax16 / (6 * weight_scale_2), 2^-9, 448)), amax16 = 0 giving 1.0 first; q =
// E2M1(x / (f32(s) * weight_scale_2)): the magnitude to nearest even among 0, 0.5, 1, 1.5, 2, 3, 4, 6
// (torch.searchsorted over the bounds 0.25 .. 5, a value on an odd bound moved up), saturating at 6,
// the sign bit where x < 0 (a negative that rounds to zero keeps it: code 8). The same codes as
// compressed-tensors' cast_to_fp4; the scales differ (compressed-tensors scales by its global
// scale before the e4m3 cast, and never clamps the block scale from below). Checked byte for byte
// against ModelOpt 0.47.0's own export of a dense Qwen3 and a Qwen3-MoE (codecs-read). Read back by
// the modelopt codec (meta/codecs/modelopt.cpp).
//
// config.json's quantization_config is the one ModelOpt writes there (convert_hf_quant_config_format:
// config_groups, ignore, quant_algo, producer, quant_method), and hf_quant_config.json beside it
// holds the same in ModelOpt's older form (vLLM reads it when config.json has none, and then
// requires group_size, kv_cache_quant_algo and exclude_modules). `producer` names the ModelOpt
// release whose form is written, as the compressed-tensors forms name compressed-tensors 0.20.0.
// The ignore list holds each module kept by its exact name, sorted as ModelOpt sorts it (ModelOpt
// may shorten a whole unquantized subtree to `prefix*`; vLLM reads both alike).
#include "meta/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

namespace {

std::string mo_nvfp4_summary(const int64_t*) {
  return " (ModelOpt W4A16_NVFP4: E2M1 pairs in weight beside an e4m3 weight_scale per 16 values and a float32 "
         "weight_scale_2 shared by each fused group; hf_quant_config.json beside config.json)";
}

json mo_nvfp4_config(const CodecRow&, const int64_t*, const json& ignore) {
  return {{"config_groups",
           {{"group_0",
             {{"weights", {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
              {"targets", {"Linear"}}}}}},
          {"ignore", modelopt_written_ignore(ignore)},
          {"quant_algo", "W4A16_NVFP4"},
          {"producer", {{"name", "modelopt"}, {"version", "0.47.0"}}},
          {"quant_method", "modelopt"}};
}

std::vector<std::pair<std::string, std::string>> mo_nvfp4_files(const json& config) {
  return modelopt_written_files(config, 16);
}

}  // namespace

const Codec& mo_nvfp4_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "nvfp4 (modelopt)";
    c.quant_method = "modelopt";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    c.rows = {{"modelopt W4A16_NVFP4", "", "", D::UInt8, D::Float8_E4M3FN, true}};
    c.explains = explained_by_reader;  // the modelopt codec reads it
    c.quantize_word = "nvfp4";
    c.quantize_help =
        "NVFP4 weights (W4A16), ModelOpt's W4A16_NVFP4: E2M1 weight, an e4m3 weight_scale per 16 values, a float32 "
        "weight_scale_2 (amax / 2688) shared by each fused group, and hf_quant_config.json";
    c.quantize_brief = "NVFP4 weights, ModelOpt's form";
    c.block_refusal = "--quantize-block goes with fp8-block: NVFP4's groups are 16 values";
    c.written_summary = mo_nvfp4_summary;
    c.written_config = mo_nvfp4_config;
    c.written_files = mo_nvfp4_files;
    c.half_step = e2m1_half_step;
    c.display = "NVFP4";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
