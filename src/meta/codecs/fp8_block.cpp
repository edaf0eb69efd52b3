// FP8 blocks, DeepSeek-V3/V3.2's and transformers' FineGrainedFP8 layout: each quantized Linear
// weight W [rows, cols] (or an expert stack [E, rows, cols], transformers' FP8Experts) as float8
// (e4m3fn) beside `W_scale_inv`, float32 [ceil(rows / b0), ceil(cols / b1)], one scale per b0 x b1
// block (or float8_e8m0fnu, a power of two: transformers' scale_fmt "ue8m0", read as
// 2^(byte - 127)), the block's elements dequantized as float32(fp8) * scale_inv (in float32).
// config.json says `quantization_config: {"quant_method": "fp8", "weight_block_size": [b0, b1],
// ...}`; the scale may sit in another shard file than its weight. torch's reference is
// torch.distributed.checkpoint.quantized_hf_storage.QuantizedHuggingFaceStorageReader: it pairs
// `X.weight` with `X.weight_scale_inv`, 2-D weights only, and computes exactly the above, then
// `.to(target_dtype)` (round to nearest even): what --dtype's cast of the float32 values does.
// Decoded and encoded by view/codecs/fp8_block.h.
#include <cmath>
#include <string>

#include "meta/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

double e4m3_half_ulp(double q) {
  double m = std::fabs(q);
  if (!(m >= 0x1p-6)) return 0x1p-10;  // subnormals (and zero): ulp 2^-9
  int e = std::ilogb(m);
  return std::ldexp(1.0, e - 4);  // ulp 2^(e - 3)
}

namespace {

std::vector<std::pair<uint32_t, uint32_t>> fp8_pairs(const Metadata& md, const NameIndex& by_name) {
  const Codec& codec = fp8_block_codec();
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& w = md.tensors[i];
    if (!w.dtype || !codec.weight_dtype(*w.dtype)) continue;
    auto s = by_name.find(w.fqn + codec.scale_suffix);
    if (s != by_name.end()) pairs.push_back({i, s->second});
  }
  return pairs;
}

std::string fp8_summary(const int64_t block[2]) {
  return " (" + std::to_string(block[0]) + "x" + std::to_string(block[1]) +
         " blocks, each beside its weight_scale_inv)";
}

json fp8_config(const CodecRow& row, const int64_t block[2], const json& not_convert) {
  return {{"quant_method", fp8_block_codec().quant_method},
          {"fmt", row.fmt},
          {"activation_scheme", "dynamic"},
          {"weight_block_size", {block[0], block[1]}},
          {"modules_to_not_convert", not_convert}};
}

}  // namespace

const Codec& fp8_block_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "fp8-block";
    c.quant_method = "fp8";
    c.weight_suffix = "";
    c.scale_suffix = "_scale_inv";
    c.rows = {
        {"fp8-block e4m3 float32", "e4m3", "float", D::Float8_E4M3FN, D::Float32, true},
        {"fp8-block e4m3 ue8m0", "e4m3", "ue8m0", D::Float8_E4M3FN, D::Float8_E8M0FNU, false},
        {"fp8-block e5m2 float32", "e5m2", "float", D::Float8_E5M2, D::Float32, false},
        {"fp8-block e5m2 ue8m0", "e5m2", "ue8m0", D::Float8_E5M2, D::Float8_E8M0FNU, false},
        // torch's float8 variants without a release format of their own, read as the e4m3 / e5m2 rows
        {"fp8-block e4m3fnuz float32", "e4m3", "float", D::Float8_E4M3FNUZ, D::Float32, false},
        {"fp8-block e4m3fnuz ue8m0", "e4m3", "ue8m0", D::Float8_E4M3FNUZ, D::Float8_E8M0FNU, false},
        {"fp8-block e5m2fnuz float32", "e5m2", "float", D::Float8_E5M2FNUZ, D::Float32, false},
        {"fp8-block e5m2fnuz ue8m0", "e5m2", "ue8m0", D::Float8_E5M2FNUZ, D::Float8_E8M0FNU, false},
    };
    c.pairs = fp8_pairs;
    c.orphan_tail = ".weight_scale_inv";
    c.quantize_word = "fp8-block";
    c.quantize_help =
        "float8_e4m3fn and a float32 weight_scale_inv per block, DeepSeek's and transformers' FP8 layout; embeddings, "
        "lm_head, norms, routers, MTP and vision weights kept";
    c.quantize_brief = "e4m3, one float32 scale per block";
    c.written_summary = fp8_summary;
    c.written_config = fp8_config;
    c.half_step = e4m3_half_ulp;
    c.display = "block-scaled float8";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
