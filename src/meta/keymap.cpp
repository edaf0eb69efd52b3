#include "meta/keymap.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <unordered_map>

#include "meta/keymap_terms.h"
#include "meta/pieces.h"
#include "util/error.h"
#include "store/file.h"

namespace dcpctl {

using nlohmann::json;

// The built-in maps' texts (src/maps/*.json, compiled in by CMake: keymap_builtin.cpp).
std::vector<std::pair<std::string, std::string>> builtin_key_map_texts();

namespace {

std::vector<KeyMap::Part> parse_side(const json& side, const std::string& source, size_t rule, bool& list) {
  std::vector<KeyMap::Part> out;
  auto where = [&] { return "rule " + std::to_string(rule); };
  if (side.is_string()) {
    out.push_back({side.get<std::string>(), "", nullptr});
  } else if (side.is_array() && !side.empty()) {
    list = true;
    for (const auto& p : side) {
      if (!p.is_object() || !p.contains("key") || !p["key"].is_string() || !p.contains("size") || !p["size"].is_string())
        bad_map(source, where() + ": each part of a list needs \"key\" and \"size\" (strings)");
      KeyMap::Part part{p["key"].get<std::string>(), p["size"].get<std::string>(), p.value("rope", json())};
      out.push_back(part);
    }
  } else if (!side.is_null()) {
    bad_map(source, where() + ": a side is a pattern string or a list of parts");
  }
  for (auto& p : out) {
    Pattern::parse(p.pattern, source);  // checked now
    if (!p.rope.is_null() && !(p.rope.is_object() && p.rope.contains("heads") && p.rope["heads"].is_string() &&
                               p.rope.contains("head_dim") && p.rope["head_dim"].is_string()))
      bad_map(source, where() + ": \"rope\" is {\"heads\": expr, \"head_dim\": expr}");
  }
  return out;
}

KeyMap parse_map(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) bad_map(source, "not a JSON object");
  if (j.value("schema", "") != "dcpctl-map/1") bad_map(source, "\"schema\" must be \"dcpctl-map/1\"");
  KeyMap m;
  m.source = source;
  if (!j.contains("name") || !j["name"].is_string()) bad_map(source, "\"name\" is missing");
  m.name = j["name"];
  m.description = j.value("description", "");
  if (j.contains("models")) {
    if (!j["models"].is_array() || !std::all_of(j["models"].begin(), j["models"].end(), [](const json& x) { return x.is_string(); }))
      bad_map(source, "\"models\" is a list of strings (the model families the map covers)");
    for (const auto& x : j["models"]) m.models.push_back(x.get<std::string>());
  }
  if (!j.contains("sides") || !j["sides"].is_array() || j["sides"].size() != 2 || !j["sides"][0].is_string() || !j["sides"][1].is_string() ||
      j["sides"][0] == j["sides"][1])
    bad_map(source, "\"sides\" must name two sides");
  m.sides[0] = j["sides"][0];
  m.sides[1] = j["sides"][1];
  if (j.contains("model")) {
    const json& mo = j["model"];
    bool ok = mo.is_object() && !mo.empty();
    for (auto it = ok ? mo.begin() : mo.end(); ok && it != mo.end(); ++it) {
      int s = it.key() == m.sides[0] ? 0 : it.key() == m.sides[1] ? 1 : -1;
      ok = s >= 0 && it.value().is_array() && !it.value().empty();
      for (const auto& x : ok ? it.value() : json::array()) {
        ok = ok && x.is_string() && !x.get<std::string>().empty();
        if (ok) m.model[s].push_back(x.get<std::string>());
      }
    }
    if (!ok || m.model[0].empty() || m.model[1].empty())
      bad_map(source, "\"model\" is {SIDE: [KEY PREFIX, ...]} for both sides (the keys that are the model's weights)");
    m.has_model = true;
  }
  m.params = j.value("params", json::object());
  if (!m.params.is_object()) bad_map(source, "\"params\" must be an object");
  for (const auto& [k, v] : m.params.items()) {
    bool ok = v.is_object() && (v.contains("config") || v.contains("default") || v.contains("shape"));
    for (const auto& [f, x] : ok ? v.items() : json::object().items()) ok = ok && (f == "config" || f == "default" || f == "shape");
    if (ok && v.contains("config")) {
      const json& c = v["config"];
      ok = c.is_string() || (c.is_array() && std::all_of(c.begin(), c.end(), [](const json& x) { return x.is_string(); }));
    }
    if (ok && v.contains("default")) ok = v["default"].is_string();
    if (!ok) bad_map(source, "parameter " + k + ": {\"config\": key or [keys], \"shape\": [...], \"default\": expression}");
    // "shape": where the tensors carry the value when config.json lacks it (keymap_terms.h).
    for (const auto& s : v.contains("shape") && v["shape"].is_array() ? v["shape"] : json::array()) {
      bool fine = s.is_object() && s.contains("key") && s["key"].is_string() && (s.contains("dim") != s.contains("count")) && s.size() == 2;
      if (fine && s.contains("dim")) fine = s["dim"].is_number_integer() && s["dim"].get<int64_t>() >= 0;
      if (fine) {
        Pattern p = Pattern::parse(s["key"].get<std::string>(), source);
        fine = !p.has_offsets();
        if (fine && s.contains("count"))
          fine = s["count"].is_string() && std::find(p.names.begin(), p.names.end(), s["count"].get<std::string>()) != p.names.end();
      }
      if (!fine) bad_map(source, "parameter " + k + ": each of \"shape\" is {\"key\": pattern, \"dim\": n} or {\"key\": pattern, \"count\": placeholder}");
    }
    if (v.contains("shape") && (!v["shape"].is_array() || v["shape"].empty()))
      bad_map(source, "parameter " + k + ": \"shape\" is a non-empty list");
  }
  if (!j.contains("rules") || !j["rules"].is_array() || j["rules"].empty()) bad_map(source, "\"rules\" must be a non-empty list");
  for (size_t i = 0; i < j["rules"].size(); ++i) {
    const json& r = j["rules"][i];
    if (!r.is_object()) bad_map(source, "rule " + std::to_string(i) + " is not an object");
    for (const auto& [k, v] : r.items())
      if (k != m.sides[0] && k != m.sides[1] && k != "rope" && k != "dim" && k != "experts" && k != "stack" && k != "groups" && k != "transpose" &&
          k != "tied" && k != "note" && k != "reason" && k != "keep_dtype")
        bad_map(source, "rule " + std::to_string(i) + " has an unknown field \"" + k + "\"");
    const std::string where = "rule " + std::to_string(i);
    KeyMap::Rule rule;
    rule.index = i;
    for (int s = 0; s < 2; ++s) rule.side[s] = parse_side(r.value(m.sides[s], json()), source, i, rule.list[s]);
    if (rule.side[0].empty() && rule.side[1].empty()) bad_map(source, where + " names neither side");
    // A one-sided rule drops a model's keys when mapping from its side: it says why the other
    // side has no such tensor, and the reason is reported beside each key it drops.
    const bool one_sided = rule.side[0].empty() || rule.side[1].empty();
    if (r.contains("reason") && (!r["reason"].is_string() || r["reason"].get<std::string>().empty()))
      bad_map(source, where + ": \"reason\" is a sentence (a string)");
    if (r.contains("reason") && !one_sided) bad_map(source, where + ": \"reason\" belongs to a one-sided rule (the keys it drops)");
    if (one_sided && !r.contains("reason"))
      bad_map(source, where + " names one side only: it drops those keys, and needs a \"reason\" (why the other side has no such tensor)");
    rule.reason = r.value("reason", "");
    if (rule.list[0] && rule.list[1]) bad_map(source, where + ": only one side may be a list");
    const bool list = rule.list[0] || rule.list[1];
    rule.dim = r.value("dim", int64_t{0});
    rule.rope = r.value("rope", json());
    // "stack" says what "experts" says (a layer stack reads better as a stack); one of them.
    if (r.contains("experts") && r.contains("stack")) bad_map(source, where + ": \"experts\" and \"stack\" are one field; give one");
    rule.experts = r.contains("stack") ? r["stack"] : r.value("experts", json());
    if (r.contains("groups")) {
      if (!r["groups"].is_string()) bad_map(source, where + ": \"groups\" is an expression (a string)");
      rule.groups = r["groups"].get<std::string>();
      if (!list) bad_map(source, where + ": \"groups\" belongs to a rule with a list side");
      for (int s = 0; s < 2; ++s)
        for (const auto& p : rule.side[s])
          if (!p.rope.is_null()) bad_map(source, where + ": a grouped concatenation's parts carry no \"rope\"");
    }
    if (!rule.rope.is_null() && !(rule.rope.is_object() && rule.rope.contains("heads") && rule.rope.contains("head_dim")))
      bad_map(source, where + ": \"rope\" is {\"heads\": expr, \"head_dim\": expr}");
    if (!rule.experts.is_null() && !(rule.experts.is_object() && rule.experts.contains("count") && rule.experts["count"].is_string()) &&
        !rule.experts.is_array())
      bad_map(source, where + ": \"experts\" / \"stack\" is {\"dim\": n, \"count\": expr}, or a list of {\"dim\", \"count\", \"index\"}");
    // A stack over several axes (Megatron's experts [L, E, ...]): each axis names the placeholder
    // that indexes it; the axes are consecutive dimensions, in order.
    if (rule.experts.is_array()) {
      bool ok = !rule.experts.empty();
      int64_t next = -1;
      for (const auto& a : rule.experts) {
        ok = ok && a.is_object() && a.size() == 3 && a.contains("dim") && a["dim"].is_number_integer() && a.contains("count") &&
             a["count"].is_string() && a.contains("index") && a["index"].is_string();
        if (!ok) break;
        const int64_t d = a["dim"].get<int64_t>();
        ok = d >= 0 && (next < 0 || d == next);
        next = d + 1;
      }
      if (!ok)
        bad_map(source, where + ": a stack over several axes is a list of {\"dim\": n, \"count\": expr, \"index\": placeholder}, on consecutive dims in order");
      if (rule.experts.size() == 1) rule.experts = rule.experts[0];
    }
    if (!rule.experts.is_null() && (rule.side[0].empty() || rule.side[1].empty()))
      bad_map(source, where + ": \"experts\" / \"stack\" needs both sides");
    if (!rule.experts.is_null() && list)
      for (int s = 0; s < 2; ++s)
        for (const auto& p : rule.side[s])
          if (!p.rope.is_null()) bad_map(source, where + ": a stacked concatenation's parts carry no \"rope\"");
    if (!rule.rope.is_null() && list) bad_map(source, where + ": a list side carries \"rope\" on its parts");
    if (r.contains("transpose")) {
      if (!r["transpose"].is_boolean()) bad_map(source, where + ": \"transpose\" is true or false");
      rule.transpose = r["transpose"].get<bool>();
    }
    if (rule.transpose) {
      // The piece copier swaps the last two dims of a box; a transposed part is neither re-rowed
      // nor taken out of (or put into) a stack, nor cut into groups.
      bool part_rope = false;
      for (int s = 0; s < 2; ++s)
        for (const auto& p : rule.side[s]) part_rope = part_rope || !p.rope.is_null();
      if (!rule.rope.is_null() || part_rope) bad_map(source, where + ": \"transpose\" with \"rope\" is not a rule kind");
      if (!rule.experts.is_null()) bad_map(source, where + ": \"transpose\" with \"experts\" / \"stack\" is not a rule kind");
      if (!rule.groups.empty()) bad_map(source, where + ": \"transpose\" with \"groups\" is not a rule kind");
      if (rule.side[0].empty() || rule.side[1].empty()) bad_map(source, where + ": \"transpose\" needs both sides");
    }
    if (r.contains("tied")) {
      const json& t = r["tied"];
      bool ok = t.is_object() && t.size() == 1;
      for (int s = 0; ok && s < 2; ++s)
        if (t.contains(m.sides[s])) {
          ok = t[m.sides[s]].is_string() && !list && rule.experts.is_null() && rule.rope.is_null() && !rule.transpose &&
               !rule.side[0].empty() && !rule.side[1].empty() && Pattern::parse(rule.side[s][0].pattern, source).names.empty() &&
               Pattern::parse(t[m.sides[s]].get<std::string>(), source).names.empty();
          if (ok) rule.tied[s] = t[m.sides[s]].get<std::string>();
        }
      if (!ok || (rule.tied[0].empty() && rule.tied[1].empty()))
        bad_map(source, where + ": \"tied\" is {SIDE: KEY} on a plain rename of two keys without placeholders");
    }
    if (r.contains("keep_dtype") && !r["keep_dtype"].is_boolean()) bad_map(source, where + ": \"keep_dtype\" is true or false");
    rule.keep_dtype = r.value("keep_dtype", false);
    rule.shape = list ? RuleShape::Concat : !rule.experts.is_null() ? RuleShape::Experts : RuleShape::OneToOne;
    m.rules.push_back(std::move(rule));
  }
  return m;
}

}  // namespace

