#include "cmd/commands.h"

#include "cmd/subcommands.h"

namespace dcpctl::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"inspect", setup_inspect}, {"verify", setup_verify},     {"ls", setup_ls},
      {"latest", setup_latest},   {"prune", setup_prune},       {"consolidate", setup_consolidate},
      {"reshard", setup_reshard}, {"cast", setup_cast},         {"compat", setup_compat},
      {"diff", setup_diff},       {"stats", setup_stats},       {"report", setup_report},
      {"maps", setup_maps},       {"generate", setup_generate}, {"bench", setup_bench},
  };
  return kCommands;
}

}  // namespace dcpctl::cli
