// compressed-tensors (vllm-project/compressed-tensors 0.20.0; what llm-compressor writes, vLLM and
// SGLang read): config.json's quantization_config is {"quant_method": "compressed-tensors",
// "format", "quantization_status": "compressed", "config_groups": {NAME: {"targets", "weights":
// {num_bits, type, strategy, group_size, block_structure, symmetric, scale_dtype, ...}, "format"}},
// "ignore"}; a group without its own format takes the top-level one. Per quantized Linear X:
//   float-quantized   X.weight e4m3 [N, K], X.weight_scale in the model's dtype: [1] (tensor),
//                     [N, 1] (channel), [N, ceil(K / g)] (group), [ceil(N / bh), ceil(K / bw)] (block)
//   pack-quantized    X.weight_packed int32 [N, ceil(K * b / 32)] (element i of a row at bits
//                     [i*b, i*b + b) of its little-endian words, stored + 2^(b-1)), X.weight_scale
//                     [N, groups], X.weight_shape int64 [2]; asymmetric: X.weight_zero_point int32
//                     packed the same way down the columns of [N, groups]
//   nvfp4-pack-quantized  X.weight_packed uint8 [N, K / 2] (E2M1, low nibble first), X.weight_scale
//                     e4m3 [N, K / 16], X.weight_global_scale float32 [1]
//   mxfp4-pack-quantized  X.weight_packed uint8 [N, K / 2], X.weight_scale uint8 [N, K / 32] (E8M0)
//   mxfp6-pack-quantized  X.weight_packed uint8 [N, 3 K / 4] (E2M3 codes of 6 bits, the sign bit 5,
//                     four a little-endian 24-bit word: code j at bits 6 j), X.weight_scale uint8
//                     [N, K / 32] (E8M0); compressed-tensors 0.20.0's MXFP6A16 and MXFP6A8 (whose
//                     activations are quantized at run time: nothing on disk)
//   mxfp8-quantized   X.weight e4m3 [N, K], X.weight_scale uint8 [N, K / 32] (E8M0)
// Decoded as compressed-tensors' own decompressors compute (view/codecs/compressed_tensors.cpp):
// float and pack formats in the scale's dtype, NVFP4 and MX (MXFP4, MXFP6, MXFP8) in bfloat16
// whatever the model's dtype.
// activation order (`weight_g_idx`) is neither written nor read by 0.20.0: refused.
#include <string>

#include "meta/codecs/codecs.h"

namespace dcpctl {

namespace {

std::vector<std::pair<uint32_t, uint32_t>> ct_pairs(const Metadata& md, const NameIndex& by_name) {
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& w = md.tensors[i];
    std::string module;
    if (ends_with_longer(w.fqn, ".weight_packed"))
      module = w.fqn.substr(0, w.fqn.size() - 14);
    else if (ends_with_longer(w.fqn, ".weight") && w.dtype == DType::Float8_E4M3FN)
      module = w.fqn.substr(0, w.fqn.size() - 7);
    else
      continue;
    auto s = by_name.find(module + ".weight_scale");
    if (s != by_name.end()) pairs.push_back({i, s->second});
  }
  return pairs;
}

}  // namespace

// The formats view/codecs/compressed_tensors.cpp decodes.
bool ct_format_read(const std::string& format) {
  return format == "float-quantized" || format == "naive-quantized" || format == "pack-quantized" ||
         format == "nvfp4-pack-quantized" || format == "mxfp4-pack-quantized" || format == "mxfp6-pack-quantized" ||
         format == "mxfp8-quantized";
}

namespace {

bool ct_explains(const nlohmann::json& qc, const nlohmann::json& config) {
  (void)config;
  if (qc.value("quant_method", "") != "compressed-tensors") return false;
  const std::string top = qc.contains("format") && qc["format"].is_string() ? qc["format"].get<std::string>() : "";
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object() || qc["config_groups"].empty()) return false;
  for (const auto& [name, g] : qc["config_groups"].items()) {
    (void)name;
    const std::string f = g.contains("format") && g["format"].is_string() ? g["format"].get<std::string>() : top;
    if (!ct_format_read(f) || !g.contains("weights") || !g["weights"].is_object()) return false;
    if (g["weights"].value("actorder", nlohmann::json()).is_string()) return false;  // g_idx: not read
  }
  return true;
}

}  // namespace

nlohmann::json ct_written_config(const std::string& format, const nlohmann::json& weights,
                                 const nlohmann::json& input_activations, const nlohmann::json& ignore) {
  using nlohmann::json;
  // compressed-tensors 0.20.0's QuantizationScheme.model_dump: targets, weights, input and output
  // activations, format; QuantizationConfig's: config_groups, quantization_status, format,
  // global_compression_ratio, ignore, kv_cache_scheme, moe_sparsity_config; model_free_ptq adds
  // version (compressed_tensors.__version__), quant_method and an empty transform_config.
  json group = {{"targets", {"Linear"}},
                {"weights", weights},
                {"input_activations", input_activations},
                {"output_activations", nullptr},
                {"format", format}};
  return {{"config_groups", {{"config_group_0", group}}},
          {"format", format},
          {"global_compression_ratio", nullptr},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr},
          {"moe_sparsity_config", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"},
          {"transform_config", json::object()},
          {"version", "0.20.0"}};
}

const Codec& compressed_tensors_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "compressed-tensors";
    c.quant_method = "compressed-tensors";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";  // X.weight beside X.weight_scale
    c.rows = {
        {"compressed-tensors float-quantized bfloat16", "", "", D::Float8_E4M3FN, D::BFloat16, false},
        {"compressed-tensors float-quantized float32", "", "", D::Float8_E4M3FN, D::Float32, false},
        {"compressed-tensors float-quantized float16", "", "", D::Float8_E4M3FN, D::Float16, false},
        {"compressed-tensors nvfp4-pack-quantized", "", "", D::UInt8, D::Float8_E4M3FN, false},
        {"compressed-tensors mxfp4-pack-quantized", "", "", D::UInt8, D::UInt8, false},
        {"compressed-tensors mxfp6-pack-quantized", "", "", D::UInt8, D::UInt8, false},
        {"compressed-tensors mxfp8-quantized", "", "", D::Float8_E4M3FN, D::UInt8, false},
    };
    c.explains = ct_explains;
    c.pairs = ct_pairs;
    c.display = "compressed-tensors";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
