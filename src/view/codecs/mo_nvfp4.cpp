// nvfp4 in ModelOpt's form (meta/codecs/mo_nvfp4.cpp describes it and its arithmetic): each Linear
// weight row by row, groups of 16 values, beside the weight_scale_2 of its fused group
// (linear_encode.h computes it once per group from mo_scale_2). Checked byte for byte against
// nvidia-modelopt 0.47.0's export_hf_checkpoint (codecs-read).
#include <algorithm>
#include <cmath>

#include "util/numeric.h"
#include "view/codecs/linear_encode.h"

namespace dcpctl {

namespace {

constexpr int64_t kMoGroup = 16;

// ModelOpt's NVFP4QTensor._cast_fp4 of one value: torch.searchsorted over the bounds [0.25, 0.75,
// 1.25, 1.75, 2.5, 3.5, 5] (the bounds below |v|), one more on an odd bound (0.75, 1.75, 3.5): to
// nearest even, saturating at 6; the sign bit where v < 0.
uint8_t mo_fp4_code(float v) {
  const float m = std::fabs(v);
  const uint8_t i = m <= 0.25f ? 0 : m < 0.75f ? 1 : m <= 1.25f ? 2 : m < 1.75f ? 3 : m <= 2.5f ? 4 : m < 3.5f ? 5 : m <= 5.0f ? 6 : 7;
  return static_cast<uint8_t>(i | (v < 0 ? 8 : 0));
}

// get_weights_scaling_factor_2: amax.float() / (6 * 448), in float32 (an all-zero group: 1).
float mo_scale_2(float amax, DType) {
  const float s2 = amax / 2688.0f;
  return s2 > 0 && std::isfinite(s2) ? s2 : 1.0f;
}

void encode_mo_nvfp4(const float* x, int64_t rows, int64_t K, DType, float s2, uint8_t* w, uint8_t* s) {
  const float six_s2 = 6.0f * s2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < K / kMoGroup; ++g) {
      const float* v = x + r * K + g * kMoGroup;
      float amax = 0;
      for (int64_t k = 0; k < kMoGroup; ++k) amax = std::max(amax, std::fabs(v[k]));
      float block = amax / six_s2;
      if (block == 0) block = 1.0f;
      const uint8_t e = f32_to_e4m3fn(std::clamp(block, 0x1p-9f, 448.0f));
      s[r * (K / kMoGroup) + g] = e;
      const float scale = e4m3fn_to_f32(e) * s2;
      uint8_t* out = w + (r * K + g * kMoGroup) / 2;
      for (int64_t k = 0; k < kMoGroup; k += 2)
        out[k / 2] = static_cast<uint8_t>(mo_fp4_code(v[k] / scale) | (mo_fp4_code(v[k + 1] / scale) << 4));
    }
}

Checkpoint mo_nvfp4_quantize(const Checkpoint& ck, const QuantizeRequest& rq) {
  LinearEncoding enc;
  enc.codec = &mo_nvfp4_codec();
  enc.group = kMoGroup;
  enc.block_cols = kMoGroup;
  enc.per_byte = 2;
  enc.weight_name = "weight";
  enc.weight_dtype = DType::UInt8;
  enc.scale_dtype = [](DType) { return DType::Float8_E4M3FN; };
  enc.scale_cols = [](int64_t K) { return K / kMoGroup; };
  enc.encode = encode_mo_nvfp4;
  enc.global_name = "weight_scale_2";
  enc.global_from_amax = mo_scale_2;
  enc.global_scalar = true;
  return encode_linears(ck, rq, enc);
}

}  // namespace

CodecView mo_nvfp4_codec_view() {
  CodecView v;
  v.codec = &mo_nvfp4_codec();
  v.quantize = mo_nvfp4_quantize;
  return v;
}

}  // namespace dcpctl
