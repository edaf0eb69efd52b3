#include "cmd/distributed.h"

namespace dcpctl::cli {

void add_dist_options(CLI::App* sub, DistOptions& o) {
  sub->add_option("--timeout", o.timeout,
                  "Under torchrun: seconds a rank waits for the others before failing (naming the silent rank)")
      ->capture_default_str()
      ->type_name("SECONDS");
  sub->add_flag("--single-process", o.single, "Ignore RANK/WORLD_SIZE from a launcher and run alone");
}

std::unique_ptr<Group> join_group(const DistOptions& o) {
  if (o.single) return nullptr;
  std::optional<LaunchEnv> env = LaunchEnv::from_environment();
  if (!env) return nullptr;
  return connect_group(*env, std::chrono::seconds(o.timeout));
}

}  // namespace dcpctl::cli
