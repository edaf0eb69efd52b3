// fp8-block in compressed-tensors' form (meta/codecs/ct_fp8_block.cpp describes it): each Linear
// weight a band of 128 rows at a time, compressed-tensors 0.20.0's FP8 block arithmetic in the
// weight's dtype D: per 128 x 128 block (the last ones partial), scale = round_D(amax / 448) (amax
// with zero included), D's machine epsilon where that is 0; q = e4m3(clamp(round_D(x / scale),
// -448, 448)), each rounding to nearest even. The weights it takes and the tensors it names:
// linear_encode.h.
#include <algorithm>
#include <cmath>

#include "util/numeric.h"
#include "view/codecs/linear_encode.h"
#include "view/codecs/rows.h"

namespace dcpctl {

namespace {

constexpr int64_t kBlock = 128;

void encode_block(const float* x, int64_t rows, int64_t K, DType D, float, uint8_t* w, uint8_t* s) {
  for (int64_t c0 = 0; c0 < K; c0 += kBlock) {
    const int64_t c1 = std::min(K, c0 + kBlock);
    float amax = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = c0; k < c1; ++k) amax = std::max(amax, std::fabs(x[r * K + k]));
    float scale = round_to(amax / 448.0f, D);
    if (scale == 0) scale = dtype_eps(D);
    store_scalar(scale, D, s + (c0 / kBlock) * itemsize(D));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = c0; k < c1; ++k)
        w[r * K + k] = f32_to_e4m3fn(std::clamp(round_to(x[r * K + k] / scale, D), -448.0f, 448.0f));
  }
}

Checkpoint ctblock_quantize(const Checkpoint& ck, const QuantizeRequest& rq) {
  LinearEncoding enc;
  enc.codec = &ct_fp8_block_codec();
  enc.band = kBlock;
  enc.block_cols = kBlock;
  enc.weight_dtype = DType::Float8_E4M3FN;
  enc.scale_dtype = [](DType model) { return model; };
  enc.scale_cols = [](int64_t K) { return (K + kBlock - 1) / kBlock; };
  enc.encode = encode_block;
  return encode_linears(ck, rq, enc);
}

}  // namespace

CodecView ct_fp8_block_codec_view() {
  CodecView v;
  v.codec = &ct_fp8_block_codec();
  v.quantize = ctblock_quantize;
  return v;
}

}  // namespace dcpctl
