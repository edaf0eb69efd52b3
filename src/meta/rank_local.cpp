// DCP saved with use_collectives=False (torch 2.9+ [I]): no coordinator, so no `.metadata`;
// every rank writes `__{rank}.metadata`, the same Metadata pickle covering only the items that
// rank planned locally. Without a global plan there is no deduplication: a replicated tensor or
// a non-tensor value is saved by every rank that holds it.
//
// torch's loader falls back to the loading rank's own file; its single-process
// dcp_to_torch_save therefore sees rank 0's chunks only and returns uninitialised memory for the
// rest (dcp-format.md §9). Here every rank's file is merged into one view:
// - a tensor's dtype and global shape must agree across ranks (FormatError naming both files);
// - chunks are the union; a chunk several ranks saved identically (same offsets and sizes) is
//   kept once, from the lowest rank;
// - a non-tensor value several ranks saved is kept once, from the lowest rank;
// - ranks 0..max must each have their file, and every rank with data files must have one:
//   otherwise the checkpoint is incomplete (a rank's save did not finish).
// Chunk tiling is then checked like any checkpoint's (verify, writers).
#include <map>
#include <set>

#include "meta/layouts.h"
#include "store/file.h"

namespace dcpctl::meta_detail {

namespace {

struct RankFile {
  int rank;
  std::string name;
};

int rank_of_metadata(const std::string& name) {
  return std::stoi(name.substr(2, name.size() - 2 - 9));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

// The ranks' `__R.metadata` files merged into one view, lowest rank first, then the ranks that
// left none named.
class RankLocalMerge {
 public:
  RankLocalMerge(const std::string& dir, const std::vector<std::string>& names) : dir_(dir), out_(ck_.md) {
    for (const auto& n : names) ranks_.push_back({rank_of_metadata(n), n});
    std::sort(ranks_.begin(), ranks_.end(), [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  }

  Checkpoint open() {
    ck_.dir = dir_;
    ck_.layout = CheckpointLayout::DcpRankLocal;
    ck_.metadata_path = join_path(dir_, ranks_.front().name);
    for (size_t i = 0; i < ranks_.size(); ++i) merge_file(i);
    if (n_disagree_)
      throw FormatError(Where(dir_), "the ranks' __R.metadata files disagree on " + std::to_string(n_disagree_) +
                                         " tensor(s) (dtype or global shape):" + disagreements_);
    note_missing_ranks();
    stat_data_files(ck_);
    resolve_safetensors_items(ck_);
    if (ck_.layout == CheckpointLayout::DcpSafetensorsItems) ck_.layout = CheckpointLayout::DcpRankLocal;
    return std::move(ck_);
  }

 private:
  void merge_file(size_t i) {
    std::string path = join_path(dir_, ranks_[i].name);
    MappedFile mf(path);
    ck_.metadata_bytes += mf.size();
    ck_.metadata_sources.push_back(path);
    MetadataParseOptions po;
    po.consumed = [&mf](uint64_t done) { mf.drop_before(done); };
    Metadata m = parse_metadata(mf.span(), path, po);
    if (i == 0) take_header(m, path);
    merge_lists(m);
    for (const auto& [is_tensor, idx] : m.order) {
      if (!is_tensor) {
        const BytesMeta& b = m.bytes[idx];
        if (bytes_index_.count(b.fqn)) continue;  // the lowest rank's copy stands
        bytes_index_[b.fqn] = static_cast<uint32_t>(out_.bytes.size());
        out_.bytes.push_back({b.fqn, remap(m, b.storage)});
        out_.order.push_back({false, bytes_index_[b.fqn]});
        continue;
      }
      merge_tensor(m, m.tensors[idx], ranks_[i].name);
    }
  }

  // What the lowest rank's file says of the whole save.
  void take_header(const Metadata& m, const std::string& path) {
    out_.source = path;
    out_.pickle_protocol = m.pickle_protocol;
    out_.has_planner_data = m.has_planner_data;
    out_.storage_meta = m.storage_meta;
    out_.has_storage_meta_field = m.has_storage_meta_field;
    out_.version = m.version;
    out_.has_version_field = m.has_version_field;
    out_.metadata_class = m.metadata_class;
    out_.properties_class = m.properties_class;
  }

  // The globals, attributes, problems and planner data of every rank's file, each once.
  void merge_lists(Metadata& m) {
    out_.has_transform_field = out_.has_transform_field || m.has_transform_field;
    for (auto& g : m.globals)
      if (std::find(out_.globals.begin(), out_.globals.end(), g) == out_.globals.end()) out_.globals.push_back(g);
    for (auto& g : m.unknown_globals)
      if (std::find(out_.unknown_globals.begin(), out_.unknown_globals.end(), g) == out_.unknown_globals.end())
        out_.unknown_globals.push_back(g);
    for (auto& a : m.extra_attributes)
      if (std::find(out_.extra_attributes.begin(), out_.extra_attributes.end(), a) == out_.extra_attributes.end())
        out_.extra_attributes.push_back(a);
    for (auto& p : m.problems) out_.problems.push_back(std::move(p));
    for (auto& [k, v] : m.planner_data) out_.planner_data.emplace(k, std::move(v));
  }

  // A storage reference of m's, in the merged view's files and transform sets.
  StorageRef remap(const Metadata& m, StorageRef r) {
    if (!r.present()) return r;
    auto [it, added] = file_index_.emplace(m.files[r.file], static_cast<uint32_t>(out_.files.size()));
    if (added) out_.files.push_back(m.files[r.file]);
    r.file = it->second;
    auto [tt, tadded] =
        transform_index_.emplace(m.transform_sets[r.transforms], static_cast<uint32_t>(out_.transform_sets.size()));
    if (tadded && out_.transform_sets.size() >= StorageRef::kMaxTransformSets)
      throw UnsupportedError(Where(m.source), "more than " + std::to_string(StorageRef::kMaxTransformSets - 1) +
                                                  " distinct sets of transform descriptors over the ranks");
    if (tadded) out_.transform_sets.push_back(m.transform_sets[r.transforms]);
    r.transforms = tt->second;
    return r;
  }

  // Tensor t of m (file `name`): new, or its chunks another rank did not save already added.
  void merge_tensor(const Metadata& m, const TensorMeta& t, const std::string& name) {
    auto it = tensor_index_.find(t.fqn);
    if (it == tensor_index_.end()) {
      TensorMeta copy = t;
      for (auto& r : copy.storage) r = remap(m, r);
      tensor_index_[t.fqn] = static_cast<uint32_t>(out_.tensors.size());
      first_seen_[t.fqn] = name;
      out_.order.push_back({true, static_cast<uint32_t>(out_.tensors.size())});
      out_.tensors.push_back(std::move(copy));
      return;
    }
    TensorMeta& have = out_.tensors[it->second];
    if (have.dtype_name != t.dtype_name || have.shape != t.shape) {
      if (n_disagree_++ < 8)
        disagreements_ += "\n  key '" + t.fqn + "': " + name + " says " + t.dtype_name + " " + shape_text(t.shape) +
                          ", " + first_seen_[t.fqn] + " says " + have.dtype_name + " " + shape_text(have.shape);
      return;
    }
    size_t nd = t.ndim();
    for (size_t c = 0; c < t.num_chunks(); ++c) {
      bool dup = false;
      for (size_t h = 0; h < have.num_chunks() && !dup; ++h)
        dup = std::equal(t.chunk_offsets(c), t.chunk_offsets(c) + nd, have.chunk_offsets(h)) &&
              std::equal(t.chunk_sizes(c), t.chunk_sizes(c) + nd, have.chunk_sizes(h));
      if (dup) continue;
      have.chunk_dims.insert(have.chunk_dims.end(), t.chunk_offsets(c), t.chunk_offsets(c) + nd);
      have.chunk_dims.insert(have.chunk_dims.end(), t.chunk_sizes(c), t.chunk_sizes(c) + nd);
      have.storage.push_back(remap(m, t.storage[c]));
    }
  }

  // Every rank up to the highest must have left its metadata, and so must every rank that left data.
  void note_missing_ranks() {
    std::set<int> have;
    for (const auto& r : ranks_) have.insert(r.rank);
    std::set<int> with_data;
    for (const auto& n : list_dir(dir_))
      if (ends_with(n, ".distcp"))
        if (auto r = rank_of_file(n)) with_data.insert(*r);
    int top = std::max(ranks_.back().rank, with_data.empty() ? 0 : *with_data.rbegin());
    for (int r = 0; r <= top; ++r) {
      if (have.count(r)) continue;
      std::string name = "__" + std::to_string(r) + ".metadata";
      ck_.incomplete.push_back(
          {"missing-rank-metadata", Where(join_path(dir_, name)),
           with_data.count(r)
               ? "missing, although rank " + std::to_string(r) + " left data files: its save did not finish"
               : "missing, although higher ranks wrote theirs: rank " + std::to_string(r) + "'s save did not finish"});
    }
  }

  const std::string& dir_;
  std::vector<RankFile> ranks_;
  Checkpoint ck_;
  Metadata& out_;
  std::map<std::string, uint32_t> file_index_, tensor_index_, bytes_index_;
  std::map<std::vector<std::string>, uint32_t> transform_index_{{{}, 0}};
  std::map<std::string, std::string> first_seen_;  // fqn -> metadata file that defined it
  std::string disagreements_;
  size_t n_disagree_ = 0;
};

}  // namespace

Checkpoint open_rank_local(const std::string& dir, const std::vector<std::string>& names) {
  return RankLocalMerge(dir, names).open();
}

}  // namespace dcpctl::meta_detail
