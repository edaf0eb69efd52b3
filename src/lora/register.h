// The LoRA module (src/lora/: a checkpoint's PEFT LoRA adapters written as a PEFT adapter folder or
// merged into their base model; docs/lora.md) joins the core through two tables the core already
// asks, and nowhere else:
//   - the model's views (view/model.h): the LoRA view's maker (install_lora_view: lora/lora.h);
//   - the output formats (plan/format.h): the peft-adapter row (lora/peft_adapter.h).
// Recognising adapters in a checkpoint's keys (meta/lora_keys.h, for inspect and --lora keep's
// refusals) and --lora's options and adapter_config.json (view/lora/lora_config.h) stay in the
// core. A build without the module (-DDCPCTL_WITH_LORA=OFF) refuses --lora adapter | merge with
// exit 5 saying how to build it.
#pragma once

namespace dcpctl {

// Installs the view and adds the format row; once (a second call does nothing). Before the
// command line is built.
void register_lora();

}  // namespace dcpctl
