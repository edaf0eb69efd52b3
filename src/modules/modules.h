// The modules this build holds (src/CMakeLists.txt, "the modules": gguf/, objstore/,
// torch_checkpointing/, lora/), registered in the core's tables. The one place that names them:
// the core does not, and each front end (the command line, cmd/app.cpp; the Python module,
// python/module.cpp) calls register_modules() before it reads anything or builds its options.
#pragma once

#include <string>

namespace dcpctl {

// Registers every module built (each once: a second call does nothing), so that their formats'
// options are consolidate's and their readers open their files.
void register_modules();

// Why an output named `output` is refused in this build: a module left out writes it (a .gguf
// without the GGUF module), saying how to build it; "" otherwise.
std::string module_left_out(const std::string& output);

}  // namespace dcpctl
