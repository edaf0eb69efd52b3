// nvfp4 in ModelOpt's form (meta/codecs/mo_nvfp4.cpp describes it and its arithmetic): each Linear
// weight row by row, groups of 16 values, beside the weight_scale_2 of its fused group
// (linear_encode.h computes it once per group from mo_scale_2). Checked byte for byte against
// nvidia-modelopt 0.47.0's export_hf_checkpoint (codecs-read).
#include <algorithm>
#include <cmath>
#include <vector>

#include "util/numeric.h"
#include "view/codecs/linear_encode.h"
#include "view/kernels.h"

namespace dcpctl {

namespace {

constexpr int64_t kMoGroup = 16;

// get_weights_scaling_factor_2: amax.float() / (6 * 448), in float32 (an all-zero group: 1).
float mo_scale_2(float amax, DType) {
  const float s2 = amax / 2688.0f;
  return s2 > 0 && std::isfinite(s2) ? s2 : 1.0f;
}

// Row by row: the groups' amax and the quotients x / scale through view/kernels.h's vectorised
// kernels, each group's scale as before, then fp4_pairs: ModelOpt's NVFP4QTensor._cast_fp4 of
// each quotient (torch.searchsorted over the bounds [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5], one
// more on an odd bound: to nearest even, saturating at 6; the sign bit where v < 0), packed.
void encode_mo_nvfp4(const float* x, int64_t rows, int64_t K, DType, float s2, uint8_t* w, uint8_t* s) {
  const float six_s2 = 6.0f * s2;
  encode_groups(
      x, rows, K, kMoGroup, s,
      [&](float amax, float& divisor) {
        float block = amax / six_s2;
        if (block == 0) block = 1.0f;
        const uint8_t e = f32_to_e4m3fn(std::clamp(block, 0x1p-9f, 448.0f));
        divisor = e4m3fn_to_f32(e) * s2;
        return e;
      },
      [&](std::vector<float>& q, int64_t r) { fp4_pairs(q.data(), q.size(), w + r * K / 2); });
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
