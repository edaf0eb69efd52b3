#include "modules/modules.h"

#ifdef DCPCTL_WITH_GGUF
#include "gguf/register.h"
#endif
#ifdef DCPCTL_WITH_OBJSTORE
#include "objstore/register.h"
#endif
#ifdef DCPCTL_WITH_TORCH_CHECKPOINTING
#include "torch_checkpointing/register.h"
#endif
#ifdef DCPCTL_WITH_LORA
#include "lora/register.h"
#endif

namespace dcpctl {

void register_modules() {
#ifdef DCPCTL_WITH_GGUF
  register_gguf();
#endif
#ifdef DCPCTL_WITH_OBJSTORE
  register_objstore();
#endif
#ifdef DCPCTL_WITH_TORCH_CHECKPOINTING
  register_torch_checkpointing();
#endif
#ifdef DCPCTL_WITH_LORA
  register_lora();
#endif
}

std::string module_left_out(const std::string& output) {
#ifndef DCPCTL_WITH_GGUF
  if (output.size() >= 5 && output.compare(output.size() - 5, 5, ".gguf") == 0)
    return "a .gguf output is written by the GGUF module (src/gguf/), which this build of dcpctl left out: configure "
           "it with "
           "-DDCPCTL_WITH_GGUF=ON";
#endif
  (void)output;
  return "";
}

}  // namespace dcpctl
