#include "cmd/commands.h"

#include "cmd/subcommands.h"

namespace dcpctl::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"inspect", setup_inspect},
      {"verify", setup_verify},
      {"generate", setup_generate},
  };
  return kCommands;
}

}  // namespace dcpctl::cli
