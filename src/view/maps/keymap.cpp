#include "view/maps/keymap.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "meta/pieces.h"
#include "store/file.h"
#include "util/dtype.h"
#include "util/error.h"
#include "view/maps/keymap_terms.h"

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
      if (!p.is_object() || !p.contains("key") || !p["key"].is_string() || !p.contains("size") ||
          !p["size"].is_string())
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

constexpr const char* kSchema1 = "dcpctl-map/1";
constexpr const char* kSchema2 = "dcpctl-map/2";

// A flat map (dcpctl-map/1, or a family expanded by expand_family: its variants table and the
// rules' "variants" tags kept for choose_variant).
void parse_variants(const json& j, KeyMap& m) {
  m.family = j.value("family", "");
  const json variants = j.value("variants", json::object());
  for (const auto& [name, v] : variants.items()) {
    KeyMap::Variant var;
    var.name = name;
    var.description = v.value("description", "");
    var.is_default = v.value("default", false);
    var.params = v.value("params", json::object());
    var.args = v.value("args", json());
    for (const auto& t : v.value("model_types", json::array())) var.model_types.push_back(t.get<std::string>());
    for (const auto& t : v.value("classes", json::array())) var.classes.push_back(t.get<std::string>());
    m.variants.push_back(std::move(var));
  }
}

// "name", "description", "models", "sides".
void parse_header(const json& j, const std::string& source, KeyMap& m) {
  if (!j.contains("name") || !j["name"].is_string()) bad_map(source, "\"name\" is missing");
  m.name = j["name"];
  m.description = j.value("description", "");
  if (j.contains("models")) {
    if (!j["models"].is_array() ||
        !std::all_of(j["models"].begin(), j["models"].end(), [](const json& x) { return x.is_string(); }))
      bad_map(source, "\"models\" is a list of strings (the model families the map covers)");
    for (const auto& x : j["models"]) m.models.push_back(x.get<std::string>());
  }
  if (!j.contains("sides") || !j["sides"].is_array() || j["sides"].size() != 2 || !j["sides"][0].is_string() ||
      !j["sides"][1].is_string() || j["sides"][0] == j["sides"][1])
    bad_map(source, "\"sides\" must name two sides");
  m.sides[0] = j["sides"][0];
  m.sides[1] = j["sides"][1];
}

