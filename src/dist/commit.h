// The protocol every distributed write follows, written once: after the ranks agreed on the plan,
// rank 0 sets up the output (temporary names) and tells everyone where it is; every rank writes
// its part; rank 0 waits for every rank's report, then commits (renames into place); every rank
// learns the outcome. A failure anywhere ends every rank with the exit code of that failure
// (3 for a damaged checkpoint, ...) and a message naming the rank, and nothing is committed.
// With no group (one process) the same calls just run the steps.
#pragma once

#include <functional>
#include <string>

namespace dcpctl {

class Group;

// Rank 0 runs `setup` and publishes what it returns (e.g. the temporary paths); every rank gets
// that value back once rank 0 announced success, or throws as rank 0 failed.
std::string set_up_on_leader(Group* group, const std::function<std::string()>& setup);

// Every rank runs `write`; rank 0 then collects every rank's outcome and runs `commit`. Returns
// true on rank 0 (and with no group) once committed, false on the other ranks once rank 0 has
// announced the commit. Throws (on every rank) when any rank's write or rank 0's commit failed.
bool write_then_commit(Group* group, const std::function<void()>& write, const std::function<void()>& commit);

}  // namespace dcpctl
