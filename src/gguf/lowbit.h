// Low-bit sources of a GGUF output (issue 82 item 4): the quantized weights llama.cpp's converter
// (convert_hf_to_gguf.py of llama-cpp-python 0.3.36, conversion/base.py) reads, decided by
// config.json's quantization_config as its ModelBase.dequant_model decides.
//
// FP8 weights are dequantized as dequant_simple dequantizes them: float32(weight) times
// float32(scale), the scale repeated over blocks of rows and columns (repeat_interleave, cut to the
// weight's shape) or broadcast over a row; one float32 multiply, then the weight is written as any
// float32 tensor is (the Q/K permutation, the output type). The product is
// view/kernels.h's dequantize_fp8_blocks, the fp8-block codec's (torch's reader computes the
// same). The sources:
//   - quant_method fp8 (transformers' FineGrainedFP8, DeepSeek's checkpoints): `X` float8 beside
//     `X_scale_inv` (float32, bfloat16, float16 or float8_e8m0fnu), blocks of
//     quantization_config.weight_block_size, or without it a scale of one value (the tensor's) or
//     one a row; `.activation_scale` / `_activation_scale` dropped;
//   - compressed-tensors float-quantized (and int-quantized, naive-quantized: the converter's one
//     branch) of one config group, strategy channel (`X.weight_scale` [rows, 1]) or block
//     (`block_structure`); the converter asserts those two strategies and no group_size;
//   - NVFP4 (nvfp4_config below) and compressed-tensors' MXFP4: passed through, not dequantized
//     (Fp4Source); NVFP4 experts of Qwen's form (experts.X.{gate,up,down}_proj) stacked by
//     gguf/model.h's plan_tensors as _flush_nvfp4_experts stacks them;
//   - modelopt (quant_method modelopt) FP8: `X.weight_scale` of one value; `.input_scale`,
//     `.k_scale`, `.v_scale` dropped, as a `.weight_scale` whose weight is absent.
// Refused (UnsupportedError, exit 5, naming the tensor and why), as the converter refuses or
// fails on them: another quant_method or format (compressed-tensors' pack-quantized, mxfp8, ...),
// several config groups, strategy tensor or group, a weight that is not float8 or not 2-D beside
// its scale, a scale whose shape is not the weight's blocks or rows; and, where dcpctl stops short
// of the converter or of a lossless copy: NVFP4 experts not in Qwen's form, MXFP4 experts saved
// one tensor each.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/dtype.h"

namespace dcpctl::gguf {

// A tensor of the source as the GGUF writer sees it.
struct SourceTensor {
  std::string key;
  DType dtype{};
  std::vector<int64_t> shape;
};

// A weight dequant_simple dequantizes: its scale (an index into the tensors) repeated over blocks
// of block[0] rows x block[1] columns of the weight.
struct Fp8Source {
  size_t scale = 0;
  int64_t block[2] = {1, 1};
};

// A packed FP4 weight passed through, before every other tensor. NVFP4, as the converter passes
// it (_generate_nvfp4_tensors): its packed E2M1 bytes (the weight, uint8 [rows, cols / 2], low
// nibble first) beside its e4m3 block scale (an index into the tensors, [rows, cols / 16]) and its
// per-tensor factors: ModelOpt's weight_scale_2 and input_scale, or compressed-tensors'
// weight_global_scale and input_global_scale, whose reciprocals (float32 1 / g) the converter
// writes. `mxfp4`: compressed-tensors' mxfp4-pack-quantized (the same bytes beside an E8M0 scale
// [rows, cols / 32], uint8), which the converter refuses ("Quant format 'mxfp4-pack-quantized'
// ... is not yet supported"): written losslessly as ggml's MXFP4, as GptOssModel.repack_mxfp4
// writes OpenAI's experts (gguf/model.h's mxfp4_repack), Q/K rows permuted as NVFP4's.
struct Fp4Source {
  size_t scale = 0;
  std::optional<size_t> scale2, input_scale;
  bool reciprocal = false;
  bool mxfp4 = false;
};

// What the converter makes of `tensors` (prepare_tensors' NVFP4 pass, then dequant_model): the
// weights it dequantizes and those passed through as NVFP4 or MXFP4 (by index), and the tensors that
// leave the model as GGUF inputs (scales, unused activation scales).
struct LowBitSources {
  std::map<size_t, Fp8Source> fp8;
  std::map<size_t, Fp4Source> fp4;
  std::vector<bool> dropped;
};
LowBitSources converter_dequant(const nlohmann::json& config, const std::vector<SourceTensor>& tensors,
                                const std::string& where);

// Whether the converter writes the model's NVFP4 weights as GGUF NVFP4 (its _is_nvfp4):
// compressed-tensors' nvfp4-pack-quantized (or mixed-precision of only such groups), ModelOpt's
// quant_algo NVFP4 in config.json's quantization_config. general.file_type is then MOSTLY_NVFP4
// (39) for f32, f16 and bf16.
bool nvfp4_config(const nlohmann::json& config);

// Whether config.json's quantization_config is ModelOpt's quant_algo W4A16_NVFP4: the converter
// then tags every NVFP4 tensor as not taking 4-bit activations (_tag_prec_a4), keys
// general.tensor_extra.name (the tensors' names, sorted) and general.tensor_extra.prec_a4 (false
// each) after general.quantization_version.
bool w4a16_nvfp4_config(const nlohmann::json& config);

// Whether config.json's quantization_config is compressed-tensors' mxfp4-pack-quantized (every
// group's): general.file_type MOSTLY_MXFP4_MOE (38) for f32, f16 and bf16, as GPT-OSS's.
bool ct_mxfp4_config(const nlohmann::json& config);

// The bytes of `rows` rows of compressed-tensors' MXFP4 weight (`packed` rows x cols / 2 bytes, low
// nibble first; `scale` rows x cols / 32 E8M0 bytes) in ggml's MXFP4 (mxfp4_repack's bytes).
std::vector<uint8_t> mxfp4_pack(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols);

// The bytes of `rows` rows of an NVFP4 weight in ggml's NVFP4 (type 40, 36 bytes a 64 values: four
// block scales, their sign bit cleared (UE4M3), then each 16-value block's 8 bytes, byte j holding
// value j (low nibble) and j + 8), as _nvfp4_pack repacks them: `packed` rows x cols / 2 bytes,
// `scale` rows x cols / 16 e4m3 bytes.
std::vector<uint8_t> nvfp4_pack(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols);

// A scale's saved bytes (`n` values of `dtype`) as float32, as torch's .float() makes them.
void scale_to_float(DType dtype, const uint8_t* bytes, size_t n, float* out);

}  // namespace dcpctl::gguf