std::string read_text(const std::string& path) {
  ReadFile f(path);
  if (f.size() > (64u << 20)) throw UsageError(Where(path), "larger than 64 MiB: not a key map or config");
  std::string text(f.size(), '\0');
  f.read_at(0, text.data(), text.size());
  return text;
}

std::vector<KeyMap> builtin_key_maps() {
  std::vector<KeyMap> out;
  for (const auto& [name, text] : builtin_key_map_texts()) out.push_back(parse_map(text, "built-in map " + name));
  std::sort(out.begin(), out.end(), [](const KeyMap& a, const KeyMap& b) { return a.name < b.name; });
  return out;
}

KeyMap load_key_map(const std::string& name_or_path) {
  bool file = name_or_path.find('/') != std::string::npos || (name_or_path.size() > 5 && name_or_path.rfind(".json") == name_or_path.size() - 5);
  if (!file)
    for (auto& m : builtin_key_maps())
      if (m.name == name_or_path) return m;
  if (path_exists(name_or_path) && !is_directory(name_or_path)) return parse_map(read_text(name_or_path), name_or_path);
  std::string names;
  for (const auto& m : builtin_key_maps()) names += (names.empty() ? "" : ", ") + m.name;
  throw UsageError(Where(name_or_path), file ? "no such map file" : "no built-in map of this name (built-in: " + names + "; or give a .json file)");
}

