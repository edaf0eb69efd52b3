// The documented exit codes: the one table that the man page's EXIT STATUS section is generated
// from (the README and the --help footer repeat it). The values come from the library's ExitCode.
#pragma once

#include <string>

#include "util/error.h"

namespace dcpctl::cli {

struct ExitCodeDoc {
  ExitCode code;
  const char* summary;  // a few words, for one-line lists ("2 usage error")
  const char* meaning;  // a sentence, for the man page
};

inline constexpr ExitCodeDoc kExitCodes[] = {
    {ExitCode::ok, "ok", "Success."},
    {ExitCode::failure, "failure", "Failure not covered below (for example out of memory)."},
    {ExitCode::usage, "usage error",
     "Usage error: an unknown command or option, a missing or invalid argument, a run folder where a checkpoint "
     "is expected (the message names the newest complete checkpoint in it)."},
    {ExitCode::invalid, "checkpoint invalid or incomplete",
     "The checkpoint, or a file in it, is malformed, inconsistent or incomplete (a referenced file missing); latest "
     "and prune: no checkpoint in the run folder is complete."},
    {ExitCode::io, "I/O error",
     "I/O error: an input path that does not exist, an unreadable file, a short read, a failed write, a full disk."},
    {ExitCode::unsupported, "unsupported",
     "Unsupported: well-formed input that this version does not handle, or no usable GPU for a command that needs "
     "one."},
};

// "Exit codes: 0 ok, 1 failure, ..." (the --help footer's wording).
inline std::string exit_codes_summary() {
  std::string s = "Exit codes:";
  const char* sep = " ";
  for (const ExitCodeDoc& e : kExitCodes) {
    s += sep + std::to_string(static_cast<int>(e.code)) + " " + e.summary;
    sep = ", ";
  }
  return s + ".";
}

}  // namespace dcpctl::cli
