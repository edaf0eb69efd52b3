// What config.json says of a checkpoint's quantized weights, and what inspect says of them.
//
// The codecs themselves (FP8 blocks, MXFP4, F4: their rows, names, recognition, --quantize words
// and bounds) are described in meta/codecs/codecs.h, each in its file; the dequantize view
// (view/codecs/dequantize.h) reads their weights as float32, the quantize view (view/codecs/quantize.h) writes
// them. What is here is shared by inspect and the views: the quantization_config keys that choose a
// codec, the block size, the config.json of a dequantized export.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/codecs/codecs.h"
#include "meta/metadata.h"

namespace dcpctl {

struct Checkpoint;

// What config.json's quantization_config says (each field empty when absent): the keys that
// choose a codec, read once for both directions.
struct QuantConfig {
  std::string path;      // the config.json (where it was looked for when none was found)
  bool found = false;    // a config.json was read
  bool present = false;  // it has a quantization_config object
  std::string quant_method, fmt, scale_fmt;
  std::optional<std::pair<int64_t, int64_t>> block;  // weight_block_size
  std::vector<std::string> modules_to_not_convert;
  nlohmann::json raw;   // the quantization_config object (null: none)
  nlohmann::json root;  // the whole config.json (null: none)
};
struct MapConfig;
// UsageError naming the file: a weight_block_size that is not two positive integers.
QuantConfig quant_config(const MapConfig& config);
// "quant_method 'fp8'", "quant_method absent", "no config.json (PATH)": what the config says of
// the keys that would decide, for messages.
std::string describe_quant_config(const QuantConfig& q);
// Helpers of the format, shared by inspect and the dequantized view.
int64_t ceil_blocks(int64_t n, int64_t b);
// config.json's quantization_config.weight_block_size, when it gives two positive integers;
// UsageError naming the file when it is there and is not.
std::optional<std::pair<int64_t, int64_t>> configured_block(const MapConfig& config);

// What inspect says of a checkpoint's block-scaled weights, or null when it has none:
// {"scaled_weights": n (float8 W beside W_scale_inv), "block": [b0, b1] (config.json's) or null,
//  "config": path or null, "float8_unscaled": n (float8 tensors with no scale beside them),
//  "mxfp4": n (X_blocks beside X_scales)}; null when it has neither kind.
// Never throws for what dequantized_view would refuse: that is said when a write asks.
nlohmann::json describe_quantization(const Checkpoint& ck);

// config.json with `quantization_config` removed and its dtype (`torch_dtype`, `dtype`, where
// present; `dtype` otherwise) set to `dtype`'s torch name: the config of a dequantized export,
// which from_pretrained then loads as a plain model. A pruned MoE model's `moe_sparsity_config`
// (view/moe_sparsity.h) whose layers keep other counts than the model's own stays, alone in a
// compressed-tensors quantization_config with no config group. The text as given when it is not a
// JSON object.
std::string dequantized_config(const std::string& config_text, DType dtype);

}  // namespace dcpctl
