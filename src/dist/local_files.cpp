#include "dist/local_files.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "dist/group.h"
#include "dist/tags.h"
#include "meta/run_folder.h"
#include "util/error.h"
#include "util/file.h"

namespace dcpctl {
namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
}

}  // namespace

Checkpoint open_local_checkpoint(Group& group, std::string dir) {
  const char* local = std::getenv("LOCAL_RANK");
  const char* node = std::getenv("GROUP_RANK");
  replace_all(dir, "{rank}", std::to_string(group.rank()));
  replace_all(dir, "{local_rank}", local ? local : "0");
  replace_all(dir, "{node_rank}", node ? node : "0");
  bool have = path_exists(join_path(dir, ".metadata"));
  group.publish("has-metadata/" + std::to_string(group.rank()), have ? "1" : "0");
  std::vector<int> holders, lacking;
  for (int r = 0; r < group.size(); ++r) {
    bool h = r == group.rank() ? have : group.fetch("has-metadata/" + std::to_string(r)) == "1";
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
  group.connect_transport();
  constexpr uint64_t kPiece = 64ull << 20;
  if (group.rank() == holders.front()) {
    MappedFile mf(join_path(dir, ".metadata"));
    uint64_t n = mf.size();
    for (int r : lacking) {
      group.send(r, tag::kMetadata, &n, sizeof n);
      for (uint64_t at = 0; at < n; at += kPiece)
        group.send(r, tag::kMetadata, mf.span().data + at, std::min(kPiece, n - at));
    }
  }
  if (have) return open_checkpoint(dir);
  uint64_t n = 0;
  group.recv(holders.front(), tag::kMetadata, &n, sizeof n);
  std::vector<uint8_t> bytes(n);
  for (uint64_t at = 0; at < n; at += kPiece)
    group.recv(holders.front(), tag::kMetadata, bytes.data() + at, std::min(kPiece, n - at));
  return open_checkpoint(dir, &bytes);
}

}  // namespace dcpctl
