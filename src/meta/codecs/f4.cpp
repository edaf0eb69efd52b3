// safetensors F4 (torch's float4_e2m1fn_x2: two E2M1 values a byte; safetensors' shapes count the
// 4-bit elements, torch's the bytes): read and written as a dtype (meta/safetensors_header.cpp,
// write/safetensors.cpp). No release dcpctl reads pairs it with a scale it dequantizes yet, so no
// view reads it as a weight (no pairs, no DerivedTensors); its row names the weight and the
// `X_scale` beside it for the planner and verify.
#include "meta/codecs/codecs.h"

namespace dcpctl {

const Codec& f4_codec() {
  static const Codec codec = [] {
    Codec c;
    c.name = "F4";
    c.quant_method = "";
    c.weight_suffix = "";
    c.scale_suffix = "_scale";
    c.rows = {{"F4", "", "", DType::Float4_E2M1FN_X2, DType::Float8_E8M0FNU, false}};
    c.orphan_tail = ".weight_scale";
    c.display = "F4";
    return c;
  }();
  return codec;
}

}  // namespace dcpctl
