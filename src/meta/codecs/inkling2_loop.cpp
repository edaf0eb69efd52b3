// Inkling2Loop's expert layout (model_type inkling2_loop, or inkling2_loop_text for the text model
// alone; transformers 5.24.0 reads it:
// core_model_loading.py Inkling2LoopDequantizeExperts, conversion_mapping.py's "inkling2_loop"
// converters, which dequantize the experts on load to the model's dtype). The routed experts of
// a layer are two stacks, `P.mlp.experts.w13_weight` (gate and up, interleaved row by row) and
// `P.mlp.experts.w2_weight` (down), each beside `X_scale`; config.json has no quantization_config
// (the conversion applies to every inkling2_loop folder whose stacks have scales):
//   NVFP4  X uint8 [E, R, C / 2] (E2M1 codes, the even element in the low nibble), X_scale
//          float8_e4m3fn [E, R, C / 16], X_amax [E] and X_outer_scale_denominator [E] (any float
//          dtype): w = float32(e2m1) * float32(scale), then * (float32(amax) / float32(denominator))
//          of its expert, the code of -0 read as -0.0;
//   MXFP8  X float8_e4m3fn [E, R, C], X_scale uint8 [E, R, C / 32] (the exponent's byte, not
//          F8_E8M0): w = float32(q) * exp2(float32(scale) - 127).
// Both are computed in float32 and cast once, to the dtype asked. Decoded by
// view/codecs/inkling2_loop.cpp; no writer of the layout exists (transformers saves the stacks as
// plain tensors), so tests/interop/codecs_test.py quantizes a model transformers saved to it and
// holds dcpctl's decode to that op's, tensor for tensor.
#include "meta/codecs/codecs.h"

namespace dcpctl {

namespace {

bool ink_stack(const std::string& name) {
  return ends_with_longer(name, ".experts.w13_weight") || ends_with_longer(name, ".experts.w2_weight");
}

std::vector<std::pair<uint32_t, uint32_t>> ink_pairs(const Metadata& md, const NameIndex& by_name) {
  const Codec& codec = inkling2_loop_codec();
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& w = md.tensors[i];
    if (!w.dtype || !codec.weight_dtype(*w.dtype) || !ink_stack(w.fqn)) continue;
    auto s = by_name.find(w.fqn + codec.scale_suffix);
    if (s != by_name.end()) pairs.push_back({i, s->second});
  }
  return pairs;
}

std::vector<std::string> ink_beside(const std::string& key) {
  if (!ink_stack(key)) return {};
  return {key + "_scale", key + "_amax", key + "_outer_scale_denominator"};
}

std::vector<Codec::Expected> ink_expected(const std::string& key, const std::string& dtype,
                                          const std::vector<int64_t>& shape) {
  if (!ink_stack(key) || shape.size() != 3) return {};
  const int64_t E = shape[0], R = shape[1];
  const std::vector<std::string> floats{"float32", "bfloat16", "float16", "float8_e4m3fn"};
  if (dtype == "uint8")
    return {{key + "_scale", {"float8_e4m3fn"}, {{E, R, shape[2] * 2 / 16}}, "NVFP4 block scale (one per 16 values)"},
            {key + "_amax", floats, {{E}}, "NVFP4 amax (one a expert)"},
            {key + "_outer_scale_denominator", floats, {{E}, {}, {1}}, "NVFP4 outer scale denominator"}};
  if (dtype == "float8_e4m3fn")
    return {{key + "_scale", {"uint8"}, {{E, R, shape[2] / 32}}, "MXFP8 exponent (one per 32 values)"}};
  return {};
}

}  // namespace

const Codec& inkling2_loop_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "inkling2-loop";
    c.quant_method = "";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    c.rows = {
        {"inkling2-loop NVFP4 experts", "", "", D::UInt8, D::Float8_E4M3FN, false},
        {"inkling2-loop MXFP8 experts", "", "", D::Float8_E4M3FN, D::UInt8, false},
    };
    c.pairs = ink_pairs;
    c.beside = ink_beside;
    c.expected_beside = ink_expected;
    c.display = "Inkling2Loop expert stack";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
