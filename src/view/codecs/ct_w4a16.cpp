// w4a16 in compressed-tensors' form (meta/codecs/ct_w4a16.cpp describes it and its arithmetic):
// each Linear weight row by row, groups of --quantize-group values (128), compressed-tensors 0.20.0's
// calculate_qparams (symmetric: s = round_D(amax / 7.5), finfo(D).eps for 0), _quantize on CPU (x / s
// in D, clamp to [-8, 7], torch.round) and pack_to_int32 (view/kernels.h int4_pairs). Checked byte
// for byte against its compress_module (codecs-read).
#include <vector>

#include "util/error.h"
#include "util/numeric.h"
#include "view/codecs/linear_encode.h"
#include "view/kernels.h"

namespace dcpctl {

namespace {

// `rows` rows of K values of dtype D in groups of `group`: the packed codes into w (K / 2 bytes a
// row), the scales in D into s (K / group a row).
void encode_w4a16(const float* x, int64_t rows, int64_t K, int64_t group, DType D, uint8_t* w, uint8_t* s) {
  const int64_t G = K / group;
  const size_t sbytes = itemsize(D);
  const float eps = dtype_eps(D);
  thread_local std::vector<float> q, amax, scale;
  q.resize(static_cast<size_t>(K));
  amax.resize(static_cast<size_t>(G));
  scale.resize(static_cast<size_t>(G));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * K;
    group_abs_max(row, K, group, amax.data());
    for (int64_t g = 0; g < G; ++g) {
      // (7 - (-8)) / 2 in D is 7.5 exactly; torch divides two D values in float32, rounded to D once
      float sc = round_to(amax[static_cast<size_t>(g)] / 7.5f, D);
      if (sc == 0) sc = eps;
      scale[static_cast<size_t>(g)] = sc;
      store_scalar(sc, D, s + static_cast<size_t>(r * G + g) * sbytes);
    }
    divide_by_groups(row, K, group, scale.data(), q.data());
    if (D != DType::Float32) round_to(q.data(), q.size(), D);
    int4_pairs(q.data(), q.size(), w + r * K / 2);
  }
}

Checkpoint w4a16_quantize(const Checkpoint& ck, const QuantizeRequest& rq) {
  const int64_t group = rq.group > 0 ? rq.group : ct_w4a16_codec().quantize_group;
  if (group % 8 != 0)
    throw UsageError(Where(), "--quantize-group " + std::to_string(group) +
                                  ": a multiple of 8 (each int32 word of weight_packed holds 8 values)");
  // The model's dtypes compressed-tensors computes in that dcpctl's float32 arithmetic reproduces.
  for (const TensorMeta& t : ck.md.tensors)
    if (t.dtype && *t.dtype == DType::Float64 && t.ndim() == 2 && ends_with_longer(t.fqn, ".weight") &&
        fp8_kept_reason(t.fqn, rq).empty() && t.shape[1] % group == 0)
      throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn),
                             "--quantize w4a16 of a float64 weight (compressed-tensors would compute its scales in "
                             "float64): give --dtype fp32 first in a separate export, or export it as it is");
  LinearEncoding enc;
  enc.codec = &ct_w4a16_codec();
  enc.group = group;
  enc.block_cols = group;
  enc.per_byte = 8;  // eight values an int32
  enc.weight_name = "weight_packed";
  enc.weight_dtype = DType::Int32;
  enc.scale_dtype = [](DType model) { return model; };
  enc.scale_cols = [group](int64_t K) { return K / group; };
  enc.encode = [group](const float* x, int64_t rows, int64_t K, DType D, float, uint8_t* w, uint8_t* s) {
    encode_w4a16(x, rows, K, group, D, w, s);
  };
  enc.shape_name = "weight_shape";
  return encode_linears(ck, rq, enc);
}

}  // namespace

CodecView ct_w4a16_codec_view() {
  CodecView v;
  v.codec = &ct_w4a16_codec();
  v.quantize = w4a16_quantize;
  return v;
}

}  // namespace dcpctl
