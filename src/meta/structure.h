// The structural checks of a checkpoint that need no item data: files present, item windows
// inside their files and not overlapping (keys that share one stored record are no overlap:
// meta/shared_records.h), chunks tiling each tensor, storage entries present, what makes the
// checkpoint incomplete, and globals a Python pickle.load would call. This is
// what `verify` without --deep judges, and what "complete" means for run folders (`latest`).
#pragma once

#include "meta/checkpoint.h"
#include "meta/shared_records.h"
#include "util/finding.h"

namespace dcpctl {

struct StructureReport {
  Findings problems;  // any makes the checkpoint invalid or incomplete
  Findings warnings;  // worth knowing, not fatal (unknown classes)
  // Keys that read one stored record (ties, views of one torch.save storage): not a problem,
  // a note (meta/shared_records.h).
  std::vector<SharedRecord> shared;
};

StructureReport check_structure(const Checkpoint& ck);

}  // namespace dcpctl
