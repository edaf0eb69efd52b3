// A problem found while checking a checkpoint. Checks collect every finding instead of stopping
// at the first, so that one run tells the user everything that is wrong.
#pragma once

#include <string>
#include <vector>

#include "util/error.h"

namespace dcpctl {

struct Finding {
  std::string code;  // stable identifier for scripts: "missing-file", "chunk-gap", ...
  Where where;
  std::string message;
  std::string text() const {
    std::string loc = where.describe();
    return loc.empty() ? message : loc + ": " + message;
  }
};

using Findings = std::vector<Finding>;

}  // namespace dcpctl
