// Pruning a run folder: the one place dcpctl deletes a user's data.
//
// Rules (plan_prune): keep the `keep` newest complete checkpoints; never remove the newest
// complete one, an incomplete checkpoint newer than it (a save may be in flight), a checkpoint
// that is a symbolic link, one that a kept checkpoint links into (or into a file of), or anything
// that is not a checkpoint (run_folder.h); incomplete
// checkpoints older than the newest complete one go only with `incomplete`.
// Removal (execute_prune), per checkpoint: it is first renamed to a hidden name in the same
// folder (`.dcpctl-prune-<name>`), so no reader ever sees a half-removed checkpoint under its own
// name, then its tree is removed without following any symbolic link (a link inside is
// removed, never what it points to). A file that appears during removal is removed on the next
// pass; when removal fails (permissions), the remains get their name back and the error says
// what is left.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "meta/run_folder.h"

namespace dcpctl {

struct PruneDecision {
  const RunEntry* entry;
  bool remove;
  std::string reason;  // why it goes or stays
};

// Throws UsageError when keep < 1, FormatError when no checkpoint is complete.
std::vector<PruneDecision> plan_prune(const RunFolder& rf, int keep, bool incomplete);

// Removes what an interrupted prune left (rf.prune_leftovers), then the checkpoints the plan
// marks. `removed` is told each path gone. Throws IoError on the first that cannot be removed
// (earlier ones stay removed).
void execute_prune(const RunFolder& rf, const std::vector<PruneDecision>& plan,
                   const std::function<void(const std::string& path)>& removed);

// Removes the directory tree at `path` without following any symbolic link (one inside is
// unlinked); a file written into it meanwhile is removed on the next pass. Returns 0 or the errno
// of the failure (ENOTDIR when `path` is not a directory).
int remove_tree_no_follow(const std::string& path);

}  // namespace dcpctl
