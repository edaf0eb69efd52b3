// A Hugging Face `config.json` against the tensors of its folder: what from_pretrained or vLLM
// would refuse, or worse, load at random. Part of check_hf_folder (check/hf_checks.h); pure, so
// the rules are unit-tested on key lists.
//
// Fields are read from a nested `text_config` first (a multimodal model's language model), then
// the top level, each under the spellings transformers' `attribute_map`s give it (GPT-2's
// `n_layer` is `num_hidden_layers`; Mixtral's and gpt-oss's `num_local_experts`, DeepSeek's
// `n_routed_experts` and Qwen-MoE's `num_experts` are the routed experts).
// The layer stack is the `<base>layers.N.` prefix of the keys outside vision, audio and MTP
// namespaces (`model.layers.`, `model.language_model.layers.`); with several and none the
// language model's, the layer checks are skipped. MTP layers are counted where the writers put
// them: `<base>layers.L+k.` (DeepSeek-V3, GLM-4.5), `mtp.layers.k.` (Qwen3-Next) and
// `model.mtp_layers.k.` (MiMo).
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "util/finding.h"

namespace dcpctl {

struct HfTensor {
  std::string key;
  std::string dtype;  // torch's name ("bfloat16", "float8_e4m3fn"); the safetensors name when unknown
  std::vector<int64_t> shape;
};

struct ConfigCheckResult {
  Findings problems, warnings;
  std::vector<std::string> checked;  // the checks that had what they need, by name
};

// Whether tensors `a` and `b` hold the same dtype, shape and bytes; nullopt when they could not
// be compared (sharded differently).
using SameBytes = std::function<std::optional<bool>(const std::string& a, const std::string& b)>;

// The value of a one-element float32 tensor (a quantized weight's global scale); nullopt when it
// is not one or could not be read. Null: no values are read (the global-scale checks are skipped).
using ReadScalar = std::function<std::optional<double>(const std::string& key)>;

// Quantized weights (the quantization_config's codec) are checked against their scales: each
// scale's dtype and shape against the weight (`quant-scale-shape`), every scale the format needs
// present (`quant-scale-missing`: ModelOpt's weight_scale_2 and, for its W4A4 NVFP4 and FP8,
// input_scale; compressed-tensors' NVFP4 weight_global_scale), one global scale a fused group
// (`quant-global-scale-unfused`: vLLM decodes the fused matrix with one; an MoE expert's gate/up is a
// warning, as vLLM's own check there is), and that in the format's
// direction (`quant-global-scale-inverted`: compressed-tensors' weight_global_scale is 2688 / amax,
// ModelOpt's weight_scale_2 amax / 2688; read through `read_scalar`). Without a quantization_config,
// the tensors a codec decodes beside its weights under names of its own (Inkling2Loop's expert
// stacks: Codec::expected_beside) are checked the same way.
//
// `kept_dtype`: keys an export's precision policy kept in their saved dtype under --dtype
// (--keep-dtype, the model's lists, the key maps' keep_dtype rules): the dtype check accepts them,
// as it accepts what the model schema keeps.
// `user_kept`: keys a `--keep-dtype` glob recorded in their file's header matches
// (meta/keep_dtype_entry.h), key -> the glob. One the dtype check would find off the config's
// dtype (and nothing else keeps) is the user's decision, not damage: a warning,
// `dtype-kept-by-user`, one per glob and dtype, naming the keys, as transformers' from_pretrained
// casts such a tensor to the config's dtype (only its own keep-in-float32 lists stay float32).
ConfigCheckResult check_hf_config(const nlohmann::json& config, const std::string& config_path,
                                  const std::vector<HfTensor>& tensors, const SameBytes& same_bytes, bool require_mtp,
                                  const ReadScalar& read_scalar = nullptr, const std::set<std::string>& kept_dtype = {},
                                  const std::map<std::string, std::string>& user_kept = {});

}  // namespace dcpctl
