#include "plan/plan.h"

#include "plan/deal.h"

#include <algorithm>
#include <unordered_set>

#include "meta/codecs/codecs.h"
#include "meta/readers.h"
#include "plan/memory.h"
#include "util/error.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// The boxes a tensor is written as, and the rank of each (RankFiles); one whole box otherwise.
void target_boxes(const Checkpoint& ck, const TensorMeta& t, const Target& target, int world,
                  std::vector<uint64_t>& rank_bytes, size_t out_item, std::vector<Box>& boxes,
                  std::vector<uint32_t>& ranks) {
  if (!target.rank_files()) {
    boxes.push_back(whole_box(t));
    ranks.push_back(0);
    return;
  }
  if (target.keep_layout) {
    for (size_t c = 0; c < t.num_chunks(); ++c) {
      boxes.push_back(chunk_box(t, c));
      auto r = t.storage[c].present() ? rank_of_file(ck.md.files[t.storage[c].file]) : std::nullopt;
      ranks.push_back(static_cast<uint32_t>(r.value_or(0)));
    }
  } else if (t.ndim() == 0 || t.shape[0] == 0) {
    // Written once, on the rank with the fewest bytes so far (as DCP places replicated tensors).
    boxes.push_back(whole_box(t));
    ranks.push_back(static_cast<uint32_t>(least_loaded(rank_bytes, 0, [](int) { return true; })));
  } else {
    // FSDP2 / DTensor Shard(0): torch.chunk's ceil(N/M) rows per rank; ranks past the end hold
    // an empty shard, recorded once (offset N, size 0) as DCP does.
    int64_t n = t.shape[0];
    int64_t cs = (n + world - 1) / world;
    bool empty_done = false;
    for (int r = 0; r < world; ++r) {
      Box b = whole_box(t);
      int64_t start = static_cast<int64_t>(r) * cs;
      if (start >= n) {
        if (empty_done) continue;
        empty_done = true;
        b.offsets[0] = n;
        b.sizes[0] = 0;
      } else {
        b.offsets[0] = start;
        b.sizes[0] = std::min(cs, n - start);
      }
      boxes.push_back(b);
      ranks.push_back(static_cast<uint32_t>(r));
    }
  }
  for (size_t c = 0; c < boxes.size(); ++c) rank_bytes[ranks[c]] += boxes[c].numel() * out_item;
}

// Saved tensor `t`, written as `key`: one record per target box, each of the pieces of its chunks.
PlannedTensor& plan_saved(const Checkpoint& ck, const TensorMeta& t, const std::string& key, const Target& target,
                          int world, std::vector<uint64_t>& rank_bytes, WritePlan& plan) {
  PlannedTensor pt;
  pt.t = &t;
  pt.key = key;
  pt.src = *t.dtype;
  pt.dst = plan.cast.target(pt.src, key, t.fqn);
  for (size_t c = 0; c < t.num_chunks(); ++c)
    pt.transformed = pt.transformed || (t.chunk_numel(c) > 0 && t.storage[c].transforms != 0);
  std::vector<Box> boxes;
  std::vector<uint32_t> ranks;
  target_boxes(ck, t, target, world, rank_bytes, itemsize(pt.dst), boxes, ranks);
  size_t ti = plan.tensors.size();
  for (size_t b = 0; b < boxes.size(); ++b) {
    Record r;
    r.tensor = ti;
    r.box = std::move(boxes[b]);
    r.dest = ranks[b];
    r.pieces = plan_pieces(t, r.box);
    r.out_bytes = r.box.numel() * itemsize(pt.dst);
    r.runs = std::all_of(r.pieces.begin(), r.pieces.end(), [](const Piece& p) { return p.run; });
    r.streams = r.out_bytes > 0 && runs_tile(r.pieces, r.box.numel() * itemsize(pt.src)) &&
                std::none_of(r.pieces.begin(), r.pieces.end(),
                             [&](const Piece& p) { return t.storage[p.chunk].transforms != 0; });
    pt.records.push_back(plan.records.size());
    plan.total_bytes += r.out_bytes;
    plan.records.push_back(std::move(r));
  }
  plan.tensors.push_back(std::move(pt));
  return plan.tensors.back();
}

