// Item windows: where each item's bytes lie in its file, which of them are one stored record
// shared by several keys, and which overlap when they must not.
//
// torch.save stores a storage once, however many saved tensors view it, as one zip record
// (`data/<storage key>`); every tensor names the record and its own offset, shape and stride in
// it. So keys legally share bytes in every layout that reads torch.save files (per-rank
// `model_world_size_W_rank_R.pt`, `.pt` inputs, HF `.bin` folders):
//   - a tie: `lm_head.weight` IS `model.embed_tokens.weight` (one Parameter, or one DTensor under
//     FSDP2), pickled once and referenced twice (the pickle memo): both keys read the very same
//     window;
//   - views: `x` and `x[1:]`, or a slice saved with the larger storage it views: the keys read
//     different, possibly overlapping, ranges of one record.
// Those are one record, read and CRC-checked once, and reported as shared (never a problem). The
// rule, per data file:
//   - the windows that lie wholly inside one CRC-watched record (Checkpoint::record_crcs: a
//     torch.save record) are one unit, the record: any overlap among them is a view's;
//   - any other window is a unit of its own, and windows with the very same (offset, length)
//     are one unit (one stored item that several keys name: the same bytes);
//   - units that overlap are a problem (`window-overlap`): two items that share some bytes but
//     are not the same item, nor views inside one record (zip records never overlap, and a DCP
//     writer never writes two items into one byte).
// An empty window (a zero-size shard stored raw) occupies no byte and overlaps nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meta/checkpoint.h"
#include "util/finding.h"

namespace dcpctl {

// Keys that read one stored record (or one item): the same set of keys in every place listed.
struct SharedRecord {
  std::vector<std::string> keys;  // sorted, two or more
  bool same_bytes = true;         // every key reads the very same window in every place (a tie), not views
  struct Place {
    uint32_t file = 0;
    uint64_t offset = 0, length = 0;  // the record (or the item) in that file
  };
  std::vector<Place> places;  // by file, then offset
};

struct WindowReport {
  Findings problems;                 // window-out-of-file, window-overlap
  std::vector<SharedRecord> shared;  // by first key
  std::vector<size_t> per_file;      // windows per data file (missing-file's message)
};

WindowReport check_windows(const Checkpoint& ck);

// For each tensor of `md`, the earlier tensor whose data it is, byte for byte: the same dtype,
// shape, chunks and storage (a tie), so reading it again would read the same bytes into the same
// values. nullopt for a tensor that is its own.
std::vector<std::optional<size_t>> same_data_as(const Metadata& md);

// "'a' and 'b' are one stored record ...", for verify's note and inspect's text.
std::string shared_text(const Checkpoint& ck, const SharedRecord& s);

}  // namespace dcpctl
