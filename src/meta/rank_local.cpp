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

int rank_of_metadata(const std::string& name) { return std::stoi(name.substr(2, name.size() - 2 - 9)); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

}  // namespace

Checkpoint open_rank_local(const std::string& dir, const std::vector<std::string>& names) {
  std::vector<RankFile> ranks;
  for (const auto& n : names) ranks.push_back({rank_of_metadata(n), n});
  std::sort(ranks.begin(), ranks.end(), [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });

  Checkpoint ck;
  ck.dir = dir;
  ck.layout = CheckpointLayout::DcpRankLocal;
  ck.metadata_path = join_path(dir, ranks.front().name);
  Metadata& out = ck.md;
  std::map<std::string, uint32_t> file_index, tensor_index, bytes_index;
  std::map<std::vector<std::string>, uint32_t> transform_index{{{}, 0}};
  std::map<std::string, std::string> first_seen;  // fqn -> metadata file that defined it
  std::string disagreements;
  size_t n_disagree = 0;

  for (size_t i = 0; i < ranks.size(); ++i) {
    std::string path = join_path(dir, ranks[i].name);
    MappedFile mf(path);
    ck.metadata_bytes += mf.size();
    ck.metadata_sources.push_back(path);
    MetadataParseOptions po;
    po.consumed = [&mf](uint64_t done) { mf.drop_before(done); };
    Metadata m = parse_metadata(mf.span(), path, po);
    if (i == 0) {
      out.source = path;
      out.pickle_protocol = m.pickle_protocol;
      out.has_planner_data = m.has_planner_data;
      out.storage_meta = m.storage_meta;
      out.has_storage_meta_field = m.has_storage_meta_field;
      out.version = m.version;
      out.has_version_field = m.has_version_field;
      out.metadata_class = m.metadata_class;
      out.properties_class = m.properties_class;
    }
    out.has_transform_field = out.has_transform_field || m.has_transform_field;
    for (auto& g : m.globals)
      if (std::find(out.globals.begin(), out.globals.end(), g) == out.globals.end()) out.globals.push_back(g);
    for (auto& g : m.unknown_globals)
      if (std::find(out.unknown_globals.begin(), out.unknown_globals.end(), g) == out.unknown_globals.end()) out.unknown_globals.push_back(g);
    for (auto& a : m.extra_attributes)
      if (std::find(out.extra_attributes.begin(), out.extra_attributes.end(), a) == out.extra_attributes.end()) out.extra_attributes.push_back(a);
    for (auto& p : m.problems) out.problems.push_back(std::move(p));
    for (auto& [k, v] : m.planner_data) out.planner_data.emplace(k, std::move(v));

    auto remap = [&](StorageRef r) {
      if (!r.present()) return r;
      auto [it, added] = file_index.emplace(m.files[r.file], static_cast<uint32_t>(out.files.size()));
      if (added) out.files.push_back(m.files[r.file]);
      r.file = it->second;
      auto [tt, tadded] = transform_index.emplace(m.transform_sets[r.transforms], static_cast<uint32_t>(out.transform_sets.size()));
      if (tadded && out.transform_sets.size() >= StorageRef::kMaxTransformSets)
        throw UnsupportedError(Where(m.source), "more than " + std::to_string(StorageRef::kMaxTransformSets - 1) +
                                                    " distinct sets of transform descriptors over the ranks");
      if (tadded) out.transform_sets.push_back(m.transform_sets[r.transforms]);
      r.transforms = tt->second;
      return r;
    };
    for (const auto& [is_tensor, idx] : m.order) {
      if (!is_tensor) {
        const BytesMeta& b = m.bytes[idx];
        if (bytes_index.count(b.fqn)) continue;  // the lowest rank's copy stands
        bytes_index[b.fqn] = static_cast<uint32_t>(out.bytes.size());
        out.bytes.push_back({b.fqn, remap(b.storage)});
        out.order.push_back({false, bytes_index[b.fqn]});
        continue;
      }
      const TensorMeta& t = m.tensors[idx];
      auto it = tensor_index.find(t.fqn);
      if (it == tensor_index.end()) {
        TensorMeta copy = t;
        for (auto& r : copy.storage) r = remap(r);
        tensor_index[t.fqn] = static_cast<uint32_t>(out.tensors.size());
        first_seen[t.fqn] = ranks[i].name;
        out.order.push_back({true, static_cast<uint32_t>(out.tensors.size())});
        out.tensors.push_back(std::move(copy));
        continue;
      }
      TensorMeta& have = out.tensors[it->second];
      if (have.dtype_name != t.dtype_name || have.shape != t.shape) {
        if (n_disagree++ < 8)
          disagreements += "\n  key '" + t.fqn + "': " + ranks[i].name + " says " + t.dtype_name + " " + shape_text(t.shape) +
                           ", " + first_seen[t.fqn] + " says " + have.dtype_name + " " + shape_text(have.shape);
        continue;
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
        have.storage.push_back(remap(t.storage[c]));
      }
    }
  }
  if (n_disagree)
    throw FormatError(Where(dir), "the ranks' __R.metadata files disagree on " + std::to_string(n_disagree) +
                                      " tensor(s) (dtype or global shape):" + disagreements);

  // Every rank up to the highest must have left its metadata, and so must every rank that left data.
  std::set<int> have;
  for (const auto& r : ranks) have.insert(r.rank);
  std::set<int> with_data;
  for (const auto& n : list_dir(dir))
    if (ends_with(n, ".distcp"))
      if (auto r = rank_of_file(n)) with_data.insert(*r);
  int top = std::max(ranks.back().rank, with_data.empty() ? 0 : *with_data.rbegin());
  for (int r = 0; r <= top; ++r) {
    if (have.count(r)) continue;
    std::string name = "__" + std::to_string(r) + ".metadata";
    ck.incomplete.push_back({"missing-rank-metadata", Where(join_path(dir, name)),
                             with_data.count(r) ? "missing, although rank " + std::to_string(r) +
                                                      " left data files: its save did not finish"
                                                : "missing, although higher ranks wrote theirs: rank " + std::to_string(r) +
                                                      "'s save did not finish"});
  }
  stat_data_files(ck);
  resolve_safetensors_items(ck);
  if (ck.layout == CheckpointLayout::DcpSafetensorsItems) ck.layout = CheckpointLayout::DcpRankLocal;
  return ck;
}

}  // namespace dcpctl::meta_detail