// --dtype on a scaled float8 weight that is still float8 here: a block-scaled weight with its
// `_scale_inv` is dequantized before planning (view/codecs/dequantize.h), so what reaches this is a scale
// dcpctl does not apply (a `_scale`, whose meaning differs between quantizers). Casting the weight
// alone would write values off by the whole scale, silently: refused (exit 5), naming the weight
// and its scale. Without --dtype, fp8 stays fp8 and its scales are written as they are. The scale
// names are those of the codecs whose weight keeps its own name (meta/codecs/codecs.h: fp8-block's
// `_scale_inv`, F4's `_scale`), in the codec list's order.
void refuse_scaled_casts(const Checkpoint& ck, const WritePlan& plan) {
  const Metadata& md = ck.md;
  std::unordered_set<std::string_view> names;
  names.reserve(md.tensors.size());
  for (const auto& t : md.tensors) names.insert(t.fqn);
  auto scale_of = [&](const std::string& key) -> std::string {
    for (const Codec* c : codecs())
      if (!*c->weight_suffix && names.count(key + c->scale_suffix)) return key + c->scale_suffix;
    return {};
  };
  for (const auto& pt : plan.tensors) {
    if (!fp8_block_codec().weight_dtype(pt.src) || pt.dst == pt.src) continue;
    std::vector<std::string> sources{pt.t->fqn};
    if (pt.mapped)
      for (const MapPart& part : pt.mapped->parts) sources.push_back(md.tensors[part.tensor].fqn);
    for (const auto& src : sources)
      if (std::string scale = scale_of(src); !scale.empty())
        throw UnsupportedError(Where(ck.metadata_path, std::nullopt, src),
                               "a scaled " + std::string(torch_name(pt.src)) + " weight (its scale is '" + scale +
                                   "'): casting it to " + torch_name(pt.dst) +
                                   " without the scale would write wrong values, and dcpctl dequantizes only block "
                                   "scales named <weight>_scale_inv; "
                                   "without --dtype the weights and their scales are written as they are");
  }
}

// A key map's output (view/maps/map_view.h: the table written holds the map's inputs and says each
// output's parts), as records of pieces of those inputs. A whole tensor under a new name is
// planned as that tensor (plan_saved). Otherwise the pieces are runs where a region is contiguous
// in its chunk and in the box (placed like any run), else copied with their frames; such a record
// is never streamed (its pieces need not come in output order), so it is assembled (.pt, DCP) or
// written piece by piece at its offsets (safetensors). A mapped tensor has no saved layout to
// keep: cast (keep_layout) shards it by rows over the source's ranks.
void plan_parts(const Checkpoint& ck, const MappedTensor& mt, const Target& target, int world,
                std::vector<uint64_t>& rank_bytes, CoverageCheck& coverage, WritePlan& plan) {
  const Metadata& md = ck.md;
  Target rows = target;
  rows.keep_layout = false;
  if (!mt.meta.dtype)
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, mt.meta.fqn),
                           "dtype " + mt.meta.dtype_name + " is unknown to dcpctl");
  bool covered = true;
  for (const MapPart& part : mt.parts) covered = coverage.covered(md.tensors[part.tensor]) && covered;
  if (!covered) return;
  if (renames_whole(md, mt)) {
    PlannedTensor& pt = plan_saved(ck, md.tensors[mt.parts[0].tensor], mt.meta.fqn, rows, world, rank_bytes, plan);
    pt.mapped = &mt;
    pt.renamed = true;
    return;
  }
  PlannedTensor pt;
  pt.t = &mt.meta;
  pt.mapped = &mt;
  pt.key = mt.meta.fqn;
  pt.src = *mt.meta.dtype;
  pt.dst = plan.cast.target(pt.src, pt.key);
  std::vector<Box> boxes;
  std::vector<uint32_t> ranks;
  target_boxes(ck, mt.meta, rows, world, rank_bytes, itemsize(pt.dst), boxes, ranks);
  size_t ti = plan.tensors.size();
  for (size_t b = 0; b < boxes.size(); ++b) {
    Record r;
    r.tensor = ti;
    r.box = std::move(boxes[b]);
    r.dest = ranks[b];
    r.pieces = plan_mapped_pieces(md, mt, r.box);
    r.out_bytes = r.box.numel() * itemsize(pt.dst);
    r.runs = std::all_of(r.pieces.begin(), r.pieces.end(), [](const Piece& p) { return p.run; });
    r.streams = false;
    for (const Piece& p : r.pieces) pt.transformed = pt.transformed || p.source->storage[p.chunk].transforms != 0;
    pt.records.push_back(plan.records.size());
    plan.total_bytes += r.out_bytes;
    plan.records.push_back(std::move(r));
  }
  plan.tensors.push_back(std::move(pt));
}

}  // namespace

