// The quantize view: an export's Linear weights written as FP8 blocks, as the serving stacks load
// them (--quantize fp8-block).
//
// Each 2-D `X.weight` of a Linear layer becomes float8_e4m3fn `X.weight` (its chunks as the table
// below has them) beside a new float32 `X.weight_scale_inv` [ceil(rows / bm), ceil(cols / bn)], one
// per bm x bn block, computed with transformers 5.23's Fp8Quantize arithmetic (view/kernels.h) from
// the weight as the table below has it (so after a LoRA merge). What the releases keep in their
// dtype is kept: embeddings, lm_head, norms, biases (not 2-D), router / gate weights
// (`mlp.gate.weight`, `router`), `e_score_correction_bias`, MTP blocks (`mtp`, and layers past
// config.json's num_hidden_layers), vision towers; and what --quantize-skip GLOB names. The HF
// folder's config.json gets the quantization_config transformers, vLLM and SGLang read
// (quant_method fp8, fmt e4m3, activation_scheme dynamic, weight_block_size,
// modules_to_not_convert: every 2-D weight left as it was).
//
// Stacked experts: a 3-D `X.experts.gate_up_proj` [E, 2I, H], `up_proj` [E, I, H] or `down_proj`
// [E, H, I] (FP8Experts' parameters, the shapes config.json's num_local_experts / num_experts,
// moe_intermediate_size / intermediate_size and hidden_size give; Gemma 4 keeps them so on disk)
// is quantized expert by expert with the 2-D rule, beside `X.experts.gate_up_proj_scale_inv`
// float32 [E, out / bm, in / bn], when its blocks are whole (transformers' Fp8Dequantize derives
// the block from the scale grid) and it has no bias; an experts module is quantized whole or kept
// whole (in modules_to_not_convert). Every other 3-D floating tensor (GPT-OSS's and Llama 4's
// [E, in, out], biased stacks, partial blocks) is kept and listed with its reason.
//
// --quantize mxfp4 (view/codecs/mxfp4.cpp): GPT-OSS's layout, the stacked MoE experts only. Each
// `X.experts.gate_up_proj` / `down_proj` of transformers' GptOssExperts ([E, in, out], floating)
// becomes `X..._blocks` uint8 [E, out, in / 32, 16] (E2M1 pairs, the low nibble first) beside
// `X..._scales` uint8 [E, out, in / 32] (E8M0), OCP MX v1.0's rule (view/kernels.h), one chunk an
// expert; every other tensor is written as it is (the 2-D weights listed as kept, with the fp8
// rules' reason where one applies). config.json gets GPT-OSS's quantization_config
// {modules_to_not_convert (the kept modules, layers as `*`, as the release lists them),
// quant_method mxfp4}. Only model_type gpt_oss (its experts' orientation is known).
//
// A quantized weight's chunk is read from the rows of whole blocks around it; its scale, whole,
// block row by block row: memory is a block row of the weight in float32, never the checkpoint.
//
// Each scheme is a codec's (meta/codecs/codecs.h: its --quantize word, names, dtypes and written
// config); its DerivedTensors and the weights it takes are in its file in src/view/codecs/
// (fp8_block.cpp, mxfp4.cpp); what is here is the choice of codec and the carve-outs they share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/checkpoint.h"

namespace dcpctl {

struct QuantizeRequest {
  std::string scheme;             // "fp8-block", "mxfp4", "fp8-dynamic"
  std::string format;             // --quantize-format: the quant_method of the form ("": the word's first)
  int64_t block[2] = {128, 128};  // --quantize-block RxC
  int64_t group = 0;              // --quantize-group N (0: the codec's quantize_group)
  std::vector<std::string> skip;  // --quantize-skip GLOB (fnmatch on the key)
  nlohmann::json config;          // the model's config.json (null: none): num_hidden_layers
};

// Why key `key` of a 2-D floating tensor is not quantized ("" : it is), by the rules above.
std::string fp8_kept_reason(const std::string& key, const QuantizeRequest& rq);
// The language model's part of config.json: its `text_config` where it has one (a multimodal
// release), else the config itself; an empty object when there is no config.
const nlohmann::json& language_config(const nlohmann::json& config);
// A model that ties its head to the embeddings saves no lm_head.weight, and transformers still makes
// lm_head a Linear the quantizer would target: "lm_head" is added to `modules` (a codec's JSON list
// of the modules kept or ignored), once, when config.json (or its text_config) says
// tie_word_embeddings and `saved_head` is false.
void list_tied_head(const nlohmann::json& config, bool saved_head, nlohmann::json& modules);

// The checkpoint with its Linear weights quantized by the codec whose --quantize word is
// rq.scheme. Its table's view "quantized" says {"scheme", "block", "weights": n, "kept": [{"key",
// "reason"}]}; its output's quantization_config is the config.json object to write, and its
// keep_dtype the keys --dtype must not cast (the quantized weights and their scales). UsageError (exit 2): an unknown
// scheme, a block not two positive integers; UnsupportedError (exit 5) naming the key: a weight already quantized
// (float8 or with a scale, MXFP4 blocks); for mxfp4, experts of a model_type other than gpt_oss, an input dimension not
// a multiple of 32, no expert stack at all.
Checkpoint quantized_view(const Checkpoint& ck, const QuantizeRequest& rq);

}  // namespace dcpctl
