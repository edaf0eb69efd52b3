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

// MXFP4 weights, as GPT-OSS releases keep their experts: `X_blocks` uint8 [..., G, B] (B = 16
// bytes a group: 32 4-bit E2M1 values, the low nibble first) beside `X_scales` uint8 [..., G] (a
// group's power of two, biased by 127: E8M0). torch's QuantizedHuggingFaceStorageReader
// (_dequantize_tensor_mxfp4) reads them as `X_blocks` of [..., G * 2B]: value = ldexp(E2M1(nibble),
// scale - 127) rounded once to float32 (scale 255, NaN in E8M0, is taken as 2^128: finite or inf),
// then the cast (checked against it for all 256 scales and bf16/fp16/fp32). transformers' convert_moe_packed_tensors computes the
// same values and returns them transposed ([E, in, out], GptOssExperts' layout); dcpctl keeps
// torch's name and orientation, and the torchtitan-gpt-oss map takes it from there. (torch 2.15's
// reader itself, through dcp.load, returns wrong values for such a folder: its
// _dequantize_tensor_mxfp4 called directly is the reference the tests use.)
//
// A scaled weight of a dequantized view: the weight and its scale as saved.
struct ScaledWeight {
  TensorMeta weight;  // float8, 2-D
  TensorMeta scale;   // float32 [ceil(rows / block[0]), ceil(cols / block[1])]
  int64_t block[2] = {128, 128};
};

// An MXFP4 weight of a dequantized view: its blocks and scales as saved. The view's tensor has the
// blocks' name, float32, shape [..., G * 2B], one chunk per chunk of the blocks (each spans B).
struct Mxfp4Weight {
  TensorMeta blocks;  // uint8 [..., G, B]
  TensorMeta scales;  // uint8 [..., G]
};

// What a dequantized view was made of (Checkpoint::dequant; empty for a checkpoint as opened).
struct Dequantization {
  std::vector<ScaledWeight> weights;
  std::vector<Mxfp4Weight> mxfp4;
  std::string config;  // the config.json that gave the block size; "" when 128 x 128 was assumed
  // `W_scale_inv` beside a weight W that is not float8, left out of the view: transformers'
  // FineGrainedFP8 quantizer leaves a weight whose dimensions are not whole blocks unquantized
  // and still writes its scale, uninitialised (torch's reader would multiply by it).
  std::vector<std::string> ignored;
  bool empty() const { return weights.empty() && mxfp4.empty(); }
};

// The checkpoint as its dequantized weights when it has scaled fp8 or MXFP4 weights and `cast`
// asks for a dtype that is not float8; nullopt when there is nothing to dequantize or no cast. The block
// size is config.json's quantization_config.weight_block_size (config.json from `assets`, else
// the checkpoint's folders), else 128 x 128 as torch's reader assumes.
// FormatError (exit 3), naming the scale: a scale whose shape is not the weight's blocks.
// UnsupportedError (exit 5), naming the weight: a float8 `cast` of scaled weights
// (requantizing), a scaled weight that is not 2-D, MXFP4 blocks saved in chunks that split a
// group's bytes. FormatError (exit 3): MXFP4 scales whose shape is not the blocks' groups.
std::optional<Checkpoint> dequantized_view(const Checkpoint& ck, std::optional<DType> cast, const std::string& assets);

// UnsupportedError (exit 5), naming the first MXFP4 pair, when `ck` still has one (no --dtype
// dequantized it): `what` (the request, "--map NAME") would take the packed bytes for weights.
void refuse_mxfp4(const Checkpoint& ck, const std::string& what);

// What --json says of a view: {"weights": n (fp8), "block": [b0, b1] or null (no fp8 weight),
// "config": path|null, "ignored_scales": [...], "mxfp4": n}; null for a checkpoint that is not one.
nlohmann::json describe_dequantized(const Checkpoint& view);

// What inspect says of a checkpoint's block-scaled weights, or null when it has none:
// {"scaled_weights": n (float8 W beside W_scale_inv), "block": [b0, b1] (config.json's) or null,
//  "config": path or null, "float8_unscaled": n (float8 tensors with no scale beside them),
//  "mxfp4": n (X_blocks beside X_scales)}; null when it has neither kind.
// Never throws for what dequantized_view would refuse: that is said when a write asks.
nlohmann::json describe_quantization(const Checkpoint& ck);

// config.json with `quantization_config` removed and its dtype (`torch_dtype`, `dtype`, where
// present; `dtype` otherwise) set to `dtype`'s torch name: the config of a dequantized export,
// which from_pretrained then loads as a plain model. The text as given when it is not a JSON object.
std::string dequantized_config(const std::string& config_text, DType dtype);

}  // namespace dcpctl
