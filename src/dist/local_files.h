// --local-files: under torchrun, each rank reads the checkpoint from a directory of its own
// (node-local disks), which holds only some of the .distcp files. In the library, not the CLI,
// so that a program embedding it can consolidate from node-local disks too.
#pragma once

#include <string>

#include "meta/checkpoint.h"

namespace dcpctl {

class Group;

// The checkpoint as this rank sees it. `{rank}`, `{local_rank}` and `{node_rank}` in `dir` name
// this rank's directory (from the group, LOCAL_RANK and GROUP_RANK). A rank whose directory lacks
// .metadata gets its bytes from the lowest rank that has it, so every rank plans from the same
// metadata. Collective: every rank of `group` calls it. Throws UsageError when no rank has
// .metadata, UnsupportedError when the layout has none to share (HF-mode DCP, rank-local).
Checkpoint open_local_checkpoint(Group& group, std::string dir);

}  // namespace dcpctl
