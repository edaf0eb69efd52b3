// The running program's identity beyond its version number.
#pragma once

#include <string>

namespace dcpctl {

// The linker's build ID of the dcpctl executable (ELF note NT_GNU_BUILD_ID: a digest of the
// program's bytes, in lowercase hex), read from the loaded program's headers, not its file; ""
// where the program was linked without one. Two builds of other code differ in it; the same
// sources built the same way (a reproducible build) share it.
std::string build_id();

}  // namespace dcpctl
