// dcpctl reshard's and cast's options, as the command line (cmd/reshard.cpp) and Python
// (python/commands.cpp, dcpctl.reshard and dcpctl.cast) fill them, and the one place they become
// the library's ReshardOptions.
#pragma once

#include <cstdint>
#include <string>

#include "args/write_args.h"
#include "write/reshard.h"

namespace dcpctl {

struct ReshardArgs : WriteArgs {
  std::string layout = "fsdp", format = "dcp";
  int world_size = 0;
  int64_t iteration = -1;  // < 0: not given
  bool is_cast = false;    // dcpctl cast: --dtype required, the source's chunks kept

  // Each option's name (Python's spelling, args/spelling.h) and field: the write options, then
  // reshard's own.
  template <class V>
  static void fields(V&& v) {
    WriteArgs::fields(v);
    v("layout", &ReshardArgs::layout);
    v("format", &ReshardArgs::format);
    v("world_size", &ReshardArgs::world_size);
    v("iteration", &ReshardArgs::iteration);
  }
};

// The options checked (UsageError naming the option as `s` spells it), before anything is read.
// Progress, notes and the process group are the front end's; a dry run's plan is rendered
// (to_write_options).
ReshardOptions reshard_options(const ReshardArgs& a, Spelling s);

}  // namespace dcpctl
