#include "meta/keymap.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <unordered_map>

#include "meta/pieces.h"
#include "util/error.h"
#include "util/file.h"

namespace dcpctl {

using nlohmann::json;

// The built-in maps' texts (src/maps/*.json, compiled in by CMake: keymap_builtin.cpp).
std::vector<std::pair<std::string, std::string>> builtin_key_map_texts();

namespace {

[[noreturn]] void bad_map(const std::string& source, const std::string& what) {
  throw UsageError(Where(source), "not a valid key map (docs/maps.md): " + what);
}

// ---- patterns: literal text and {NAME} placeholders matching decimal integers ----
struct Pattern {
  std::vector<std::string> lit;    // lit[0] {names[0]} lit[1] ... {names[k-1]} lit[k]
  std::vector<std::string> names;

  static Pattern parse(const std::string& s, const std::string& source) {
    Pattern p;
    std::string cur;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '{') {
        size_t e = s.find('}', i);
        if (e == std::string::npos || e == i + 1) bad_map(source, "pattern '" + s + "' has an unclosed or empty {}");
        p.lit.push_back(cur);
        cur.clear();
        p.names.push_back(s.substr(i + 1, e - i - 1));
        i = e;
      } else if (s[i] == '}') {
        bad_map(source, "pattern '" + s + "' has a stray }");
      } else {
        cur += s[i];
      }
    }
    p.lit.push_back(cur);
    for (size_t i = 1; i + 1 < p.lit.size(); ++i)
      if (p.lit[i].empty()) bad_map(source, "pattern '" + s + "' has two placeholders side by side");
    return p;
  }
  // Matches `key`, filling the placeholders' values (names -> digits).
  bool match(const std::string& key, std::map<std::string, std::string>& vals) const {
    size_t pos = 0;
    if (key.compare(0, lit[0].size(), lit[0]) != 0) return false;
    pos = lit[0].size();
    for (size_t i = 0; i < names.size(); ++i) {
      size_t s = pos;
      while (pos < key.size() && std::isdigit(static_cast<unsigned char>(key[pos]))) ++pos;
      if (pos == s || pos - s > 18) return false;
      std::string v = key.substr(s, pos - s);
      auto it = vals.find(names[i]);
      if (it != vals.end() && it->second != v) return false;
      vals[names[i]] = v;
      const std::string& l = lit[i + 1];
      if (key.compare(pos, l.size(), l) != 0) return false;
      pos += l.size();
    }
    return pos == key.size();
  }
  std::string fill(const std::map<std::string, std::string>& vals) const {
    std::string out = lit[0];
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = vals.find(names[i]);
      out += (it == vals.end() ? "{" + names[i] + "}" : it->second) + lit[i + 1];
    }
    return out;
  }
};

// ---- parameters: config.json keys, defaults, integer expressions ----
class Params {
 public:
  Params(const KeyMap& map, const MapConfig& config) : map_(map), config_(config) {}
  int64_t eval(const std::string& expr, const std::string& why) {
    size_t pos = 0;
    int64_t v = sum(expr, pos, why);
    skip(expr, pos);
    if (pos != expr.size()) bad_map(map_.source, "expression '" + expr + "' has trailing text at '" + expr.substr(pos) + "'");
    return v;
  }
  bool used_config() const { return used_config_; }

