// NVIDIA ModelOpt's Hugging Face export (nvidia-modelopt 0.47.0, export_hf_checkpoint): config.json's
// quantization_config is {"quant_method": "modelopt", "quant_algo", "config_groups", "ignore",
// "producer"}, and hf_quant_config.json beside it says the same (its `exclude_modules`; dcpctl reads
// config.json only). Per quantized Linear X:
//   NVFP4, W4A16_NVFP4  X.weight uint8 [N, K / 2] (E2M1, low nibble first), X.weight_scale e4m3
//                       [N, K / 16], X.weight_scale_2 float32 [] (amax / (6 * 448): the reciprocal
//                       of compressed-tensors' global scale); NVFP4 (W4A4) adds X.input_scale
//   FP8                 X.weight e4m3 [N, K], X.weight_scale float32 [], X.input_scale float32 []
//   MXFP8               X.weight e4m3 [N, K], X.weight_scale uint8 [N, K / 32] (E8M0)
//   fp8_pb_wo           X.weight e4m3 [N, K], X.weight_scale float32 [ceil(N / 128), 1, ceil(K / 128), 1]
//                       (FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG: one scale a 128x128 block, the last ones cut
//                       short; the quant_algo in lower case as 0.47.0's export writes its
//                       QUANTIZATION_FP8_PB_WO; FP8_PB_WO, as published configs spell it, read alike;
//                       a scale of [ceil(N / 128), ceil(K / 128)] too, the shape its dequantize takes)
//   MIXED_PRECISION     each layer one of the above, named in quantization_config.quantized_layers
//                       ({module: {"quant_algo", "group_size"}}, as export_hf_checkpoint writes a model
//                       quantized in several formats); read where every layer's is, none packed
// Decoded as ModelOpt's own QTensor.dequantize computes (view/codecs/modelopt.cpp), in float32:
// NVFP4 e2m1 * (float32(scale) * weight_scale_2), the code of -0 read as +0.0; MXFP8 q * 2^(e-127);
// FP8 q * weight_scale; fp8_pb_wo q * its block's scale. The activation scales leave with the weight: a dequantized
// model has none.
#include <algorithm>
#include <string>

#include "meta/codecs/codecs.h"

