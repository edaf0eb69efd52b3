// Block-scaled FP8 weights, and the checkpoint as their dequantized values.
//
// DeepSeek-V3/V3.2 and many Hugging Face releases (transformers' FineGrainedFP8 quantizer writes
// the same) keep each quantized Linear weight W [rows, cols] as float8 (e4m3fn) beside
// `W_scale_inv`, float32 [ceil(rows / b0), ceil(cols / b1)], one scale per b0 x b1 block (or
// float8_e8m0fnu, a power of two: transformers' scale_fmt "ue8m0", read as 2^(byte - 127)), the
// block's elements dequantized as float32(fp8) * scale_inv (in float32). config.json says
// `quantization_config: {"quant_method": "fp8", "weight_block_size": [b0, b1], ...}`; the
// scale may sit in another shard file than its weight. torch's reference is
// torch.distributed.checkpoint.quantized_hf_storage.QuantizedHuggingFaceStorageReader: it pairs
// `X.weight` with `X.weight_scale_inv`, 2-D weights only, and computes exactly the above, then
// `.to(target_dtype)` (round to nearest even): what --dtype's cast of the float32 values does here.
//
// The dequantized view (view/dequantize.h) reads such weights as float32; what is here is the
// format's recognition, shared by inspect and the view.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
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
// Helpers of the format, shared by inspect and the dequantized view.
bool is_float8(DType d);
constexpr const char* kScaleSuffix = "_scale_inv";
int64_t ceil_blocks(int64_t n, int64_t b);
// The tensor indices by name.
std::unordered_map<std::string_view, uint32_t> tensor_names(const Metadata& md);
// (blocks, scales) pairs: a uint8 or int8 X_blocks (the same nibbles: DeepSeek-V4-style releases
// keep MXFP4 in I8) with a uint8 or float8_e8m0fnu X_scales beside it (the same biased exponent).
// Dequantized only when config.json's quantization_config.quant_method is "mxfp4"
// (view/dequantize.h).
std::vector<std::pair<uint32_t, uint32_t>> mxfp4_pairs(const Metadata& md, const std::unordered_map<std::string_view, uint32_t>& by_name);
// config.json's quantization_config.weight_block_size, when it gives two positive integers;
// UsageError naming the file when it is there and is not.
struct MapConfig;
std::optional<std::pair<int64_t, int64_t>> configured_block(const MapConfig& config);
// The config.json beside the checkpoint (or `assets`, or its step folder's asset dirs).
MapConfig checkpoint_config(const Checkpoint& ck, const std::string& assets);

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
