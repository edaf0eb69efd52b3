// torch_checkpointing's SafetensorsSerialization layout (torch-checkpointing 0.1.1,
// checkpoint_layout.py): an item so declared (ItemSpec(layout=LayoutInfo("model_{rank}.safetensors",
// SafetensorsSerialization()))) is written by every rank to its own safetensors file, the path
// metadata.pkl's rank_to_layout_info records per rank with {rank} filled in (sub-folders allowed).
// Each file holds that rank's LOCAL tensors (DTensor._local_tensor, made contiguous) under the
// item's flattened keys ("proj.weight", "layers.0.attn.wq.weight"), with no offsets: a Hugging
// Face reader would take each rank's shard for the tensor. Where each sits follows only from
// metadata.pkl: per tensor, groups of ranks with their mesh (mesh_shape, mesh_data: the ranks in
// mesh order) and placements, placed as DTensor places them (dtensor_slices.h).
//
// The view: every rank's file is a data file; each tensor's local shard becomes one chunk per box
// of its index runs (one box for Shard and Replicate, more for a _StridedShard whose runs are
// apart), and one Raw storage ref per contiguous run of bytes of that box inside the local tensor.
// A box another rank already supplied (Replicate, a second group of the same mesh) is a copy: read
// once, from the lowest rank; copies are not compared (no checksum to trust).
// Findings (the checkpoint is incomplete): a rank's file missing or with a damaged header, a
// tensor a rank's file lacks, a local tensor whose shape or dtype is not what metadata.pkl's
// placements give that rank. A key a file holds that metadata.pkl does not name is a warning:
// the library's own load ignores it (its consolidation refuses it). Items of no tensor (a rank
// whose layout entry is None) are skipped.
#include <algorithm>
#include <map>
#include <set>

#include "meta/geometry.h"
#include "meta/layouts.h"
#include "meta/safetensors_header.h"
#include "store/file.h"
#include "torch_checkpointing/torch_checkpointing.h"

namespace dcpctl::tc {

namespace {

constexpr uint64_t kMaxRunsPerShard = 1u << 22;

// Appends one local box's byte runs (the local tensor is C-contiguous in the file, starting at
// `base`) as chunks of `t`: the box covers local [lo, lo + n) and global [glo, glo + n).
void add_box(TensorMeta& t, uint32_t file, uint64_t base, uint64_t item, const std::vector<int64_t>& local_shape,
             const std::vector<int64_t>& lo, const std::vector<int64_t>& glo, const std::vector<int64_t>& n,
             const Where& where) {
  const size_t nd = n.size();
  StorageRef ref;
  ref.file = file;
  ref.format = ItemFormat::Raw;
  uint64_t numel = 1;
  for (int64_t s : n) numel *= static_cast<uint64_t>(s);
  if (nd == 0 || numel == 0) {
    ref.offset = base;
    ref.length = numel * item;
    t.chunk_dims.insert(t.chunk_dims.end(), glo.begin(), glo.end());
    t.chunk_dims.insert(t.chunk_dims.end(), n.begin(), n.end());
    t.storage.push_back(ref);
    return;
  }
  std::vector<int64_t> stride(nd, 1);
  for (size_t d = nd - 1; d-- > 0;) stride[d] = stride[d + 1] * local_shape[d + 1];
  // Dims after k are whole in the box, so one index of dims [0, k) is one run of bytes.
  size_t k = nd - 1;
  while (k > 0 && n[k] == local_shape[k]) --k;
  uint64_t count = 1;
  for (size_t d = 0; d < k; ++d) count *= static_cast<uint64_t>(n[d]);
  if (count > kMaxRunsPerShard)
    throw UnsupportedError(
        where, "a local shard of " + std::to_string(count) + " separate runs of bytes, more than dcpctl reads");
  uint64_t run_elems = numel / count;
  std::vector<int64_t> idx(k, 0);
  for (uint64_t r = 0; r < count; ++r) {
    int64_t elem = 0;
    for (size_t d = 0; d < nd; ++d) elem += (lo[d] + (d < k ? idx[d] : 0)) * stride[d];
    ref.offset = base + static_cast<uint64_t>(elem) * item;
    ref.length = run_elems * item;
    for (size_t d = 0; d < nd; ++d) t.chunk_dims.push_back(glo[d] + (d < k ? idx[d] : 0));
    for (size_t d = 0; d < nd; ++d) t.chunk_dims.push_back(d < k ? 1 : n[d]);
    t.storage.push_back(ref);
    for (size_t d = k; d-- > 0;) {
      if (++idx[d] < n[d]) break;
      idx[d] = 0;
    }
  }
}

std::vector<int64_t> coordinate_of(const ShardGroup& g, int rank) {
  auto it = std::find(g.mesh_data.begin(), g.mesh_data.end(), rank);
  if (it == g.mesh_data.end()) return {};
  int64_t linear = it - g.mesh_data.begin();
  std::vector<int64_t> c(g.mesh_shape.size());
  for (size_t d = c.size(); d-- > 0;) {
    c[d] = linear % g.mesh_shape[d];
    linear /= g.mesh_shape[d];
  }
  return c;
}

// One safetensors-layout item added to a checkpoint: each rank's file and its header, then each
// tensor metadata.pkl names of the item, placed from the local shards its sharding metadata gives.
class SafetensorsItem {
 public:
  SafetensorsItem(Checkpoint& ck, const Metadata& md, const std::string& item)
      : ck_(ck), md_(md), item_(item), view_(ck.md), layouts_(md.layouts.at(item)) {}