namespace {

// The number of rank files a rank-files output has: --world-size, or the source's own ranks.
int target_world(const Metadata& md, const Target& target) {
  if (!target.rank_files()) return 1;
  int world = target.world_size;
  if (target.keep_layout) {
    world = 1;
    for (const auto& f : md.files)
      if (auto r = rank_of_file(f)) world = std::max(world, *r + 1);
  }
  if (world < 1 || world > 1 << 20) throw UsageError(Where(), "--world-size must be between 1 and 1048576");
  return world;
}

// Why tensor `t`, of no dtype dcpctl reads, is refused: a type its layout knows and does not decode
// (or decodes only under --dtype, meta/readers.h's decode_opaque), or a dtype dcpctl does not know.
std::string undecoded(const Checkpoint& ck, const TensorMeta& t) {
  if (!opaque_type(ck, t)) return "dtype " + t.dtype_name + " is unknown to dcpctl";
  const LayoutReader& row = layout_reader(ck.layout);
  const bool decoding = ck.derived && ck.derived->views.contains("dequantized");
  return std::string(row.opaque_types) + " " + t.dtype_name +
         (row.decode_opaque && !decoding
              ? ": its blocks are decoded only under --dtype (fp32, bf16, ...), for the types dcpctl decodes"
              : ": dcpctl lists and checks it but does not decode its values");
}

// Each selected item planned: a value as it is, a mapped tensor from its parts, a saved one from
// its chunks; refused where incomplete or of a type the target cannot hold.
void plan_items(const Checkpoint& ck, const Target& target, int world, std::vector<uint64_t>& rank_bytes,
                WritePlan& plan) {
  const Metadata& md = ck.md;
  CoverageCheck coverage;
  for (const auto& it : plan.items) {
    if (!it.tensor) {
      plan.values.push_back(&it);
      continue;
    }
    const TensorMeta& t = md.tensors[it.index];
    if (const MappedTensor* mt = ck.derived ? ck.derived->parts_of(t.fqn) : nullptr) {
      plan_parts(ck, *mt, target, world, rank_bytes, coverage, plan);
      continue;
    }
    if (!t.dtype) throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn), undecoded(ck, t));
    if (!coverage.covered(t)) continue;
    plan_saved(ck, t, it.key, target, world, rank_bytes, plan);
  }
  coverage.refuse_if_incomplete(Where(ck.dir), target.rank_files() ? "reshard" : "write a partial model");
  refuse_scaled_casts(ck, plan);
  if (!target.format->tensors_only) return;
  for (const auto& pt : plan.tensors)
    if (!*info(pt.dst).safetensors_name)
      throw UnsupportedError(Where(ck.metadata_path, std::nullopt, pt.t->fqn),
                             std::string("safetensors has no type for torch.") + torch_name(pt.dst) +
                                 "; exclude it (--exclude), cast it (--dtype) or write a .pt");
  if (plan.tensors.empty())
    throw UsageError(Where(ck.dir), "the selection holds no tensors; safetensors holds tensors only");
}

