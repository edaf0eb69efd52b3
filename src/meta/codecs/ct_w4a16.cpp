// --quantize w4a16: INT4 weights (activations stay in the model's dtype) in compressed-tensors'
// form, its W4A16 preset as llm-compressor's data-free (round-to-nearest, memoryless min-max
// observer) path writes it (compressed-tensors 0.20.0, format `pack-quantized`, strategy `group`,
// symmetric, group 128 or --quantize-group N): each quantized Linear weight X.weight [N, K] becomes
//   X.weight_packed  int32 [N, K / 8]: element i of a row at bits [4i, 4i + 4) of the row's
//                    little-endian words, stored + 8 (pack_to_int32: so each byte holds two
//                    elements, the first in its low nibble)
//   X.weight_scale   [N, K / G] in the weight's dtype D (compressed-tensors initialises the scale
//                    in the observed weight's dtype; no scale_dtype)
//   X.weight_shape   int64 [2] = {N, K}
// and no zero point (symmetric). The arithmetic (calculate_qparams, _quantize on CPU,
// pack_to_int32): per G values s = round_D(amax / 7.5) (max(|min(x, 0)|, max(x, 0)) over the group,
// divided by (7 - (-8)) / 2 in D), torch.finfo(D).eps where that is 0; q = round-half-even(clamp(
// round_D(x / s), -8, 7)) (x / s divided in D, as torch divides a D tensor by a D scale on CPU).
// compressed-tensors' Triton kernel (on a GPU) divides in float32 without the rounding to D, so a
// bfloat16 model quantized there can differ in a code where x / s lies within bfloat16's rounding
// of a half-integer; dcpctl writes the CPU result, which compressed-tensors' compressor gives on any
// machine without Triton. The group must be a multiple of 8 (each int32 word holds 8 values, and
// rows then fill their words); a weight whose K is not a multiple of it is kept (as
// compressed-tensors refuses such a weight). Read back by the compressed-tensors codec.
#include "meta/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

namespace {

std::string w4a16_summary(const int64_t* block) {
  return " (compressed-tensors pack-quantized: symmetric INT4 in int32 weight_packed beside a weight_scale in the "
         "model's "
         "dtype per " +
         std::to_string(block[1]) + " values and weight_shape)";
}

// block[1]: the group (--quantize-group).
json w4a16_config(const CodecRow&, const int64_t* block, const json& ignore) {
  const json weights = {{"dynamic", false},    {"group_size", block[1]}, {"num_bits", 4},
                        {"strategy", "group"}, {"symmetric", true},      {"type", "int"}};
  return ct_written_config("pack-quantized", weights, nullptr, ignore);
}

}  // namespace

// Half a step of the integer grid: round to nearest. At the top code (7, where x / s reaches 7.5
// and is clamped) the scale's own rounding to D (at most 2^-9 of it for bfloat16) adds what the
// bound's rounding term covers (bound.h).
double int_half_step(double) {
  return 0.5;
}

const Codec& ct_w4a16_codec() {
  static const Codec codec = [] {
    using D = DType;
    Codec c;
    c.name = "w4a16 (compressed-tensors)";
    c.quant_method = "compressed-tensors";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    c.rows = {{"compressed-tensors pack-quantized int4 bfloat16", "", "", D::Int32, D::BFloat16, true},
              {"compressed-tensors pack-quantized int4 float32", "", "", D::Int32, D::Float32, false},
              {"compressed-tensors pack-quantized int4 float16", "", "", D::Int32, D::Float16, false}};
    c.explains = explained_by_reader;  // the compressed-tensors codec reads it
    c.quantize_word = "w4a16";
    c.quantize_help =
        "INT4 weights, compressed-tensors' W4A16 (pack-quantized): symmetric int4 in int32 weight_packed, a "
        "weight_scale in the model's dtype per --quantize-group values (128), weight_shape; round to nearest";
    c.quantize_brief = "INT4 weights (W4A16), compressed-tensors' form";
    c.block_refusal = "--quantize-block goes with fp8-block: W4A16's groups are --quantize-group N values";
    c.quantize_group = 128;
    c.written_summary = w4a16_summary;
    c.written_config = w4a16_config;
    c.half_step = int_half_step;
    c.display = "W4A16";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
