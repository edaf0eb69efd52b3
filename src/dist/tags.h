// The tag of every point-to-point message between ranks (Group::send/recv), in one place so that
// no two exchanges can share a tag: between two ranks, messages on one tag arrive in the order
// they were sent, which each exchange relies on. The values are the wire format between the ranks
// of one run (all the same build); they are kept as they were when first used.
#pragma once

#include <cstdint>

namespace dcpctl::tag {

// .metadata sent to the ranks whose directory lacks it (--local-files, dist/local_files.h).
constexpr uint32_t kMetadata = 7;
// Raw bytes of non-tensor items a rank cannot see (--local-files, gather_raw_items in
// dist/exchange.h).
constexpr uint32_t kRawItems = 8;
// Chunk windows of consolidate's exchange (dist/exchange.h): lane L sends on kChunkLanes + L.
// Every tag from here up is theirs.
constexpr uint32_t kChunkLanes = 100;

}  // namespace dcpctl::tag
