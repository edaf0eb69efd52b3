// mxfp8 and mxfp4 in compressed-tensors' form (meta/codecs/ct_mx.cpp describes them and their
// exponent rule): each Linear weight row by row, groups of 32 values, compressed-tensors 0.20.0's
// generate_mx_scales (round_to_power_2 on the amax's bits in the weight's dtype D),
// calculate_qparams (the exponent clamped to a byte; 2^(e - 127) in D, 1 where that is 0),
// compress_mx_scale, and _quantize in D. Checked byte for byte against its compress_module
// (codecs-read).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "util/numeric.h"
#include "view/codecs/linear_encode.h"
#include "view/codecs/rows.h"
#include "view/kernels.h"

namespace dcpctl {

namespace {

constexpr int64_t kMxGroup = 32;

// E2M1's exponent of its largest power of two below its max (2 for 6), E4M3's (8 for 448).
constexpr int kEmaxFp4 = 2, kEmaxFp8 = 8;

// log2 of compressed-tensors' round_to_power_2(amax) (amax a value of D), or INT32_MIN for 0.
int ct_power_2_exponent(float amax, DType D) {
  uint32_t bits = 0;
  int mantissa = 23, exponent = 8;
  if (D == DType::BFloat16) {
    bits = f32_to_bf16(amax), mantissa = 7;
  } else if (D == DType::Float16) {
    bits = f32_to_f16(amax), mantissa = 10, exponent = 5;
  } else {
    std::memcpy(&bits, &amax, 4);
  }
  const uint32_t add = 1u << (mantissa - 1 - 1);  // E2M1's one mantissa bit
  const uint32_t mask = ((1u << (exponent + 1)) - 1) << mantissa;
  const uint32_t p2 = (bits + add) & mask;
  const int field = static_cast<int>(p2 >> mantissa);
  if (field == 0) return INT32_MIN;  // zero (a subnormal that did not round up)
  return field - ((1 << (exponent - 1)) - 1);
}

// The scale byte and the scale in D of a group of amax `amax`.
uint8_t ct_mx_byte(float amax, DType D, int emax, float& scale) {
  const int p = ct_power_2_exponent(amax, D);
  const int e = p == INT32_MIN ? 0 : std::clamp(127 + p - emax, 0, 255);
  scale = round_to(std::ldexp(1.0f, e - 127), D);
  if (scale == 0) return static_cast<uint8_t>(127);  // compressed-tensors' eps for a uint8 scale: 1
  return static_cast<uint8_t>(e);
}

// Row by row: the groups' amax and the quotients x / scale through view/kernels.h's vectorised
// kernels, each group's scale byte as before, the quotients rounded to D where D is narrower, then
// e4m3 of them clamped to +-448 (mxfp8) or fp4_pairs (mxfp4: cast_to_fp4 of them clamped to +-6,
// packed; the clamp changes no code).
template <bool kFp4>
void encode_mx(const float* x, int64_t rows, int64_t K, DType D, float, uint8_t* w, uint8_t* s) {
  encode_groups(
      x, rows, K, kMxGroup, s,
      [&](float amax, float& divisor) {
        float sc = 1;
        const uint8_t b = ct_mx_byte(amax, D, kFp4 ? kEmaxFp4 : kEmaxFp8, sc);
        divisor = sc == 0 ? 1.0f : sc;
        return b;
      },
      [&](std::vector<float>& q, int64_t r) {
        if (D != DType::Float32)
          for (float& v : q) v = round_to(v, D);
        if (kFp4)
          fp4_pairs(q.data(), q.size(), w + r * K / 2);
        else
          e4m3fn_saturated(q.data(), q.size(), w + r * K);
      });
}

LinearEncoding mx_encoding(bool fp4) {
  LinearEncoding enc = mx_layout(fp4);
  enc.encode = fp4 ? encode_mx<true> : encode_mx<false>;
  return enc;
}

Checkpoint mxfp8_quantize(const Checkpoint& ck, const QuantizeRequest& rq) {
  LinearEncoding enc = mx_encoding(false);
  enc.codec = &ct_mxfp8_codec();
  return encode_linears(ck, rq, enc);
}

Checkpoint ctmxfp4_quantize(const Checkpoint& ck, const QuantizeRequest& rq) {
  LinearEncoding enc = mx_encoding(true);
  enc.codec = &ct_mxfp4_codec();
  return encode_linears(ck, rq, enc);
}

}  // namespace

LinearEncoding mx_layout(bool fp4) {
  LinearEncoding enc;
  enc.group = kMxGroup;
  enc.block_cols = kMxGroup;
  enc.per_byte = fp4 ? 2 : 1;
  enc.weight_name = fp4 ? "weight_packed" : "weight";
  enc.weight_dtype = fp4 ? DType::UInt8 : DType::Float8_E4M3FN;
  enc.scale_dtype = [](DType) { return DType::UInt8; };
  enc.scale_cols = [](int64_t K) { return K / kMxGroup; };
  return enc;
}

CodecView ct_mxfp8_codec_view() {
  CodecView v;
  v.codec = &ct_mxfp8_codec();
  v.quantize = mxfp8_quantize;
  return v;
}

CodecView ct_mxfp4_codec_view() {
  CodecView v;
  v.codec = &ct_mxfp4_codec();
  v.quantize = ctmxfp4_quantize;
  return v;
}

}  // namespace dcpctl
