#include "lora/register.h"

#include "lora/lora.h"
#include "lora/peft_adapter.h"
#include "plan/format.h"
#include "view/model.h"

namespace dcpctl {

void register_lora() {
  static const bool registered = [] {
    install_lora_view(lora_view);
    formats::add(&peft_adapter_format);
    return true;
  }();
  (void)registered;
}

}  // namespace dcpctl
