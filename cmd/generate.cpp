// `dcpctl generate {bash,zsh,fish,man}` (hidden): prints a shell completion script or the man
// page, generated from the CLI11 model that build_app() builds, to stdout. The committed copies
// under completions/ and man/ come from here (tools/regen-docs.sh); tests/docs checks they agree.
#include <iostream>

#include "cmd/generate_model.h"
#include "cmd/subcommands.h"
#include "util/error.h"

namespace dcpctl::cli {

struct GenerateOptions {
  std::string what;
};

int run_generate(const GenerateOptions& o) {
  // A fresh model rather than the parsed one: nothing the user typed can leak into the output.
  CLI::App app;
  RunFn unused;
  build_app(app, unused);
  const gen::CommandDoc model = gen::walk(app);
  if (o.what == "bash")
    std::cout << gen::emit_bash(model);
  else if (o.what == "zsh")
    std::cout << gen::emit_zsh(model);
  else if (o.what == "fish")
    std::cout << gen::emit_fish(model);
  else
    std::cout << gen::emit_man(model);
  std::cout.flush();
  return std::cout ? 0 : static_cast<int>(ExitCode::io);
}

void setup_generate(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = parent.add_subcommand("generate", "Generate shell completions or the man page");
  sub->group("");  // hidden: for packagers and tools/regen-docs.sh
  sub->add_option("what", o->what, "What to print: a completion script or the man page")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish", "man"}));
  sub->callback([&run, o] { run = [o] { return run_generate(*o); }; });
}

}  // namespace dcpctl::cli
