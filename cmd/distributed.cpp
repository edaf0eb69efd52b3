#include "cmd/distributed.h"

#include <utility>

#include "dist/local_files.h"
#include "util/error.h"

namespace dcpctl::cli {

void add_dist_options(CLI::App* sub, DistOptions& o, bool transport) {
  sub->add_option("--timeout", o.timeout,
                  "Under torchrun: seconds a rank waits for the others before failing (naming the silent rank)")
      ->capture_default_str()
      ->type_name("SECONDS");
  sub->add_flag("--single-process", o.single, "Ignore RANK/WORLD_SIZE from a launcher and run alone");
  if (!transport) return;
  sub->add_option("--backend", o.backend,
                  "Under torchrun: process group moving the bytes: gloo (CPU, TCP) or nccl (GPUs)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str()
      ->type_name("BACKEND");
  sub->add_flag("--local-files", o.local_files,
                "Under torchrun: each rank reads only the .distcp files in its own directory (node-local disks); "
                "{rank}, {local_rank}, {node_rank} in the path name it");
}

std::unique_ptr<Group> join_group(const DistOptions& o) {
  if (o.single) return nullptr;
  std::optional<LaunchEnv> env = LaunchEnv::from_environment();
  if (!env) {
    if (o.local_files) throw UsageError(Where(), "--local-files needs several processes (launch with torchrun)");
    return nullptr;
  }
  return connect_group(*env, std::chrono::seconds(o.timeout), o.backend == "nccl" ? Backend::Nccl : Backend::Gloo);
}

Checkpoint open_checkpoint_on(Group* group, const DistOptions& o, std::string dir) {
  if (!group || !o.local_files) return open_checkpoint(dir);
  return open_local_checkpoint(*group, std::move(dir));
}

}  // namespace dcpctl::cli
