// DTensor's placement rule, as runs of global indices (dtensor_slices.h).
#include "item/dtensor_slices.h"

#include <algorithm>

#include "util/error.h"

namespace dcpctl {

namespace {

constexpr size_t kMaxIndexRuns = 1u << 16;  // per dim: a product of split factors, never near this

// torch.chunk's piece `index` of `extent` items in `pieces` pieces: {size, start}.
std::pair<int64_t, int64_t> torch_chunk_piece(int64_t extent, int64_t pieces, int64_t index) {
  int64_t full = (extent + pieces - 1) / pieces;
  int64_t start = full * index;
  if (start >= extent) return {0, extent};
  return {std::min(extent, start + full) - start, start};
}

// Positions [pos, pos + len) of the list `runs` describes, appended to `out` as runs (adjacent
// runs merged).
void select_positions(const IndexRuns& runs, int64_t pos, int64_t len, IndexRuns& out) {
  for (const IndexRun& r : runs) {
    if (len <= 0) break;
    if (pos >= r.length) {
      pos -= r.length;
      continue;
    }
    int64_t take = std::min(len, r.length - pos);
    IndexRun piece{r.start + pos, take};
    if (!out.empty() && out.back().start + out.back().length == piece.start)
      out.back().length += take;
    else
      out.push_back(piece);
    len -= take;
    pos = 0;
  }
}

int64_t runs_total(const IndexRuns& runs) {
  int64_t n = 0;
  for (const IndexRun& r : runs) n += r.length;
  return n;
}

}  // namespace

std::string MeshPlacement::text() const {
  switch (kind) {
    case Shard: return "Shard(" + std::to_string(dim) + ")";
    case StridedShard:
      return "StridedShard(" + std::to_string(dim) + ", split_factor=" + std::to_string(split_factor) + ")";
    case Replicate: break;
  }
  return "Replicate";
}

std::vector<IndexRuns> local_index_runs(const std::vector<int64_t>& global_shape,
                                        const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& coordinate,
                                        const std::vector<MeshPlacement>& placements, const Where& where) {
  if (placements.size() != mesh_shape.size() || coordinate.size() != mesh_shape.size())
    throw FormatError(where, std::to_string(placements.size()) + " placements on a " +
                                 std::to_string(mesh_shape.size()) + "-dim mesh");
  std::vector<IndexRuns> runs(global_shape.size());
  for (size_t d = 0; d < global_shape.size(); ++d) {
    if (global_shape[d] < 0) throw FormatError(where, "a negative global size");
    if (global_shape[d] > 0) runs[d].push_back({0, global_shape[d]});
  }
  for (size_t m = 0; m < placements.size(); ++m) {
    const MeshPlacement& p = placements[m];
    if (mesh_shape[m] < 1 || coordinate[m] < 0 || coordinate[m] >= mesh_shape[m])
      throw FormatError(where, "mesh coordinate " + std::to_string(coordinate[m]) + " on a mesh dim of size " +
                                   std::to_string(mesh_shape[m]));
    if (p.kind == MeshPlacement::Replicate) continue;
    if (p.dim < 0 || p.dim >= static_cast<int64_t>(global_shape.size()))
      throw FormatError(where, p.text() + " of a " + std::to_string(global_shape.size()) + "-dim tensor");
    IndexRuns& cur = runs[static_cast<size_t>(p.dim)];
    const int64_t n = runs_total(cur);
    IndexRuns next;
    if (p.kind == MeshPlacement::Shard) {
      auto [size, start] = torch_chunk_piece(n, mesh_shape[m], coordinate[m]);
      select_positions(cur, start, size, next);
    } else {
      if (p.split_factor < 1 || p.split_factor > (int64_t{1} << 20))
        throw FormatError(where, p.text() + ": not a split factor");
      for (int64_t j = 0; j < p.split_factor; ++j) {
        auto [flen, fstart] = torch_chunk_piece(n, p.split_factor, j);
        auto [slen, sstart] = torch_chunk_piece(flen, mesh_shape[m], coordinate[m]);
        select_positions(cur, fstart + sstart, slen, next);
        if (next.size() > kMaxIndexRuns)
          throw FormatError(where, p.text() + ": more runs of indices than dcpctl follows");
      }
    }
    cur = std::move(next);
  }
  return runs;
}

std::vector<int64_t> local_shape(const std::vector<IndexRuns>& runs) {
  std::vector<int64_t> s;
  for (const IndexRuns& r : runs) s.push_back(runs_total(r));
  return s;
}

}  // namespace dcpctl
