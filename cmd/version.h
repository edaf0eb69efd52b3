#pragma once

#include <string>

namespace dcpctl::cli {
// "dcpctl X\nLibTorch Y (source)\nCUDA: ..." for --version.
std::string version_text();
}  // namespace dcpctl::cli
