// inkling2-loop's DerivedTensors (meta/codecs/inkling2_loop.cpp describes the layout): each expert
// stack read as float32 the way transformers 5.24.0's Inkling2LoopDequantizeExperts computes it
// before its cast: NVFP4 (float32(e2m1) * float32(scale)) * (float32(amax) / float32(denominator)),
// MXFP8 float32(q) * exp2(float32(scale) - 127).
#include <cmath>

#include "meta/geometry.h"
#include "util/error.h"
#include "util/numeric.h"
#include "view/codecs/codecs.h"
#include "view/codecs/rows.h"

namespace dcpctl {

namespace {

bool ink_applies(const QuantConfig& qc) {
  const std::string type = qc.root.is_object() ? qc.root.value("model_type", "") : "";
  return type == "inkling2_loop" || type == "inkling2_loop_text";  // the text model alone converts alike
}

// `t` (the stack itself, its scale or a factor) is not what stack `w` needs: exit 3 naming `t`.
[[noreturn]] void ink_misshapen(const Checkpoint& ck, const TensorMeta& t, const TensorMeta& w,
                                const std::string& want) {
  throw FormatError(Where(ck.metadata_path, std::nullopt, t.fqn),
                    t.dtype_name + " " + dims_text(t.shape) + " does not fit Inkling2Loop expert stack '" + w.fqn +
                        "' " + dims_text(w.shape) + ": " + want + " expected");
}

std::string dims3(int64_t a, int64_t b, int64_t c) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + "]";
}

// A per-expert factor of an NVFP4 stack (`X_amax`, `X_outer_scale_denominator`): one float a
// expert, [E]; the denominator may be one float for all.
const TensorMeta& ink_factor(const Checkpoint& ck, const TensorMeta& w, const char* tail, bool one_ok) {
  const TensorMeta* f = tensor_named(ck, w.fqn + tail);
  const int64_t E = w.shape[0];
  if (!f)
    throw FormatError(Where(ck.metadata_path, std::nullopt, w.fqn),
                      "Inkling2Loop NVFP4 expert stack without its '" + w.fqn + tail + "'");
  const bool fdt = f->dtype && (*f->dtype == DType::Float32 || *f->dtype == DType::BFloat16 ||
                                *f->dtype == DType::Float16 || *f->dtype == DType::Float8_E4M3FN);
  if (!fdt || !(f->shape == std::vector<int64_t>{E} || (one_ok && f->numel() == 1 && f->ndim() <= 1)))
    ink_misshapen(ck, *f, w, "one float a expert [" + std::to_string(E) + "]" + (one_ok ? " (or one for all)" : ""));
  return *f;
}

DecodedTensor decode_ink_nvfp4(const Checkpoint& ck, const TensorMeta& w, const TensorMeta& s) {
  const int64_t E = w.shape[0], R = w.shape[1], bytes = w.shape[2], C = bytes * 2;
  if (s.dtype != DType::Float8_E4M3FN || s.shape != std::vector<int64_t>{E, R, C / 16} || C % 16)
    ink_misshapen(ck, s, w, "float8_e4m3fn " + dims3(E, R, C / 16) + " (one scale per 16 values)");
  const TensorMeta& amax = ink_factor(ck, w, "_amax", false);
  const TensorMeta& den = ink_factor(ck, w, "_outer_scale_denominator", true);
  const DType ad = *amax.dtype, dd = *den.dtype;
  const bool one_den = den.numel() == 1;
  DecodedTensor d = stack_decoded(
      ck, w.fqn, w, {&s, &amax, &den}, C,
      [=](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t e = (r0 + r) / R;
          const float factor = float_at(a[1], ad, e) / float_at(a[2], dd, one_den ? 0 : e);
          for (int64_t j = 0; j < C; ++j) {
            const uint8_t b = p[r * bytes + j / 2];
            const uint8_t code = (j & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 15);
            const float block = e4m3fn_to_f32(a[0][(r0 + r) * (C / 16) + j / 16]);
            out[r * C + j] = (e2m1_value(code, true) * block) * factor;
          }
        }
      });
  d.consumed.erase(d.consumed.begin());  // the scale leaves as the pair's; amax and the denominator with it
  return d;
}

DecodedTensor decode_ink_mxfp8(const Checkpoint& ck, const TensorMeta& w, const TensorMeta& s) {
  const int64_t E = w.shape[0], R = w.shape[1], C = w.shape[2];
  if (s.dtype != DType::UInt8 || s.shape != std::vector<int64_t>{E, R, C / 32} || C % 32)
    ink_misshapen(ck, s, w, "uint8 " + dims3(E, R, C / 32) + " (one exponent per 32 values)");
  DecodedTensor d = stack_decoded(
      ck, w.fqn, w, {&s}, C,
      [C](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < C; ++j) {
            const float scale = std::exp2(static_cast<float>(a[0][(r0 + r) * (C / 32) + j / 32]) - 127.0f);
            out[r * C + j] = e4m3fn_to_f32(p[r * C + j]) * scale;
          }
      });
  d.consumed.clear();  // its one auxiliary is the scale, which leaves as the pair's
  return d;
}

DecodedTensor decode_ink(const Checkpoint& ck, const TensorMeta& w, const TensorMeta& s, const QuantConfig& qc) {
  (void)qc;
  if (w.ndim() != 3) ink_misshapen(ck, w, w, "a 3-D stack [experts, rows, columns]");
  if (*w.dtype == DType::UInt8) return decode_ink_nvfp4(ck, w, s);
  if (tensor_named(ck, w.fqn + "_amax"))
    throw FormatError(Where(ck.metadata_path, std::nullopt, w.fqn),
                      "a float8 Inkling2Loop expert stack beside '" + w.fqn +
                          "_amax': an amax belongs to NVFP4 stacks (uint8 codes), MXFP8 ones have none");
  return decode_ink_mxfp8(ck, w, s);
}

}  // namespace

CodecView inkling2_loop_codec_view() {
  CodecView v;
  v.codec = &inkling2_loop_codec();
  v.applies = ink_applies;
  v.decode = decode_ink;
  v.said = "inkling2_loop_experts";
  return v;
}

}  // namespace dcpctl
