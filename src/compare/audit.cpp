#include "compare/audit.h"

#include <algorithm>

#include "check/hf_checks.h"
#include "compare/diff.h"
#include "item/item_reader.h"
#include "meta/derived.h"
#include "meta/pieces.h"
#include "view/codecs/dequantize.h"
#include "view/codecs/quantized.h"
#include "view/maps/keymap_terms.h"
#include "view/model_config.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// The export's tensors as saved (what a codec bound reads its scales from): the checkpoint as opened,
// and its reader, kept beside the dequantize view that replaces them.
class SavedReads final : public TensorReads {
 public:
  explicit SavedReads(Checkpoint ck) : ck_(std::move(ck)), reader_(ck_) {}
  void read(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    reader_.read_chunk_bytes(t, chunk, from, n, dst);
  }
  std::vector<uint8_t> read_whole(const TensorMeta& t) const override { return read_box(*this, t, whole_box(t)); }

 private:
  Checkpoint ck_;
  ItemReader reader_;
};

// Whether `md` holds weights some codec reads with their scales (or any float8 tensor).
bool holds_quantized(const Metadata& md) {
  const NameIndex by_name = tensor_names(md);
  for (const Codec* c : codecs())
    if (c->pairs && !c->pairs(md, by_name).empty()) return true;
  for (const auto& t : md.tensors)
    if (t.dtype && fp8_block_codec().weight_dtype(*t.dtype)) return true;
  return false;
}

}  // namespace

std::map<std::string, ExportBound> dequantize_export(Input& exported, const Input& source) {
  std::map<std::string, ExportBound> bounds;
  if (holds_quantized(source.ck.md) || !holds_quantized(exported.ck.md)) return bounds;
  std::optional<Checkpoint> view = dequantized_view(exported.ck, DType::Float32, ModelConfig());
  if (!view || !view->derived) return bounds;
  // A weight whose format has no bound implemented: refused, naming it.
  for (const auto& [name, d] : view->derived->output.decoded)
    if (!d.bound)
      throw UnsupportedError(
          Where(exported.path, std::nullopt, name),
          std::string("comparing an export of ") + (d.codec ? d.codec->display : "quantized") +
              " weights with its source is not supported for this weight's format (its error bound is not "
              "implemented); dequantize it (consolidate EXPORT -o DIR/ --dtype fp32) and compare that with "
              "--atol/--rtol");
  exported.reader.reset();  // it reads the checkpoint replaced below
  auto saved = std::make_shared<SavedReads>(std::move(exported.ck));
  for (const auto& [name, d] : view->derived->output.decoded) {
    ExportBound b;
    b.kind = ExportBound::Kind::Codec;
    b.codec = d.bound;
    b.saved = saved;
    bounds.emplace(name, std::move(b));
  }
  exported.ck = std::move(*view);
  exported.reader = std::make_unique<ItemReader>(exported.ck);
  return bounds;
}

bool export_ties_embeddings(const Input& exported) {
  MapConfig c = ModelConfig().saved(exported.ck);
  if (!c.json.is_object()) return false;
  for (const json* j : {&c.json, c.json.contains("text_config") ? &c.json["text_config"] : nullptr})
    if (j && j->is_object() && j->value("tie_word_embeddings", json()).is_boolean() &&
        (*j)["tie_word_embeddings"].get<bool>())
      return true;
  return false;
}

namespace {

// The reason of a one-sided rule of side `to` whose pattern matches `key` (a key the export's
// convention has and the source's lacks), or nullopt.
std::optional<std::string> export_only_reason(const KeyMap& map, const std::string& to, const std::string& key) {
  int t = map.sides[0] == to ? 0 : map.sides[1] == to ? 1 : -1;
  if (t < 0) return std::nullopt;
  for (const KeyMap::Rule& rule : map.rules) {
    if (!rule.side[1 - t].empty() || rule.side[t].size() != 1) continue;
    Pattern p = Pattern::parse(rule.side[t][0].pattern, map.source);
    std::map<std::string, std::string> vals;
    if (!p.has_offsets() && p.match(key, vals)) return rule.reason;
  }
  return std::nullopt;
}

}  // namespace

