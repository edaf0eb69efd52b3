// The table of subcommands: one place that feeds parsing, --help, completions and the man page.
// Each subcommand lives in its own file with an options struct, setup_<cmd>() and run_<cmd>().
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace dcpctl::cli {

// Set by a subcommand's parse callback: the work to run once parsing succeeded.
using RunFn = std::function<int()>;

struct Command {
  const char* name;
  void (*setup)(CLI::App& parent, RunFn& run);
};

const std::vector<Command>& commands();

// Builds the whole CLI model (used by main and by `generate`).
void build_app(CLI::App& app, RunFn& run);

// Output conventions shared by subcommands.
bool stderr_is_tty();

}  // namespace dcpctl::cli
