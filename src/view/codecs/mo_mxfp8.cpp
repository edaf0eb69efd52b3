// mxfp8 in ModelOpt's form (meta/codecs/mo_mxfp8.cpp describes it and its exponent rule): each
// Linear weight row by row, groups of 32 values, nvidia-modelopt 0.47.0's MXFP8QTensor
// (get_weights_scaling_factor, quantize_with_scale). Checked byte for byte against its
// export_hf_checkpoint (codecs-read).
#include <algorithm>
#include <cmath>
#include <vector>

#include "view/codecs/linear_encode.h"
#include "view/kernels.h"

namespace dcpctl {

namespace {

constexpr int64_t kMoMxGroup = 32;

// _compute_e8m0_exponent + 127: ceil of torch.log2 of the float32 quotient amax / 448 (log2 in
// float32: the double's log2 rounded to float32, as a correctly rounded log2f gives it), clamped
// to [-127, 127]; -127 for a group of zeros.
uint8_t mo_mx_byte(float amax) {
  const float descale = amax / 448.0f;
  float e = -127.0f;
  if (descale > 0) e = std::ceil(static_cast<float>(std::log2(static_cast<double>(descale))));
  return static_cast<uint8_t>(std::clamp(e, -127.0f, 127.0f) + 127.0f);
}

// Row by row: the groups' amax and the quotients through view/kernels.h's vectorised kernels (the
// division by 2^(e - 127) is ModelOpt's product by 2^(127 - e), both exact or rounded alike), then
// e4m3 of them clamped to +-448.
void encode_mo_mxfp8(const float* x, int64_t rows, int64_t K, DType, float, uint8_t* w, uint8_t* s) {
  encode_groups(
      x, rows, K, kMoMxGroup, s,
      [&](float amax, float& divisor) {
        const uint8_t b = mo_mx_byte(amax);
        divisor = std::ldexp(1.0f, static_cast<int>(b) - 127);
        return b;
      },
      [&](std::vector<float>& q, int64_t r) { e4m3fn_saturated(q.data(), q.size(), w + r * K); });
}

Checkpoint mo_mxfp8_quantize(const Checkpoint& ck, const QuantizeRequest& rq) {
  LinearEncoding enc = mx_layout(false);  // X.weight e4m3 beside a uint8 weight_scale per 32, as compressed-tensors'
  enc.codec = &mo_mxfp8_codec();
  enc.encode = encode_mo_mxfp8;
  return encode_linears(ck, rq, enc);
}

}  // namespace

CodecView mo_mxfp8_codec_view() {
  CodecView v;
  v.codec = &mo_mxfp8_codec();
  v.quantize = mo_mxfp8_quantize;
  return v;
}

}  // namespace dcpctl
