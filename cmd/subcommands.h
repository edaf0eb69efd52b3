// One setup function per subcommand file (cmd/<name>.cpp).
#pragma once

#include "cmd/commands.h"

namespace dcpctl::cli {

void setup_inspect(CLI::App& parent, RunFn& run);
void setup_verify(CLI::App& parent, RunFn& run);
void setup_ls(CLI::App& parent, RunFn& run);
void setup_latest(CLI::App& parent, RunFn& run);
void setup_prune(CLI::App& parent, RunFn& run);
void setup_compat(CLI::App& parent, RunFn& run);
void setup_consolidate(CLI::App& parent, RunFn& run);
void setup_reshard(CLI::App& parent, RunFn& run);
void setup_cast(CLI::App& parent, RunFn& run);
void setup_diff(CLI::App& parent, RunFn& run);
void setup_stats(CLI::App& parent, RunFn& run);
void setup_report(CLI::App& parent, RunFn& run);
void setup_maps(CLI::App& parent, RunFn& run);
void setup_generate(CLI::App& parent, RunFn& run);
void setup_bench(CLI::App& parent, RunFn& run);

}  // namespace dcpctl::cli