namespace dcpctl {

// The quant_algo values view/codecs/modelopt.cpp decodes.
bool modelopt_algo_read(const std::string& algo) {
  return algo == "NVFP4" || algo == "W4A16_NVFP4" || algo == "FP8" || algo == "MXFP8" || algo == "fp8_pb_wo" ||
         algo == "FP8_PB_WO";
}

std::string modelopt_layer_algo(const nlohmann::json& qc, const std::string& module) {
  const std::string algo =
      qc.contains("quant_algo") && qc["quant_algo"].is_string() ? qc["quant_algo"].get<std::string>() : "";
  if (algo != "MIXED_PRECISION") return algo;
  if (!qc.contains("quantized_layers") || !qc["quantized_layers"].is_object()) return "";
  const nlohmann::json& layers = qc["quantized_layers"];
  auto it = layers.find(module);
  if (it == layers.end() || !it->is_object() || !it->contains("quant_algo") || !(*it)["quant_algo"].is_string())
    return "";
  return (*it)["quant_algo"].get<std::string>();
}

namespace {

// MIXED_PRECISION is read where every layer's quant_algo is one dcpctl decodes, none of them packed.
bool modelopt_mixed_read(const nlohmann::json& qc) {
  if (!qc.contains("quantized_layers") || !qc["quantized_layers"].is_object() || qc["quantized_layers"].empty())
    return false;
  for (const auto& [module, layer] : qc["quantized_layers"].items())
    if (!layer.is_object() || layer.contains("packing") || !modelopt_algo_read(modelopt_layer_algo(qc, module)))
      return false;
  return true;
}

std::vector<std::pair<uint32_t, uint32_t>> modelopt_pairs(const Metadata& md, const NameIndex& by_name) {
  const Codec& codec = modelopt_codec();
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& w = md.tensors[i];
    if (!w.dtype || !codec.weight_dtype(*w.dtype) || !ends_with_longer(w.fqn, ".weight")) continue;
    auto s = by_name.find(w.fqn + "_scale");
    if (s != by_name.end()) pairs.push_back({i, s->second});
  }
  return pairs;
}

bool modelopt_explains(const nlohmann::json& qc, const nlohmann::json& config) {
  (void)config;
  if (qc.value("quant_method", "") != "modelopt" || !qc.contains("quant_algo") || !qc["quant_algo"].is_string())
    return false;
  const std::string algo = qc["quant_algo"].get<std::string>();
  return algo == "MIXED_PRECISION" ? modelopt_mixed_read(qc) : modelopt_algo_read(algo);
}

// MIXED_PRECISION (export_hf_checkpoint of a model quantized in several formats): config.json's
// quantization_config keeps hf_quant_config.json's `quantized_layers`, {module: {"quant_algo", ...}}.
// Layers packed as ggml blocks ("packing": "ggml", with "block_payload_bytes"; Q8_0 and the IQ
// codebook types) are in ModelOpt's development tree, not in nvidia-modelopt 0.47.0 (whose export
// writes no `packing`), so none of them has a producer to check a decode against: each is named.
std::string modelopt_unread(const nlohmann::json& qc) {
  if (qc.value("quant_method", "") != "modelopt" || !qc.contains("quantized_layers") ||
      !qc["quantized_layers"].is_object())
    return "";
  std::string out;
  for (const auto& [module, layer] : qc["quantized_layers"].items()) {
    if (!layer.is_object()) continue;
    const std::string algo = layer.value("quant_algo", std::string("?")),
                      packing = layer.contains("packing") && layer["packing"].is_string()
                                    ? layer["packing"].get<std::string>()
                                    : "";
    if (packing.empty() && modelopt_algo_read(algo)) continue;
    out += std::string(out.empty() ? "" : "; ") + "layer '" + module + "' is " + algo +
           (packing.empty() ? "" : " packed as '" + packing + "' blocks");
    if (!packing.empty()) break;  // the first packed one names the kind; the rest are alike
  }
  if (out.empty()) return "";
  return "MIXED_PRECISION: " + out +
         " (dcpctl decodes ModelOpt's NVFP4, W4A16_NVFP4, FP8, MXFP8 and FP8_PB_WO layers; nvidia-modelopt 0.47.0 "
         "writes no ggml packing, so no decode of one is checked against its producer)";
}

}  // namespace

nlohmann::json modelopt_written_ignore(const nlohmann::json& ignore) {
  std::vector<std::string> names;
  for (const nlohmann::json& m : ignore)
    if (m.is_string()) names.push_back(m.get<std::string>());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::pair<std::string, std::string>> modelopt_written_files(const nlohmann::json& config, int group_size) {
  nlohmann::ordered_json q;
  q["quant_algo"] = config.at("quant_algo").get<std::string>();
  q["kv_cache_quant_algo"] = nullptr;
  q["group_size"] = group_size;
  q["exclude_modules"] = nlohmann::ordered_json::parse(config.at("ignore").dump());
  nlohmann::ordered_json f;
  f["producer"] = nlohmann::ordered_json::parse(R"({"name": "modelopt", "version": "0.47.0"})");
  f["quantization"] = q;
  return {{"hf_quant_config.json", f.dump(4)}};
}

const Codec& modelopt_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "modelopt";
    c.quant_method = "modelopt";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    c.rows = {
        {"modelopt NVFP4", "", "", D::UInt8, D::Float8_E4M3FN, false},
        {"modelopt FP8", "", "", D::Float8_E4M3FN, D::Float32, false},
        {"modelopt MXFP8", "", "", D::Float8_E4M3FN, D::UInt8, false},
    };
    c.explains = modelopt_explains;
    c.pairs = modelopt_pairs;
    c.unread = modelopt_unread;
    c.display = "ModelOpt";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
