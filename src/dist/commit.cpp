#include "dist/commit.h"

#include "dist/group.h"

namespace dcpctl {

std::string set_up_on_leader(Group* group, const std::function<std::string()>& setup) {
  if (!group) return setup();
  std::string value;
  if (group->rank() == 0) {
    try {
      value = setup();
      group->publish("setup/value", value);
    } catch (const std::exception& e) {
      group->announce("setup", e.what(), exit_code_of(e));
      throw;
    }
    group->announce("setup", "", ExitCode::ok);
  }
  group->await("setup");
  if (group->rank() != 0) value = group->fetch("setup/value");
  return value;
}

bool write_then_commit(Group* group, const std::function<void()>& write, const std::function<void()>& commit) {
  if (!group) {
    write();
    commit();
    return true;
  }
  const bool leader = group->rank() == 0;
  try {
    write();
  } catch (const std::exception& e) {
    group->report("write", e.what(), exit_code_of(e));
    if (leader) group->announce("commit", std::string("rank 0 failed: ") + e.what(), exit_code_of(e));
    throw;
  }
  group->report("write", "", ExitCode::ok);
  if (!leader) {
    group->await("commit");
    return false;
  }
  try {
    group->collect("write");
    commit();
  } catch (const std::exception& e) {
    group->announce("commit", e.what(), exit_code_of(e));
    throw;
  }
  group->announce("commit", "", ExitCode::ok);
  return true;
}

}  // namespace dcpctl
