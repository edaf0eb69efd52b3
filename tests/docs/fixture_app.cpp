// A made-up CLI model, harder than dcpctl's own, for the generators of `dcpctl generate`:
// nested subcommands with an alias, hidden subcommands, options and option groups, choices,
// path validators, counting flags, vectors, an environment variable, and descriptions with roff
// and shell metacharacters and non-ASCII text. Prints what `dcpctl generate <what>` would
// print for it; tests/docs/fixture.sh lints and exercises the result.
#include <iostream>
#include <string>
#include <vector>

#include "cmd/generate_model.h"

namespace {

struct Values {
  std::string src, dst, dtype = "bf16", out_dir, config, name, pushed;
  std::vector<std::string> tags, inputs;
  int threads = 4, secret = 0, verbose = 0;
  bool dry_run = false;
};

void build(CLI::App& app, Values& v) {
  app.name("dcpctl");
  app.description(
      "dcpctl: a made-up model.\n.starts with a dot, 'starts with a quote\nback\\slash \"quotes\" "
      "Gr\xc3\xb6\xc3\x9f"
      "e \xe2\x80\x94 and a very long line that has to be wrapped somewhere because it goes on "
      "and on past eighty columns");
  app.require_subcommand(1);
  app.footer("Root footer.");

  auto* convert = app.add_subcommand("convert", ".Convert a checkpoint; 'quoted' [bracketed]: with colon");
  convert->add_option("src", v.src, "Source checkpoint")->required();
  convert->add_option("dst", v.dst, "Output file for the result");
  convert->add_option("-d,--dtype", v.dtype, "Element type")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}))
      ->capture_default_str();
  convert->add_option("--out-dir", v.out_dir, "Where to write")->check(CLI::ExistingDirectory);
  convert->add_option("--config", v.config, "Settings")->check(CLI::ExistingFile);
  convert->add_option("--name", v.name, "A name with 'quotes', [brackets]: a colon, a \\ backslash and $HOME");
  convert->add_option("--tag", v.tags, "A tag");
  convert->add_flag("-v,--verbose", v.verbose, "More output (repeat for more)");
  convert->add_flag("-n,--dry-run", v.dry_run, "Only say what would be done");
  convert->add_option("--secret", v.secret, "Hidden")->group("");
  auto* advanced = convert->add_option_group("Advanced");
  advanced->add_option("--threads", v.threads, "Worker threads")->envname("DCPCTL_THREADS")->capture_default_str();
  convert->footer("A footer of convert.");

  auto* remote = app.add_subcommand("remote", "Talk to a remote");
  auto* push = remote->add_subcommand("push", "Push files")->alias("up");
  push->add_option("inputs", v.inputs, "Files to push");
  remote->require_subcommand(1);

  app.add_subcommand("secret", "Hidden command")->group("");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: docs_fixture_gen {bash,zsh,fish,man}\n";
    return 2;
  }
  CLI::App app;
  Values v;
  build(app, v);
  const auto model = dcpctl::cli::gen::walk(app);
  const std::string what = argv[1];
  if (what == "bash")
    std::cout << dcpctl::cli::gen::emit_bash(model);
  else if (what == "zsh")
    std::cout << dcpctl::cli::gen::emit_zsh(model);
  else if (what == "fish")
    std::cout << dcpctl::cli::gen::emit_fish(model);
  else if (what == "man")
    std::cout << dcpctl::cli::gen::emit_man(model);
  else
    return 2;
  return 0;
}
