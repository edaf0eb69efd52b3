// nvfp4 in compressed-tensors' form (meta/codecs/ct_nvfp4.cpp describes it and its arithmetic):
// each Linear weight row by row, groups of 16 values, beside the global scale of its fused group
// (linear_encode.h computes it once per group from global_from_amax). Checked byte for byte
// against compressed-tensors 0.20.0's calculate_qparams and compress_module (codecs-read).
#include <algorithm>
#include <cmath>

#include "util/numeric.h"
#include "view/codecs/linear_encode.h"
#include "view/codecs/rows.h"

namespace dcpctl {

namespace {

constexpr int64_t kNvGroup = 16;

// compressed-tensors' cast_to_fp4 then pack_fp4_to_uint8 of one value already clamped to +-6: the
// magnitude to nearest even among 0, 0.5, 1, 1.5, 2, 3, 4, 6; the sign bit where v < 0 (a
// negative that rounds to zero is -0.0 there; -0.0 itself is +0).
uint8_t ct_fp4_code(float v) {
  const float m = std::fabs(v);
  const uint8_t i = m <= 0.25f ? 0 : m < 0.75f ? 1 : m <= 1.25f ? 2 : m < 1.75f ? 3 : m <= 2.5f ? 4 : m < 3.5f ? 5 : m <= 5.0f ? 6 : 7;
  return static_cast<uint8_t>(i | (v < 0 ? 8 : 0));
}

float nvfp4_global(float amax, DType D) {
  const float tiny = D == DType::BFloat16 ? 0x1p-126f : D == DType::Float16 ? 0x1p-14f : 0x1p-126f;
  // torch computes the scalar 448 * 6 over a tensor as the tensor's reciprocal times the scalar
  // (Tensor.__rtruediv__), each rounded to D.
  const float g = round_to(round_to(1.0f / std::max(amax, tiny), D) * (448.0f * 6.0f), D);
  return std::isfinite(g) ? g : 1.0f;
}

void encode_nvfp4(const float* x, int64_t rows, int64_t K, DType D, float global, uint8_t* w, uint8_t* s) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < K / kNvGroup; ++g) {
      const float* v = x + r * K + g * kNvGroup;
      float amax = 0;
      for (int64_t k = 0; k < kNvGroup; ++k) amax = std::max(amax, std::fabs(v[k]));
      uint8_t e = f32_to_e4m3fn(std::clamp(global * round_to(amax / 6.0f, D), -448.0f, 448.0f));
      if (e4m3fn_to_f32(e) == 0) e = f32_to_e4m3fn(0.125f);
      s[r * (K / kNvGroup) + g] = e;
      const float scale = e4m3fn_to_f32(e) / global;
      uint8_t* out = w + (r * K + g * kNvGroup) / 2;
      for (int64_t k = 0; k < kNvGroup; k += 2)
        out[k / 2] = static_cast<uint8_t>(ct_fp4_code(std::clamp(v[k] / scale, -6.0f, 6.0f)) |
                                          (ct_fp4_code(std::clamp(v[k + 1] / scale, -6.0f, 6.0f)) << 4));
    }
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
