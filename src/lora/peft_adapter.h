// The `peft-adapter` output format's row (plan/format.h), which lora/register.h adds: the folder
// PeftModel.from_pretrained loads, written from the LoRA view's adapter (consolidate --lora adapter).
#pragma once

#include "plan/format.h"

namespace dcpctl {

extern const Format peft_adapter_format;

}  // namespace dcpctl
