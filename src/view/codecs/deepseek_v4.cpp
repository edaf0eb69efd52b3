// deepseek-v4's DerivedTensors (meta/codecs/deepseek_v4.cpp describes the layout): an FP8 weight
// beside its F8_E8M0 `X.scale` decoded as fp8-block decodes it (the same arithmetic, the scale's
// name aside); an FP4 expert (I8 or F4 codes beside one F8_E8M0 scale per 32 values of a row) as
// transformers 5.23's Fp8Dequantize._dequantize_one computes it: float32(e2m1) * float32(2^(e-127)).
#include "meta/geometry.h"
#include "util/error.h"
#include "view/codecs/codecs.h"
#include "view/codecs/rows.h"
#include "view/kernels.h"

namespace dcpctl {

namespace {

DecodedTensor decode_dsv4(const Checkpoint& ck, const TensorMeta& w, const TensorMeta& s, const QuantConfig& qc) {
  if (ends_with_longer(w.fqn, "engram.embed.weight"))
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, w.fqn),
                           "DeepSeek V4.1's Engram table (" + w.dtype_name + " " + dims_text(w.shape) +
                               " rows beside '" + s.fqn + "' " + s.dtype_name + " " + dims_text(s.shape) +
                               ", the table's weight_scale_inv in vLLM 0.33's deepseek_v41): dcpctl does not decode "
                               "it, as transformers 5.24.0 has no Engram module and vLLM dequantizes it only in a "
                               "Triton kernel, so no decode is checked against its reader; without --dtype the table "
                               "and its scale are written as they are");
  if (*w.dtype == DType::Float8_E4M3FN) return fp8_block_codec_view().decode(ck, w, s, qc);
  // FP4 experts: [R, C / 2] bytes beside [R, C / 32] scales.
  const int64_t cols = w.ndim() == 2 ? w.shape[1] * 2 : 0;
  if (w.ndim() != 2 || s.ndim() != 2 || s.shape[0] != w.shape[0] || cols % 32 != 0 || s.shape[1] != cols / 32)
    throw FormatError(Where(ck.metadata_path, std::nullopt, s.fqn),
                      "DeepSeek-V4's FP4 scale of shape " + dims_text(s.shape) +
                          " is not one per 32 values of the rows of '" + w.fqn + "' " + dims_text(w.shape) +
                          " (two E2M1 values a byte): [" + std::to_string(w.shape.empty() ? 0 : w.shape[0]) + ", " +
                          std::to_string(cols / 32) + "] expected");
  const int64_t bytes = w.shape[1], groups = s.shape[1];
  DecodedTensor d = row_decoded(ck, w.fqn, w, {&s}, cols,
                                [bytes, groups, cols](const uint8_t* packed, int64_t r0, int64_t rows,
                                                      const std::vector<std::vector<uint8_t>>& aux, float* out) {
                                  std::vector<float> scale(aux[0].size());
                                  e8m0_to_float(aux[0].data(), scale.size(), scale.data());
                                  for (int64_t r = 0; r < rows; ++r)
                                    for (int64_t j = 0; j < cols; ++j) {
                                      const uint8_t b = packed[r * bytes + j / 2];
                                      const uint8_t code =
                                          (j & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 15);
                                      out[r * cols + j] = e2m1_value(code, true) * scale[(r0 + r) * groups + j / 32];
                                    }
                                });
  d.consumed.clear();  // its one auxiliary is the scale, which leaves as the pair's
  return d;
}

}  // namespace

CodecView deepseek_v4_codec_view() {
  CodecView v;
  v.codec = &deepseek_v4_codec();
  v.decode = decode_dsv4;
  v.said = "deepseek_v4";
  return v;
}

}  // namespace dcpctl
