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
// then the cast (checked against it for all 256 scales and bf16/fp16/fp32). transformers' convert_moe_packed_tensors
// computes the same values and returns them transposed ([E, in, out], GptOssExperts' layout); dcpctl keeps torch's name
// and orientation, and the torchtitan-gpt-oss map takes it from there. (torch 2.15's reader itself, through dcp.load,
// returns wrong values for such a folder: its _dequantize_tensor_mxfp4 called directly is the reference the tests use.)
//
// The codec table: one row per quantized format dcpctl reads (the dequantize view recognises
// a weight and its scale by a row) or writes (the quantize view takes its names, dtypes and
// config from a row). A row says what is on disk and what config.json's quantization_config says
// of it; which rows apply to a checkpoint is chosen from that config (QuantConfig), never from the
// byte width alone.
enum class CodecFamily { Fp8Block, Mxfp4, F4 };
struct Codec {
  const char* name;  // for messages and --json: "fp8-block e4m3 float32", ...
  CodecFamily family;
  const char* quant_method;   // quantization_config.quant_method: "fp8", "mxfp4"
  const char* fmt;            // quantization_config.fmt: "e4m3", "e5m2"; "" where the format has none
  const char* scale_fmt;      // quantization_config.scale_fmt: "float", "ue8m0"; "" where it has none
  DType weight;               // the saved weight's dtype
  DType scale;                // the saved scale's dtype
  const char* weight_suffix;  // the weight's name: X + weight_suffix ("" : X itself)
  const char* scale_suffix;   // the scale's name beside it: X + scale_suffix
  bool writes;                // --quantize writes this row (fp8-block: e4m3 float32; mxfp4: U8 U8)
};
const std::vector<Codec>& codec_table();
// The row `family` writes (--quantize).
const Codec& writing_codec(CodecFamily family);
// The row of weight dtype `weight` beside scale dtype `scale` in `family`, or null.
const Codec* find_codec(CodecFamily family, DType weight, DType scale);

// What config.json's quantization_config says (each field empty when absent): the keys that
// choose a codec, read once for both directions.
struct QuantConfig {
  std::string path;      // the config.json (where it was looked for when none was found)
  bool found = false;    // a config.json was read
  bool present = false;  // it has a quantization_config object
  std::string quant_method, fmt, scale_fmt;
  std::optional<std::pair<int64_t, int64_t>> block;  // weight_block_size
  std::vector<std::string> modules_to_not_convert;
};
struct MapConfig;
// UsageError naming the file: a weight_block_size that is not two positive integers.
QuantConfig quant_config(const MapConfig& config);
// "quant_method 'fp8'", "quant_method absent", "no config.json (PATH)": what the config says of
// the keys that would decide, for messages.
std::string describe_quant_config(const QuantConfig& q);
// quantization_config as --quantize writes it for `codec` (block: fp8-block's RxC;
// not_convert: modules_to_not_convert), in the key order the releases use.
nlohmann::json written_quant_config(const Codec& codec, const int64_t block[2], const nlohmann::json& not_convert);

// Helpers of the format, shared by inspect and the dequantized view.
bool is_float8(DType d);
constexpr const char* kScaleSuffix = "_scale_inv";
int64_t ceil_blocks(int64_t n, int64_t b);
// The tensor indices by name.
std::unordered_map<std::string_view, uint32_t> tensor_names(const Metadata& md);
// (blocks, scales) pairs of the MXFP4 rows of the codec table: a uint8 or int8 X_blocks (the same
// nibbles: DeepSeek-V4-style releases keep MXFP4 in I8) with a uint8 or float8_e8m0fnu X_scales
// beside it (the same biased exponent). Dequantized only when config.json's
// quantization_config.quant_method is "mxfp4" (view/dequantize.h).
std::vector<std::pair<uint32_t, uint32_t>> mxfp4_pairs(const Metadata& md, const std::unordered_map<std::string_view, uint32_t>& by_name);
// config.json's quantization_config.weight_block_size, when it gives two positive integers;
// UsageError naming the file when it is there and is not.
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
