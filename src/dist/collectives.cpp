// Group's collectives (dist/group.h): what consolidate, reshard and --local-files once each wrote
// by hand over publish/fetch and send/recv.
#include <algorithm>
#include <memory>

#include "dist/group.h"

namespace dcpctl {

std::vector<std::string> Group::all_gather(const std::string& key, const std::string& value) {
  publish("gather/" + key + "/" + std::to_string(rank()), value);
  std::vector<std::string> all(static_cast<size_t>(size()));
  for (int r = 0; r < size(); ++r)
    all[static_cast<size_t>(r)] = r == rank() ? value : fetch("gather/" + key + "/" + std::to_string(r));
  return all;
}

void Group::send_pieces(int dst, uint32_t tag, uint64_t n,
                        const std::function<void(uint64_t, uint8_t*, uint64_t)>& fill) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[std::min(n, kPiece) + 1]);
  for (uint64_t at = 0; at < n; at += kPiece) {
    uint64_t len = std::min(kPiece, n - at);
    fill(at, buf.get(), len);
    send(dst, tag, buf.get(), len);
  }
}

void Group::recv_pieces(int src, uint32_t tag, uint64_t n,
                        const std::function<void(uint64_t, const uint8_t*, uint64_t)>& take) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[std::min(n, kPiece) + 1]);
  for (uint64_t at = 0; at < n; at += kPiece) {
    uint64_t len = std::min(kPiece, n - at);
    recv(src, tag, buf.get(), len);
    take(at, buf.get(), len);
  }
}

}  // namespace dcpctl
