#include "view/maps/keymap_terms.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "util/error.h"

namespace dcpctl {

using nlohmann::json;

namespace {

void skip(const std::string& e, size_t& p) {
  while (p < e.size() && std::isspace(static_cast<unsigned char>(e[p]))) ++p;
}

}  // namespace

void bad_map(const std::string& source, const std::string& what) {
  throw UsageError(Where(source), "not a valid key map (docs/maps.md): " + what);
}

Pattern Pattern::parse(const std::string& s, const std::string& source) {
  Pattern p;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{') {
      size_t e = s.find('}', i);
      if (e == std::string::npos || e == i + 1) bad_map(source, "pattern '" + s + "' has an unclosed or empty {}");
      p.lit.push_back(cur);
      cur.clear();
      std::string inside = s.substr(i + 1, e - i - 1), offset;
      if (size_t plus = inside.find('+'); plus != std::string::npos) {
        offset = inside.substr(plus + 1);
        inside = inside.substr(0, plus);
        auto trim = [](std::string& x) {
          while (!x.empty() && std::isspace(static_cast<unsigned char>(x.back()))) x.pop_back();
          while (!x.empty() && std::isspace(static_cast<unsigned char>(x.front()))) x.erase(x.begin());
        };
        trim(inside);
        trim(offset);
        if (offset.empty()) bad_map(source, "pattern '" + s + "': {NAME + EXPR} needs an expression after +");
      }
      if (inside.empty() || !std::all_of(inside.begin(), inside.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
          }))
        bad_map(source, "pattern '" + s + "': a placeholder is {NAME} or {NAME + EXPR}, NAME letters, digits and _");
      p.names.push_back(inside);
      p.offsets.push_back(offset);
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

bool Pattern::has_offsets() const {
  return std::any_of(offsets.begin(), offsets.end(), [](const std::string& o) { return !o.empty(); });
}

bool Pattern::match(const std::string& key, std::map<std::string, std::string>& vals, Params* params) const {
  size_t pos = 0;
  if (key.compare(0, lit[0].size(), lit[0]) != 0) return false;
  pos = lit[0].size();
  std::vector<std::string> digits(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    size_t s = pos;
    while (pos < key.size() && std::isdigit(static_cast<unsigned char>(key[pos]))) ++pos;
    if (pos == s || pos - s > 18) return false;
    digits[i] = key.substr(s, pos - s);
    const std::string& l = lit[i + 1];
    if (key.compare(pos, l.size(), l) != 0) return false;
    pos += l.size();
  }
  if (pos != key.size()) return false;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string v = digits[i];
    if (!offsets[i].empty()) {
      if (!params) throw std::logic_error("Pattern::match: an offset needs the map's parameters");
      int64_t n = std::stoll(v) -
                  params->eval(offsets[i], "the placeholder {" + names[i] + " + " + offsets[i] + "} of key " + key);
      if (n < 0) return false;
      v = std::to_string(n);
    }
    auto it = vals.find(names[i]);
    if (it != vals.end() && it->second != v) return false;
    vals[names[i]] = v;
  }
  return true;
}

std::string Pattern::fill(const std::map<std::string, std::string>& vals, Params* params) const {
  std::string out = lit[0];
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = vals.find(names[i]);
    std::string v = it == vals.end() ? "{" + names[i] + "}" : it->second;
    if (it != vals.end() && !offsets[i].empty()) {
      if (!params) throw std::logic_error("Pattern::fill: an offset needs the map's parameters");
      v = std::to_string(std::stoll(v) + params->eval(offsets[i], "the placeholder {" + names[i] + " + " + offsets[i] +
                                                                      "} of " + lit[0] + "..."));
    }
    out += v + lit[i + 1];
  }
  return out;
}

int64_t Params::eval(const std::string& expr, const std::string& why) {
  size_t pos = 0;
  int64_t v = sum(expr, pos, why);
  skip(expr, pos);
  if (pos != expr.size())
    bad_map(map_.source, "expression '" + expr + "' has trailing text at '" + expr.substr(pos) + "'");
  return v;
}

int64_t Params::sum(const std::string& e, size_t& p, const std::string& why) {
  int64_t v = product(e, p, why);
  for (skip(e, p); p < e.size() && (e[p] == '+' || e[p] == '-'); skip(e, p)) {
    char op = e[p++];
    int64_t r = product(e, p, why);
    v = op == '+' ? v + r : v - r;
  }
  return v;
}

int64_t Params::product(const std::string& e, size_t& p, const std::string& why) {
  int64_t v = atom(e, p, why);
  for (skip(e, p); p < e.size() && (e[p] == '*' || e[p] == '/'); skip(e, p)) {
    char op = e[p++];
    int64_t r = atom(e, p, why);
    if (op == '/' && r == 0)
      throw UsageError(Where(config_.path), "map " + map_.name + ": '" + e + "' divides by zero (" + why + ")");
    v = op == '*' ? v * r : v / r;
  }
  return v;
}

