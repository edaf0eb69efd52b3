#include "meta/keymap_terms.h"

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
      if (inside.empty() || !std::all_of(inside.begin(), inside.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }))
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
      int64_t n = std::stoll(v) - params->eval(offsets[i], "the placeholder {" + names[i] + " + " + offsets[i] + "} of key " + key);
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
      v = std::to_string(std::stoll(v) + params->eval(offsets[i], "the placeholder {" + names[i] + " + " + offsets[i] + "} of " + lit[0] + "..."));
    }
    out += v + lit[i + 1];
  }
  return out;
}

int64_t Params::eval(const std::string& expr, const std::string& why) {
  size_t pos = 0;
  int64_t v = sum(expr, pos, why);
  skip(expr, pos);
  if (pos != expr.size()) bad_map(map_.source, "expression '" + expr + "' has trailing text at '" + expr.substr(pos) + "'");
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
    if (op == '/' && r == 0) throw UsageError(Where(config_.path), "map " + map_.name + ": '" + e + "' divides by zero (" + why + ")");
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
  values_[n] = v;
  return v;
}

std::optional<int64_t> Params::config_int(const std::string& k) {
  if (!config_.json.is_object()) return std::nullopt;
  // A key as written, else a dotted path into nested objects: a multimodal release's config.json
  // keeps the language model's numbers under text_config (Qwen 3.5, Kimi K2.5).
  const json* v = nullptr;
  if (config_.json.contains(k)) {
    v = &config_.json[k];
  } else if (k.find('.') != std::string::npos) {
    v = &config_.json;
    for (size_t at = 0; v;) {
      size_t dot = k.find('.', at);
      std::string name = k.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
      v = v->is_object() && v->contains(name) ? &(*v)[name] : nullptr;
      if (dot == std::string::npos) break;
      at = dot + 1;
    }
  }
  if (!v || !v->is_number_integer()) return std::nullopt;
  const json& found = *v;
  used_config_ = true;
  return found.get<int64_t>();
}

}  // namespace dcpctl