ExportAudit audit_export(const Input& a, const Input& b, const DiffResult& r, const KeyMap& map) {
  ExportAudit x;
  const MappedModel& m = *a.map;  // the map's table says what it applied
  x.map = m.name;
  x.direction = m.from + "->" + m.to;
  x.mapped = m.inputs;
  x.export_keys = m.tensors.size();
  for (size_t i = 0; i < m.dropped.size(); ++i)
    x.dropped.push_back({m.dropped[i], i < m.reasons.size() ? m.reasons[i] : ""});
  x.left_out = m.left_out;
  x.excluded = m.excluded;
  for (const KeyDiff& k : r.keys) {
    auto why = [&](const std::string& w) { x.unexplained.push_back({k.key, w}); };
    std::string detail;
    switch (k.status) {
      case DiffStatus::Identical:
        if (!k.compared || (k.acc.inexact == 0))
          ++x.bit_equal;
        else if (k.bound == ExportBound::Kind::Codec)
          ++x.within_codec;
        else
          ++x.after_cast;
        break;
      case DiffStatus::Tied: ++x.tied; break;
      case DiffStatus::OnlyInA: why("the source's model key (mapped) is missing from the export"); break;
      case DiffStatus::OnlyInB:
        if (auto reason = export_only_reason(map, m.to, k.key))
          x.export_only.push_back({k.key, *reason});
        else
          why("the export has this key and the source makes none");
        break;
      case DiffStatus::KindChanged: why("a tensor on one side, a value on the other"); break;
      case DiffStatus::DtypeChanged:
        why("dtype " + k.a->dtype_name + " in the source, " + k.b->dtype_name + " in the export: no cast explains it");
        break;
      case DiffStatus::ShapeChanged: why("shape differs between the source (mapped) and the export"); break;
      case DiffStatus::ValuesChanged:
        detail = std::to_string(k.acc.differ) + " values differ";
        if (k.codec) detail += " beyond the " + std::string(k.codec->codec().name) + " bound (" + k.codec->rule() + ")";
        if (k.bound == ExportBound::Kind::Cast) detail += " after the cast to " + k.b->dtype_name;
        if (!k.b_key.empty()) detail += " from " + k.b_key + " (the export ties them)";
        why(detail);
        break;
    }
  }
  if (is_hf_checkpoint(b.ck)) {
    HfReport hr = check_hf_folder(b.path);
    json problems = json::array();
    for (const Finding& f : hr.problems) {
      problems.push_back({{"code", f.code}, {"message", f.text()}});
      x.unexplained.push_back(
          {f.where.describe().empty() ? b.path : f.where.describe(), "[" + f.code + "] " + f.message});
    }
    x.config = {{"path", hr.summary.value("config", json())},
                {"checked", hr.summary.value("config_checks", json::array())},
                {"problems", problems}};
  }
  return x;
}

json audit_json(const ExportAudit& x) {
  json dropped = json::array(), unexplained = json::array();
  json export_only = json::array();
  for (const auto& [k, reason] : x.dropped) dropped.push_back({{"key", k}, {"reason", reason}});
  for (const auto& [k, reason] : x.export_only) export_only.push_back({{"key", k}, {"reason", reason}});
  for (const auto& [k, why] : x.unexplained) unexplained.push_back({{"key", k}, {"why", why}});
  return {{"clean", x.clean()},
          {"map", x.map},
          {"direction", x.direction},
          {"counts",
           {{"mapped", x.mapped},
            {"export_keys", x.export_keys},
            {"bit_equal", x.bit_equal},
            {"within_codec", x.within_codec},
            {"after_cast", x.after_cast},
            {"tied", x.tied},
            {"dropped", x.dropped.size()},
            {"export_only", x.export_only.size()},
            {"left_out", x.left_out.size()},
            {"excluded", x.excluded.size()},
            {"config_checks", x.config.is_null() ? 0 : x.config["checked"].size()},
            {"unexplained", x.unexplained.size()}}},
          {"dropped", dropped},
          {"export_only", export_only},
          {"left_out", x.left_out},
          {"excluded", x.excluded},
          {"config", x.config},
          {"unexplained", unexplained}};
}

}  // namespace dcpctl
