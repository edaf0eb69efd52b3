// Block-scaled FP8 weights, and the checkpoint as their dequantized values.
//
// DeepSeek-V3/V3.2 and many Hugging Face releases (transformers' FineGrainedFP8 quantizer writes
// the same) keep each quantized Linear weight W [rows, cols] as float8 (e4m3fn) beside
// `W_scale_inv`, float32 [ceil(rows / b0), ceil(cols / b1)], one scale per b0 x b1 block, the
// block's elements dequantized as float32(fp8) * scale_inv (in float32). config.json says
// `quantization_config: {"quant_method": "fp8", "weight_block_size": [b0, b1], ...}`; the
// scale may sit in another shard file than its weight. torch's reference is
// torch.distributed.checkpoint.quantized_hf_storage.QuantizedHuggingFaceStorageReader: it pairs
// `X.weight` with `X.weight_scale_inv`, 2-D weights only, and computes exactly the above, then
// `.to(target_dtype)` (round to nearest even): what --dtype's cast of the float32 values does here.
//
// A write with --dtype (to a dtype that is not float8) reads such a checkpoint through its
// dequantized view: every scaled weight a float32 tensor of the same name, shape and chunks,
// read by the item reader from its fp8 bytes and its scale (item/item_reader.h), and the scales
// gone; maps, selection, planning and casts then see plain float32 weights. Without --dtype
// nothing changes: fp8 stays fp8 and the scales are written as they are, byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/metadata.h"

namespace dcpctl {

struct Checkpoint;

// A scaled weight of a dequantized view: the weight and its scale as saved.
struct ScaledWeight {
  TensorMeta weight;  // float8, 2-D
  TensorMeta scale;   // float32 [ceil(rows / block[0]), ceil(cols / block[1])]
  int64_t block[2] = {128, 128};
};

// What a dequantized view was made of (Checkpoint::dequant; empty for a checkpoint as opened).
struct Dequantization {
  std::vector<ScaledWeight> weights;
  std::string config;  // the config.json that gave the block size; "" when 128 x 128 was assumed
  // `W_scale_inv` beside a weight W that is not float8, left out of the view: transformers'
  // FineGrainedFP8 quantizer leaves a weight whose dimensions are not whole blocks unquantized
  // and still writes its scale, uninitialised (torch's reader would multiply by it).
  std::vector<std::string> ignored;
  bool empty() const { return weights.empty(); }
};

// The checkpoint as its dequantized weights when it has scaled fp8 weights and `cast` asks for
// a dtype that is not float8; nullopt when there is nothing to dequantize or no cast. The block
// size is config.json's quantization_config.weight_block_size (config.json from `assets`, else
// the checkpoint's folders), else 128 x 128 as torch's reader assumes.
// FormatError (exit 3), naming the scale: a scale whose shape is not the weight's blocks.
// UnsupportedError (exit 5), naming the weight: a float8 `cast` of scaled weights
// (requantizing), a scaled weight that is not 2-D.
std::optional<Checkpoint> dequantized_view(const Checkpoint& ck, std::optional<DType> cast, const std::string& assets);

// MXFP4 weights, as GPT-OSS releases keep their experts: `X_blocks` uint8 [..., G, 16] (two 4-bit
// E2M1 values a byte, 32 a group) beside `X_scales` uint8 [..., G] (a power-of-two exponent a
// group, biased by 127); torch's QuantizedHuggingFaceStorageReader reads them as X_blocks of
// [..., G * 32]. dcpctl does not dequantize them yet. UnsupportedError (exit 5), naming the first
// pair and `what` (the request: "--dtype bf16", "--map NAME"), when the checkpoint has one:
// casting would leave them quantized under a plain dtype, and no map names them, so an export
// would lose the experts.
void refuse_mxfp4(const Checkpoint& ck, const std::string& what);

// What --json says of a view: {"weights": n, "block": [b0, b1], "config": path|null,
// "ignored_scales": [...]}; null for a checkpoint that is not one.
nlohmann::json describe_dequantized(const Checkpoint& view);

// What inspect says of a checkpoint's block-scaled weights, or null when it has none:
// {"scaled_weights": n (float8 W beside W_scale_inv), "block": [b0, b1] (config.json's) or null,
//  "config": path or null, "float8_unscaled": n (float8 tensors with no scale beside them)}.
// Never throws for what dequantized_view would refuse: that is said when a write asks.
nlohmann::json describe_quantization(const Checkpoint& ck);

// config.json with `quantization_config` removed and its dtype (`torch_dtype`, `dtype`, where
// present; `dtype` otherwise) set to `dtype`'s torch name: the config of a dequantized export,
// which from_pretrained then loads as a plain model. The text as given when it is not a JSON object.
std::string dequantized_config(const std::string& config_text, DType dtype);

}  // namespace dcpctl