json MappedModel::describe() const {
  json reasons_by_key = json::object();
  for (size_t i = 0; i < dropped.size() && i < reasons.size(); ++i) reasons_by_key[dropped[i]] = reasons[i];
  json j = {{"name", name},         {"direction", from + "->" + to}, {"mapped", inputs}, {"outputs", tensors.size()}, {"left_out", left_out},
            {"dropped", dropped},   {"drop_reasons", reasons_by_key}, {"missing", missing}, {"excluded", excluded}};
  j["model"] = model.empty() ? json() : json(model);
  j["config"] = config.empty() ? json() : json(config);
  j["tie_word_embeddings"] = tied.empty() ? json() : json(tied == "true");
  j["params"] = params.is_null() ? json::object() : params;
  return j;
}

MapConfig find_map_config(const std::string& checkpoint_dir, const std::string& config, const std::string& assets) {
  std::vector<std::string> tries;
  if (!config.empty()) {
    if (!path_exists(config) || is_directory(config)) throw UsageError(Where(config), "--config: no such file");
    tries.push_back(config);
  } else {
    if (!assets.empty()) tries.push_back(join_path(assets, "config.json"));
    tries.push_back(join_path(checkpoint_dir, "config.json"));
    std::string parent = checkpoint_dir;
    while (!parent.empty() && parent.back() == '/') parent.pop_back();
    size_t slash = parent.rfind('/');
    if (slash != std::string::npos && parent.substr(slash + 1) == "sharded") tries.push_back(join_path(parent.substr(0, slash), "config.json"));
  }
  for (const auto& p : tries) {
    if (!path_exists(p) || is_directory(p)) continue;
    MapConfig c;
    c.path = p;
    c.json = json::parse(read_text(p), nullptr, false);
    if (c.json.is_discarded() || !c.json.is_object()) throw UsageError(Where(p), "not a JSON object: not a model's config.json");
    return c;
  }
  MapConfig none;
  none.path = "looked for";
  for (size_t i = 0; i < tries.size(); ++i) none.path += (i ? ", " : " ") + tries[i];
  return none;
}