// What each record holds at once, and the budget: refused where one record needs more than it.
void plan_needs(const Checkpoint& ck, const Target& target,
                const std::function<bool(const TensorMeta&, size_t)>& in_place, WritePlan& plan) {
  const Record* neediest = nullptr;
  for (auto& pt : plan.tensors) {
    uint64_t read_need = target.rank_files() ? source_read_need(plan.records, pt.records) : 0;
    for (size_t ri : pt.records) {
      Record& r = plan.records[ri];
      r.need = target.format->own_windows ? 0 : record_need(pt, r, target, read_need, ck.derived.get());
      // A streaming record (InOrder, RankFiles) whose pieces can all be read in place goes out through the
      // stream window and needs no buffer. Asked only when it would not fit (the answer reads each
      // source item's data.pkl); a chunk that cannot be read counts in full here and fails when
      // written.
      bool streaming_writer = target.format->writing != Writing::AtOffsets;
      if (streaming_writer && target.max_memory && r.need > target.max_memory && r.streams && in_place) {
        bool all = true;
        try {
          for (const Piece& p : r.pieces) all = all && in_place(*p.source, p.chunk);
        } catch (const Error&) {
          all = false;
        }
        if (all) r.need = 0;
      }
      if (!neediest || r.need > neediest->need) neediest = &r;
    }
  }
  plan.largest_need = neediest ? neediest->need : 0;
  plan.budget = memory_budget(target.max_memory, plan.largest_need);
  if (plan.largest_need > plan.budget)
    throw UsageError(Where(ck.metadata_path, std::nullopt, plan.meta(*neediest).fqn),
                     "writing " + neediest->box.text() + " needs " + std::to_string(plan.largest_need) +
                         " bytes of buffers at once, more than --max-memory " + std::to_string(plan.budget) +
                         "; raise --max-memory" + (target.rank_files() ? " or use more target ranks" : ""));
}

// The files and the records each holds, named by the format.
void lay_out_files(const Target& target, int world, const std::vector<uint64_t>& rank_bytes, WritePlan& plan) {
  switch (target.format->writing) {
    case Writing::RankFiles:
      for (int r = 0; r < world; ++r) plan.files.push_back({"", {}, rank_bytes[static_cast<size_t>(r)]});
      for (size_t i = 0; i < plan.records.size(); ++i) plan.files[plan.records[i].dest].records.push_back(i);
      break;
    case Writing::AtOffsets: {
      uint64_t cap = target.format->sharded ? target.max_shard_size : UINT64_MAX;
      for (size_t i = 0; i < plan.records.size(); ++i) {
        Record& r = plan.records[i];
        if (plan.files.empty() ||
            (plan.files.back().data_bytes + r.out_bytes > cap && !plan.files.back().records.empty()))
          plan.files.emplace_back();
        PlannedFile& f = plan.files.back();
        r.dest = static_cast<uint32_t>(plan.files.size() - 1);
        r.offset = f.data_bytes;
        f.data_bytes += r.out_bytes;
        f.records.push_back(i);
      }
      break;
    }
    case Writing::InOrder:
      plan.files.push_back({"", {}, plan.total_bytes});
      for (size_t i = 0; i < plan.records.size(); ++i) plan.files[0].records.push_back(i);
      break;
  }
  if (target.format->file_name)
    for (size_t f = 0; f < plan.files.size(); ++f) plan.files[f].name = target.format->file_name(f, plan.files.size());
}

}  // namespace

WritePlan plan_write(const Checkpoint& ck, const Selection& selection, std::optional<DType> cast, const Target& target,
                     const std::function<bool(const TensorMeta&, size_t)>& in_place) {
  WritePlan plan;
  plan.target = target;
  plan.items = select_items(ck.md, selection);
  plan.cast = CastChoice(cast, target.precision);
  if (ck.derived) plan.cast.keep_for_view(ck.derived->output.keep_dtype, "quantized (--quantize)");
  const int world = target_world(ck.md, target);
  std::vector<uint64_t> rank_bytes(static_cast<size_t>(world), 0);
  plan_items(ck, target, world, rank_bytes, plan);
  plan_needs(ck, target, in_place, plan);
  lay_out_files(target, world, rank_bytes, plan);
  return plan;
}

