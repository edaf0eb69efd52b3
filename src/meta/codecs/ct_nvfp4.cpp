// --quantize nvfp4: NVFP4 weights (W4A16: activations stay in the model's dtype) in
// compressed-tensors' form, its NVFP4A16 preset as llm-compressor's model_free_ptq writes it
// (compressed-tensors 0.20.0, format `nvfp4-pack-quantized`, strategy `tensor_group`, group 16):
// each quantized Linear weight X.weight [N, K] becomes X.weight_packed uint8 [N, K / 2] (E2M1 codes,
// two a byte, the low nibble first) beside X.weight_scale float8_e4m3fn [N, K / 16] (one per 16
// values) and X.weight_global_scale float32 [1]. The global scale is shared across each fused
// group, as vLLM fuses them into one matrix and reads one global scale: q/k/v, gate/up (and each
// MoE expert's gate/up, which llm-compressor 0.14's mappings do not catch for per-expert names),
// DeepSeek's wq_a/wkv_a_with_mqa (q_a_proj/kv_a_proj_with_mqa in transformers' names) and w1/w3
// (codecs.h fused_group), computed
// before the block scales. The arithmetic is compressed-tensors' (generate_gparam,
// calculate_qparams, _quantize, cast_to_fp4, pack_fp4_to_uint8; D the weight's dtype): global =
// round_D(round_D(1 / amax of the group) * 448 * 6) (torch's scalar / tensor; 1 where that is not
// finite); per 16 values s =
// e4m3(clamp(global * round_D(amax / 6), +-448)) (0.125 where that is 0); q = E2M1(clamp(x / (s /
// global), +-6)) to nearest even, a negative value that rounds to zero keeping its sign
// (view/codecs/ct_nvfp4.cpp). Read back by the compressed-tensors codec.
#include "meta/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

namespace {

std::string nvfp4_summary(const int64_t*) {
  return " (compressed-tensors nvfp4-pack-quantized: E2M1 pairs in weight_packed beside an e4m3 weight_scale per 16 "
         "values and a weight_global_scale shared by each fused group)";
}

json nvfp4_config(const CodecRow&, const int64_t*, const json& ignore) {
  const json weights = {
      {"dynamic", false},           {"group_size", 16},  {"num_bits", 4},  {"scale_dtype", "torch.float8_e4m3fn"},
      {"strategy", "tensor_group"}, {"symmetric", true}, {"type", "float"}};
  return ct_written_config("nvfp4-pack-quantized", weights, nullptr, ignore);
}

}  // namespace

const Codec& ct_nvfp4_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "nvfp4 (compressed-tensors)";
    c.quant_method = "compressed-tensors";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    c.rows = {{"compressed-tensors nvfp4-pack-quantized", "", "", D::UInt8, D::Float8_E4M3FN, true}};
    c.explains = explained_by_reader;  // the compressed-tensors codec reads it
    c.quantize_word = "nvfp4";
    c.quantize_help =
        "NVFP4 weights (W4A16), compressed-tensors' NVFP4A16: E2M1 weight_packed, an e4m3 weight_scale per 16 values, "
        "a float32 weight_global_scale shared by each fused group (q/k/v, gate/up)";
    c.quantize_brief = "NVFP4 weights, compressed-tensors' form";
    c.block_refusal = "--quantize-block goes with fp8-block: NVFP4's groups are 16 values";
    c.written_summary = nvfp4_summary;
    c.written_config = nvfp4_config;
    c.half_step = e2m1_half_step;
    c.display = "NVFP4";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
