#include "bench/layout.h"

#include <algorithm>
#include <set>

#include "bench/sizes.h"
#include "meta/checkpoint.h"
#include "util/error.h"

namespace dcpctl::bench {

Layout contiguous(uint64_t bytes, uint64_t chunk) {
  Layout l;
  if (chunk == 0 || chunk >= bytes) {
    l.segments.push_back({0, bytes});
  } else {
    for (uint64_t off = 0; off < bytes; off += chunk) l.segments.push_back({off, std::min(chunk, bytes - off)});
  }
  l.payload = l.span = bytes;
  return l;
}

Layout packed(const std::vector<uint64_t>& sizes, uint64_t align) {
  Layout l;
  uint64_t off = 0;
  for (uint64_t s : sizes) {
    off = (off + align - 1) & ~(align - 1);
    l.segments.push_back({off, s});
    off += s;
    l.payload += s;
  }
  l.span = off;
  return l;
}

RankTensors rank_tensors(const std::string& dir, int rank) {
  const Checkpoint ck = open_checkpoint(dir);
  RankTensors r;
  r.checkpoint = dir;
  r.rank = rank;
  std::vector<std::optional<int>> file_rank;
  for (const std::string& f : ck.md.files) file_rank.push_back(rank_of_file(f));
  std::set<int> ranks;
  for (const TensorMeta& t : ck.md.tensors) {
    bool on_rank = false;
    for (size_t i = 0; i < t.num_chunks(); ++i) {
      const StorageRef& s = t.storage[i];
      if (!s.present() || s.file >= file_rank.size() || !file_rank[s.file]) continue;
      ranks.insert(*file_rank[s.file]);
      if (*file_rank[s.file] != rank) continue;
      uint64_t bytes;
      if (t.dtype) {
        const uint64_t numel = t.chunk_numel(i), item = itemsize(*t.dtype);
        if (numel > kMaxSize / item)
          throw FormatError(Where(ck.metadata_path, std::nullopt, t.fqn),
                            "chunk " + std::to_string(i) + " is larger than 16 TiB");
        bytes = numel * item;
      } else {
        bytes = s.length;
        ++r.unknown_dtype_chunks;
      }
      if (bytes > kMaxSize - r.bytes)
        throw UnsupportedError(Where(ck.metadata_path),
                               "rank " + std::to_string(rank) + " holds more than 16 TiB of tensor data");
      r.sizes.push_back(bytes);
      r.bytes += bytes;
      on_rank = true;
    }
    r.tensors += on_rank;
  }
  r.ranks.assign(ranks.begin(), ranks.end());
  if (r.sizes.empty()) {
    std::string list;
    for (int x : r.ranks) list += (list.empty() ? "" : ",") + std::to_string(x);
    throw UsageError(Where(ck.metadata_path),
                     "rank " + std::to_string(rank) + " wrote no tensor data" +
                         (list.empty() ? std::string(" (no data file is named __<rank>_<n>.distcp)")
                                       : "; ranks with tensor data: " + list + " (choose one with --rank)"));
  }
  return r;
}

}  // namespace dcpctl::bench
