// The adapter's adapter_config.json and the options of --lora, for the LoRA view (lora/lora.h);
// the adapters themselves, recognised from the keys, are meta/lora_keys.h.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/lora_keys.h"

namespace dcpctl {

struct Checkpoint;

// What --lora asks (write/consolidate.h).
enum class LoraMode { Keep, Adapter, Merge };

// An adapter's scaling: alpha / r, or alpha / sqrt(r) with rsLoRA; per module from the config's
// rank_pattern / alpha_pattern where they name it.
struct LoraConfig {
  nlohmann::json json;  // adapter_config.json as found or given (an object), or built
  std::string path;     // where it came from; "" when built from --lora-alpha
  // alpha_pattern in the file's order: PEFT takes the first pattern that matches a module.
  std::vector<std::pair<std::string, double>> alpha_patterns;
  double alpha(const std::string& module) const;  // module: its key under the model
  bool rslora() const;
  bool fan_in_fan_out() const;
  // The LoRA variant the config turns on whose merge is not W + s·B·A (PEFT's is_lora_variant
  // fields, MiCA's init_lora_weights, lora_bias, trainable tokens, layer replication), as
  // "NAME (field)"; "" for plain LoRA and rsLoRA.
  std::string variant() const;
};

// --lora-layout: how MoE experts adapted by target_parameters are written. Default: Fused for
// --lora adapter (PEFT's own [r·E] layout), PerExpert for --lora merge (what transformers'
// save_pretrained writes: mlp.experts.E.{gate,up,down}_proj.weight).
enum class LoraLayout { Default, Fused, PerExpert };

// The options of --lora: the adapter (--lora-name; "" for the only one), and where its
// adapter_config.json comes from.
struct LoraRequest {
  LoraMode mode = LoraMode::Keep;
  std::string name;             // --lora-name
  std::string config_file;      // --lora-config FILE
  std::optional<double> alpha;  // --lora-alpha
  std::string base_model;       // base_model_name_or_path for a built config ("" : from the config, or none)
  LoraLayout layout = LoraLayout::Default;  // --lora-layout
};

// The adapter's config: --lora-config FILE, else an adapter_config.json beside the checkpoint (its
// folder, the folder above, the trainer's asset folders; an adapter other than "default" in a
// subfolder of its name), else built from --lora-alpha; with --lora-alpha its lora_alpha wins.
// UsageError naming where dcpctl looked when none says alpha; UnsupportedError for a peft_type
// that is not LORA.
LoraConfig find_lora_config(const Checkpoint& ck, const LoraRequest& rq, const std::string& adapter);

// Whether a rank_pattern / alpha_pattern key names `key` (PEFT's regex rule).
bool pattern_matches(const std::string& pattern, const std::string& key);
}  // namespace dcpctl
