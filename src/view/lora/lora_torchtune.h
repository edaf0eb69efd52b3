// torchtune's LoRA (torchtune 0.6.1 LoRALinear / DoRALinear, meta/lora_keys.h finds it): a module M holds its
// base as M.weight and its adapter as M.lora_a.weight [r, in], M.lora_b.weight [out, r] (DoRA:
// M.magnitude [out]), under torchtune's own names (layers.N.attn.q_proj, mlp.w1, output). What
// torchtune's HF checkpointer converts it to (convert_weights.tune_to_peft_adapter_weights /
// tune_to_peft_adapter_config) is a PEFT adapter in the HF model's names, with lora_B of q_proj and
// k_proj permuted back to HF's RoPE row order; its merge (get_merged_lora_ckpt) is
// W + ((alpha / r) · B) · A: the scale multiplies B before the product, unlike PEFT's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "view/lora/lora_config.h"

namespace dcpctl {

class ModelConfig;

// The HF module of a torchtune module ("layers.3.attn.q_proj" -> "model.layers.3.self_attn.q_proj",
// mlp.w1/w2/w3 -> mlp.gate_proj/down_proj/up_proj, output -> lm_head: torchtune's _FROM_HF map
// reversed); "" for one it does not name.
std::string torchtune_hf_module(const std::string& module);

// The attention heads the q/k permutation needs.
struct TorchtuneHeads {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
};

// From the model's config.json (view/model_config.h's heads_tries()): --config, else the adapter's base
// model (base_model_name_or_path of the adapter's config when it is a folder, relative to the config's
// own folder), else --assets, else beside the checkpoint (its folder, the folder above). nullopt when
// none says num_attention_heads; `looked` lists where.
std::optional<TorchtuneHeads> torchtune_heads(const Checkpoint& ck, const LoraConfig& config, const ModelConfig& model,
                                              std::string* looked);

// torchtune's _permute_lora_matrix(t, n_heads) as a row map: row i of the permuted [heads·head_dim, r]
// is row rows[i] of torchtune's (t.view(heads, head_dim / 2, 2, r).transpose(1, 2)).
std::vector<int64_t> torchtune_rope_rows(int64_t heads, int64_t head_dim);

}  // namespace dcpctl
