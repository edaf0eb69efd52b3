// LoRA adapters in a checkpoint, as PEFT names them, and the checkpoint seen as a PEFT adapter or
// as the model with its adapters merged.
//
// A PEFT model's state dict (get_model_state_dict of a PeftModel under FSDP2, saved by dcp.save)
// holds, for every adapted module M (keys under the PeftModel's `base_model.model.` prefix) and
// adapter NAME ("default" unless named):
//   M.base_layer.weight [out, in] (and .bias)      the frozen base weight
//   M.lora_A.NAME.weight [r, in], M.lora_B.NAME.weight [out, r]   a Linear's adapter (and
//                                                 lora_B.NAME.bias with lora_bias)
//   M.lora_embedding_A.NAME [r, num], M.lora_embedding_B.NAME [dim, r]   an Embedding's
//   M.lora_magnitude_vector.NAME.weight [out]      DoRA's magnitude
//   M.modules_to_save.NAME.<param>, M.original_module.<param>   a module trained whole
// A parameter targeted by target_parameters (PEFT's lora.ParamWrapper: MoE experts' fused
// gate_up_proj / down_proj) wraps the module once per targeted parameter, so the keys nest
// `base_layer.` once per wrapper, the innermost wrapping the parameter registered first:
//   M.base_layer.base_layer.gate_up_proj [E, out, in]    the frozen parameters (no `.weight`)
//   M.base_layer.lora_A.NAME.weight [r·E, in]            the inner wrapper's (gate_up_proj's) adapter
//   M.lora_A.NAME.weight, M.lora_B.NAME.weight [out, r·E]  the outer wrapper's (down_proj's)
// Expert e's delta is B_e·A_e with A_e = A's rows e·r … e·r + r − 1 and B_e[o, k] = B[o, k·E + e]
// (PEFT's get_delta_weight: A as [E, r, in], B as [out, r, E]).
// An adapter saved alone (get_peft_model_state_dict, adapter_model.safetensors) has the same keys
// with `.NAME` removed (`M.lora_A.weight`, `M.lora_embedding_A`, `M.lora_magnitude_vector`) and a
// module to save as `M.<param>`.
//
// find_lora reads that structure from the tensor keys alone (no config needed); check_lora says
// what of it cannot be right (an adapter whose rank or shape disagrees with its pair or its base
// layer: accelerate #4206 saved one rank's slice of each adapter); the LoRA view (lora/lora.h)
// turns it into what a writer writes (--lora adapter, merge).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/metadata.h"
#include "meta/select.h"
#include "util/finding.h"

namespace dcpctl {

struct Checkpoint;

// One adapter on one module.
struct LoraLayer {
  std::string module;      // the module's key as saved ("model.base_model.model.model.layers.0.self_attn.q_proj")
  std::string adapter;     // its adapter's name as saved; "" when the keys carry none (saved by PEFT alone)
  bool embedding = false;  // lora_embedding_A/B (A [r, num_embeddings], B [embedding_dim, r])
  int a = -1, b = -1;      // indices into Metadata::tensors
  int b_bias = -1;         // lora_B.NAME.bias (lora_bias=True)
  int magnitude = -1;      // DoRA's lora_magnitude_vector
  int base = -1;           // M.base_layer.weight, when the checkpoint holds the base model
  int base_bias = -1;      // M.base_layer.bias (what lora_bias merges into)
  // A ParamWrapper's (target_parameters; `wrapper`, from the nesting): the parameter it adapts ("gate_up_proj"), the
  // experts of a 3-D one (E, from the base's first dimension, or from the config's r when there is no base), and
  // whether that base is [E, in, out] (`is_transposed` experts) rather than [E, out, in].
  bool wrapper = false;
  // torchtune's (view/lora/lora_torchtune.h): M.lora_a.weight, M.lora_b.weight, M.magnitude over M.weight.
  bool torchtune = false;
  std::string param;
  int64_t experts = 0;
  bool param_transposed = false;
  // The key PEFT matches rank_pattern / alpha_pattern against, as saved: the module's, or for a
  // ParamWrapper the unwrapped module's with the parameter ("…mlp.experts.gate_up_proj").
  std::string target() const;
};

// A module trained whole (modules_to_save): its copy for one adapter.
struct LoraSavedModule {
  std::string module;        // the module's key as saved ("model.base_model.model.lm_head")
  std::string adapter;       // "" when saved without a name
  std::vector<int> tensors;  // M.modules_to_save.NAME.<param>
};

// An adapter layout dcpctl recognises but does not export or merge: Megatron-Bridge's LoRA
// (megatron.bridge.peft LoRA / CanonicalLoRA, also what verl's Megatron backend trains through it):
// M.adapter.linear_in.weight [r, in] and M.adapter.linear_out.weight [out, r] beside M.weight
// (CanonicalLoRA: M.adapter_q / adapter_k / adapter_v / adapter_up / adapter_gate.linear_in/out).
struct LoraForeign {
  std::string layout;             // "megatron-bridge"
  std::string example;            // one of its keys, as saved
  std::set<std::string> targets;  // the adapted modules' last parts ("linear_qkv")
  std::set<int64_t> ranks;        // linear_in's rows
  size_t modules = 0;
};

struct LoraModel {
  std::vector<LoraForeign> foreign;  // layouts seen that --lora adapter / merge refuse (exit 5)
  std::vector<LoraLayer> layers;
  std::vector<LoraSavedModule> saved;
  std::vector<int> originals;                    // M.original_module.<param>: the frozen copies of saved modules
  std::vector<std::string> adapters;             // the names, in the order first met ("" for unnamed)
  bool empty() const { return layers.empty(); }  // no adapter dcpctl can write (foreign ones aside)
  // The target module names (the last part of each module's key: "q_proj"), sorted; ParamWrappers'
  // are target_parameters ("experts.gate_up_proj": the module's last part and the parameter).
  std::vector<std::string> targets(const std::string& adapter) const;
  std::vector<std::string> target_parameters(const std::string& adapter) const;
  // {"adapters": [{"name", "modules", "targets", "ranks", "embedding", "dora", "modules_to_save"}],
  //  "base_model": bool, "hint"}: what inspect says.
  nlohmann::json describe(const Metadata& md) const;
};

LoraModel find_lora(const Metadata& md);

// What cannot be right in the adapters' shapes, each naming the key (code "lora-shape"): A and B
// whose ranks differ, a lora_A without its lora_B (or the reverse), an adapter whose in/out
// features are not its base layer's, a magnitude vector that is not [out].
Findings check_lora(const Metadata& md, const LoraModel& lora);

// PEFT's names, shared with the LoRA view (lora/lora.h).
inline constexpr std::string_view kPeftPrefix = "base_model.model.";
// Where PEFT's `base_model.model.` starts in `key` (at a segment boundary), or npos.
size_t peft_prefix_at(std::string_view key);
// The module's key under the PeftModel's base model ("model.layers.0.self_attn.q_proj"): what
// PEFT's rank_pattern / alpha_pattern are matched against.
std::string module_in_model(const std::string& module);
// PEFT's _remove_adapter_name_from_state_dict_key, then DoRA's rename.
std::string peft_saved_key(const std::string& key, const std::string& adapter);
// The adapter's rank: lora_A's rows (0 when it has none); a 3-D ParamWrapper's, those rows / E.
int64_t lora_rank(const Metadata& md, const LoraLayer& l);

}  // namespace dcpctl