std::vector<std::string> rule_kinds(const KeyMap& map) {
  std::set<std::string> kinds;
  for (const auto& r : map.rules) {
    if (r.side[0].empty() || r.side[1].empty()) kinds.insert("drop");
    else if (r.shape == RuleShape::OneToOne) kinds.insert("rename");
    if (r.shape == RuleShape::Concat) kinds.insert("concat");
    if (!r.experts.is_null()) kinds.insert("stack");
    if (!r.groups.empty()) kinds.insert("groups");
    if (r.transpose) kinds.insert("transpose");
    if (!r.tied[0].empty() || !r.tied[1].empty()) kinds.insert("tied");
    bool rope = !r.rope.is_null();
    for (int s = 0; s < 2; ++s)
      for (const auto& p : r.side[s]) {
        rope = rope || !p.rope.is_null();
        if (p.pattern.find('+') != std::string::npos) kinds.insert("offset");
      }
    if (rope) kinds.insert("rope");
  }
  return {kinds.begin(), kinds.end()};
}

bool renames_whole(const Metadata& md, const MappedTensor& mt) {
  if (mt.parts.size() != 1) return false;
  const MapPart& p = mt.parts[0];
  const TensorMeta& t = md.tensors[p.tensor];
  return p.drop < 0 && p.add < 0 && !p.rows && !p.transpose && p.from.sizes == t.shape && mt.meta.shape == t.shape &&
         std::all_of(p.from.offsets.begin(), p.from.offsets.end(), [](int64_t o) { return o == 0; }) &&
         std::all_of(p.to.begin(), p.to.end(), [](int64_t o) { return o == 0; }) && mt.meta.dtype == t.dtype;
}

}  // namespace dcpctl