// "model": {SIDE: [KEY PREFIX, ...]} for both sides.
void parse_model_prefixes(const json& mo, const std::string& source, KeyMap& m) {
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

// One parameter: {"config": key or [keys], "shape": [...], "default": expression}.
void check_param(const std::string& k, const json& v, const std::string& source) {
  bool ok = v.is_object() && (v.contains("config") || v.contains("default") || v.contains("shape"));
  static const json kNone = json::object();
  for (const auto& [f, x] : (ok ? v : kNone).items()) ok = ok && (f == "config" || f == "default" || f == "shape");
  if (ok && v.contains("config")) {
    const json& c = v["config"];
    ok =
        c.is_string() || (c.is_array() && std::all_of(c.begin(), c.end(), [](const json& x) { return x.is_string(); }));
  }
  if (ok && v.contains("default")) ok = v["default"].is_string();
  if (!ok)
    bad_map(source, "parameter " + k + ": {\"config\": key or [keys], \"shape\": [...], \"default\": expression}");
  // "shape": where the tensors carry the value when config.json lacks it (keymap_terms.h).
  for (const auto& s : v.contains("shape") && v["shape"].is_array() ? v["shape"] : json::array()) {
    bool fine = s.is_object() && s.contains("key") && s["key"].is_string() &&
                (s.contains("dim") != s.contains("count")) && s.size() == 2;
    if (fine && s.contains("dim")) fine = s["dim"].is_number_integer() && s["dim"].get<int64_t>() >= 0;
    if (fine) {
      Pattern p = Pattern::parse(s["key"].get<std::string>(), source);
      fine = !p.has_offsets();
      if (fine && s.contains("count"))
        fine = s["count"].is_string() &&
               std::find(p.names.begin(), p.names.end(), s["count"].get<std::string>()) != p.names.end();
    }
    if (!fine)
      bad_map(
          source,
          "parameter " + k +
              ": each of \"shape\" is {\"key\": pattern, \"dim\": n} or {\"key\": pattern, \"count\": placeholder}");
  }
  if (v.contains("shape") && (!v["shape"].is_array() || v["shape"].empty()))
    bad_map(source, "parameter " + k + ": \"shape\" is a non-empty list");
}

void check_rule_fields(const json& r, size_t i, const KeyMap& m, bool family, const std::string& source) {
  if (!r.is_object()) bad_map(source, "rule " + std::to_string(i) + " is not an object");
  for (const auto& [k, v] : r.items())
    if (k != m.sides[0] && k != m.sides[1] && k != "rope" && k != "dim" && k != "experts" && k != "stack" &&
        k != "groups" && k != "transpose" && k != "interleave" && k != "tied" && k != "note" && k != "reason" &&
        k != "keep_dtype" && k != "drop_when" && k != "zeros" && !(family && k == "variants"))
      bad_map(source, "rule " + std::to_string(i) + " has an unknown field \"" + k + "\"");
}

// A one-sided rule drops a model's keys when mapping from its side: it says why the other side
// has no such tensor ("reason", reported beside each key it drops), maybe only when they are all
// zeros ("drop_when"), and what zeros the other direction makes ("zeros").
void parse_drop(const json& r, const std::string& where, const std::string& source, KeyMap::Rule& rule) {
  const bool one_sided = rule.side[0].empty() || rule.side[1].empty();
  if (r.contains("reason") && (!r["reason"].is_string() || r["reason"].get<std::string>().empty()))
    bad_map(source, where + ": \"reason\" is a sentence (a string)");
  if (r.contains("reason") && !one_sided)
    bad_map(source, where + ": \"reason\" belongs to a one-sided rule (the keys it drops)");
  if (one_sided && !r.contains("reason"))
    bad_map(source, where +
                        " names one side only: it drops those keys, and needs a \"reason\" (why the other side has no "
                        "such tensor)");
  rule.reason = r.value("reason", "");
  if (r.contains("drop_when") && (r["drop_when"] != "zeros" || !one_sided))
    bad_map(source,
            where + ": \"drop_when\": \"zeros\" belongs to a one-sided rule (its keys dropped only when all zeros)");
  rule.drop_when_zeros = r.contains("drop_when");
  if (!r.contains("zeros")) return;
  const json& z = r["zeros"];
  bool fine = rule.drop_when_zeros && z.is_object() && z.size() == 3 && z.contains("beside") &&
              z["beside"].is_string() && z.contains("shape") && z["shape"].is_array() && !z["shape"].empty() &&
              z.contains("dtype") && z["dtype"].is_string() &&
              dtype_from_torch_name(z["dtype"].get<std::string>()).has_value();
  for (const auto& d : fine ? z["shape"] : json::array()) fine = fine && d.is_string();
  if (fine) {
    const Pattern beside = Pattern::parse(z["beside"].get<std::string>(), source);
    for (const auto& part : rule.side[0].empty() ? rule.side[1] : rule.side[0])
      for (const auto& n : Pattern::parse(part.pattern, source).names)
        fine = fine && std::find(beside.names.begin(), beside.names.end(), n) != beside.names.end();
  }
  if (!fine)
    bad_map(source,
            where +
                ": \"zeros\" is {\"beside\": pattern with the rule's placeholders, \"shape\": [expression, ...], "
                "\"dtype\": torch dtype name} on a \"drop_when\": \"zeros\" rule");
  rule.zeros_beside = z["beside"].get<std::string>();
  for (const auto& d : z["shape"]) rule.zeros_shape.push_back(d.get<std::string>());
  rule.zeros_dtype = z["dtype"].get<std::string>();
}

bool any_part_rope(const KeyMap::Rule& rule) {
  for (int s = 0; s < 2; ++s)
    for (const auto& p : rule.side[s])
      if (!p.rope.is_null()) return true;
  return false;
}

// "experts" / "stack": {"dim": n, "count": expr}, or a stack over several axes (Megatron's experts
// [L, E, ...]): each axis names the placeholder that indexes it; the axes are consecutive
// dimensions, in order.
void parse_stack(const json& r, const std::string& where, const std::string& source, bool list, KeyMap::Rule& rule) {
  // "stack" says what "experts" says (a layer stack reads better as a stack); parse_rule refused both.
  rule.experts = r.contains("stack") ? r["stack"] : r.value("experts", json());
  if (!rule.experts.is_null() &&
      !(rule.experts.is_object() && rule.experts.contains("count") && rule.experts["count"].is_string()) &&
      !rule.experts.is_array())
    bad_map(
        source,
        where +
            ": \"experts\" / \"stack\" is {\"dim\": n, \"count\": expr}, or a list of {\"dim\", \"count\", \"index\"}");
  if (rule.experts.is_array()) {
    bool ok = !rule.experts.empty();
    int64_t next = -1;
    for (const auto& a : rule.experts) {
      ok = ok && a.is_object() && a.size() == 3 && a.contains("dim") && a["dim"].is_number_integer() &&
           a.contains("count") && a["count"].is_string() && a.contains("index") && a["index"].is_string();
      if (!ok) break;
      const int64_t d = a["dim"].get<int64_t>();
      ok = d >= 0 && (next < 0 || d == next);
      next = d + 1;
    }
    if (!ok)
      bad_map(source, where +
                          ": a stack over several axes is a list of {\"dim\": n, \"count\": expr, \"index\": "
                          "placeholder}, on consecutive dims in order");
    if (rule.experts.size() == 1) rule.experts = rule.experts[0];
  }
  if (!rule.experts.is_null() && (rule.side[0].empty() || rule.side[1].empty()))
    bad_map(source, where + ": \"experts\" / \"stack\" needs both sides");
  if (!rule.experts.is_null() && list && any_part_rope(rule))
    bad_map(source, where + ": a stacked concatenation's parts carry no \"rope\"");
}

// "transpose" and "interleave": what the copy does to a box besides renaming it.
void parse_reorder(const json& r, const std::string& where, const std::string& source, bool list, KeyMap::Rule& rule) {
  if (r.contains("transpose")) {
    if (!r["transpose"].is_boolean()) bad_map(source, where + ": \"transpose\" is true or false");
    rule.transpose = r["transpose"].get<bool>();
  }
  if (rule.transpose) {
    // The piece copier swaps the last two dims of a box; a transposed part is neither re-rowed
    // nor cut into groups; a stack's entries are transposed one by one (not a stacked list).
    if (!rule.rope.is_null() || any_part_rope(rule))
      bad_map(source, where + ": \"transpose\" with \"rope\" is not a rule kind");
    if (!rule.experts.is_null() && list)
      bad_map(source, where + ": \"transpose\" of a stacked list is not a rule kind");
    if (!rule.groups.empty()) bad_map(source, where + ": \"transpose\" with \"groups\" is not a rule kind");
    if (rule.side[0].empty() || rule.side[1].empty()) bad_map(source, where + ": \"transpose\" needs both sides");
  }
  if (r.contains("interleave")) {
    if (!r["interleave"].is_number_integer() || r["interleave"].get<int64_t>() < 0)
      bad_map(source, where + ": \"interleave\" is a dimension (an integer, 0 or more)");
    rule.interleave = r["interleave"].get<int64_t>();
    if (list || !rule.rope.is_null() || !rule.groups.empty() || rule.side[0].empty() || rule.side[1].empty())
      bad_map(
          source,
          where +
              ": \"interleave\" belongs to a rule with one key on each side (renamed or stacked), without \"rope\"");
  }
}

// "tied": {SIDE: KEY} on a plain rename of two keys without placeholders.
void parse_tied(const json& t, const std::string& where, const std::string& source, const KeyMap& m, bool list,
                KeyMap::Rule& rule) {
  bool ok = t.is_object() && t.size() == 1;
  for (int s = 0; ok && s < 2; ++s)
    if (t.contains(m.sides[s])) {
      ok = t[m.sides[s]].is_string() && !list && rule.experts.is_null() && rule.rope.is_null() && !rule.transpose &&
           !rule.side[0].empty() && !rule.side[1].empty() &&
           Pattern::parse(rule.side[s][0].pattern, source).names.empty() &&
           Pattern::parse(t[m.sides[s]].get<std::string>(), source).names.empty();
      if (ok) rule.tied[s] = t[m.sides[s]].get<std::string>();
    }
  if (!ok || (rule.tied[0].empty() && rule.tied[1].empty()))
    bad_map(source, where + ": \"tied\" is {SIDE: KEY} on a plain rename of two keys without placeholders");
}

KeyMap::Rule parse_rule(const json& r, size_t i, const KeyMap& m, bool family, const std::string& source) {
  check_rule_fields(r, i, m, family, source);
  const std::string where = "rule " + std::to_string(i);
  KeyMap::Rule rule;
  rule.index = i;
  for (int s = 0; s < 2; ++s) rule.side[s] = parse_side(r.value(m.sides[s], json()), source, i, rule.list[s]);
  if (rule.side[0].empty() && rule.side[1].empty()) bad_map(source, where + " names neither side");
  parse_drop(r, where, source, rule);
  if (rule.list[0] && rule.list[1]) bad_map(source, where + ": only one side may be a list");
  const bool list = rule.list[0] || rule.list[1];
  rule.dim = r.value("dim", int64_t{0});
  rule.rope = r.value("rope", json());
  if (r.contains("experts") && r.contains("stack"))
    bad_map(source, where + ": \"experts\" and \"stack\" are one field; give one");
  if (r.contains("groups")) {
    if (!r["groups"].is_string()) bad_map(source, where + ": \"groups\" is an expression (a string)");
    rule.groups = r["groups"].get<std::string>();
    if (!list) bad_map(source, where + ": \"groups\" belongs to a rule with a list side");
    if (any_part_rope(rule)) bad_map(source, where + ": a grouped concatenation's parts carry no \"rope\"");
  }
  if (!rule.rope.is_null() && !(rule.rope.is_object() && rule.rope.contains("heads") && rule.rope.contains("head_dim")))
    bad_map(source, where + ": \"rope\" is {\"heads\": expr, \"head_dim\": expr}");
  parse_stack(r, where, source, list, rule);
  if (!rule.rope.is_null() && list) bad_map(source, where + ": a list side carries \"rope\" on its parts");
  parse_reorder(r, where, source, list, rule);
  if (r.contains("tied")) parse_tied(r["tied"], where, source, m, list, rule);
  if (r.contains("keep_dtype") && !r["keep_dtype"].is_boolean())
    bad_map(source, where + ": \"keep_dtype\" is true or false");
  rule.keep_dtype = r.value("keep_dtype", false);
  const json tags = family ? r.value("variants", json::array()) : json::array();
  if (!tags.is_array() || !std::all_of(tags.begin(), tags.end(), [](const json& x) { return x.is_string(); }))
    bad_map(source, where + ": \"variants\" is a list of the family's variant names");
  for (const auto& v : tags) rule.variants.push_back(v.get<std::string>());
  rule.shape = list ? RuleShape::Concat : !rule.experts.is_null() ? RuleShape::Experts : RuleShape::OneToOne;
  return rule;
}

KeyMap parse_map(const json& j, const std::string& source) {
  const bool family = j.value("schema", "") == kSchema2;
  KeyMap m;
  m.source = source;
  if (family) parse_variants(j, m);
  parse_header(j, source, m);
  if (j.contains("model")) parse_model_prefixes(j["model"], source, m);
  m.params = j.value("params", json::object());
  if (!m.params.is_object()) bad_map(source, "\"params\" must be an object");
  for (const auto& [k, v] : m.params.items()) check_param(k, v, source);
  if (!j.contains("rules") || !j["rules"].is_array() || j["rules"].empty())
    bad_map(source, "\"rules\" must be a non-empty list");
  for (size_t i = 0; i < j["rules"].size(); ++i) m.rules.push_back(parse_rule(j["rules"][i], i, m, family, source));
  return m;
}

// dcpctl-map/2, a family (docs/maps.md, "Families and variants"): one flat map (the family's
// own, or an alias's) with each {"group": NAME} of its rules replaced by that group's rules and
// each {"layers": PREFIX} by the family's layer rules under that prefix: a rule's patterns
// prefixed, and under a prefix with "stack" ([L, ...] layers) each rule's tensors stacked over
// its axis first, before the rule's own (experts [L, E, ...]). A layer rule with "prefixes" is
// used under those only; one without, under every prefix not marked "explicit". The variants an
// alias allows are kept, and the rules' "variants" tags, for choose_variant.
// tests/interop/map_reference.py's expand() is the same in Python.
// expand_family's steps: the family's tables checked, the alias's variants chosen, its rules
// emitted with groups inlined and layer rules put under each prefix (stacked where it stacks).
class FamilyExpander {
 public:
  FamilyExpander(const json& fam, const std::string& source) : fam_(fam), source_(source) {
    need(fam.contains("name") && fam["name"].is_string(), "\"name\" is missing");
    need(fam.contains("sides") && fam["sides"].is_array() && fam["sides"].size() == 2 && fam["sides"][0].is_string() &&
             fam["sides"][1].is_string(),
         "\"sides\" must name two sides");
    variants_ = fam.value("variants", json::object());
    prefixes_ = fam.value("prefixes", json::object());
    groups_ = fam.value("groups", json::object());
    layer_rules_ = fam.value("layer_rules", json::array());
    aliases_ = fam.value("aliases", json::object());
    need(variants_.is_object() && prefixes_.is_object() && groups_.is_object() && layer_rules_.is_array() &&
             aliases_.is_object(),
         "\"variants\", \"prefixes\", \"groups\" and \"aliases\" are objects, \"layer_rules\" a list");
    for (const auto& [n, v] : variants_.items()) check_variant(n, v);
    sides_ = {fam["sides"][0].get<std::string>(), fam["sides"][1].get<std::string>()};
  }

  json expand(const std::string& alias) {
    json a = json::object();
    if (!alias.empty()) {
      need(aliases_.contains(alias) && aliases_[alias].is_object(), "no alias " + alias);
      a = aliases_[alias];
    }
    json allowed = a.value("variants", json::array());
    if (!a.contains("variants"))
      for (const auto& [n, v] : variants_.items()) allowed.push_back(n);
    json out_variants = json::object();
    for (const auto& n : allowed) {
      need(n.is_string() && variants_.contains(n.get<std::string>()),
           "alias " + alias + ": \"variants\" names a variant the family lacks");
      out_variants[n.get<std::string>()] = variants_[n.get<std::string>()];
    }
    emit(a.value("rules", fam_.value("rules", json::array())), 0);
    json out = {{"schema", kSchema2},       {"name", alias.empty() ? fam_["name"] : json(alias)},
                {"family", fam_["name"]},   {"description", a.value("description", fam_.value("description", ""))},
                {"sides", fam_["sides"]},   {"params", fam_.value("params", json::object())},
                {"variants", out_variants}, {"rules", rules_}};
    if (a.contains("models") || fam_.contains("models"))
      out["models"] = a.value("models", fam_.value("models", json::array()));
    if (a.contains("model") || fam_.contains("model")) out["model"] = a.value("model", fam_.value("model", json()));
    return out;
  }

 private:
  void need(bool ok, const std::string& what) const {
    if (!ok) bad_map(source_, what);
  }

  void check_variant(const std::string& n, const json& v) const {
    bool ok = v.is_object() && v.contains("model_types") && v["model_types"].is_array();
    for (const auto& t : ok ? v["model_types"] : json::array()) ok = ok && t.is_string();
    for (const auto& [f, x] : v.is_object() ? v.items() : variants_.items())
      ok = ok && (f == "model_types" || f == "description" || (f == "default" && x.is_boolean()) ||
                  (f == "params" && x.is_object()) || (f == "args" && x.is_object()) ||
                  (f == "classes" && x.is_array() &&
                   std::all_of(x.begin(), x.end(), [](const json& c) { return c.is_string(); })));
    need(ok, "variant " + n +
                 ": {\"model_types\": [model_type, ...], \"description\", \"default\": bool, \"params\": {...}, "
                 "\"classes\": [class, ...], \"args\": {...}}");
  }

  std::set<std::string> placeholders(const json& side) const {
    std::set<std::string> names;
    for (const auto& p : side.is_array() ? side : json::array({side}))
      for (const auto& n : Pattern::parse(p.is_object() ? p.value("key", "") : p.get<std::string>(), source_).names)
        names.insert(n);
    return names;
  }

  // The rules' entries in order: a group's rules in its place, a prefix's layer rules in its.
  void emit(const json& entries, int depth) {
    need(entries.is_array() && depth < 8, "\"rules\" and each group are lists (groups nest at most 8 deep)");
    for (const auto& e : entries) {
      if (e.is_object() && e.size() == 1 && e.contains("group") && e["group"].is_string()) {
        need(groups_.contains(e["group"].get<std::string>()), "no group " + e["group"].get<std::string>());
        emit(groups_[e["group"].get<std::string>()], depth + 1);
      } else if (e.is_object() && e.size() == 1 && e.contains("layers") && e["layers"].is_string()) {
        layer(e["layers"].get<std::string>());
      } else {
        rules_.push_back(e);
      }
    }
  }

  // The layer rules that apply under prefix `pname`, each put under it.
  void layer(const std::string& pname) {
    need(prefixes_.contains(pname) && prefixes_[pname].is_object(), "no prefix " + pname);
    const json& p = prefixes_[pname];
    for (const auto& s : sides_)
      need(p.contains(s) && p[s].is_string(), "prefix " + pname + ": a key prefix for each side");
    for (const auto& r : layer_rules_) {
      need(r.is_object(), "a layer rule is an object");
      const bool explicit_only = p.value("explicit", false);
      if (r.contains("prefixes")) {
        need(r["prefixes"].is_array(), "a layer rule's \"prefixes\" is a list of prefix names");
        if (std::find(r["prefixes"].begin(), r["prefixes"].end(), json(pname)) == r["prefixes"].end()) continue;
      } else if (explicit_only) {
        continue;
      }
      json nr = r;
      nr.erase("prefixes");
      put_under(p, nr);
      // a one-sided rule (a key one side has and the other lacks) stacks nothing: its keys are its side's own
      if (p.contains("stack") && nr.contains(sides_[0]) && nr.contains(sides_[1]))
        stack_under(pname, p["stack"], r, nr);
      rules_.push_back(std::move(nr));
    }
  }

  // A rule's keys under the prefix's key prefix on each side.
  void put_under(const json& p, json& nr) const {
    for (const auto& s : sides_) {
      if (!nr.contains(s)) continue;
      if (nr[s].is_string())
        nr[s] = p[s].get<std::string>() + nr[s].get<std::string>();
      else if (nr[s].is_array())
        for (auto& part : nr[s])
          if (part.is_object() && part.contains("key") && part["key"].is_string())
            part["key"] = p[s].get<std::string>() + part["key"].get<std::string>();
      // a zeros rule's `beside` is a key of the side the rule names, under the same prefix
      if (nr.contains("zeros") && nr["zeros"].is_object() && nr["zeros"].contains("beside") &&
          nr["zeros"]["beside"].is_string())
        nr["zeros"]["beside"] = p[s].get<std::string>() + nr["zeros"]["beside"].get<std::string>();
    }
  }

  // A stacked prefix's axis (Megatron's layers [L, ...]) before the rule's own (the experts').
  void stack_under(const std::string& pname, const json& ax, const json& r, json& nr) const {
    need(ax.is_object() && ax.contains("dim") && ax.contains("count") && ax.contains("index"),
         "prefix " + pname + ": \"stack\" is {\"dim\", \"count\", \"index\"}");
    json own = nr.contains("stack") ? nr["stack"] : nr.value("experts", json());
    nr.erase("stack");
    nr.erase("experts");
    if (own.is_null()) {
      nr["stack"] = {{"dim", ax["dim"]}, {"count", ax["count"]}};
      return;
    }
    // the rule's own axis is indexed by the placeholder its per-entry side has and its
    // stacked side lacks (the expert's {E})
    std::set<std::string> a0 = placeholders(r.value(sides_[0], json(""))),
                          a1 = placeholders(r.value(sides_[1], json(""))), diff;
    std::set_symmetric_difference(a0.begin(), a0.end(), a1.begin(), a1.end(), std::inserter(diff, diff.end()));
    need(own.is_object() && own.contains("dim") && own["dim"].is_number_integer() && diff.size() == 1,
         "a layer rule's stack under the stacked prefix " + pname + " is one axis, indexed by one placeholder");
    nr["stack"] =
        json::array({ax, {{"dim", own["dim"].get<int64_t>() + 1}, {"count", own["count"]}, {"index", *diff.begin()}}});
  }

  const json& fam_;
  const std::string& source_;
  json variants_, prefixes_, groups_, layer_rules_, aliases_;
  std::vector<std::string> sides_;
  json rules_ = json::array();
};

json expand_family(const json& fam, const std::string& alias, const std::string& source) {
  return FamilyExpander(fam, source).expand(alias);
}

json parse_text(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) bad_map(source, "not a JSON object");
  const std::string schema = j.value("schema", "");
  if (schema != kSchema1 && schema != kSchema2)
    bad_map(source, "\"schema\" must be \"dcpctl-map/1\" or \"dcpctl-map/2\" (a family)");
  return j;
}