 private:
  static void skip(const std::string& e, size_t& p) {
    while (p < e.size() && std::isspace(static_cast<unsigned char>(e[p]))) ++p;
  }
  int64_t sum(const std::string& e, size_t& p, const std::string& why) {
    int64_t v = product(e, p, why);
    for (skip(e, p); p < e.size() && (e[p] == '+' || e[p] == '-'); skip(e, p)) {
      char op = e[p++];
      int64_t r = product(e, p, why);
      v = op == '+' ? v + r : v - r;
    }
    return v;
  }
  int64_t product(const std::string& e, size_t& p, const std::string& why) {
    int64_t v = atom(e, p, why);
    for (skip(e, p); p < e.size() && (e[p] == '*' || e[p] == '/'); skip(e, p)) {
      char op = e[p++];
      int64_t r = atom(e, p, why);
      if (op == '/' && r == 0) throw UsageError(Where(config_.path), "map " + map_.name + ": '" + e + "' divides by zero (" + why + ")");
      v = op == '*' ? v * r : v / r;
    }
    return v;
  }
  int64_t atom(const std::string& e, size_t& p, const std::string& why) {
    skip(e, p);
    if (p < e.size() && e[p] == '(') {
      ++p;
      int64_t v = sum(e, p, why);
      skip(e, p);
      if (p >= e.size() || e[p] != ')') bad_map(map_.source, "expression '" + e + "' misses a )");
      ++p;
      return v;
    }
    size_t s = p;
    if (p < e.size() && std::isdigit(static_cast<unsigned char>(e[p]))) {
      while (p < e.size() && std::isdigit(static_cast<unsigned char>(e[p]))) ++p;
      return std::stoll(e.substr(s, p - s));
    }
    while (p < e.size() && (std::isalnum(static_cast<unsigned char>(e[p])) || e[p] == '_')) ++p;
    if (p == s) bad_map(map_.source, "expression '" + e + "': expected a number, a name or ( at '" + e.substr(s) + "'");
    return name(e.substr(s, p - s), why);
  }
  // A parameter of the map, else a config key.
  int64_t name(const std::string& n, const std::string& why) {
    auto done = values_.find(n);
    if (done != values_.end()) return done->second;
    if (!active_.insert(n).second) bad_map(map_.source, "parameter " + n + " is defined in terms of itself");
    int64_t v;
    if (map_.params.contains(n)) {
      const json& spec = map_.params[n];
      std::vector<std::string> keys;
      if (spec.contains("config")) {
        if (spec["config"].is_string()) keys.push_back(spec["config"].get<std::string>());
        else for (const auto& k : spec["config"]) keys.push_back(k.get<std::string>());
      }
      std::optional<int64_t> found;
      for (const auto& k : keys)
        if ((found = config_int(k))) break;
      if (!found && spec.contains("default")) found = eval(spec["default"].get<std::string>(), why);
      if (!found) {
        std::string list;
        for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
        throw UsageError(Where(config_.path), "map " + map_.name + " needs parameter " + n + " (" + why + "): " +
                                                  (config_.json.is_null() ? "no config.json was found (" + config_.path + ")"
                                                                          : "config.json has none of " + list) +
                                                  "; give --config FILE or --assets DIR");
      }
      v = *found;
    } else if (auto c = config_int(n)) {
      v = *c;
    } else {
      throw UsageError(Where(config_.path), "map " + map_.name + " needs " + n + " (" + why + "): " +
                                                (config_.json.is_null() ? "no config.json was found (" + config_.path + ")"
                                                                        : "config.json has no integer " + n) +
                                                "; give --config FILE or --assets DIR");
    }
    active_.erase(n);
    values_[n] = v;
    return v;
  }
  std::optional<int64_t> config_int(const std::string& k) {
    if (!config_.json.is_object() || !config_.json.contains(k)) return std::nullopt;
    const json& v = config_.json[k];
    if (!v.is_number_integer()) return std::nullopt;
    used_config_ = true;
    return v.get<int64_t>();
  }
  const KeyMap& map_;
  const MapConfig& config_;
  std::unordered_map<std::string, int64_t> values_;
  std::set<std::string> active_;
  bool used_config_ = false;
};

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
  if (!j.contains("sides") || !j["sides"].is_array() || j["sides"].size() != 2 || !j["sides"][0].is_string() || !j["sides"][1].is_string() ||
      j["sides"][0] == j["sides"][1])
    bad_map(source, "\"sides\" must name two sides");
  m.sides[0] = j["sides"][0];
  m.sides[1] = j["sides"][1];
  m.params = j.value("params", json::object());
  if (!m.params.is_object()) bad_map(source, "\"params\" must be an object");
  for (const auto& [k, v] : m.params.items()) {
    bool ok = v.is_object() && (v.contains("config") || v.contains("default"));
    if (ok && v.contains("config")) {
      const json& c = v["config"];
      ok = c.is_string() || (c.is_array() && std::all_of(c.begin(), c.end(), [](const json& x) { return x.is_string(); }));
    }
    if (ok && v.contains("default")) ok = v["default"].is_string();
    if (!ok) bad_map(source, "parameter " + k + ": {\"config\": key or [keys], \"default\": expression}");
  }
  if (!j.contains("rules") || !j["rules"].is_array() || j["rules"].empty()) bad_map(source, "\"rules\" must be a non-empty list");
  for (size_t i = 0; i < j["rules"].size(); ++i) {
    const json& r = j["rules"][i];
    if (!r.is_object()) bad_map(source, "rule " + std::to_string(i) + " is not an object");
    for (const auto& [k, v] : r.items())
      if (k != m.sides[0] && k != m.sides[1] && k != "rope" && k != "dim" && k != "experts" && k != "note")
        bad_map(source, "rule " + std::to_string(i) + " has an unknown field \"" + k + "\"");
    KeyMap::Rule rule;
    rule.index = i;
    for (int s = 0; s < 2; ++s) rule.side[s] = parse_side(r.value(m.sides[s], json()), source, i, rule.list[s]);
    if (rule.side[0].empty() && rule.side[1].empty()) bad_map(source, "rule " + std::to_string(i) + " names neither side");
    if (rule.list[0] && rule.list[1]) bad_map(source, "rule " + std::to_string(i) + ": only one side may be a list");
    rule.dim = r.value("dim", int64_t{0});
    rule.rope = r.value("rope", json());
    rule.experts = r.value("experts", json());
    if (!rule.rope.is_null() && !(rule.rope.is_object() && rule.rope.contains("heads") && rule.rope.contains("head_dim")))
      bad_map(source, "rule " + std::to_string(i) + ": \"rope\" is {\"heads\": expr, \"head_dim\": expr}");
    if (!rule.experts.is_null() && !(rule.experts.is_object() && rule.experts.contains("count") && rule.experts["count"].is_string()))
      bad_map(source, "rule " + std::to_string(i) + ": \"experts\" is {\"dim\": n, \"count\": expr}");
    if (!rule.experts.is_null() && (rule.list[0] || rule.list[1] || rule.side[0].empty() || rule.side[1].empty()))
      bad_map(source, "rule " + std::to_string(i) + ": \"experts\" needs one pattern on each side");
    if (!rule.rope.is_null() && (rule.list[0] || rule.list[1]))
      bad_map(source, "rule " + std::to_string(i) + ": a list side carries \"rope\" on its parts");
    m.rules.push_back(std::move(rule));
  }
  return m;
}