int64_t Params::atom(const std::string& e, size_t& p, const std::string& why) {
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
int64_t Params::name(const std::string& n, const std::string& why) {
  auto done = values_.find(n);
  if (done != values_.end()) return done->second;
  if (!active_.insert(n).second) bad_map(map_.source, "parameter " + n + " is defined in terms of itself");
  // A parameter that could not be resolved is not being resolved any more: the direction's pass
  // over the keys asks again (keymap_rules.cpp), and must hear "needs parameter", not a loop.
  struct Leave {
    std::set<std::string>& active;
    const std::string& n;
    ~Leave() { active.erase(n); }
  } leave{active_, n};
  int64_t v;
  std::string from;
  if (map_.params.contains(n)) {
    const json& spec = map_.params[n];
    std::vector<std::string> keys;
    if (spec.contains("config")) {
      if (spec["config"].is_string())
        keys.push_back(spec["config"].get<std::string>());
      else
        for (const auto& k : spec["config"]) keys.push_back(k.get<std::string>());
    }
    std::optional<int64_t> found;
    for (const auto& k : keys)
      if ((found = config_int(k))) break;
    if (!found && spec.contains("shape")) found = shape_int(spec["shape"]);
    if (found) from = from_;
    if (!found && spec.contains("default")) {
      found = eval(spec["default"].get<std::string>(), why);
      from = "the default " + spec["default"].get<std::string>();
    }
    if (!found) {
      std::string list;
      for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
      if (spec.contains("shape")) list += std::string(list.empty() ? "" : ", ") + "nor the tensors its \"shape\" names";
      throw UsageError(
          Where(config_.path),
          "map " + map_.name + " needs parameter " + n + " (" + why + "): " +
              (config_.json.is_null() ? "no config.json was found (" + config_.path + ")"
                                      : "config.json has none of " + list + " (nor an alias transformers gives them)") +
              "; give --config FILE or --assets DIR");
    }
    v = *found;
  } else if (auto c = config_int(n)) {
    v = *c;
    from = from_;
  } else {
    throw UsageError(Where(config_.path),
                     "map " + map_.name + " needs " + n + " (" + why + "): " +
                         (config_.json.is_null() ? "no config.json was found (" + config_.path + ")"
                                                 : "config.json has no integer " + n) +
                         "; give --config FILE or --assets DIR");
  }
  values_[n] = v;
  sources_[n] = {{"value", v}, {"from", from}};
  return v;
}

namespace {

// `k` as written in `obj`, else as a dotted path into nested objects.
const json* lookup(const json& obj, const std::string& k) {
  if (!obj.is_object()) return nullptr;
  if (obj.contains(k)) return &obj[k];
  if (k.find('.') == std::string::npos) return nullptr;
  const json* v = &obj;
  for (size_t at = 0; v;) {
    size_t dot = k.find('.', at);
    std::string name = k.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    v = v->is_object() && v->contains(name) ? &(*v)[name] : nullptr;
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  return v;
}

}  // namespace

// The built-in table's text (src/view/maps/config_aliases.json, compiled in by CMake).
std::string config_aliases_text();

const json& config_aliases(const std::string& model_type) {
  static const json table = [] {
    json j = json::parse(config_aliases_text(), nullptr, false);
    return j.is_object() && j.contains("attribute_map") ? j["attribute_map"] : json::object();
  }();
  static const json none;
  auto it = table.find(model_type);
  return it == table.end() ? none : *it;
}

std::optional<int64_t> Params::config_int(const std::string& k) {
  if (!config_.json.is_object()) return std::nullopt;
  // In one config object: as written, else through its model_type's attribute_map both ways.
  auto in = [&](const json& obj, const std::string& prefix) -> std::optional<int64_t> {
    auto found = [&](const json* v, const std::string& as, const std::string& note) -> std::optional<int64_t> {
      if (!v || !v->is_number_integer()) return std::nullopt;
      from_ = "config.json " + prefix + as + note;
      return v->get<int64_t>();
    };
    if (auto r = found(lookup(obj, k), k, "")) return r;
    const std::string type =
        obj.contains("model_type") && obj["model_type"].is_string() ? obj["model_type"].get<std::string>() : "";
    const json& amap = config_aliases(type);
    if (!amap.is_object()) return std::nullopt;
    const std::string note = " (transformers' attribute_map of " + type + ": " + k + " is ";
    if (amap.contains(k) && amap[k].is_string())
      if (auto r = found(lookup(obj, amap[k].get<std::string>()), amap[k].get<std::string>(), note + "an alias of it)"))
        return r;
    for (const auto& [alias, real] : amap.items())
      if (real == k)
        if (auto r = found(lookup(obj, alias), alias, note + "what it aliases)")) return r;
    return std::nullopt;
  };
  std::optional<int64_t> r = in(config_.json, "");
  // A multimodal release keeps the language model's numbers under text_config.
  if (!r && k.find('.') == std::string::npos && config_.json.contains("text_config") &&
      config_.json["text_config"].is_object())
    r = in(config_.json["text_config"], "text_config.");
  if (r) used_config_ = true;
  return r;
}

std::optional<int64_t> Params::shape_int(const json& spec) {
  if (!shapes_) return std::nullopt;
  for (const auto& s : spec) {
    Pattern p = Pattern::parse(s["key"].get<std::string>(), map_.source);
    std::optional<int64_t> best;
    std::string seen;
    for (const auto& [key, shape] : *shapes_) {
      std::map<std::string, std::string> vals;
      if (!p.match(key, vals)) continue;
      if (s.contains("dim")) {
        const int64_t d = s["dim"].get<int64_t>();
        if (d < 0 || d >= static_cast<int64_t>(shape.size())) continue;
        from_ = "dimension " + std::to_string(d) + " of " + key + " (config.json lacks it)";
        return shape[static_cast<size_t>(d)];
      }
      const int64_t v = std::stoll(vals[s["count"].get<std::string>()]) + 1;
      if (!best || v > *best) best = v, seen = key;
    }
    if (best) {
      from_ = "the keys " + s["key"].get<std::string>() + " ({" + s["count"].get<std::string>() + "} up to " +
              std::to_string(*best - 1) + ", config.json lacks it)";
      return best;
    }
  }
  return std::nullopt;
}

}  // namespace dcpctl