// A map file's maps: a flat map, or a family's own and its aliases'.
std::vector<KeyMap> parse_maps(const std::string& text, const std::string& source, bool aliases) {
  json j = parse_text(text, source);
  if (j["schema"] == kSchema1) return {parse_map(j, source)};
  std::vector<KeyMap> out = {parse_map(expand_family(j, "", source), source)};
  const json names = aliases ? j.value("aliases", json::object()) : json::object();
  for (const auto& [name, a] : names.items()) out.push_back(parse_map(expand_family(j, name, source), source));
  return out;
}

}  // namespace

std::vector<KeyMap> builtin_key_maps() {
  std::vector<KeyMap> out;
  for (const auto& [name, text] : builtin_key_map_texts())
    for (auto& m : parse_maps(text, "built-in map " + name, true)) out.push_back(std::move(m));
  std::sort(out.begin(), out.end(), [](const KeyMap& a, const KeyMap& b) { return a.name < b.name; });
  return out;
}

namespace {

// The built-in map of this name (a flat map, a family or one of its aliases), or nothing: each
// text's JSON is read for its names and only the one named is parsed and expanded (every map's
// expansion was most of a `--map` run's start-up: 35% of it in the sanitizer tree).
std::optional<KeyMap> builtin_key_map(const std::string& name) {
  for (const auto& [file, text] : builtin_key_map_texts()) {
    const std::string source = "built-in map " + file;
    json j = parse_text(text, source);
    const bool named = j.contains("name") && j["name"] == name;
    if (j["schema"] == kSchema1) {
      if (named) return parse_map(j, source);
      continue;
    }
    const json aliases = j.value("aliases", json::object());
    if (named || aliases.contains(name)) return parse_map(expand_family(j, named ? "" : name, source), source);
  }
  return std::nullopt;
}

}  // namespace

