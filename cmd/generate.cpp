// Placeholder until the generator lands (completions and man page from the CLI model).
#include "cmd/subcommands.h"
#include "util/error.h"

namespace dcpctl::cli {

void setup_generate(CLI::App& parent, RunFn& run) {
  auto* sub = parent.add_subcommand("generate", "Generate shell completions or the man page");
  sub->group("");  // hidden
  auto what = std::make_shared<std::string>();
  sub->add_option("what", *what, "bash, zsh, fish or man")->required();
  sub->callback([&run, what] {
    run = [what]() -> int { throw UnsupportedError(Where(), "generate " + *what + " is not implemented yet"); };
  });
}

}  // namespace dcpctl::cli
