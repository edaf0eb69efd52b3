// The dequantize view: a checkpoint's quantized weights read as float32 (meta/codecs/codecs.h has
// the formats: block-scaled float8 beside `W_scale_inv`, GPT-OSS's MXFP4 `_blocks` beside
// `_scales`; view/codecs/ their decoders).
//
// Every scaled fp8 weight becomes a float32 tensor of the same name, shape and chunks, computed
// from its fp8 chunk and its whole scale (torch's QuantizedHuggingFaceStorageReader's arithmetic,
// view/kernels.h); every MXFP4 pair a float32 tensor under the blocks' name, [..., G * 2B], one
// chunk per chunk of the blocks; the scales leave the table. Maps, selection, planning and casts
// then see plain float32 weights. Without --dtype nothing changes: fp8 stays fp8 and the scales
// are written as they are, byte for byte.
#pragma once

#include <optional>
#include <string>

#include "meta/checkpoint.h"
#include "view/model_config.h"

namespace dcpctl {

// The checkpoint as its dequantized weights when it has scaled fp8 or MXFP4 weights and `cast`
// asks for a dtype that is not float8; nullopt when there is nothing to dequantize or no cast. The
// block size is config.json's quantization_config.weight_block_size (the model's config.json,
// view/model_config.h's saved()), else 128 x 128 as torch's reader assumes. Its table's view
// "dequantized" says {"weights": n (fp8), "block": [b0, b1] or null, "config": path|null,
// "ignored_scales": [...], "mxfp4": n}.
// FormatError (exit 3), naming the scale: a scale whose shape is not the weight's blocks; MXFP4
// scales whose shape is not the blocks' groups. UnsupportedError (exit 5), naming the weight: a
// float8 `cast` of scaled weights (requantizing), a scaled weight that is not 2-D or a 3-D expert
// stack ([E, R, C] beside a scale [E, ceil(R / b0), ceil(C / b1)]), MXFP4 blocks
// saved in chunks that split a group's bytes.
std::optional<Checkpoint> dequantized_view(const Checkpoint& ck, std::optional<DType> cast, const ModelConfig& model);

// UnsupportedError (exit 5), naming the first MXFP4 pair, when `ck` still has one (no --dtype
// dequantized it): `what` (the request, "--map NAME") would take the packed bytes for weights.
void refuse_mxfp4(const Checkpoint& ck, const std::string& what);

}  // namespace dcpctl