KeyMap load_key_map(const std::string& name_or_path) {
  bool file = name_or_path.find('/') != std::string::npos ||
              (name_or_path.size() > 5 && name_or_path.rfind(".json") == name_or_path.size() - 5);
  if (!file)
    if (std::optional<KeyMap> m = builtin_key_map(name_or_path)) return std::move(*m);
  if (path_exists(name_or_path) && !is_directory(name_or_path))
    return parse_maps(read_text(name_or_path), name_or_path, false)[0];
  std::string names;
  for (const auto& m : builtin_key_maps()) names += (names.empty() ? "" : ", ") + m.name;
  throw UsageError(
      Where(name_or_path),
      file ? "no such map file" : "no built-in map of this name (built-in: " + names + "; or give a .json file)");
}

KeyMap choose_variant(const KeyMap& map, const json& config, const std::vector<std::string>& keys, std::string* chosen,
                      std::string* why) {
  if (map.family.empty()) return map;
  const KeyMap::Variant* pick = nullptr;
  std::string how;
  const std::string mt = config.is_object() && config.contains("model_type") && config["model_type"].is_string()
                             ? config["model_type"].get<std::string>()
                             : "";
  if (map.variants.size() == 1) {
    pick = &map.variants[0];
    how = "map " + map.name + "'s only variant";
  } else if (!mt.empty()) {
    for (const auto& v : map.variants)
      if (!pick && std::find(v.model_types.begin(), v.model_types.end(), mt) != v.model_types.end()) pick = &v;
    how = "config.json's model_type " + mt;
    // remote code (auto_map: the model_type is the release's own, Kimi-K2's kimi_k2) whose
    // architectures names a class a variant writes: that variant, as the model schema finds its class
    const json* arch = config.contains("architectures") && config["architectures"].is_array() &&
                               config["architectures"].size() == 1 && config["architectures"][0].is_string()
                           ? &config["architectures"][0]
                           : nullptr;
    if (!pick && arch && config.contains("auto_map") && config["auto_map"].is_object())
      for (const auto& v : map.variants)
        if (!pick && std::find(v.classes.begin(), v.classes.end(), arch->get<std::string>()) != v.classes.end()) {
          pick = &v;
          how = "config.json's architectures " + arch->get<std::string>() + " (its model_type " + mt +
                " is remote code's, auto_map, which no variant lists)";
        }
  } else {
    // the checkpoint's keys: the variant whose own rules (those tagged with it) match most of
    // them; a tie goes to the default
    size_t best = 0;
    std::vector<const KeyMap::Variant*> tied;
    for (const auto& v : map.variants) {
      std::vector<Pattern> pats;
      for (const auto& r : map.rules)
        if (std::find(r.variants.begin(), r.variants.end(), v.name) != r.variants.end())
          for (int s = 0; s < 2; ++s)
            for (const auto& p : r.side[s]) {
              Pattern pat = Pattern::parse(p.pattern, map.source);
              if (!pat.has_offsets()) pats.push_back(std::move(pat));
            }
      size_t n = 0;
      for (const auto& k : keys) {
        std::map<std::string, std::string> vals;
        n += std::any_of(pats.begin(), pats.end(), [&](const Pattern& p) { return vals.clear(), p.match(k, vals); });
      }
      if (n > best) tied.clear(), best = n;
      if (n == best && n > 0) tied.push_back(&v);
    }
    for (const auto* v : tied)
      if (!pick || v->is_default) pick = pick && pick->is_default ? pick : v;
    how = pick ? "the checkpoint's keys (" + std::to_string(best) +
                     " match the variant's rules; config.json names no model_type)"
               : "";
    for (const auto& v : map.variants)
      if (!pick && v.is_default)
        pick = &v, how = "the default (config.json names no model_type and the checkpoint's keys do not tell)";
  }
  KeyMap out = map;
  out.rules.clear();
  for (const auto& r : map.rules)
    if (r.variants.empty() ||
        (pick && std::find(r.variants.begin(), r.variants.end(), pick->name) != r.variants.end())) {
      out.rules.push_back(r);
      out.rules.back().index = out.rules.size() - 1;
    }
  if (pick)
    for (const auto& [k, v] : pick->params.items()) out.params[k] = v;
  if (chosen) *chosen = pick ? pick->name : "";
  if (why) *why = how;
  return out;
}

