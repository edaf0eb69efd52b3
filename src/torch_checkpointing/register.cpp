#include "torch_checkpointing/register.h"

#include "meta/readers.h"
#include "torch_checkpointing/torch_checkpointing.h"

namespace dcpctl {

void register_torch_checkpointing() {
  static const bool registered = [] {
    install_reader(CheckpointLayout::TorchCheckpointing, &open_torch_checkpointing);
    return true;
  }();
  (void)registered;
}

}  // namespace dcpctl
