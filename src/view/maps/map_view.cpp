#include "view/maps/map_view.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "item/chunk_source.h"
#include "meta/derived.h"
#include "meta/geometry.h"
#include "meta/pieces.h"
#include "util/error.h"

namespace dcpctl {

namespace {

// The chunk engine's source over a derived tensor's reads of the table below: every read a range
// (assemble_box then reads a run piece alone), in any order.
class BelowChunks final : public ChunkSource {
 public:
  explicit BelowChunks(const TensorReads& below) : below_(below) {}
  std::optional<DirectRun> in_place(const TensorMeta&, size_t) const override { return std::nullopt; }
  void read(unsigned, const TensorMeta& t, size_t chunk, const WindowFn& fn, GateCharge) override {
    std::vector<uint8_t> buf(t.chunk_numel(chunk) * itemsize(*t.dtype));
    below_.read(t, chunk, 0, buf.size(), buf.data());
    fn(buf.data(), 0, buf.size());
  }
  void read_into(unsigned, const TensorMeta& t, size_t chunk, uint8_t* dst) override {
    below_.read(t, chunk, 0, UINT64_MAX, dst);
  }
  void read_range(unsigned, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst) override {
    below_.read(t, chunk, from, n, dst);
  }
  bool reads_ranges() const override { return true; }
  bool ordered() const override { return false; }

 private:
  const TensorReads& below_;
};

// A mapped tensor that is not a whole tensor renamed: one chunk, the whole tensor, any byte range
// of it assembled from its parts.
class MappedTensorRead final : public DerivedTensor {
 public:
  // `largest`: the bytes of the largest chunk of any part's tensor (mapped_view knows them per tensor).
  MappedTensorRead(std::shared_ptr<const Metadata> md, MappedTensor mt, uint64_t largest)
      : md_(std::move(md)), mt_(std::move(mt)), largest_(largest) {}
  const TensorMeta& follows() const override { return md_->tensors[mt_.parts.at(0).tensor]; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const TensorMeta& t = mt_.meta;
    const uint64_t item = itemsize(*t.dtype), bytes = t.numel() * item;
    const Where where(md_->source, std::nullopt, t.fqn);
    n = checked_range(where, "chunk " + std::to_string(chunk), bytes, from, n);
    if (n == 0) return;
    // Whole elements: a range that cuts one is assembled into a copy of its own first.
    const uint64_t first = from / item, last = (from + n + item - 1) / item;
    const bool whole = from % item == 0 && n % item == 0;
    std::vector<uint8_t> own(whole ? 0 : (last - first) * item);
    uint8_t* out = whole ? static_cast<uint8_t*>(dst) : own.data();
    BelowChunks src(below);
    // Padding rows (MappedTensor::pad_rows) are no part's: zeros, the rest from the parts.
    Box held = whole_box(t);
    held.sizes[0] -= mt_.pad_rows;
    for (const Box& box : run_boxes(t.shape, first, last - first)) {
      const std::vector<Piece> pieces = plan_mapped_pieces(*md_, mt_, box);
      const uint64_t want = box.numel() * item;
      Box in;
      const uint64_t covered = mt_.pad_rows == 0 ? want : intersect(box, held, in) ? in.numel() * item : 0;
      uint64_t filled = 0;
      for (const Piece& p : pieces) filled += p.bytes;
      if (filled != covered)  // checked before reading: a gap would leave bytes unwritten
        throw FormatError(where, "the parts hold " + std::to_string(filled) + " of the " + std::to_string(covered) +
                                     " bytes of box " + box.text());
      if (covered != want) std::memset(out, 0, want);
      if (!pieces.empty()) assemble_box(src, t, box, pieces, out, nullptr, 1, 0);
      out += want;
    }
    if (!whole) std::memcpy(dst, own.data() + (from - first * item), n);
  }
  // A piece that is not a contiguous run of its chunk is placed from a whole copy of that chunk
  // (assemble_box): the largest such chunk. What reading it through the table below holds (a
  // chunk that table computes) is added by DerivedTable::working_bytes over inputs().
  uint64_t working_bytes(size_t) const override { return largest_; }
  std::vector<const TensorMeta*> inputs() const override {
    std::vector<const TensorMeta*> out;
    for (const MapPart& part : mt_.parts) {
      const TensorMeta* s = &md_->tensors[part.tensor];
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
    return out;
  }

 private:
  std::shared_ptr<const Metadata> md_;  // the table below's tensors, which the parts index
  MappedTensor mt_;
  uint64_t largest_;
};

// A rule's "zeros" output (MappedTensor::zeros): one chunk, the whole tensor, every byte zero;
// nothing below is read.
class ZerosRead final : public DerivedTensor {
 public:
  ZerosRead(std::shared_ptr<const Metadata> md, MappedTensor mt) : md_(std::move(md)), mt_(std::move(mt)) {}
  const TensorMeta& follows() const override { return md_->tensors[mt_.place]; }
  void read(const TensorReads&, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const TensorMeta& t = mt_.meta;
    n = checked_range(Where(md_->source, std::nullopt, t.fqn), "chunk " + std::to_string(chunk),
                      t.numel() * itemsize(*t.dtype), from, n);
    if (n) std::memset(dst, 0, n);
  }
  uint64_t working_bytes(size_t) const override { return 0; }
  std::vector<const TensorMeta*> inputs() const override { return {}; }

