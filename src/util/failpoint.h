// Failure injection for fault tests. Distributed runs: when DCPCTL_FAILPOINT equals
// "<name>:<rank>", that rank kills itself with SIGKILL at that point (as a crashed or OOM-killed
// worker would). Unset in normal use; costs one getenv per call site.
#pragma once

#include <signal.h>

#include <cstdlib>
#include <string>

namespace dcpctl {

inline void failpoint(const char* name, int rank) {
  const char* fp = std::getenv("DCPCTL_FAILPOINT");
  if (fp && std::string(fp) == std::string(name) + ":" + std::to_string(rank)) ::raise(SIGKILL);
}

// When DCPCTL_FAILPOINT equals "<name>:stop", the process stops itself (SIGSTOP) at that point,
// so a test can change the files under it and then continue it with SIGCONT.
inline void failpoint_stop(const char* name) {
  const char* fp = std::getenv("DCPCTL_FAILPOINT");
  if (fp && std::string(fp) == std::string(name) + ":stop") ::raise(SIGSTOP);
}

}  // namespace dcpctl