  void add() {
    for (const auto& [rank, l] : layouts_) open_file(rank, l);
    for (int r = 0; r < md_.world; ++r)
      if (!layouts_.count(r))
        ck_.incomplete.push_back({"missing-rank", Where(md_.path, std::nullopt, item_),
                                  "rank_to_layout_info gives rank " + std::to_string(r) + " of " +
                                      std::to_string(md_.world) + " no file of item '" + item_ + "'"});
    // Keys a file holds that metadata.pkl does not name: not read (the library's load ignores them).
    for (const auto& [rank, rf] : files_)
      if (rf.ok)
        for (const auto& e : rf.h.tensors)
          if (!md_.tensors.count(item_ + "." + e.key))
            view_.problems.push_back({"unknown-key", Where(rf.path, std::nullopt, e.key),
                                      "metadata.pkl does not name " + item_ + "." + e.key + ": not read"});
    for (const std::string& fqn : md_.order) {
      const Tensor& mt = md_.tensors.at(fqn);
      if (mt.item != item_) continue;
      add_tensor(fqn, mt);
    }
  }

 private:
  struct RankFile {
    uint32_t file = 0;
    bool ok = false;
    std::string path;
    SafetensorsHeader h;
  };
  using Boxes = std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>>;  // (start, sizes) kept

  // Rank `rank`'s file of the item, listed, and its header read where it is there.
  void open_file(int rank, const std::optional<FileLayout>& l) {
    Where w(md_.path, std::nullopt, item_);
    if (!l || l->type != "SafetensorsSerialization")
      throw UnsupportedError(w, "torch_checkpointing: item '" + item_ +
                                    "' is saved in the SafetensorsSerialization layout by some ranks and " +
                                    (l ? "in " + l->type : std::string("in the default layout")) + " by rank " +
                                    std::to_string(rank) + "; dcpctl reads an item in one layout");
    RankFile rf;
    rf.file = static_cast<uint32_t>(view_.files.size());
    rf.path = join_path(ck_.dir, l->file_path);
    view_.files.push_back(l->file_path);
    if (!path_exists(rf.path)) {
      ck_.incomplete.push_back({"missing-rank", Where(rf.path),
                                "rank " + std::to_string(rank) + " of " + std::to_string(md_.world) +
                                    " has no file of item '" + item_ +
                                    "' where metadata.pkl's "
                                    "rank_to_layout_info puts it: its save did not finish"});
    } else {
      try {
        ReadFile file(rf.path);
        rf.h = read_safetensors_header(file, 0, file.size());
        rf.ok = true;
        ck_.metadata_bytes += 8 + rf.h.header_bytes;
        ck_.metadata_sources.push_back(rf.path);
      } catch (const FormatError& e) {
        ck_.incomplete.push_back({"bad-safetensors-header", e.where(), e.detail()});
      }
    }
    files_.emplace(rank, std::move(rf));
  }

