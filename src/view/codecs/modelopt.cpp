// modelopt's DerivedTensors (meta/codecs/modelopt.cpp describes the format): each quantized weight
// read as float32 the way ModelOpt 0.47.0's own QTensor.dequantize(dtype=float32) computes it
// (qtensor/nvfp4_tensor.py, mxfp8_tensor.py, fp8_tensor.py).
#include <cmath>

#include "meta/geometry.h"
#include "util/error.h"
#include "util/numeric.h"
#include "view/codecs/codecs.h"
#include "view/codecs/rows.h"

namespace dcpctl {

namespace {

bool mo_applies(const QuantConfig& qc) {
  return qc.quant_method == "modelopt";
}

[[noreturn]] void mo_misshapen(const Checkpoint& ck, const TensorMeta& s, const TensorMeta& w,
                               const std::string& want) {
  throw FormatError(Where(ck.metadata_path, std::nullopt, s.fqn),
                    s.dtype_name + " " + dims_text(s.shape) + " is not the scale of ModelOpt weight '" + w.fqn + "' " +
                        dims_text(w.shape) + ": " + want + " expected");
}

// FP8_PB_WO (FP8_2D_BLOCKWISE_WEIGHT_ONLY_CFG): one float32 scale a 128x128 block, cut at the edges;
// export_hf_checkpoint writes it [ceil(N/128), 1, ceil(K/128), 1], FP8QTensor.dequantize takes it as
// [ceil(N/128), ceil(K/128)] (the same values in the same order): float32(q) * scale.
DecodedTensor decode_mo_fp8_blocks(const Checkpoint& ck, const TensorMeta& w, const TensorMeta& s,
                                   const std::vector<const TensorMeta*>& aux) {
  constexpr int64_t kBlock = 128;
  const int64_t N = w.shape[0], K = w.shape[1], rb = (N + kBlock - 1) / kBlock, cb = (K + kBlock - 1) / kBlock;
  if (s.dtype != DType::Float32 ||
      (s.shape != std::vector<int64_t>{rb, 1, cb, 1} && s.shape != std::vector<int64_t>{rb, cb}))
    mo_misshapen(ck, s, w,
                 "float32 [" + std::to_string(rb) + ", 1, " + std::to_string(cb) + ", 1] or [" + std::to_string(rb) +
                     ", " + std::to_string(cb) + "] (one scale a 128x128 block)");
  DecodedTensor d = row_decoded(
      ck, w.fqn, w, aux, K,
      [K, cb](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < K; ++j)
            out[r * K + j] =
                e4m3fn_to_f32(p[r * K + j]) * float_at(a[0], DType::Float32, ((r0 + r) / kBlock) * cb + j / kBlock);
      });
  d.consumed.erase(d.consumed.begin());
  TensorMeta grid = s;  // the bound's grid as [rb, cb]: the export's [rb, 1, cb, 1] holds the same values
  if (s.ndim() == 4 && s.num_chunks() == 1) grid.shape = {rb, cb}, grid.chunk_dims = {0, 0, rb, cb};
  d.bound = std::make_shared<ElementBound>(ck.metadata_path, modelopt_codec(), d.meta, scale_grid(grid, kBlock, kBlock),
                                           e4m3_half_ulp, 0.0, 0.0,
                                           "s = weight_scale (float32, per 128x128 block); e4m3 grid");
  return d;
}

DecodedTensor decode_modelopt(const Checkpoint& ck, const TensorMeta& w, const TensorMeta& s, const QuantConfig& qc) {
  const std::string module = w.fqn.substr(0, w.fqn.size() - 7);
  const std::string algo = modelopt_layer_algo(qc.raw, module);  // MIXED_PRECISION: the layer's
  std::vector<const TensorMeta*> aux{&s};
  if (const TensorMeta* in = tensor_named(ck, module + ".input_scale")) aux.push_back(in);  // leaves with it
  if (w.ndim() != 2) mo_misshapen(ck, w, w, "a 2-D Linear weight");
  const int64_t N = w.shape[0];
  if (algo == "NVFP4" || algo == "W4A16_NVFP4") {
    const int64_t bytes = w.shape[1], K = bytes * 2;
    if (*w.dtype != DType::UInt8 || s.dtype != DType::Float8_E4M3FN || s.shape != std::vector<int64_t>{N, K / 16} ||
        K % 16)
      mo_misshapen(ck, s, w, "float8_e4m3fn [" + std::to_string(N) + ", " + std::to_string(K / 16) + "]");
    const TensorMeta* s2 = tensor_named(ck, module + ".weight_scale_2");
    if (!s2 || s2->dtype != DType::Float32 || s2->numel() != 1)
      throw FormatError(Where(ck.metadata_path, std::nullopt, w.fqn),
                        "ModelOpt NVFP4 weight without its float32 per-tensor scale '" + module + ".weight_scale_2'");
    aux.insert(aux.begin() + 1, s2);
    DecodedTensor d = row_decoded(
        ck, w.fqn, w, aux, K,
        [bytes, K](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
          const float s2v = float_at(a[1], DType::Float32, 0);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < K; ++j) {
              const uint8_t b = p[r * bytes + j / 2];
              const uint8_t code = (j & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 15);
              const float block = e4m3fn_to_f32(a[0][(r0 + r) * (K / 16) + j / 16]) * s2v;
              out[r * K + j] = e2m1_value(code, false) * block;
            }
        });
    d.consumed.erase(d.consumed.begin());  // the scale leaves as the pair's
    ScaleGrid g = scale_grid(s, 1, 16);
    g.global = *s2;  // multiplies: weight_scale_2 = amax / 2688
    auto bound =
        std::make_shared<ElementBound>(ck.metadata_path, mo_nvfp4_codec(), d.meta, std::move(g), e2m1_half_step, 0.0,
                                       0.0, "s = weight_scale (e4m3, per 16 values) * weight_scale_2; E2M1 grid");
    bound->saturating(6, 3);  // the e4m3 block scale's own rounding (bound.h)
    d.bound = std::move(bound);
    return d;
  }
  const int64_t K = w.shape[1];
  if (*w.dtype != DType::Float8_E4M3FN) mo_misshapen(ck, w, w, "float8_e4m3fn");
  if (algo == "MXFP8") {
    if (s.dtype != DType::UInt8 || K % 32 || s.shape != std::vector<int64_t>{N, K / 32})
      mo_misshapen(ck, s, w, "uint8 (E8M0) [" + std::to_string(N) + ", " + std::to_string(K / 32) + "]");
    DecodedTensor d = row_decoded(
        ck, w.fqn, w, aux, K,
        [K](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < K; ++j) {
              const int e = a[0][(r0 + r) * (K / 32) + j / 32];
              out[r * K + j] = e4m3fn_to_f32(p[r * K + j]) * std::exp2(static_cast<float>(e - 127));
            }
        });
    d.consumed.erase(d.consumed.begin());
    ScaleGrid g = scale_grid(s, 1, 32);
    g.e8m0 = true;  // ModelOpt's exponent is ceil(log2(amax / 448)): nothing saturates
    d.bound = std::make_shared<ElementBound>(ck.metadata_path, mo_mxfp8_codec(), d.meta, std::move(g),
                                             mo_mxfp8_codec().half_step, 0.0, 0.0,
                                             "s = 2^(weight_scale - 127) per 32 values; e4m3 grid");
    return d;
  }
  if (algo == "fp8_pb_wo" || algo == "FP8_PB_WO") return decode_mo_fp8_blocks(ck, w, s, aux);
  if (algo == "FP8") {
    if (s.dtype != DType::Float32 || s.numel() != 1) mo_misshapen(ck, s, w, "float32 [] (one scale)");
    DecodedTensor d = row_decoded(
        ck, w.fqn, w, aux, K,
        [K](const uint8_t* p, int64_t, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
          const float sv = float_at(a[0], DType::Float32, 0);
          for (int64_t i = 0; i < rows * K; ++i) out[i] = e4m3fn_to_f32(p[i]) * sv;
        });
    d.consumed.erase(d.consumed.begin());
    d.bound =
        std::make_shared<ElementBound>(ck.metadata_path, modelopt_codec(), d.meta, scale_grid(s, N, K), e4m3_half_ulp,
                                       0.0, 0.0, "s = weight_scale (float32, per tensor); e4m3 grid");
    return d;
  }
  throw UnsupportedError(Where(ck.metadata_path, std::nullopt, w.fqn),
                         (algo.empty() ? "a ModelOpt MIXED_PRECISION weight whose layer '" + module +
                                             "' quantization_config.quantized_layers does not name"
                                       : "ModelOpt quant_algo '" + algo + "'") +
                             " (" + qc.path +
                             "): dcpctl decodes NVFP4, W4A16_NVFP4, FP8, MXFP8 and FP8_PB_WO (fp8_pb_wo)");
}

}  // namespace

CodecView modelopt_codec_view() {
  CodecView v;
  v.codec = &modelopt_codec();
  v.applies = mo_applies;
  v.decode = decode_modelopt;
  v.said = "modelopt";
  return v;
}

}  // namespace dcpctl
