// MXFP4 weights, as GPT-OSS releases keep their experts: `X_blocks` uint8 [..., G, B] (B = 16
// bytes a group: 32 4-bit E2M1 values, the low nibble first) beside `X_scales` uint8 [..., G] (a
// group's power of two, biased by 127: E8M0). torch's QuantizedHuggingFaceStorageReader
// (_dequantize_tensor_mxfp4) reads them as `X_blocks` of [..., G * 2B]: value = ldexp(E2M1(nibble),
// scale - 127) rounded once to float32 (scale 255, NaN in E8M0, is taken as 2^128: finite or inf),
// then the cast (checked against it for all 256 scales and bf16/fp16/fp32). transformers' convert_moe_packed_tensors
// computes the same values and returns them transposed ([E, in, out], GptOssExperts' layout); dcpctl keeps torch's name
// and orientation, and the torchtitan-gpt-oss map takes it from there. (torch 2.15's reader itself, through dcp.load,
// returns wrong values for such a folder: its _dequantize_tensor_mxfp4 called directly is the reference the tests use.)
// A uint8 or int8 X_blocks (the same nibbles: DeepSeek-V4-style releases keep MXFP4 in I8) with a
// uint8 or float8_e8m0fnu X_scales beside it (the same biased exponent); dequantized only when
// config.json's quantization_config.quant_method is "mxfp4" (view/codecs/dequantize.h). Decoded and
// encoded by view/codecs/mxfp4.h.
#include <cmath>

#include "meta/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

namespace {

std::vector<std::pair<uint32_t, uint32_t>> mxfp4_pairs(const Metadata& md, const NameIndex& by_name) {
  const Codec& codec = mxfp4_codec();
  const size_t tail = std::string(codec.weight_suffix).size();
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& t = md.tensors[i];
    if (!t.dtype || !ends_with_longer(t.fqn, codec.weight_suffix)) continue;
    auto s = by_name.find(t.fqn.substr(0, t.fqn.size() - tail) + codec.scale_suffix);
    if (s != by_name.end() && md.tensors[s->second].dtype && codec.row(*t.dtype, *md.tensors[s->second].dtype))
      out.push_back({i, s->second});
  }
  return out;
}

// Half a step of the E2M1 grid under OCP MX v1.0's exponent rule (torchao's to_mx, FLOOR): the
// scale is 2^(floor(log2 amax) - 2), so a group's values reach up to 8 s and saturate at 6: 2 at
// the top code, e2m1_half_step below it.
double ocp_e2m1_half_step(double q) {
  return std::fabs(q) >= 5 ? 2.0 : e2m1_half_step(q);
}

std::string mxfp4_summary(const int64_t*) {
  return " (stacked experts as _blocks of E2M1 pairs beside _scales, one E8M0 exponent per 32 values)";
}

json mxfp4_config(const CodecRow&, const int64_t*, const json& not_convert) {
  return {{"modules_to_not_convert", not_convert}, {"quant_method", mxfp4_codec().quant_method}};
}

}  // namespace

const Codec& mxfp4_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "mxfp4";
    c.quant_method = "mxfp4";
    c.weight_suffix = "_blocks";
    c.scale_suffix = "_scales";
    c.rows = {
        {"mxfp4 U8 U8", "", "", D::UInt8, D::UInt8, true},
        {"mxfp4 U8 F8_E8M0", "", "", D::UInt8, D::Float8_E8M0FNU, false},
        {"mxfp4 I8 U8", "", "", D::Int8, D::UInt8, false},
        {"mxfp4 I8 F8_E8M0", "", "", D::Int8, D::Float8_E8M0FNU, false},
    };
    c.pairs = mxfp4_pairs;
    c.orphan_tail = "_scales";
    c.orphan_within = ".experts.";
    c.quantize_word = "mxfp4";
    c.quantize_help = "GPT-OSS's MoE experts as E2M1 _blocks and E8M0 _scales, OCP MX v1.0; the other weights kept";
    c.quantize_brief = "GPT-OSS's experts";
    c.block_refusal = "--quantize-block goes with fp8-block: mxfp4's blocks are 32 values, one E8M0 scale each";
    c.written_summary = mxfp4_summary;
    c.written_config = mxfp4_config;
    c.half_step = ocp_e2m1_half_step;
    c.display = "MXFP4";
    c.scale_is = "scales are";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