  // Tensor fqn (mt: what metadata.pkl says of it), its chunks the boxes of every rank's local
  // shard, each box once.
  void add_tensor(const std::string& fqn, const Tensor& mt) {
    const std::string key = fqn.substr(item_.size() + 1);
    Where wm(md_.path, std::nullopt, fqn);
    TensorMeta t;
    t.fqn = fqn;
    t.dtype = dtype_from_torch_name(mt.dtype);
    t.dtype_name = mt.dtype;
    t.shape = mt.shape;
    if (!t.dtype)
      throw UnsupportedError(
          wm, "torch_checkpointing: dtype " + mt.dtype + " of a safetensors-layout tensor, which dcpctl does not know");
    if (mt.groups.empty())
      throw UnsupportedError(wm, "torch_checkpointing: no DTensorShardingMetadata places this tensor's local shards");
    std::vector<std::pair<int, const ShardGroup*>> holders;
    for (const ShardGroup& g : mt.groups)
      for (int r : g.ranks) holders.push_back({r, &g});
    std::stable_sort(holders.begin(), holders.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    Boxes kept;
    for (const auto& [rank, g] : holders) add_shard(t, mt, key, rank, *g, wm, kept);
    if (t.storage.empty() && t.numel() == 0) {  // an empty tensor: one empty chunk, as every reader keeps
      auto fit = files_.find(holders.empty() ? 0 : holders.front().first);
      if (fit != files_.end() && fit->second.ok)
        add_box(t, fit->second.file, fit->second.h.data_start, itemsize(*t.dtype), t.shape,
                std::vector<int64_t>(t.ndim(), 0), std::vector<int64_t>(t.ndim(), 0), t.shape, wm);
    }
    view_.order.push_back({true, static_cast<uint32_t>(view_.tensors.size())});
    view_.tensors.push_back(std::move(t));
  }

  // Rank `rank`'s local shard of t, on group g's mesh: checked against its file's entry, and its
  // boxes not kept yet added.
  void add_shard(TensorMeta& t, const Tensor& mt, const std::string& key, int rank, const ShardGroup& g,
                 const Where& wm, Boxes& kept) {
    std::vector<int64_t> coord = coordinate_of(g, rank);
    if (coord.empty())
      throw FormatError(wm, "rank " + std::to_string(rank) + " is in the group of ranks but not on its mesh " +
                                dims_text(g.mesh_data));
    std::vector<IndexRuns> runs = local_index_runs(mt.shape, g.mesh_shape, coord, g.placements, wm);
    std::vector<int64_t> lshape = local_shape(runs);
    auto fit = files_.find(rank);
    if (fit == files_.end() || !fit->second.ok) return;  // the missing file is the finding
    const RankFile& rf = fit->second;
    Where w(rf.path, std::nullopt, key);
    const SafetensorsTensorInfo* e = rf.h.find(key);
    if (!e) {
      ck_.incomplete.push_back(
          {"missing-key", w,
           "rank " + std::to_string(rank) + "'s file lacks " + t.fqn + ", which metadata.pkl places there"});
      return;
    }
    std::string dname = e->dtype ? torch_name(*e->dtype) : e->dtype_name;
    if (dname != mt.dtype || e->shape != lshape) {
      ck_.incomplete.push_back({"metadata-mismatch", w,
                                "rank " + std::to_string(rank) + "'s local shard is " + dname + " " +
                                    dims_text(e->shape) + ", but metadata.pkl's " + g.placements_text + " of " +
                                    mt.dtype + " " + dims_text(mt.shape) + " on a mesh of " + dims_text(g.mesh_shape) +
                                    " gives coordinate " + dims_text(coord) + " " + dims_text(lshape)});
      return;
    }
    add_boxes(t, rf.file, rf.h.data_start + e->begin, runs, lshape, w, kept);
  }

  // Every box of a local shard (one run of each dim), at `base` in file `file`.
  static void add_boxes(TensorMeta& t, uint32_t file, uint64_t base, const std::vector<IndexRuns>& runs,
                        const std::vector<int64_t>& lshape, const Where& w, Boxes& kept) {
    const size_t nd = runs.size();
    uint64_t boxes = 1;
    for (const IndexRuns& r : runs) boxes *= r.size();
    if (boxes > kMaxRunsPerShard)
      throw UnsupportedError(w, std::to_string(boxes) + " boxes in one local shard, more than dcpctl reads");
    const uint64_t item_bytes = itemsize(*t.dtype);
    std::vector<size_t> pick(nd, 0);
    for (uint64_t b = 0; b < boxes; ++b) {
      std::vector<int64_t> lo(nd, 0), glo(nd), n(nd);
      for (size_t d = 0; d < nd; ++d) {
        for (size_t j = 0; j < pick[d]; ++j) lo[d] += runs[d][j].length;
        glo[d] = runs[d][pick[d]].start;
        n[d] = runs[d][pick[d]].length;
      }
      if (kept.insert({glo, n}).second) add_box(t, file, base, item_bytes, lshape, lo, glo, n, w);
      for (size_t d = nd; d-- > 0;) {
        if (++pick[d] < runs[d].size()) break;
        pick[d] = 0;
      }
    }
  }

  Checkpoint& ck_;
  const Metadata& md_;
  const std::string& item_;
  dcpctl::Metadata& view_;
  const std::map<int, std::optional<FileLayout>>& layouts_;
  std::map<int, RankFile> files_;
};

}  // namespace

void add_safetensors_item(Checkpoint& ck, const Metadata& md, const std::string& item) {
  SafetensorsItem(ck, md, item).add();
}

}  // namespace dcpctl::tc