json MappedModel::describe() const {
  json reasons_by_key = json::object();
  for (size_t i = 0; i < dropped.size() && i < reasons.size(); ++i) reasons_by_key[dropped[i]] = reasons[i];
  json j = {{"name", name},
            {"direction", from + "->" + to},
            {"mapped", inputs},
            {"outputs", tensors.size()},
            {"left_out", left_out},
            {"dropped", dropped},
            {"drop_reasons", reasons_by_key},
            {"missing", missing},
            {"excluded", excluded}};
  j["model"] = model.empty() ? json() : json(model);
  j["config"] = config.empty() ? json() : json(config);
  j["tie_word_embeddings"] = tied.empty() ? json() : json(tied == "true");
  j["params"] = params.is_null() ? json::object() : params;
  j["variant"] = variant.empty() ? json() : json(variant);
  j["dropped_zeros"] = zero_checked;
  json zeros = json::array();
  for (const auto& mt : tensors)
    if (mt.zeros) zeros.push_back(mt.meta.fqn);
  j["zeros"] = zeros;
  j["zero_reasons"] = zero_reasons.is_null() ? json::object() : zero_reasons;
  j["args_from"] = args_from.empty() ? json() : json(args_from);
  j["args_checked"] = args_checked;  // null: not a Megatron -> Hugging Face map
  j["args_note"] = args_note.empty() ? json() : json(args_note);
  j["trainer_config"] = trainer_config;  // null: not a torchtitan -> Hugging Face map
  j["vocab"] = vocab;
  j["megatron_args"] = megatron_args;
  return j;
}

