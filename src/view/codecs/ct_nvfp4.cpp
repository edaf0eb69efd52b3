// nvfp4 in compressed-tensors' form (meta/codecs/ct_nvfp4.cpp describes it and its arithmetic):
// each Linear weight row by row, groups of 16 values, beside the global scale of its fused group
// (linear_encode.h computes it once per group from global_from_amax). Checked byte for byte
// against compressed-tensors 0.20.0's calculate_qparams and compress_module (codecs-read).
#include <algorithm>
#include <cmath>
#include <vector>

#include "util/numeric.h"
#include "view/codecs/linear_encode.h"
#include "view/codecs/rows.h"
#include "view/kernels.h"

namespace dcpctl {

namespace {

constexpr int64_t kNvGroup = 16;

float nvfp4_global(float amax, DType D) {
  const float tiny = D == DType::BFloat16 ? 0x1p-126f : D == DType::Float16 ? 0x1p-14f : 0x1p-126f;
  // torch computes the scalar 448 * 6 over a tensor as the tensor's reciprocal times the scalar
  // (Tensor.__rtruediv__), each rounded to D.
  const float g = round_to(round_to(1.0f / std::max(amax, tiny), D) * (448.0f * 6.0f), D);
  return std::isfinite(g) ? g : 1.0f;
}

// Row by row: the groups' amax and the quotients x / scale through view/kernels.h's vectorised
// kernels, each group's scale (16 values a scale) as before, then fp4_pairs (compressed-tensors'
// cast_to_fp4 of the quotient clamped to +-6, packed: the clamp changes no code).
void encode_nvfp4(const float* x, int64_t rows, int64_t K, DType D, float global, uint8_t* w, uint8_t* s) {
  encode_groups(
      x, rows, K, kNvGroup, s,
      [&](float amax, float& divisor) {
        uint8_t e = f32_to_e4m3fn(std::clamp(global * round_to(amax / 6.0f, D), -448.0f, 448.0f));
        if (e4m3fn_to_f32(e) == 0) e = f32_to_e4m3fn(0.125f);
        divisor = e4m3fn_to_f32(e) / global;
        return e;
      },
      [&](std::vector<float>& q, int64_t r) { fp4_pairs(q.data(), q.size(), w + r * K / 2); });
}

Checkpoint nvfp4_quantize(const Checkpoint& ck, const QuantizeRequest& rq) {
  LinearEncoding enc;
  enc.codec = &ct_nvfp4_codec();
  enc.group = kNvGroup;
  enc.block_cols = kNvGroup;
  enc.per_byte = 2;
  enc.weight_name = "weight_packed";
  enc.weight_dtype = DType::UInt8;
  enc.scale_dtype = [](DType) { return DType::Float8_E4M3FN; };
  enc.scale_cols = [](int64_t K) { return K / kNvGroup; };
  enc.encode = encode_nvfp4;
  enc.global_name = "weight_global_scale";
  enc.global_from_amax = nvfp4_global;
  return encode_linears(ck, rq, enc);
}

}  // namespace

CodecView ct_nvfp4_codec_view() {
  CodecView v;
  v.codec = &ct_nvfp4_codec();
  v.quantize = nvfp4_quantize;
  return v;
}

}  // namespace dcpctl
