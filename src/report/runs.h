// Run folders as JSON data (`dcpctl ls --json`, `latest --json`, `prune --json`).
//
// JSON schema, version 1:
// ls:     {"schema_version": 1, "run_folder": "<dir>", "newest_complete": "<path>"|null,
//          "checkpoints": [entry, ...],                       ordered by the numbers in names
//          "prune_leftovers": [path, ...],                    .dcpctl-prune-* of an interrupted prune
//          "timing": folder_timing}
// folder_timing: {"seconds": listing and judging, "judged": checkpoints opened and checked,
//          "metadata_bytes": metadata they read}              ls judges every checkpoint (reading
//                                                             all of each one's metadata); latest
//                                                             stops at the newest complete one
// entry:  {"name", "path", "step" (int|null: several numbers in the name), "layout":
// "dcp"|"dcp-safetensors-items"|"dcp-rank-local"|
//          "hf-dcp"|"hf-safetensors"|null, "complete": bool, "problems": n,
//          "why_incomplete": str|null, "bytes", "tensors", "dtypes": {dtype: tensors},
//          "optimizer": bool, "mtime": seconds, "symlink": bool,
//          "timing": {"judged": bool, "metadata_bytes": read to judge it, "open_seconds": reading
//                     and parsing its metadata, "check_seconds": the structure check}}
// latest: {"schema_version": 1, "run_folder", "path", "step", "layout", "timing": folder_timing}
// prune:  {"schema_version": 1, "run_folder", "dry_run": bool, "keep", "incomplete": bool,
//          "removed": [{"name", "path", "reason"}], "kept": [{"name", "path", "reason"}],
//          "bytes_freed"}
#pragma once

#include <nlohmann/json.hpp>

#include "meta/run_folder.h"

namespace dcpctl {

nlohmann::json run_entry_json(const RunEntry& e);
nlohmann::json run_folder_report(const RunFolder& rf);
nlohmann::json run_folder_timing(const RunFolder& rf);

}  // namespace dcpctl