std::string read_text(const std::string& path) {
  ReadFile f(path);
  if (f.size() > (64u << 20)) throw UsageError(Where(path), "larger than 64 MiB: not a key map or config");
  std::string text(f.size(), '\0');
  f.read_at(0, text.data(), text.size());
  return text;
}

// ---- RoPE row orders ----
// The rows of `heads` groups of `head_dim`: output row i comes from input row perm[i].
// interleaved -> halves (torchtitan's _permute): out (h, a, b) <- in (h, b, a), a in {0, 1}.
// halves -> interleaved (_reverse_permute): out (h, b, a) <- in (h, a, b).
std::shared_ptr<const std::vector<int64_t>> rope_rows(int64_t heads, int64_t head_dim, bool to_halves) {
  auto v = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(heads * head_dim));
  int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < head_dim; ++j) {
      int64_t src = to_halves ? h * head_dim + (j % half) * 2 + j / half : h * head_dim + (j % 2) * half + j / 2;
      (*v)[static_cast<size_t>(h * head_dim + j)] = src;
    }
  return v;
}

struct Input {
  uint32_t tensor;
  const SelectedItem* item;
};

}  // namespace

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

MappedModel apply_key_map(const KeyMap& map, const Metadata& md, const std::vector<SelectedItem>& items, const MapConfig& config) {
  MappedModel out;
  out.name = map.name;
  // Which side the input is on: the one whose patterns match more of its tensor keys.
  std::vector<std::vector<Pattern>> pats[2];
  for (int s = 0; s < 2; ++s)
    for (const auto& r : map.rules) {
      pats[s].emplace_back();
      for (const auto& p : r.side[s]) pats[s].back().push_back(Pattern::parse(p.pattern, map.source));
    }
  size_t hits[2] = {0, 0};
  for (const auto& it : items) {
    if (!it.tensor) continue;
    for (int s = 0; s < 2; ++s) {
      bool any = false;
      for (const auto& rp : pats[s])
        for (const auto& p : rp) {
          std::map<std::string, std::string> v;
          any = any || p.match(it.key, v);
        }
      hits[s] += any;
    }
  }
  if (hits[0] == 0 && hits[1] == 0)
    throw UsageError(Where(md.source), "map " + map.name + " matches none of the selected keys (neither its " + map.sides[0] + " nor its " +
                                           map.sides[1] + " names); check --select, or the map");
  if (hits[0] == hits[1])
    throw UsageError(Where(md.source), "map " + map.name + ": as many keys match its " + map.sides[0] + " names as its " + map.sides[1] +
                                           " names (" + std::to_string(hits[0]) + "); the direction is ambiguous");
  const int from = hits[0] > hits[1] ? 0 : 1, to = 1 - from;
  out.from = map.sides[from];
  out.to = map.sides[to];
  Params params(map, config);

  std::unordered_map<std::string, Input> by_key;
  for (const auto& it : items)
    if (it.tensor) by_key.emplace(it.key, Input{it.index, &it});
  std::set<std::string> used;
  auto tensor_of = [&](uint32_t i) -> const TensorMeta& { return md.tensors[i]; };
  auto shape_error = [&](const std::string& key, const std::string& what) {
    throw UsageError(Where(config.path, std::nullopt, key), "map " + map.name + ": " + what + " (is the config.json the checkpoint's model's?)");
  };
  auto new_tensor = [&](const std::string& key, std::vector<int64_t> shape, const TensorMeta& like, size_t rule) {
    MappedTensor mt;
    mt.meta.fqn = key;
    mt.meta.dtype_name = like.dtype_name;
    mt.meta.dtype = like.dtype;
    mt.meta.requires_grad = like.requires_grad;
    mt.meta.shape = std::move(shape);
    mt.rule = rule;
    return mt;
  };
  auto rope_of = [&](const json& rope, int64_t rows, const std::string& key, const std::string& rule) -> std::shared_ptr<const std::vector<int64_t>> {
    if (rope.is_null()) return nullptr;
    std::string why = "the RoPE row order of " + key + " (" + rule + ")";
    int64_t heads = params.eval(rope["heads"].get<std::string>(), why), hd = params.eval(rope["head_dim"].get<std::string>(), why);
    if (heads <= 0 || hd <= 0 || hd % 2 || heads * hd != rows)
      shape_error(key, "its " + std::to_string(rows) + " rows are not " + std::to_string(heads) + " heads of " + std::to_string(hd) +
                           " (an even head_dim) for the RoPE row order");
    // The first side holds the interleaved order.
    return rope_rows(heads, hd, from == 0);
  };

  // Each input tensor, in order: the rule that takes it.
  for (const auto& it : items) {
    if (!it.tensor) {
      out.left_out.push_back(it.key);
      continue;
    }
    if (used.count(it.key)) continue;
    bool taken = false;
    for (size_t ri = 0; ri < map.rules.size() && !taken; ++ri) {
      const KeyMap::Rule& rule = map.rules[ri];
      std::string rname = "rule " + std::to_string(ri);
      const auto& fp = pats[from][ri];
      const auto& tp = pats[to][ri];
      for (size_t pi = 0; pi < fp.size() && !taken; ++pi) {
        std::map<std::string, std::string> vals;
        if (!fp[pi].match(it.key, vals)) continue;
        taken = true;
        if (tp.empty()) {  // a key the other side lacks
          out.dropped.push_back(it.key);
          used.insert(it.key);
          break;
        }
        const TensorMeta& t = tensor_of(it.index);
        if (!rule.experts.is_null()) {
          int64_t dim = rule.experts.value("dim", int64_t{0});
          std::string why = "the experts of " + it.key + " (" + rname + ")";
          int64_t count = params.eval(rule.experts["count"].get<std::string>(), why);
          // The per-expert side's pattern has one placeholder more than the stacked side's: the expert.
          const bool stacked_is_from = fp[0].names.size() < tp[0].names.size();
          const Pattern& per = stacked_is_from ? tp[0] : fp[0];
          const Pattern& stacked = stacked_is_from ? fp[0] : tp[0];
          std::string ename;
          for (const auto& n : per.names)
            if (std::find(stacked.names.begin(), stacked.names.end(), n) == stacked.names.end()) ename = n;
          if (ename.empty() || per.names.size() != stacked.names.size() + 1)
            bad_map(map.source, rname + ": \"experts\" needs exactly one placeholder more on the per-expert side (the expert)");
          if (stacked_is_from) {
            // One stacked tensor -> count tensors.
            if (dim < 0 || dim >= static_cast<int64_t>(t.ndim()) || t.shape[static_cast<size_t>(dim)] != count)
              shape_error(it.key, "dimension " + std::to_string(dim) + " of shape " + whole_box(t).text() + " is not the " + std::to_string(count) + " experts");
            for (int64_t e = 0; e < count; ++e) {
              auto v = vals;
              v[ename] = std::to_string(e);
              std::vector<int64_t> shape = t.shape;
              shape.erase(shape.begin() + dim);
              MappedTensor mt = new_tensor(tp[0].fill(v), shape, t, ri);
              MapPart part;
              part.tensor = it.index;
              part.from = whole_box(t);
              part.from.offsets[static_cast<size_t>(dim)] = e;
              part.from.sizes[static_cast<size_t>(dim)] = 1;
              part.to.assign(shape.size(), 0);
              part.drop = static_cast<int>(dim);
              mt.parts.push_back(part);
              mt.transforms = {"unstack"};
              mt.inputs.push_back(it.key);
              out.tensors.push_back(std::move(mt));
            }
            used.insert(it.key);
          } else {
            // count per-expert tensors -> one stacked tensor: gather them all.
            std::vector<const Input*> parts;
            std::vector<std::string> keys;
            for (int64_t e = 0; e < count; ++e) {
              auto v = vals;
              v[ename] = std::to_string(e);
              std::string k = fp[0].fill(v);
              auto f = by_key.find(k);
              if (f == by_key.end()) {
                out.missing.push_back(tp[0].fill(vals) + " (no " + k + ")");
                parts.clear();
                break;
              }
              parts.push_back(&f->second);
              keys.push_back(k);
            }
            for (const auto& k : keys) used.insert(k);
            if (parts.empty()) break;
            std::vector<int64_t> shape = t.shape;
            if (dim < 0 || dim > static_cast<int64_t>(shape.size())) shape_error(it.key, "experts dimension out of range");
            shape.insert(shape.begin() + dim, count);
            auto v = vals;
            v.erase(ename);
            MappedTensor mt = new_tensor(tp[0].fill(v), shape, t, ri);
            for (int64_t e = 0; e < count; ++e) {
              const TensorMeta& pe = tensor_of(parts[static_cast<size_t>(e)]->tensor);
              if (pe.shape != t.shape || pe.dtype_name != t.dtype_name)
                shape_error(keys[static_cast<size_t>(e)], "experts of one stack differ in shape or dtype from " + keys[0]);
              MapPart part;
              part.tensor = parts[static_cast<size_t>(e)]->tensor;
              part.from = whole_box(pe);
              part.to.assign(shape.size(), 0);
              part.to[static_cast<size_t>(dim)] = e;
              part.add = static_cast<int>(dim);
              mt.parts.push_back(part);
              mt.transforms = {"stack"};
              mt.inputs.push_back(keys[static_cast<size_t>(e)]);
            }
            out.tensors.push_back(std::move(mt));
          }
          break;
        }
        if (!rule.list[from] && !rule.list[to]) {  // 1:1
          MappedTensor mt = new_tensor(tp[0].fill(vals), t.shape, t, ri);
          MapPart part;
          part.tensor = it.index;
          part.from = whole_box(t);
          part.to.assign(t.ndim(), 0);
          if (!rule.rope.is_null()) {
            if (t.ndim() < 1) shape_error(it.key, "a 0-d tensor has no rows to reorder");
            part.rows = rope_of(rule.rope, t.shape[0], it.key, rname);
          }
          mt.transforms = {part.rows ? "rope" : "rename"};
          mt.parts.push_back(part);
          mt.inputs.push_back(it.key);
          out.tensors.push_back(std::move(mt));
          used.insert(it.key);
          break;
        }
        const int64_t dim = rule.dim;
        if (rule.list[to]) {  // split one tensor into the listed ones
          if (dim < 0 || dim >= static_cast<int64_t>(t.ndim())) shape_error(it.key, "split dimension " + std::to_string(dim) + " out of range");
          int64_t at = 0;
          std::vector<std::pair<int64_t, int64_t>> spans;
          for (const auto& p : rule.side[to]) {
            int64_t n = params.eval(p.size, "the part " + p.pattern + " of " + it.key + " (" + rname + ")");
            spans.push_back({at, n});
            at += n;
          }
          if (at != t.shape[static_cast<size_t>(dim)])
            shape_error(it.key, "its parts' sizes sum to " + std::to_string(at) + ", dimension " + std::to_string(dim) + " is " +
                                    std::to_string(t.shape[static_cast<size_t>(dim)]));
          for (size_t k = 0; k < rule.side[to].size(); ++k) {
            std::vector<int64_t> shape = t.shape;
            shape[static_cast<size_t>(dim)] = spans[k].second;
            MappedTensor mt = new_tensor(tp[k].fill(vals), shape, t, ri);
            MapPart part;
            part.tensor = it.index;
            part.from = whole_box(t);
            part.from.offsets[static_cast<size_t>(dim)] = spans[k].first;
            part.from.sizes[static_cast<size_t>(dim)] = spans[k].second;
            part.to.assign(t.ndim(), 0);
            if (!rule.side[to][k].rope.is_null()) {
              if (dim != 0) shape_error(it.key, "RoPE rows of a part split along dimension " + std::to_string(dim));
              part.rows = rope_of(rule.side[to][k].rope, spans[k].second, mt.meta.fqn, rname);
            }
            mt.transforms = {"split"};
            if (part.rows) mt.transforms.push_back("rope");
            mt.parts.push_back(part);
            mt.inputs.push_back(it.key);
            out.tensors.push_back(std::move(mt));
          }
          used.insert(it.key);
          break;
        }
        // Join the listed tensors into one: gather every part under the same placeholders.
        std::vector<const Input*> parts;
        std::vector<std::string> keys;
        for (size_t k = 0; k < fp.size(); ++k) {
          std::string key = fp[k].fill(vals);
          auto f = by_key.find(key);
          if (f == by_key.end()) {
            out.missing.push_back(tp[0].fill(vals) + " (no " + key + ")");
            parts.clear();
            break;
          }
          parts.push_back(&f->second);
          keys.push_back(key);
        }
        for (size_t k = 0; k < fp.size(); ++k) used.insert(fp[k].fill(vals));
        if (parts.empty()) break;
        std::vector<int64_t> shape = tensor_of(parts[0]->tensor).shape;
        if (dim < 0 || dim >= static_cast<int64_t>(shape.size())) shape_error(keys[0], "join dimension " + std::to_string(dim) + " out of range");
        int64_t total = 0;
        for (size_t k = 0; k < parts.size(); ++k) {
          const TensorMeta& pk = tensor_of(parts[k]->tensor);
          std::vector<int64_t> a = pk.shape, b = shape;
          if (a.size() != b.size()) shape_error(keys[k], "parts of one join differ in rank");
          a[static_cast<size_t>(dim)] = b[static_cast<size_t>(dim)] = 0;
          if (a != b || pk.dtype_name != tensor_of(parts[0]->tensor).dtype_name) shape_error(keys[k], "parts of one join differ in shape or dtype");
          int64_t want = params.eval(rule.side[from][k].size, "the part " + rule.side[from][k].pattern + " (" + rname + ")");
          if (want != pk.shape[static_cast<size_t>(dim)])
            shape_error(keys[k], "dimension " + std::to_string(dim) + " is " + std::to_string(pk.shape[static_cast<size_t>(dim)]) + ", the map says " +
                                     std::to_string(want));
          total += want;
        }
        shape[static_cast<size_t>(dim)] = total;
        MappedTensor mt = new_tensor(tp[0].fill(vals), shape, tensor_of(parts[0]->tensor), ri);
        int64_t at = 0;
        for (size_t k = 0; k < parts.size(); ++k) {
          const TensorMeta& pk = tensor_of(parts[k]->tensor);
          MapPart part;
          part.tensor = parts[k]->tensor;
          part.from = whole_box(pk);
          part.to.assign(shape.size(), 0);
          part.to[static_cast<size_t>(dim)] = at;
          if (!rule.side[from][k].rope.is_null()) {
            if (dim != 0) shape_error(keys[k], "RoPE rows of a part joined along dimension " + std::to_string(dim));
            part.rows = rope_of(rule.side[from][k].rope, pk.shape[0], keys[k], rname);
          }
          if (mt.transforms.empty()) mt.transforms = {"join"};
          if (part.rows && mt.transforms.size() == 1) mt.transforms.push_back("rope");
          at += pk.shape[static_cast<size_t>(dim)];
          mt.parts.push_back(part);
          mt.inputs.push_back(keys[k]);
        }
        out.tensors.push_back(std::move(mt));
      }
    }
    if (!taken) out.left_out.push_back(it.key);
  }
  if (out.tensors.empty())
    throw UsageError(Where(md.source), "map " + map.name + " makes no tensor of the selection (every matched key is dropped or incomplete)");
  std::set<std::string> seen;
  for (const auto& mt : out.tensors)
    if (!seen.insert(mt.meta.fqn).second)
      throw UsageError(Where(md.source, std::nullopt, mt.meta.fqn), "map " + map.name + " makes this key twice (two rules, or a pattern matching two inputs)");
  if (params.used_config()) out.config = config.path;
  std::set<std::string> inputs;
  for (const auto& mt : out.tensors) inputs.insert(mt.inputs.begin(), mt.inputs.end());
  out.inputs = inputs.size();
  if (config.json.is_object() && config.json.contains("tie_word_embeddings") && config.json["tie_word_embeddings"].is_boolean())
    out.tied = config.json["tie_word_embeddings"].get<bool>() ? "true" : "false";
  return out;
}

json MappedModel::describe() const {
  json j = {{"name", name},         {"direction", from + "->" + to}, {"mapped", inputs}, {"outputs", tensors.size()}, {"left_out", left_out},
            {"dropped", dropped},   {"missing", missing}};
  j["config"] = config.empty() ? json() : json(config);
  j["tie_word_embeddings"] = tied.empty() ? json() : json(tied == "true");
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

bool renames_whole(const Metadata& md, const MappedTensor& mt) {
  if (mt.parts.size() != 1) return false;
  const MapPart& p = mt.parts[0];
  const TensorMeta& t = md.tensors[p.tensor];
  return p.drop < 0 && p.add < 0 && !p.rows && p.from.sizes == t.shape && mt.meta.shape == t.shape &&
         std::all_of(p.from.offsets.begin(), p.from.offsets.end(), [](int64_t o) { return o == 0; }) &&
         std::all_of(p.to.begin(), p.to.end(), [](int64_t o) { return o == 0; }) && mt.meta.dtype == t.dtype;
}

}  // namespace dcpctl
