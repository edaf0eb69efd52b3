#include "cmd/distributed.h"

#include <cstdlib>
#include <cstring>

#include "meta/run_folder.h"
#include "util/error.h"
#include "util/file.h"

namespace dcpctl::cli {

void add_dist_options(CLI::App* sub, DistOptions& o, bool transport) {
  sub->add_option("--timeout", o.timeout,
                  "Under torchrun: seconds a rank waits for the others before failing (naming the silent rank)")
      ->capture_default_str()
      ->type_name("SECONDS");
  sub->add_flag("--single-process", o.single, "Ignore RANK/WORLD_SIZE from a launcher and run alone");
  if (!transport) return;
  sub->add_option("--backend", o.backend, "Under torchrun: process group moving the bytes: gloo (CPU, TCP) or nccl (GPUs)")
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

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
}

}  // namespace

Checkpoint open_checkpoint_on(Group* group, const DistOptions& o, std::string dir) {
  if (!group || !o.local_files) return open_checkpoint(dir);
  const char* local = std::getenv("LOCAL_RANK");
  const char* node = std::getenv("GROUP_RANK");
  replace_all(dir, "{rank}", std::to_string(group->rank()));
  replace_all(dir, "{local_rank}", local ? local : "0");
  replace_all(dir, "{node_rank}", node ? node : "0");
  bool have = path_exists(join_path(dir, ".metadata"));
  group->publish("has-metadata/" + std::to_string(group->rank()), have ? "1" : "0");
  std::vector<int> holders, lacking;
  for (int r = 0; r < group->size(); ++r) {
    bool h = r == group->rank() ? have : group->fetch("has-metadata/" + std::to_string(r)) == "1";
    (h ? holders : lacking).push_back(r);
  }
  if (holders.empty()) {
    // A layout without .metadata (HF-mode DCP, rank-local __R.metadata): each rank would build
    // its view from different files, so it is read from a shared filesystem instead.
    if (is_directory(dir) && holds_checkpoint_files(dir)) {
      Checkpoint local = open_checkpoint(dir);
      if (local.layout != CheckpointLayout::Dcp && local.layout != CheckpointLayout::DcpSafetensorsItems)
        throw UnsupportedError(Where(dir), std::string("--local-files reads DCP checkpoints with a .metadata; this is ") +
                                               layout_description(local.layout) + ": run without --local-files on a shared filesystem");
    }
    throw UsageError(Where(join_path(dir, ".metadata")), "no rank's checkpoint directory holds .metadata");
  }
  if (lacking.empty()) return open_checkpoint(dir);
  group->connect_transport();
  constexpr uint32_t kTag = 7;
  constexpr uint64_t kPiece = 64ull << 20;
  if (group->rank() == holders.front()) {
    MappedFile mf(join_path(dir, ".metadata"));
    uint64_t n = mf.size();
    for (int r : lacking) {
      group->send(r, kTag, &n, sizeof n);
      for (uint64_t at = 0; at < n; at += kPiece) group->send(r, kTag, mf.span().data + at, std::min(kPiece, n - at));
    }
  }
  if (have) return open_checkpoint(dir);
  uint64_t n = 0;
  group->recv(holders.front(), kTag, &n, sizeof n);
  std::vector<uint8_t> bytes(n);
  for (uint64_t at = 0; at < n; at += kPiece) group->recv(holders.front(), kTag, bytes.data() + at, std::min(kPiece, n - at));
  return open_checkpoint(dir, &bytes);
}

}  // namespace dcpctl::cli