 private:
  std::shared_ptr<const Metadata> md_;
  MappedTensor mt_;
};

}  // namespace

void set_map(DerivedTable& table, std::shared_ptr<const MappedModel> map, bool parts) {
  table.views["map"] = map->describe();
  table.parts.clear();
  if (parts)
    for (const MappedTensor& mt : map->tensors)
      // a zeros or padded output is planned as its own derived tensor (its parts do not tile it)
      if (!mt.zeros && mt.pad_rows == 0) table.parts[mt.meta.fqn] = &mt;
  table.output.map = std::move(map);
}

namespace {

// What the outputs' reads index: the table below's tensors that are some output's part, at their
// indices there; the others (the optimizer's states, what the map leaves out) are not copied.
std::shared_ptr<const Metadata> parts_metadata(const Checkpoint& ck, const MappedModel& map) {
  auto m = std::make_shared<Metadata>();
  m->source = ck.md.source;
  m->tensors.resize(ck.md.tensors.size());
  std::vector<bool> copied(ck.md.tensors.size(), false);
  for (const MappedTensor& mt : map.tensors)
    for (const MapPart& part : mt.parts)
      if (!copied[part.tensor]) {
        copied[part.tensor] = true;
        m->tensors[part.tensor] = ck.md.tensors.at(part.tensor);
      }
  return m;
}

// An input that shares its name with an output it is not (renamed to itself) is kept under a
// name of its own, so that reading either by name finds it.
void rename_shadowed_inputs(const Checkpoint& ck, const MappedModel& map, Checkpoint& view, DerivedTable& table) {
  std::unordered_map<std::string, size_t> outputs;
  for (size_t i = 0; i < map.tensors.size(); ++i) outputs.emplace(map.tensors[i].meta.fqn, i);
  for (size_t i = 0; i < ck.md.tensors.size(); ++i) {
    auto o = outputs.find(ck.md.tensors[i].fqn);
    if (o == outputs.end()) continue;
    const MappedTensor& mt = map.tensors[o->second];
    if (renames_whole(ck.md, mt) && mt.parts[0].tensor == i) continue;
    TensorMeta& kept = view.md.tensors[i];
    const std::string name = kept.fqn + " (input of --map)";
    if (auto e = table.tensors.find(kept.fqn); e != table.tensors.end()) {
      table.tensors.emplace(name, e->second);
      table.tensors.erase(e);
    }
    kept.fqn = name;
  }
}

// A view reads the outputs: their parts must be there (the planner checks the written table's).
void require_covered(const Checkpoint& ck, const TensorMeta& s, const std::string& output) {
  Coverage cov = check_coverage(s, 1);
  bool missing = false;
  for (size_t c = 0; c < s.num_chunks(); ++c) missing = missing || (!s.storage[c].present() && s.chunk_numel(c) > 0);
  if (!cov.exact || missing)
    throw FormatError(Where(ck.metadata_path, std::nullopt, s.fqn),
                      "not fully covered by its chunks; refusing to map it into '" + output + "'");
}

// An output made of its parts (or zeros), read through the table: one chunk, where its first
// part's first chunk lies (a zeros output's: its place's), as the planner and the deal ask.
TensorMeta derived_output(const Checkpoint& ck, const MappedTensor& mt, const std::shared_ptr<const Metadata>& md,
                          uint64_t largest_part_chunk, bool inputs, DerivedTable& table) {
  // The written table's planner refuses it, in the outputs' order (plan/plan.h).
  if (!mt.meta.dtype && !inputs)
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, mt.meta.fqn),
                           "dtype " + mt.meta.dtype_name + " is unknown to dcpctl");
  TensorMeta t = mt.meta;
  t.chunk_dims.assign(t.ndim(), 0);
  t.chunk_dims.insert(t.chunk_dims.end(), t.shape.begin(), t.shape.end());
  t.storage = {md->tensors[mt.zeros ? mt.place : mt.parts.at(0).tensor].storage.at(0)};
  if (mt.zeros)
    table.tensors[t.fqn] = {std::make_shared<ZerosRead>(md, mt), ck.derived};
  else
    table.tensors[t.fqn] = {std::make_shared<MappedTensorRead>(md, mt, largest_part_chunk), ck.derived};
  return t;
}

}  // namespace

