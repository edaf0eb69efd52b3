// The structural checks of a checkpoint that need no item data: files present, item windows
// inside their files and not overlapping, chunks tiling each tensor, storage entries present,
// what makes the checkpoint incomplete, and globals a Python pickle.load would call. This is
// what `verify` without --deep judges, and what "complete" means for run folders (`latest`).
#pragma once

#include "meta/checkpoint.h"
#include "util/finding.h"

namespace dcpctl {

struct StructureReport {
  Findings problems;  // any makes the checkpoint invalid or incomplete
  Findings warnings;  // worth knowing, not fatal (unknown classes)
};

StructureReport check_structure(const Checkpoint& ck);

}  // namespace dcpctl