namespace {

json describe_record(const WritePlan& plan, const Record& r) {
  const PlannedTensor& pt = plan.tensors[r.tensor];
  json out = {{"key", pt.key},
              {"dtype", torch_name(pt.dst)},
              {"shape", pt.t->shape},
              {"box", r.box.text()},
              {"file", plan.files[r.dest].name},
              {"bytes", r.out_bytes},
              {"streams", r.streams},
              {"need", r.need}};
  if (pt.mapped) out["from"] = {{"keys", pt.mapped->inputs}, {"transforms", pt.mapped->transforms}};
  return out;
}

json describe_piece(const Piece& p, bool mapped) {
  if (mapped)
    return {
        {"tensor", p.source->fqn}, {"chunk", p.chunk}, {"box", p.in.text()}, {"bytes", p.bytes}, {"in_place", p.run}};
  return {{"chunk", p.chunk}, {"box", p.in.text()}, {"bytes", p.bytes}, {"in_place", p.run}};
}

// `j` as json::dump(2) writes it where it stands `indent` spaces in.
void dump_at(std::string& out, const json& j, unsigned indent) {
  nlohmann::detail::serializer<json> s(nlohmann::detail::output_adapter<char, std::string>(out), ' ',
                                       json::error_handler_t::strict);
  s.dump(j, true, false, 2, indent);
}

// A string as json::dump writes it (ensure_ascii false): printable ASCII as it is, else through
// nlohmann's own escaping.
void put_string(std::string& out, const std::string& v) {
  for (unsigned char c : v)
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') return dump_at(out, json(v), 0);
  out += '"';
  out += v;
  out += '"';
}

void put_uint(std::string& out, uint64_t v) {
  char buf[24];
  char* e = buf + sizeof buf;
  char* b = e;
  do *--b = static_cast<char>('0' + v % 10);
  while (v /= 10);
  out.append(b, e);
}

// A record's pieces, as describe_piece's objects in an array dumped at `indent` (the key's).
void put_pieces(std::string& out, const std::vector<Piece>& pieces, bool mapped, unsigned indent) {
  if (pieces.empty()) {
    out += "[]";
    return;
  }
  const std::string obj(indent + 2, ' '), key(indent + 4, ' ');
  out += "[\n";
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    out += obj;
    out += "{\n";
    out += key;
    out += "\"box\": ";
    put_string(out, p.in.text());
    out += ",\n";
    out += key;
    out += "\"bytes\": ";
    put_uint(out, p.bytes);
    out += ",\n";
    out += key;
    out += "\"chunk\": ";
    put_uint(out, p.chunk);
    out += ",\n";
    out += key;
    out += p.run ? "\"in_place\": true" : "\"in_place\": false";
    if (mapped) {
      out += ",\n";
      out += key;
      out += "\"tensor\": ";
      put_string(out, p.source->fqn);
    }
    out += '\n';
    out += obj;
    out += i + 1 < pieces.size() ? "},\n" : "}\n";
  }
  out.append(indent, ' ');
  out += ']';
}

}  // namespace

json WritePlan::describe(bool with_pieces) const {
  json out = json::array();
  for (const Record& r : records) {
    out.push_back(describe_record(*this, r));
    if (!with_pieces) continue;
    const bool mapped = tensors[r.tensor].mapped != nullptr;
    json pieces = json::array();
    for (const Piece& p : r.pieces) pieces.push_back(describe_piece(p, mapped));
    out.back()["pieces"] = std::move(pieces);
  }
  return out;
}

std::string WritePlan::render(unsigned indent) const {
  std::string out;
  if (records.empty()) return "[]";
  // Each record's JSON holds a mark where its pieces go ("pieces" sorts between "need" and
  // "shape"): every quote inside a dumped string is escaped, so the mark's text is found only there.
  static const std::string mark = "\"pieces\": \"\\u0001\"";
  const std::string rec(indent + 2, ' ');
  out += "[\n";
  std::string one;
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    json j = describe_record(*this, r);
    j["pieces"] = "\x01";
    one.clear();
    dump_at(one, j, indent + 2);
    const size_t at = one.find(mark);
    out += rec;
    out.append(one, 0, at);
    out += "\"pieces\": ";
    put_pieces(out, r.pieces, tensors[r.tensor].mapped != nullptr, indent + 4);
    out.append(one, at + mark.size(), std::string::npos);
    out += i + 1 < records.size() ? ",\n" : "\n";
  }
  out.append(indent, ' ');
  out += ']';
  return out;
}

}  // namespace dcpctl
