// Fail closed (issue 57): quantized weights that no codec of codecs() explains are never treated
// as plain weights.
//
// A write that changes what a weight's bytes mean (--dtype, which dequantizes what a codec decodes
// and casts the rest; --quantize, which encodes floating weights) refuses, with UnsupportedError
// (exit 5) naming the scheme and a tensor, a checkpoint whose config.json says it is quantized in
// a way no codec reads, or whose tensors say so whatever the config says:
//
//   - config.json's `quantization_config` names a scheme no codec explains: a quant_method other
//     than those of the codecs ("compressed-tensors" with its `format`, "modelopt" with its
//     `quant_algo`, "awq", "gptq", ...; an object without quant_method), or quant_method "fp8"
//     with `expert_dtype: "fp4"` (DeepSeek-V4's FP4 experts, in quantization_config or, V4's, at the
//     top of config.json);
//   - config.json has no quantization_config but an `hf_quant_config.json` lies beside it
//     (ModelOpt's sidecar): the format is never read from a sidecar, so the folder is refused, not
//     guessed;
//   - a tensor carries a quantization parameter no codec reads: compressed-tensors' and ModelOpt's
//     `weight_packed`, `weight_global_scale`, `weight_zero_point`, `weight_scale_2`, `weight_shape`,
//     `weight_g_idx`, `input_scale`, `input_global_scale`; GPTQ/AWQ's `qweight`, `qzeros`;
//   - a one-byte or F4 weight `X.weight` beside `X.scale` (DeepSeek-V4's release names) or a
//     one-byte weight that is not float8 beside `X.weight_scale` (ModelOpt's NVFP4 and MXFP8);
//   - an F4 (float4_e2m1fn_x2) weight (`X.weight`): packed E2M1 codes, never "cast" (an F4 tensor of
//     another name, a plain checkpoint's, is written as saved: --dtype casts floating tensors only).
//
// The tensor named is the first the scheme marks (a parameter above, a packed or one-byte weight),
// else the first weight. Without --dtype or --quantize nothing is refused: the bytes and the config
// are copied as they are.
#pragma once

#include <string>

#include "meta/checkpoint.h"
#include "view/model_config.h"

namespace dcpctl {

// UnsupportedError naming the scheme and a tensor when `ck` holds quantized weights no codec
// explains; `what` is the request that would misread them ("--dtype bfloat16", "--quantize
// fp8-block"). config.json (the model's: view/model_config.h's saved()) is read only when a tensor
// looks quantized (a parameter above, a one-byte or F4 tensor, a scale's name), so a plain
// checkpoint costs no look-up.
void refuse_unexplained_quantization(const Checkpoint& ck, const ModelConfig& model, const std::string& what);
// Its two halves: what config.json (or the sidecar) declares, asked before a view decodes; what the
// tensors say, asked of what is left after it (the dequantize view, view/codecs/dequantize.h).
void refuse_unexplained_scheme(const Checkpoint& ck, const ModelConfig& model, const std::string& what);
void refuse_unexplained_tensors(const Checkpoint& ck, const ModelConfig& model, const std::string& what);

}  // namespace dcpctl
