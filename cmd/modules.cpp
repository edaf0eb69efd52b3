// The modules this build holds, registered in the core's tables before the command line is built
// (their formats' options become consolidate's, their readers open their files). The one place
// that names them: the core does not (src/CMakeLists.txt, "the modules").
#include "cmd/commands.h"

#ifdef DCPCTL_WITH_GGUF
#include "gguf/register.h"
#endif

namespace dcpctl::cli {

void register_modules() {
#ifdef DCPCTL_WITH_GGUF
  register_gguf();
#endif
}

}  // namespace dcpctl::cli
