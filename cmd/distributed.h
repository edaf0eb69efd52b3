// Shared by consolidate and reshard: join the other processes when launched by torchrun.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

#include "dist/group.h"

namespace dcpctl::cli {

struct DistOptions {
  unsigned timeout = 600;  // seconds a rank waits for another before giving up
  bool single = false;     // ignore RANK/WORLD_SIZE
};

void add_dist_options(CLI::App* sub, DistOptions& o);
// The group when RANK/WORLD_SIZE say this is one of several processes, else nullptr.
std::unique_ptr<Group> join_group(const DistOptions& o);

}  // namespace dcpctl::cli
