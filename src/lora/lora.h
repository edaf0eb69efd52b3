// The LoRA view: a checkpoint holding PEFT LoRA adapters (meta/lora_keys.h) seen as the adapter alone
// (--lora adapter) or as the model with one adapter merged (--lora merge).
//
// A merged weight keeps its base weight's name, dtype, shape and chunks, and is read chunk by
// chunk as base + scale·B·A (view/kernels.h: add_lora_delta, PEFT's merge_and_unload
// arithmetic) from its base chunk and the whole A and B as the table below has them.
#pragma once

#include "meta/checkpoint.h"
#include "meta/select.h"
#include "view/lora/lora_config.h"
#include "view/model_config.h"

namespace dcpctl {

// The checkpoint as the adapter (Adapter) or the merged model (Merge) of `rq`, over the items
// `selection` picks (without one, the subtree that holds the adapters: {"model": ...}'s): a view
// whose tensors are exactly what is written, under their output names (the selection applied; the
// caller writes the view with an empty selection), its non-tensor items those selected (Merge) or
// none (Adapter), and no planner_data (flat keys). Its table's view "lora" says how (--json's
// "lora"); its output "adapter_config" is the adapter_config.json to write (Adapter). Throws
// UsageError (exit 2) when the checkpoint has no LoRA adapter, when several adapters need
// --lora-name (listing them), when the scaling cannot be known (no --lora-config, no --lora-alpha,
// no adapter_config.json beside the checkpoint); FormatError (exit 3) for check_lora's findings;
// UnsupportedError (exit 5) for a merge the config says is DoRA, or an adapter dcpctl cannot merge,
// and for a checkpoint whose weights a view below derived (dequantized).
// `model`: the model's config.json (a torchtune adapter's attention heads, view/lora/lora_torchtune.h).
Checkpoint lora_view(const Checkpoint& ck, const Selection& selection, const LoraRequest& rq, const ModelConfig& model);

}  // namespace dcpctl
