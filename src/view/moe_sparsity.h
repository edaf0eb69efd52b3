// Pruned MoE models: compressed-tensors 0.20's expert sparsity (config/expert_sparsity.py,
// `ExpertSparsityConfig`), stored in config.json as `quantization_config.moe_sparsity_config`
// (top level, or a multimodal model's `text_config`):
//
//   "moe_sparsity_config": {"method": "prune", "num_experts": [null, 6, 5, ...]}
//
// `num_experts` has one entry per decoder layer (num_hidden_layers of them): null for a dense
// layer, else how many experts that layer kept. A pruned layer's surviving experts are
// left-shifted (per-expert keys `experts.0.` .. `experts.K-1.`, stacked tensors K along dimension
// 0) and its router's rows and per-expert vectors (`mlp.gate.e_score_correction_bias`, gpt-oss's
// `mlp.router.bias`) sliced with them, as compressed-tensors' MagnitudeExpertPruner writes them.
// The model's own expert count (n_routed_experts, num_experts, ...) is then no measure of a layer
// whose entry differs from it: the export checks (check/hf_config_checks.h, check/hf_schema.h)
// read each layer's count from here. `method: "novice"` (MoNe: the pruned experts collapsed into
// constant "novice" experts kept as a single tensor) is a layout dcpctl does not read (exit 5).
//
// Layers are the main stack's `layers.N.` (keys under a vision, audio, image, speech, MTP or
// encoder prefix are not counted here).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dcpctl {

// config.json's spellings of the routed-expert count (transformers' attribute_maps; the pruner's
// NUM_EXPERTS_CONFIG_KEYS), canonical first.
extern const std::vector<std::string> kExpertCountFields;

struct MoeSparsity {
  std::string field;   // where config.json holds it: "quantization_config.moe_sparsity_config"
  std::string method;  // "prune", "novice"
  std::vector<std::optional<int64_t>> num_experts;  // per decoder layer; nullopt: dense
  // Why it is not what ExpertSparsityConfig validates ("" when it is): the entries above are then
  // empty and nothing is read by layer.
  std::string invalid;

  // Layer `layer`'s count: nullopt for a dense layer, one past the list, or an invalid config.
  std::optional<int64_t> count(int64_t layer) const;
  // Whether the list says anything of `layer` (an entry, null or not).
  bool covers(int64_t layer) const {
    return invalid.empty() && layer >= 0 && static_cast<size_t>(layer) < num_experts.size();
  }
  // Whether a layer keeps another count than `config`'s own (kExpertCountFields, text_config first),
  // or `config` has none, or this list is invalid: then only the list says the layers' counts.
  bool differs_from(const nlohmann::json& config) const;
};

// config.json's own expert count: the first of kExpertCountFields it holds, text_config first.
std::optional<int64_t> config_expert_count(const nlohmann::json& config);

// config.json's moe_sparsity_config, or nullopt when it has none (or it is null).
std::optional<MoeSparsity> find_moe_sparsity(const nlohmann::json& config);

// `config` as the layers of `count` experts read it: each expert-count field it holds (kExpertCountFields,
// at the top level and in text_config) set to `count`.
nlohmann::json config_with_experts(const nlohmann::json& config, int64_t count);

// The decoder layer `key` is in: N of its first `layers.N.` outside the side stacks named above.
std::optional<int64_t> decoder_layer(const std::string& key);

}  // namespace dcpctl
