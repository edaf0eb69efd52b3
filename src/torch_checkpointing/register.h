// The torch_checkpointing module (src/torch_checkpointing/: the folders torch_checkpointing's
// CheckpointManager writes, "DCPv2"; docs/layouts.md) joins the core through the readers' table's
// torch-checkpointing row (meta/readers.h), whose opener it installs, and nowhere else. The row
// itself (its name, its detection) stays in the core, so that a build without the module
// (-DDCPCTL_WITH_TORCH_CHECKPOINTING=OFF) refuses such a folder with exit 5 saying how to build it
// rather than calling it "not a checkpoint". Its JSON and raw-bytes items are decoded by the item
// reader (item/raw_values.h), a format of the core's.
#pragma once

namespace dcpctl {

// Installs the row's opener; once (a second call does nothing). Before the first path is read.
void register_torch_checkpointing();

}  // namespace dcpctl
