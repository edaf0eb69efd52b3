// DeepSeek-V4's release layout (transformers 5.23 reads it: integrations/finegrained_fp8.py
// FP8Experts and Fp8Dequantize, quantizers/quantizer_finegrained_fp8.py's `.scale` renaming,
// models/deepseek_v4/configuration_deepseek_v4.py): config.json's quantization_config is
// {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
// and `expert_dtype` ("fp4": in quantization_config since V4.1, at the top of config.json in V4).
// Each quantized Linear X keeps its weight as `X.weight` beside `X.scale` (not `_scale_inv`):
//   - float8 e4m3 [R, C] beside F8_E8M0 [ceil(R / 128), ceil(C / 128)]: fp8-block's arithmetic,
//     w = float32(q) * 2^(e - 127) per block;
//   - the routed experts with expert_dtype fp4: E2M1 codes two a byte (low nibble first) in `I8`
//     [R, C / 2] (or safetensors' F4, the same bytes) beside F8_E8M0 [R, C / 32], one scale per 32
//     values of a row: w = float32(e2m1) * 2^(e - 127) (the code of -0 is -0.0, Fp8Dequantize's
//     table), computed in float32 and cast once.
// V4.1 (vLLM 0.33's deepseek_v41 reads it; transformers 5.24.0 reads its text model) adds:
//   - weight_block_size [32, 32] with FP4 experts: the Linear layers MXFP8, one F8_E8M0 `X.scale` a
//     32x32 block (vLLM repeats each over its 32 rows as MX scales), decoded as fp8-block's blocks;
//   - expert_dtype "fp8" (Flash-Base): the routed experts FP8 in 128x128 blocks like the Linear
//     layers, every `X.scale` float32;
//   - the Engram tables, `layers.N.engram.embed.weight` float8 rows beside `.scale`, one E8M0 per 32
//     values of a row: refused (exit 5) by view/codecs/deepseek_v4.cpp: transformers 5.24.0 has no
//     Engram module, and vLLM dequantizes them only in a Triton kernel on a GPU, so no decode of one
//     is checked against its reader.
// No tiny public release exists; tests/interop/quant_producers.py writes the layout after that
// reading code. Decoded by view/codecs/deepseek_v4.cpp.
#include "meta/codecs/codecs.h"

namespace dcpctl {

namespace {

std::vector<std::pair<uint32_t, uint32_t>> dsv4_pairs(const Metadata& md, const NameIndex& by_name) {
  const Codec& codec = deepseek_v4_codec();
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& w = md.tensors[i];
    if (!w.dtype || !codec.weight_dtype(*w.dtype) || !ends_with_longer(w.fqn, ".weight")) continue;
    auto s = by_name.find(w.fqn.substr(0, w.fqn.size() - 7) + ".scale");
    if (s != by_name.end() && md.tensors[s->second].dtype && codec.row(*w.dtype, *md.tensors[s->second].dtype))
      pairs.push_back({i, s->second});
  }
  return pairs;
}

bool dsv4_explains(const nlohmann::json& qc, const nlohmann::json& config) {
  (void)config;
  return qc.value("quant_method", "") == "fp8";
}

}  // namespace

const Codec& deepseek_v4_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "deepseek-v4";
    c.quant_method = "fp8";
    c.weight_suffix = "";
    c.scale_suffix = ".scale";  // X.weight's scale is X.scale: no suffix of the weight's name gives it
    c.rows = {
        {"deepseek-v4 fp8 e4m3 ue8m0", "e4m3", "ue8m0", D::Float8_E4M3FN, D::Float8_E8M0FNU, false},
        {"deepseek-v4 fp8 e4m3 float32", "e4m3", "float", D::Float8_E4M3FN, D::Float32, false},
        {"deepseek-v4 fp4 experts int8", "", "ue8m0", D::Int8, D::Float8_E8M0FNU, false},
        {"deepseek-v4 fp4 experts F4", "", "ue8m0", D::Float4_E2M1FN_X2, D::Float8_E8M0FNU, false},
    };
    c.explains = dsv4_explains;
    c.pairs = dsv4_pairs;
    c.display = "DeepSeek-V4 FP8 / FP4";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
