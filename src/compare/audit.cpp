#include "compare/audit.h"

#include <algorithm>

#include "compare/diff.h"
#include "check/hf_checks.h"
#include "view/keymap_terms.h"
#include "view/model_config.h"
#include "view/quantized.h"
#include "view/dequantize.h"
#include "view/derived.h"

namespace dcpctl {

using nlohmann::json;

std::map<std::string, ExportBound> dequantize_export(Input& exported, const Input& source) {
  std::map<std::string, ExportBound> bounds;
  const Codec& fp8 = fp8_block_codec();
  for (const auto& t : source.ck.md.tensors)
    if (t.dtype && fp8.weight_dtype(*t.dtype)) return bounds;
  const Metadata& md = exported.ck.md;
  const NameIndex by_name = tensor_names(md);
  // A codec whose error bound is not implemented: refused, naming its first weight.
  for (const Codec* c : codecs())
    if (c->pairs && !c->half_step)
      if (auto pairs = c->pairs(md, by_name); !pairs.empty())
        throw UnsupportedError(
            Where(exported.path, std::nullopt, md.tensors[pairs[0].first].fqn),
            std::string("auditing an ") + c->display + " export is not supported (its error bound is not implemented); compare it with "
            "`diff --dtype`-free tolerances (--atol) instead");
  std::optional<Checkpoint> view = dequantized_view(exported.ck, DType::Float32, ModelConfig());
  if (!view) return bounds;
  int64_t b0 = 128, b1 = 128;
  const json& said = view->derived ? view->derived->views.value("dequantized", json()) : json();
  if (said.is_object() && said.value("block", json()).is_array())
    b0 = said["block"][0].get<int64_t>(), b1 = said["block"][1].get<int64_t>();
  for (const auto& [wi, si] : fp8.pairs(md, by_name)) {
    const TensorMeta& w = md.tensors[wi];
    if (w.shape.size() != 2 || !view->derived->find(w.fqn)) continue;
    const TensorMeta& st = md.tensors[si];
    if (st.dtype != DType::Float32 || st.num_chunks() != 1 || st.chunk_numel(0) != st.numel())
      throw UnsupportedError(Where(exported.path, std::nullopt, st.fqn), "a scale that is not one float32 chunk");
    auto scales = std::make_shared<std::vector<float>>(st.numel());
    exported.reader->read_chunk(st, 0, scales->data());
    ExportBound b;
    b.kind = ExportBound::Kind::Fp8Block;
    b.half_step = fp8.half_step;
    b.scales = std::move(scales);
    b.cols = std::max<int64_t>(1, w.shape[1]);
    b.b0 = b0;
    b.b1 = b1;
    b.grid_cols = ceil_blocks(w.shape[1], b1);
    bounds.emplace(w.fqn, std::move(b));
  }
  exported.reader.reset();  // it reads the checkpoint replaced below
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
        else if (k.bound == ExportBound::Kind::Fp8Block)
          ++x.within_codec;
        else
          ++x.after_cast;
        break;
      case DiffStatus::Tied:
        ++x.tied;
        break;
      case DiffStatus::OnlyInA:
        why("the source's model key (mapped) is missing from the export");
        break;
      case DiffStatus::OnlyInB:
        if (auto reason = export_only_reason(map, m.to, k.key))
          x.export_only.push_back({k.key, *reason});
        else
          why("the export has this key and the source makes none");
        break;
      case DiffStatus::KindChanged:
        why("a tensor on one side, a value on the other");
        break;
      case DiffStatus::DtypeChanged:
        why("dtype " + k.a->dtype_name + " in the source, " + k.b->dtype_name + " in the export: no cast explains it");
        break;
      case DiffStatus::ShapeChanged:
        why("shape differs between the source (mapped) and the export");
        break;
      case DiffStatus::ValuesChanged:
        detail = std::to_string(k.acc.differ) + " values differ";
        if (k.bound == ExportBound::Kind::Fp8Block) detail += " beyond the fp8 block bound";
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
