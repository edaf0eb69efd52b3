#include "dist/local_files.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dist/group.h"
#include "dist/tags.h"
#include "meta/run_folder.h"
#include "store/file.h"
#include "util/error.h"

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
  std::vector<std::string> has = group.all_gather("has-metadata", have ? "1" : "0");
  std::vector<int> holders, lacking;
  for (int r = 0; r < group.size(); ++r) (has[static_cast<size_t>(r)] == "1" ? holders : lacking).push_back(r);
  if (holders.empty()) {
    // A layout without .metadata (HF-mode DCP, rank-local __R.metadata): each rank would build
    // its view from different files, so it is read from a shared filesystem instead.
    if (is_directory(dir) && holds_checkpoint_files(dir)) {
      Checkpoint local = open_checkpoint(dir);
      if (local.layout != CheckpointLayout::Dcp && local.layout != CheckpointLayout::DcpSafetensorsItems)
        throw UnsupportedError(
            Where(dir), std::string("--local-files reads DCP checkpoints with a .metadata; this is ") +
                            layout_description(local.layout) + ": run without --local-files on a shared filesystem");
    }
    throw UsageError(Where(join_path(dir, ".metadata")), "no rank's checkpoint directory holds .metadata");
  }
  if (lacking.empty()) return open_checkpoint(dir);
  group.connect_transport();
  if (group.rank() == holders.front()) {
    MappedFile mf(join_path(dir, ".metadata"));
    uint64_t n = mf.size();
    for (int r : lacking) {
      group.send(r, tag::kMetadata, &n, sizeof n);
      group.send_pieces(r, tag::kMetadata, n,
                        [&](uint64_t at, uint8_t* buf, uint64_t len) { std::memcpy(buf, mf.span().data + at, len); });
    }
  }
  if (have) return open_checkpoint(dir);
  uint64_t n = 0;
  group.recv(holders.front(), tag::kMetadata, &n, sizeof n);
  std::vector<uint8_t> bytes(n);
  group.recv_pieces(holders.front(), tag::kMetadata, n,
                    [&](uint64_t at, const uint8_t* buf, uint64_t len) { std::memcpy(bytes.data() + at, buf, len); });
  return open_checkpoint(dir, &bytes);
}

}  // namespace dcpctl
