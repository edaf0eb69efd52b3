// Shared by consolidate and reshard: join the other processes when launched by torchrun.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

#include "dist/group.h"
#include "meta/checkpoint.h"

namespace dcpctl::cli {

struct DistOptions {
  unsigned timeout = 600;  // seconds a rank waits for another before giving up
  bool single = false;     // ignore RANK/WORLD_SIZE
  std::string backend = "gloo";
  bool local_files = false;  // consolidate: each rank reads the files in its own directory
};

// --timeout, --single-process, and for commands that move bytes between ranks --backend (and,
// with `local_files`, --local-files).
void add_dist_options(CLI::App* sub, DistOptions& o, bool transport);
// The group when RANK/WORLD_SIZE say this is one of several processes, else nullptr.
std::unique_ptr<Group> join_group(const DistOptions& o);
// The checkpoint, for this rank: with --local-files under torchrun, this rank's own directory
// (open_local_checkpoint in dist/local_files.h).
Checkpoint open_checkpoint_on(Group* group, const DistOptions& o, std::string dir);

}  // namespace dcpctl::cli
