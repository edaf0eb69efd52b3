// fp8-dynamic's DerivedTensors (meta/codecs/ct_fp8_dynamic.cpp describes the format): each Linear
// weight row by row, compressed-tensors 0.20.0's FP8 channel arithmetic in the weight's dtype D
// (quantization/utils/helpers.py calculate_qparams, lifecycle/forward_helpers.py _quantize):
// scale = round_D(amax / 448) (amax over the row, zero included: max(|min(x, 0)|, max(x, 0))),
// D's machine epsilon where that is 0; q = e4m3(clamp(round_D(x / scale), -448, 448)), each
// rounding to nearest even. The weights it takes and the tensors it names: linear_encode.h.
#include <algorithm>
#include <cmath>
#include <vector>

#include "util/numeric.h"
#include "view/codecs/linear_encode.h"
#include "view/codecs/rows.h"
#include "view/kernels.h"

namespace dcpctl {

// torch.finfo(D).eps: compressed-tensors' scale for an all-zero row.
float dtype_eps(DType d) {
  return d == DType::BFloat16 ? 0x1p-7f : d == DType::Float16 ? 0x1p-10f : 0x1p-23f;
}

void store_scalar(float v, DType d, uint8_t* out) {
  cast_elements(DType::Float32, d, reinterpret_cast<const uint8_t*>(&v), out, 1);
}

namespace {

// Row by row through view/kernels.h's vectorised kernels: the amax (NaN skipped, as the scalar
// std::max fold skipped it), the quotients x / scale in float32, rounded to D where D is narrower,
// then e4m3 of them clamped.
void encode_channel(const float* x, int64_t rows, int64_t K, DType D, float, uint8_t* w, uint8_t* s) {
  thread_local std::vector<float> q;
  q.resize(static_cast<size_t>(K));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * K;
    const float amax = abs_max(row, static_cast<size_t>(K));
    float scale = round_to(amax / 448.0f, D);
    if (scale == 0) scale = dtype_eps(D);
    store_scalar(scale, D, s + r * itemsize(D));
    divide_by_groups(row, K, K, &scale, q.data());
    if (D != DType::Float32)
      for (float& v : q) v = round_to(v, D);
    e4m3fn_saturated(q.data(), q.size(), w + r * K);
  }
}

Checkpoint fp8dyn_quantize(const Checkpoint& ck, const QuantizeRequest& rq) {
  LinearEncoding enc;
  enc.codec = &ct_fp8_dynamic_codec();
  enc.weight_dtype = DType::Float8_E4M3FN;
  enc.scale_dtype = [](DType model) { return model; };
  enc.scale_cols = [](int64_t) -> int64_t { return 1; };
  enc.encode = encode_channel;
  return encode_linears(ck, rq, enc);
}

}  // namespace

CodecView ct_fp8_dynamic_codec_view() {
  CodecView v;
  v.codec = &ct_fp8_dynamic_codec();
  v.quantize = fp8dyn_quantize;
  return v;
}

}  // namespace dcpctl