std::vector<std::string> maps_to_hf_for(const std::vector<std::string>& keys, const json& config) {
  // The model's class: config.json's architectures, else its model_type's causal LM (a config saved
  // without a model, as `Config().save_pretrained` writes it, names no architectures): qwen3_moe is
  // Qwen3MoeForCausalLM, compared without case.
  auto lower = [](std::string t) {
    std::string out;
    for (char c : t)
      if (c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  std::string cls;
  if (config.is_object() && config.contains("architectures") && config["architectures"].is_array() &&
      !config["architectures"].empty() && config["architectures"][0].is_string())
    cls = lower(config["architectures"][0].get<std::string>());
  else if (config.is_object() && config.contains("model_type") && config["model_type"].is_string())
    cls = lower(config["model_type"].get<std::string>()) + "forcausallm";
  std::vector<std::string> fits, named;
  std::set<std::string> families;
  for (const KeyMap& m : builtin_key_maps()) {
    const int h = m.sides[1] == "hf" ? 1 : m.sides[0] == "hf" ? 0 : -1;
    if (h < 0) continue;
    const int s = 1 - h;
    std::vector<Pattern> pats[2];
    for (const auto& r : m.rules)
      for (int side = 0; side < 2; ++side)
        for (const auto& p : r.side[side]) {
          Pattern pat = Pattern::parse(p.pattern, m.source);
          if (!pat.has_offsets()) pats[side].push_back(std::move(pat));  // an offset needs a parameter
        }
    auto matches = [](const std::vector<Pattern>& ps, const std::string& k) {
      std::map<std::string, std::string> vals;
      return std::any_of(ps.begin(), ps.end(), [&](const Pattern& p) { return vals.clear(), p.match(k, vals); });
    };
    size_t model = 0, foreign = 0, hf = 0;
    bool covered = true;
    for (const std::string& k : keys) {
      const bool in_model = !m.has_model || std::any_of(m.model[s].begin(), m.model[s].end(),
                                                        [&](const std::string& p) { return k.rfind(p, 0) == 0; });
      const bool ours = matches(pats[s], k), theirs = matches(pats[h], k);
      model += in_model;
      covered = covered && (!in_model || ours);
      foreign += ours && !theirs;
      hf += theirs;
    }
    if (!covered || model == 0 || foreign <= hf) continue;
    if (!m.family.empty() && !families.insert(m.family).second) continue;
    fits.push_back(m.name);
    if (!cls.empty() &&
        std::any_of(m.models.begin(), m.models.end(), [&](const std::string& c) { return lower(c) == cls; }))
      named.push_back(m.name);
  }
  return named.empty() ? fits : named;
}

json variant_args(const KeyMap& map, const std::string& variant) {
  const KeyMap::Variant *pick = nullptr, *dflt = nullptr;
  json defaults = json::object();
  for (const auto& v : map.variants) {
    if (v.name == variant && v.args.is_object()) pick = &v;
    if (v.is_default && v.args.is_object()) dflt = &v;
    if (v.args.is_object() && v.args.contains("config_defaults") && v.args["config_defaults"].is_object())
      for (const auto& [model_type, d] : v.args["config_defaults"].items()) defaults[model_type] = d;
  }
  if (!pick) pick = dflt;
  if (!pick) return nullptr;
  json out = pick->args;
  out["config_defaults"] = std::move(defaults);
  return out;
}

std::vector<std::string> rule_kinds(const KeyMap& map) {
  std::set<std::string> kinds;
  for (const auto& r : map.rules) {
    if (r.side[0].empty() || r.side[1].empty())
      kinds.insert("drop");
    else if (r.shape == RuleShape::OneToOne)
      kinds.insert("rename");
    if (r.shape == RuleShape::Concat) kinds.insert("concat");
    if (!r.experts.is_null()) kinds.insert("stack");
    if (!r.groups.empty()) kinds.insert("groups");
    if (r.transpose) kinds.insert("transpose");
    if (r.interleave >= 0) kinds.insert("interleave");
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