Checkpoint mapped_view(const Checkpoint& ck, MappedModel applied, MapTable kind) {
  const bool inputs = kind == MapTable::Written;
  auto map = std::make_shared<const MappedModel>(std::move(applied));
  const std::shared_ptr<const Metadata> md = parts_metadata(ck, *map);
  Checkpoint view = ck;
  view.md.order.clear();
  view.md.planner_data.clear();
  // Each output a top-level key (select.h: a key without a path). The written table keeps the
  // flag: a DCP writer records its outputs' paths as it did the inputs'.
  if (!inputs) {
    view.md.tensors.clear();
    view.md.has_planner_data = false;
  }
  std::shared_ptr<DerivedTable> table =
      table_over(ck.derived, [&](const std::string& n) { return inputs ? n : std::string(); });
  if (inputs) rename_shadowed_inputs(ck, *map, view, *table);
  // Each input checked once, and its largest chunk found once: a stack of 384 experts is a part of
  // 384 outputs.
  std::vector<bool> checked(md->tensors.size(), false);
  std::vector<std::optional<uint64_t>> largest(md->tensors.size());
  auto largest_chunk_bytes = [&](uint32_t i) {
    if (!largest[i]) {
      const TensorMeta& s = md->tensors[i];
      uint64_t most = 0;
      if (s.dtype)
        for (size_t c = 0; c < s.num_chunks(); ++c) most = std::max(most, s.chunk_numel(c) * itemsize(*s.dtype));
      largest[i] = most;
    }
    return *largest[i];
  };
  for (const MappedTensor& mt : map->tensors) {
    if (!inputs)
      for (const MapPart& part : mt.parts)
        if (!checked[part.tensor]) {
          checked[part.tensor] = true;
          require_covered(ck, md->tensors[part.tensor], mt.meta.fqn);
        }
    TensorMeta t;
    if (renames_whole(ck.md, mt)) {
      const TensorMeta& s = md->tensors[mt.parts[0].tensor];
      if (inputs && s.fqn == mt.meta.fqn) {  // the input itself
        view.md.order.push_back({true, mt.parts[0].tensor});
        continue;
      }
      t = s;
      t.fqn = mt.meta.fqn;
      if (ck.derived)
        if (const DerivedTable::Entry* e = ck.derived->find(s.fqn)) table->tensors[t.fqn] = *e;
    } else {
      uint64_t most = 0;
      if (!mt.zeros)
        for (const MapPart& part : mt.parts) most = std::max(most, largest_chunk_bytes(part.tensor));
      t = derived_output(ck, mt, md, most, inputs, *table);
    }
    view.md.order.push_back({true, static_cast<uint32_t>(view.md.tensors.size())});
    view.md.tensors.push_back(std::move(t));
  }
  set_map(*table, std::move(map), inputs);
  view.derived = std::move(table);
  return view;
}

}  // namespace dcpctl
