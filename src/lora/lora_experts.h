// MoE experts adapted by PEFT's target_parameters (meta/lora_keys.h: one ParamWrapper on a fused
// [E, out, in] stack, lora_A [r·E, in], lora_B [out, r·E]) written one expert at a time
// (--lora-layout per-expert), for the LoRA view (lora/lora.h):
//   the adapter as vLLM loads MoE LoRA (vllm/lora/model_manager.py, its 2-D layout): per expert E,
//     M.E.gate_proj.lora_A.weight [r, D] and .lora_B.weight [F, r], up_proj the same A with B's
//     rows F … 2F−1 (gate_up_proj's halves: gate first, then up), down_proj A_e and B_e; every
//     expert of rank r, the adapter's own;
//   the merged model as transformers 5.23's save_pretrained writes it: M.E.gate_proj.weight =
//     merged gate_up_proj[E, :F], up_proj = [E, F:], down_proj = down_proj[E].
// A_e = rows e·r … e·r + r − 1 of A; B_e[o, k] = B[o, k·E + e] (PEFT's get_delta_weight).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meta/derived.h"
#include "meta/metadata.h"

namespace dcpctl {

// A tensor of the per-expert layout: its meta (one chunk) and how it is read.
struct ExpertTensor {
  TensorMeta meta;
  std::shared_ptr<const DerivedTensor> tensor;
};

// Tensor `t` of the table `below` reads, whole, as float32 (an adapter's A and B).
std::vector<float> read_whole_float(const TensorReads& below, const TensorMeta& t);

// The per-expert names a fused parameter's rows give: gate_up_proj's halves (gate_proj, up_proj)
// or down_proj's one; empty for another parameter.
std::vector<std::string> expert_projections(const std::string& param);

// The adapter of expert stack `module` ("base_model.model.model.layers.0.mlp.experts", as written)
// for parameter `param` (gate_up_proj or down_proj), from its fused A and B (as the table below
// has them): for each expert, each projection's lora_A and lora_B.
std::vector<ExpertTensor> expert_adapter(const std::string& path, const std::string& module, const std::string& param,
                                         const TensorMeta& a, const TensorMeta& b, int64_t experts);

// The merged weights of stack `w` ([E, out, in]) one per expert and projection
// ("model.layers.0.mlp.experts.E.gate_proj.weight"), each W_e + s·B_e·A_e as the fused merge
// computes it (view/kernels.h add_lora_expert_deltas) over that expert's rows only.
std::vector<ExpertTensor> expert_merged(const std::string& path, const std::string& module, const std::string& param,
                                        const TensorMeta& w, const TensorMeta& a, const TensorMeta& b, int64_t experts,
                                        float scale);

}  // namespace dcpctl
