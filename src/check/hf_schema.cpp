#include "check/hf_schema.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string_view>

#include "meta/codecs/codecs.h"
#include "util/error.h"
#include "view/maps/keymap_terms.h"
#include "view/moe_sparsity.h"

namespace dcpctl {

using nlohmann::json;

// The schema's text (src/check/hf_schema.json, compiled in by CMake: hf_schema_builtin.cpp).
std::string hf_schema_text();

namespace hf_schema_impl {

// A scan of the compiled-in schema's structure, for its index (hf_schema): the text tools/hf_schema.py
// writes with json.dump, so anything malformed is this build's defect (logic_error), not input.
static char char_at(std::string_view t, size_t at) {
  return at < t.size() ? t[at] : '\0';
}

static size_t skip_space(std::string_view t, size_t at) {
  while (at < t.size() && (t[at] == ' ' || t[at] == '\n' || t[at] == '\r' || t[at] == '\t')) ++at;
  return at;
}

[[noreturn]] static void malformed(size_t at) {
  throw std::logic_error("the compiled-in model schema is malformed at byte " + std::to_string(at));
}

// Past the closing quote of the string whose opening quote is at `at`.
static size_t string_end(std::string_view t, size_t at) {
  for (++at; at < t.size(); ++at)
    if (t[at] == '\\')
      ++at;
    else if (t[at] == '"')
      return at + 1;
  malformed(at);
}

// Past the value that starts at `at`: a string, an object or array (brackets counted, strings
// skipped), or a literal.
static size_t value_end(std::string_view t, size_t at) {
  const char c = char_at(t, at);
  if (c == '"') return string_end(t, at);
  if (c == '{' || c == '[') {
    size_t depth = 0;
    for (; at < t.size(); ++at) {
      const char d = t[at];
      if (d == '"')
        at = string_end(t, at) - 1;
      else if (d == '{' || d == '[')
        ++depth;
      else if ((d == '}' || d == ']') && --depth == 0)
        return at + 1;
    }
    malformed(at);
  }
  const size_t begin = at;
  while (at < t.size() && t[at] != ',' && t[at] != '}' && t[at] != ']' && t[at] != ' ' && t[at] != '\n') ++at;
  if (at == begin) malformed(at);
  return at;
}

// The members of the object at `at`: each key and its value's text, in order.
static std::vector<std::pair<std::string, std::string_view>> members(std::string_view t, size_t at) {
  std::vector<std::pair<std::string, std::string_view>> out;
  at = skip_space(t, at);
  if (char_at(t, at) != '{') malformed(at);
  at = skip_space(t, at + 1);
  if (char_at(t, at) == '}') return out;
  for (;;) {
    if (char_at(t, at) != '"') malformed(at);
    const size_t key_end = string_end(t, at);
    const std::string_view quoted = t.substr(at, key_end - at);
    std::string key = quoted.find('\\') == std::string_view::npos ? std::string(quoted.substr(1, quoted.size() - 2))
                                                                  : json::parse(quoted).get<std::string>();
    at = skip_space(t, key_end);
    if (char_at(t, at) != ':') malformed(at);
    const size_t begin = skip_space(t, at + 1), end = value_end(t, begin);
    out.emplace_back(std::move(key), t.substr(begin, end - begin));
    at = skip_space(t, end);
    if (char_at(t, at) == '}') return out;
    if (char_at(t, at) != ',') malformed(at);
    at = skip_space(t, at + 1);
  }
}

ModelSchema parse_type(const std::string& type, const json& o);

bool all_digits(const std::string& s, size_t b, size_t e) {
  if (b >= e) return false;
  for (size_t i = b; i < e; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

bool key_ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// The object a field path ("hidden_size", "vision_config.hidden_size",
// "thinker_config.text_config.hidden_size") is in, and the field's name there; null when a
// sub-config on the way is not an object of the config.
const json* field_parent(const json& config, const std::string& path, std::string& name) {
  const json* at = &config;
  size_t b = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; b = dot + 1, dot = path.find('.', b)) {
    const std::string sub = path.substr(b, dot - b);
    if (!at->is_object() || !at->contains(sub) || !(*at)[sub].is_object()) return nullptr;
    at = &(*at)[sub];
  }
  name = path.substr(b);
  return at->is_object() ? at : nullptr;
}

// `FIELD=VALUE` or `SUB.FIELD=VALUE` (sub-configs nested to any depth) against the config; a field
// the config lacks has the class's default, which is the default build's, so the condition (a
// flipped default) does not hold. `schema_type`: the schema's model_type, whose attribute_map
// applies where the config's own type has none (a remote kimi_k2 config read as deepseek_v3's,
// found by its architectures).
const json* config_field(const json& config, const std::string& path, const std::string& schema_type) {
  std::string name;
  const json* at = field_parent(config, path, name);
  if (!at) return nullptr;
  if (at->contains(name) && !(*at)[name].is_null()) return &(*at)[name];
  // transformers' attribute_map, both ways (a config written with an alias).
  std::string type = at->value("model_type", std::string());
  if (type.empty()) type = config.value("model_type", std::string());
  const json* aliases = &config_aliases(type);
  if (!aliases->is_object() && !schema_type.empty()) aliases = &config_aliases(schema_type);
  const json& amap = *aliases;
  if (amap.is_object()) {
    if (amap.contains(name) && amap[name].is_string() && at->contains(amap[name].get<std::string>()))
      return &(*at)[amap[name].get<std::string>()];
    for (const auto& [alias, real] : amap.items())
      if (real == name && at->contains(alias) && !(*at)[alias].is_null()) return &(*at)[alias];
  }
  return nullptr;
}

bool condition_holds(const json& config, const std::string& when, const std::string& schema_type) {
  if (when.empty()) return true;
  // "A!=B": two size fields that differ (OPT's project_in when word_embed_proj_dim != hidden_size).
  // A field the config lacks has the class's default, equal to the other's in the default build,
  // so the condition does not hold.
  if (const size_t ne = when.find("!="); ne != std::string::npos) {
    const json* a = config_field(config, when.substr(0, ne), schema_type);
    const json* b = config_field(config, when.substr(ne + 2), schema_type);
    return a && b && a->is_number_integer() && b->is_number_integer() && a->get<int64_t>() != b->get<int64_t>();
  }
  const size_t eq = when.find('=');
  if (when.compare(eq + 1, std::string::npos, "nonempty") == 0) {  // a layer list with a layer in it
    const json* v = config_field(config, when.substr(0, eq), schema_type);
    return v && v->is_array() && !v->empty();
  }
  if (when.compare(eq + 1, std::string::npos, "null") == 0) {  // written null (absent: the default, not null)
    std::string name;
    const json* at = field_parent(config, when.substr(0, eq), name);
    return at && at->contains(name) && (*at)[name].is_null();
  }
  // A field null by default that the config class derives and config.json then holds (BLT's
  // global_config.encoder_cross_output_size: its token_embedding_projection).
  if (when.compare(eq + 1, std::string::npos, "set") == 0)
    return config_field(config, when.substr(0, eq), schema_type) != nullptr;
  const json* v = config_field(config, when.substr(0, eq), schema_type);
  return v && v->is_boolean() && v->get<bool>() == (when.substr(eq + 1) == "true");
}

// A dims formula ("hidden_size", "2*intermediate_size", "a+b", "head_dim*num_attention_heads") or
// count ("vision_config.n_layers-1": a constant may be taken away) from the config: terms joined by
// `+`, each a constant or a product of constants and fields (tools/hf_schema.py's evaluate); nullopt
// when a field is not there or not an integer, or a value is past 2^40 (no tensor dimension is).
std::optional<int64_t> evaluate_dims(const json& config, const std::string& formula, const std::string& schema_type) {
  constexpr int64_t kCap = int64_t{1} << 40;
  int64_t total = 0;
  size_t at = 0;
  while (at <= formula.size()) {
    size_t plus = formula.find_first_of("+-", at);
    if (plus == std::string::npos) plus = formula.size();
    const std::string term = formula.substr(at, plus - at);
    const bool minus = at > 0 && formula[at - 1] == '-';
    if (term.empty()) return std::nullopt;
    if (all_digits(term, 0, term.size())) {  // rows past the fields' (mllama's vocab_size+8), or fewer (n_layers-1)
      if (term.size() > 12) return std::nullopt;
      total += (minus ? -1 : 1) * std::stoll(term);
      at = plus + 1;
      continue;
    }
    if (minus) return std::nullopt;  // only a constant is taken away
    int64_t product = 1;
    for (size_t f = 0; f <= term.size();) {
      size_t star = term.find('*', f);
      if (star == std::string::npos) star = term.size();
      const std::string factor = term.substr(f, star - f);
      int64_t value = 0;
      if (factor.empty()) return std::nullopt;
      if (all_digits(factor, 0, factor.size())) {
        if (factor.size() > 12) return std::nullopt;
        value = std::stoll(factor);
      } else {
        const json* v = config_field(config, factor, schema_type);
        if (!v || !v->is_number_integer()) return std::nullopt;
        value = v->get<int64_t>();
      }
      if (value < 0 || value > kCap || (value && product > kCap / value)) return std::nullopt;
      product *= value;
      f = star + 1;
    }
    total += product;
    if (total > kCap) return std::nullopt;
    at = plus + 1;
  }
  return total;
}

bool regex_search_any(const std::vector<std::string>& patterns, const std::string& s) {
  for (const auto& p : patterns) {
    try {
      if (std::regex_search(s, std::regex(p))) return true;
    } catch (const std::regex_error&) {
    }
  }
  return false;
}

size_t key_edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1)});
      prev = cur;
    }
  }
  return row[b.size()];
}

// Quantization's own tensors beside a quantized weight, and the weight's packed names.
bool quant_extra(const std::string& key) {
  static const char* kSuffixes[] = {".weight_scale", ".weight_scale_inv", ".weight_scale_2", ".input_scale",
                                    ".weight_global_scale", ".input_global_scale", ".weight_zero_point",
                                    ".weight_shape", ".k_scale", ".v_scale", "_scales", ".weight_g_idx", ".scales",
                                    ".biases",
                                    // a stacked expert parameter's FP8 block scale (transformers'
                                    // FP8Experts: experts.gate_up_proj_scale_inv beside gate_up_proj)
                                    "_scale_inv"};
  for (const char* s : kSuffixes)
    if (key_ends_with(key, s)) return true;
  return false;
}
// A packed weight's plain name (`X.weight_packed` -> `X.weight`, `X_blocks` -> `X`), or "".
std::string unpacked_name(const std::string& key) {
  if (key_ends_with(key, ".weight_packed")) return key.substr(0, key.size() - 7);
  if (key_ends_with(key, "_blocks")) return key.substr(0, key.size() - 7);
  return {};
}

// The MLP of a layer: which layers have one of which kind is the config's layer plan.
bool layer_kind_family(const std::string& rest) {
  for (const char* w : {"mlp", "expert", "moe", "ffn", "feed_forward", "block_sparse", "router", "gate"})
    if (rest.find(w) != std::string::npos) return true;
  return false;
}

// The integer components of `key` up to the last `#` component of its pattern, joined by '.'
// ("3", "1.0"), or "" for a key outside numbered blocks. Key and pattern have the same components
// (an index numbered in a name, `expert_12` for `expert_#`, is one component of either).
std::string block_id(const std::string& key, const std::string& pattern) {
  const size_t last = pattern.rfind(".#.");
  if (last == std::string::npos) return {};
  const size_t count = std::count(pattern.begin(), pattern.begin() + last + 1, '.') + 1;  // components up to that `#`
  std::string id;
  size_t b = 0;
  for (size_t i = 0; i < count && b <= key.size(); ++i) {
    size_t e = key.find('.', b);
    if (e == std::string::npos) e = key.size();
    if (all_digits(key, b, e)) id += (id.empty() ? "" : ".") + key.substr(b, e - b);
    b = e + 1;
  }
  return id;
}

// The integer components of key[0, upto), joined by '.' ("3" of model.decoder.layers.3.ffn.).
std::string path_numbers(const std::string& key, size_t upto) {
  std::string id;
  for (size_t b = 0; b < upto;) {
    size_t e = key.find('.', b);
    if (e == std::string::npos || e > upto) e = upto;
    if (all_digits(key, b, e)) id += (id.empty() ? "" : ".") + key.substr(b, e - b);
    b = e + 1;
  }
  return id;
}

// Where component `n` (from 0) of `key` ends (the offset of the dot after it, or the key's size).
size_t components_end(const std::string& key, size_t n) {
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    at = key.find('.', at);
    if (at == std::string::npos) return key.size();
    ++at;
  }
  const size_t e = key.find('.', at);
  return e == std::string::npos ? key.size() : e;
}

// The number a name ends in (`norm_12`: 12), or -1 (none, or past what an index holds).
int64_t name_index(const std::string& component) {
  size_t d = component.size();
  while (d > 0 && component[d - 1] >= '0' && component[d - 1] <= '9') --d;
  if (d == 0 || d == component.size() || component.size() - d > 9) return -1;
  return std::stoll(component.substr(d));
}

// Indices as a short list ("0, 1, 5" or "3 to 23").
std::string index_list(const std::vector<int64_t>& v) {
  if (!v.empty() && v.size() > 3 && v.back() - v.front() + 1 == static_cast<int64_t>(v.size()))
    return std::to_string(v.front()) + " to " + std::to_string(v.back());
  std::string s;
  for (size_t i = 0; i < v.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > 16) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

// The first integer path component of `key` ("3" of model.layers.3.mlp.experts.0.w1.weight), or "".
std::string first_block(const std::string& key) {
  size_t b = 0;
  while (b < key.size()) {
    size_t e = key.find('.', b);
    if (e == std::string::npos) e = key.size();
    if (all_digits(key, b, e)) return key.substr(b, e - b);
    b = e + 1;
  }
  return {};
}

// A pattern's key in block `id` of its stack (its first `#`), any further `#` as 0.
std::string key_in_block(const std::string& pattern, const std::string& id) {
  std::string k = pattern;
  if (size_t at = k.find('#'); at != std::string::npos) k.replace(at, 1, id);
  for (size_t at = k.find('#'); at != std::string::npos; at = k.find('#', at)) k.replace(at, 1, "0");
  return k;
}

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace hf_schema_impl

using namespace hf_schema_impl;

std::string schema_pattern(const std::string& key) {
  std::string out;
  size_t b = 0;
  while (b <= key.size()) {
    size_t e = key.find('.', b);
    if (e == std::string::npos) e = key.size();
    if (b) out += '.';
    out += all_digits(key, b, e) ? std::string("#") : key.substr(b, e - b);
    b = e + 1;
  }
  return out;
}

const SchemaKey* ModelSchema::find(const std::string& pattern) const {
  auto it = std::lower_bound(keys.begin(), keys.end(), pattern,
                             [](const SchemaKey& k, const std::string& p) { return k.pattern < p; });
  return it != keys.end() && it->pattern == pattern ? &*it : nullptr;
}

std::string ModelSchema::named_pattern(const std::string& pattern) const {
  if (named.empty()) return pattern;
  std::string out;
  size_t b = 0;
  while (b <= pattern.size()) {
    size_t e = pattern.find('.', b);
    if (e == std::string::npos) e = pattern.size();
    std::string c = pattern.substr(b, e - b);
    if (name_index(c) >= 0) {
      size_t d = c.size();
      while (c[d - 1] >= '0' && c[d - 1] <= '9') --d;
      const std::string stem = c.substr(0, d) + "#";
      const std::string upto = out + (b ? "." : "") + stem;
      for (const auto& n : named)
        if (n.first == upto) c = stem;
    }
    out += (b ? "." : "") + c;
    b = e + 1;
  }
  return out;
}

const std::pair<std::string, std::string>* ModelSchema::named_of(const std::string& pattern) const {
  for (const auto& n : named)
    if (pattern.size() > n.first.size() && pattern.compare(0, n.first.size(), n.first) == 0 &&
        pattern[n.first.size()] == '.')
      return &n;
  return nullptr;
}

const SchemaKey* ModelSchema::lookup(const std::string& pattern) const {
  // The pattern as it is (a fixed name with digits, `fc1`), else with its indices numbered in names.
  auto found = [&](const std::string& p) -> const SchemaKey* {
    if (const SchemaKey* k = find(p)) return k;
    if (named.empty()) return nullptr;
    const std::string n = named_pattern(p);
    return n != p ? find(n) : nullptr;
  };
  if (const SchemaKey* k = found(pattern)) return k;
  // A prefix transformers' loader changes (Qwen3.5's model.language_model. read as model.).
  for (const auto& [disk, own] : prefixes)
    if (pattern.rfind(disk, 0) == 0 && (own.size() < disk.size() || pattern.rfind(own, 0) != 0))
      if (const SchemaKey* k = found(own + pattern.substr(disk.size()))) return k;
  // A release name transformers renames on load (load_renames): its save_pretrained key.
  if (!load_renames.empty())
    if (const std::string save = save_pattern(pattern); !save.empty()) return found(save);
  return nullptr;
}

namespace {
// The integer path components of `key`, in order ("model.layers.3.mlp.experts.7.w1" -> 3, 7).
std::vector<std::string> int_components(const std::string& key) {
  std::vector<std::string> ints;
  for (size_t b = 0; b <= key.size();) {
    size_t e = key.find('.', b);
    if (e == std::string::npos) e = key.size();
    if (all_digits(key, b, e)) ints.push_back(key.substr(b, e - b));
    b = e + 1;
  }
  return ints;
}
}  // namespace

std::string ModelSchema::save_pattern(const std::string& pattern) const {
  auto it = std::lower_bound(load_renames.begin(), load_renames.end(), pattern,
                             [](const auto& r, const std::string& p) { return r.first < p; });
  if (it != load_renames.end() && it->first == pattern) return it->second;
  // A tensor renamed with its module: X.weight's release pattern, another last component (`.scale`).
  const size_t dot = pattern.rfind('.');
  if (dot == std::string::npos || pattern.compare(dot, std::string::npos, ".weight") == 0 ||
      pattern.compare(dot, std::string::npos, ".#") == 0)
    return {};
  it = std::lower_bound(load_renames.begin(), load_renames.end(), pattern.substr(0, dot) + ".weight",
                        [](const auto& r, const std::string& p) { return r.first < p; });
  if (it == load_renames.end() || it->first != pattern.substr(0, dot) + ".weight" ||
      !key_ends_with(it->second, ".weight"))
    return {};
  return it->second.substr(0, it->second.size() - 7) + pattern.substr(dot);
}

std::string ModelSchema::save_name(const std::string& key) const {
  if (load_renames.empty()) return {};
  const std::string p = schema_pattern(key);
  if (find(p)) return {};  // a save_pretrained name already
  const std::string save = save_pattern(p);
  if (save.empty()) return {};
  // The key's integer components, in order, into the save pattern's `#` components.
  const std::vector<std::string> ints = int_components(key);
  std::string out;
  size_t used = 0;
  for (size_t b = 0; b <= save.size();) {
    size_t e = save.find('.', b);
    if (e == std::string::npos) e = save.size();
    const std::string c = save.substr(b, e - b);
    if (c == "#" && used >= ints.size()) return {};
    out += (b ? "." : "") + (c == "#" ? ints[used++] : c);
    b = e + 1;
  }
  return used == ints.size() ? out : std::string();
}

// The release name of a save_pretrained `key` (load_renames read backwards), or "" where none.
std::string release_name(const ModelSchema& s, const std::string& key) {
  const std::string p = schema_pattern(key);
  for (const auto& [release, save] : s.load_renames) {
    if (save != p) continue;
    const std::vector<std::string> ints = int_components(key);
    std::string out = release;
    for (size_t i = 0, at = out.find('#'); at != std::string::npos && i < ints.size(); at = out.find('#', at), ++i) {
      out.replace(at, 1, ints[i]);
      at += ints[i].size();
    }
    return out;
  }
  return {};
}

KeyLayout key_layout(const ModelSchema& s, const std::vector<std::string>& keys) {
  KeyLayout out;
  if (s.load_renames.empty()) return out;
  for (const auto& k : keys)
    if (std::string n = s.save_name(k); !n.empty() && n != k) out.save_names.emplace(k, std::move(n));
  if (out.save_names.empty()) return out;
  out.layout = kReleaseLayout;
  std::map<std::string, std::string> loads_as;  // save_pretrained name -> the first key loading as it
  for (const auto& k : keys) {
    auto n = out.save_names.find(k);
    auto [it, fresh] = loads_as.emplace(n == out.save_names.end() ? k : n->second, k);
    if (!fresh) out.collisions.emplace_back(k, it->second);
  }
  return out;
}

std::string ModelSchema::pattern_of(const std::string& key) const {
  const std::string p = schema_pattern(key);
  const SchemaKey* k = lookup(p);
  return k ? k->pattern : p;
}

struct HfSchema::Parsed {
  std::mutex lock;
  std::map<std::string, std::unique_ptr<ModelSchema>> types;
};

const ModelSchema* HfSchema::of(const std::string& model_type) const {
  auto it = std::lower_bound(index.begin(), index.end(), model_type,
                             [](const SchemaEntry& e, const std::string& t) { return e.type < t; });
  if (it == index.end() || it->type != model_type) return nullptr;
  std::lock_guard<std::mutex> hold(parsed->lock);
  std::unique_ptr<ModelSchema>& m = parsed->types[model_type];
  if (!m)
    m = std::make_unique<ModelSchema>(
        hf_schema_impl::parse_type(model_type, json::parse(text.begin() + it->begin, text.begin() + it->end)));
  return m.get();
}

const ModelSchema* HfSchema::of_class(const std::string& cls) const {
  const SchemaEntry* found = nullptr;
  for (const auto& e : index)
    if (e.cls == cls && (!found || (!found->class_type.empty() && e.class_type.empty()))) found = &e;
  return found ? of(found->type) : nullptr;
}

std::string HfSchema::why_not(const std::string& model_type) const {
  if (const std::string* f = failed_reason(model_type))
    return "transformers " + transformers + " defines model_type " + model_type +
           " but its model could not be built: " + *f;
  if (std::binary_search(skipped.begin(), skipped.end(), model_type))
    return "transformers " + transformers + " defines model_type " + model_type + " with no language-model class";
  return "model_type " + model_type + " is not one transformers " + transformers + " defines";
}

const std::string* HfSchema::failed_reason(const std::string& model_type) const {
  for (const auto& [t, why] : failed)
    if (t == model_type) return &why;
  return nullptr;
}

namespace hf_schema_impl {

// One type's object of the schema's JSON.
ModelSchema parse_type(const std::string& type, const json& o) {
  auto strings = [](const json& o, const char* f) {
    std::vector<std::string> v;
    if (o.contains(f))
      for (const auto& x : o[f]) v.push_back(x.get<std::string>());
    return v;
  };
  ModelSchema m;
  m.type = type;
  m.cls = o.at("class").get<std::string>();
  m.class_type = o.value("class_type", std::string());
  m.prefix = o.value("prefix", std::string());
  for (const auto& k : o.at("keys")) {
    SchemaKey sk;
    sk.pattern = k.at(0).get<std::string>();
    for (const auto& d : k.at(1)) sk.dims.push_back(d.is_string() ? d.get<std::string>() : std::string());
    const std::string keep = k.at(2).get<std::string>();
    if (keep.size() == 2) sk.keep_bf16 = keep[0], sk.keep_fp16 = keep[1], sk.keep_known = true;
    sk.when = k.at(3).get<std::string>();
    sk.required = k.size() > 4 && k.at(4).get<int>() != 0;
    m.keys.push_back(std::move(sk));
  }
  std::sort(m.keys.begin(), m.keys.end(), [](const SchemaKey& a, const SchemaKey& b) { return a.pattern < b.pattern; });
  if (o.contains("absent"))
    for (const auto& a : o["absent"]) m.absent.emplace_back(a.at(0).get<std::string>(), a.at(1).get<std::string>());
  m.memory = strings(o, "memory");
  m.renamed = strings(o, "renamed");
  m.ignore_unexpected = strings(o, "ignore_unexpected");
  m.ignore_missing = strings(o, "ignore_missing");
  if (o.contains("experts") && o["experts"].is_string()) m.experts = o["experts"].get<std::string>();
  m.experts_unexplained = o.contains("experts") && o["experts"].is_null();
  m.head_untied = o.value("head_untied", false);
  if (o.contains("together"))
    for (const auto& g : o["together"]) {
      std::vector<std::string> group;
      for (const auto& x : g) group.push_back(x.get<std::string>());
      m.together.push_back(std::move(group));
    }
  if (o.contains("prefixes"))
    for (const auto& pr : o["prefixes"])
      m.prefixes.emplace_back(pr.at(0).get<std::string>(), pr.at(1).get<std::string>());
  if (o.contains("load_renames"))
    for (const auto& r : o["load_renames"])
      m.load_renames.emplace_back(r.at(0).get<std::string>(), r.at(1).get<std::string>());
  std::sort(m.load_renames.begin(), m.load_renames.end());
  if (o.contains("named"))
    for (const auto& n : o["named"])
      m.named.emplace_back(n.at(0).get<std::string>(),
                           n.at(1).is_string() ? n.at(1).get<std::string>() : std::string());
  if (o.contains("load_conversions"))
    for (const auto& c : o["load_conversions"])
      m.load_conversions.emplace_back(c.at(0).get<std::string>(), c.at(1).get<std::string>());
  m.load_renames_not_derived = o.value("load_renames_not_derived", "");
  if (o.contains("saved_config")) {
    const json& sc = o["saved_config"];
    m.saved_config.per_layer = sc.at("per_layer").get<int64_t>();
    m.saved_config.list = sc.at("list").get<std::string>();
    m.saved_config.kind = sc.at("kind").get<std::string>();
    m.saved_config.fields = strings(sc, "fields");
  }
  return m;
}

}  // namespace hf_schema_impl

// The compiled-in text is indexed by a scan of its structure (scan_value: strings and brackets
// only, no values built); each type's object is parsed when `of` first asks for it.
const HfSchema& hf_schema() {
  static const HfSchema schema = [] {
    using hf_schema_impl::members;
    HfSchema s;
    s.text = hf_schema_text();
    s.parsed = std::make_shared<HfSchema::Parsed>();
    const std::string_view all(s.text);
    auto value = [&](std::string_view v) { return json::parse(v.begin(), v.end()); };
    for (const auto& [key, v] : members(all, 0)) {
      if (key == "transformers")
        s.transformers = value(v).get<std::string>();
      else if (key == "torch")
        s.torch = value(v).get<std::string>();
      else if (key == "failed") {
        const json failed = value(v);
        for (const auto& [t, why] : failed.items()) s.failed.emplace_back(t, why.get<std::string>());
      } else if (key == "skipped") {
        const json skipped = value(v);
        for (const auto& [t, why] : skipped.items()) s.skipped.push_back(t);
      } else if (key == "types")
        for (const auto& [type, o] : members(all, size_t(v.data() - all.data()))) {
          SchemaEntry e;
          e.type = type;
          e.begin = size_t(o.data() - all.data());
          e.end = e.begin + o.size();
          for (const auto& [field, fv] : members(all, e.begin))
            if (field == "class")
              e.cls = value(fv).get<std::string>();
            else if (field == "class_type")
              e.class_type = value(fv).get<std::string>();
          s.index.push_back(std::move(e));
        }
    }
    if (s.transformers.empty() || s.index.empty())
      throw std::logic_error("the compiled-in model schema has no transformers version or types");
    std::sort(s.index.begin(), s.index.end(),
              [](const SchemaEntry& a, const SchemaEntry& b) { return a.type < b.type; });
    std::sort(s.skipped.begin(), s.skipped.end());
    return s;
  }();
  return schema;
}

// The numeric components of a version ("5.24.0.dev0": 5, 24, 0), up to the first that is not one.
static std::vector<int64_t> version_numbers(const std::string& v) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < v.size() && std::isdigit(static_cast<unsigned char>(v[at])) && out.size() < 8) {
    int64_t n = 0;
    for (; at < v.size() && std::isdigit(static_cast<unsigned char>(v[at])) && n < (int64_t{1} << 40); ++at)
      n = n * 10 + (v[at] - '0');
    out.push_back(n);
    if (at >= v.size() || v[at] != '.') break;
    ++at;
  }
  return out;
}

// The transformers that wrote config.json (its `transformers_version`), where it is newer than the
// schema's: the version that has a model_type the schema lacks, and the one to regenerate with.
// (An older one says nothing: a remote-code type, Kimi-K2's, is no type of any version.)
static std::string saved_by(const json& config, const std::string& schema_version) {
  if (!config.contains("transformers_version") || !config["transformers_version"].is_string()) return "";
  const std::string v = config["transformers_version"].get<std::string>();
  if (!(version_numbers(schema_version) < version_numbers(v))) return "";
  return "; config.json was saved by transformers " + v + ", newer than the schema's " + schema_version +
         ": regenerate the schema with it (tools/hf_schema.py, docs/architecture.md)";
}

SchemaMatch match_schema(const json& config) {
  SchemaMatch m;
  const HfSchema& schema = hf_schema();
  if (!config.is_object()) {
    m.why = "config.json is not a JSON object";
    return m;
  }
  const std::string type =
      config.contains("model_type") && config["model_type"].is_string() ? config["model_type"].get<std::string>() : "";
  std::string arch;
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string())
    arch = config["architectures"][0].get<std::string>();
  if (const ModelSchema* s = type.empty() ? nullptr : schema.of(type)) {
    if (arch.empty() || arch == s->cls) {
      m.schema = s;
      m.found_by = "model_type";
    } else {
      m.why = "its architectures names " + arch + ", the schema holds " + s->cls + " for model_type " + type;
    }
    return m;
  }
  // A model_type the schema does not hold (remote code: Kimi-K2's kimi_k2): the class it names.
  if (!arch.empty())
    if (const ModelSchema* s = schema.of_class(arch)) {
      m.schema = s;
      m.found_by = "architectures";
      return m;
    }
  m.why = (type.empty() ? "config.json names no model_type" : schema.why_not(type)) +
          (arch.empty() ? std::string(", and no architectures")
                        : ", and its architectures' " + arch + " is no class of the model schema (transformers " +
                              schema.transformers + ")") +
          saved_by(config, schema.transformers);
  return m;
}

const ModelSchema* schema_for_config(const json& config) {
  return match_schema(config).schema;
}

json config_as_loaded(const json& config) {
  const ModelSchema* s = schema_for_config(config);
  if (!s || s->saved_config.per_layer < 2) return config;
  const ModelSchema::SavedConfig& sc = s->saved_config;
  // The fields where they are: the top level, or a nested text_config (as config fields are read).
  json out = config;
  for (json* c :
       {&out, out.contains("text_config") && out["text_config"].is_object() ? &out["text_config"] : nullptr}) {
    if (!c || !c->contains(sc.list) || !(*c)[sc.list].is_array()) continue;
    const json& list = (*c)[sc.list];
    if (std::none_of(list.begin(), list.end(), [&](const json& e) { return e.is_string() && e == sc.kind; })) continue;
    json kept = json::array();
    for (size_t i = 0; i < list.size(); i += static_cast<size_t>(sc.per_layer)) kept.push_back(list[i]);
    (*c)[sc.list] = std::move(kept);
    for (const auto& f : sc.fields)
      if (c->contains(f) && (*c)[f].is_number_integer()) (*c)[f] = (*c)[f].get<int64_t>() / sc.per_layer;
  }
  return out;
}

bool schema_defines(const ModelSchema& s, const json& config, const std::string& key) {
  const SchemaKey* k = s.lookup(schema_pattern(key));
  return k && condition_holds(config, k->when, s.type);
}

std::optional<char> schema_keep(const ModelSchema& s, const std::string& key, bool fp16) {
  const SchemaKey* k = s.lookup(schema_pattern(key));
  if (!k || !k->keep_known) return std::nullopt;  // a key two size fields bring: its dtype was not derived
  return fp16 ? k->keep_fp16 : k->keep_bf16;
}

std::optional<std::pair<int64_t, std::string>> schema_expert_count(const json& config) {
  const ModelSchema* s = schema_for_config(config);
  if (!s || s->experts.empty()) return std::nullopt;
  std::optional<int64_t> n = evaluate_dims(config, s->experts, s->type);
  if (!n) return std::nullopt;
  return std::make_pair(*n, s->experts);
}

bool schema_expert_count_unexplained(const json& config) {
  const ModelSchema* s = schema_for_config(config);
  return s && s->experts_unexplained;
}

bool schema_dim_unexplained(const json& config, const std::string& key, size_t dim) {
  const ModelSchema* s = schema_for_config(config);
  if (!s) return false;
  const SchemaKey* k = s->lookup(schema_pattern(key));
  if (!k || !k->when.empty() || dim >= k->dims.size() || !k->dims[dim].empty()) return false;
  return std::any_of(k->dims.begin(), k->dims.end(), [](const std::string& d) { return !d.empty(); });
}

std::optional<std::pair<int64_t, std::string>> schema_dim(const json& config, const std::string& key, size_t dim) {
  const ModelSchema* s = schema_for_config(config);
  if (!s) return std::nullopt;
  const SchemaKey* k = s->lookup(schema_pattern(key));
  if (!k || dim >= k->dims.size() || k->dims[dim].empty() || !condition_holds(config, k->when, s->type))
    return std::nullopt;
  std::optional<int64_t> n = evaluate_dims(config, k->dims[dim], s->type);
  if (!n) return std::nullopt;
  return std::make_pair(*n, k->dims[dim]);
}

bool schema_keeps_dtype(const json& config, const std::string& key, const std::string& tensor_dtype,
                        const std::string& config_dtype) {
  if (config_dtype != "bfloat16" && config_dtype != "float16") return false;
  const ModelSchema* s = schema_for_config(config);
  if (!s) return false;
  const std::optional<char> keep = schema_keep(*s, key, config_dtype == "float16");
  return keep && *keep == 'f' && tensor_dtype == "float32";
}

// A load-time conversion's source pattern as transformers matches it (core_model_loading.py,
// WeightTransform: `*.` is any run then a dot, and a pattern ending in a letter or digit ends on a
// name boundary).
static std::string conversion_regex(std::string p) {
  for (size_t at = 0; (at = p.find("*.", at)) != std::string::npos; at += 4) p.replace(at, 2, ".*\\.");
  if (!p.empty() && std::isalnum(static_cast<unsigned char>(p.back()))) p += "(?!\\w)";
  return p;
}

namespace {

// check_hf_schema's steps over one folder whose model schema was found: each key classified
// against it (present, unexpected, in-memory, numbered), then what is missing.
class SchemaChecker {
 public:
  SchemaChecker(const json& config, const std::string& config_path, const ModelSchema& s, std::string who,
                SchemaCheckResult& out)
      : config_(config), config_path_(config_path), s_(s), who_(std::move(who)), out_(out) {}

  void classify(const std::vector<HfTensor>& tensors);
  void check_named_indices();
  void refuse_load_conversions() const;
  void report_unexpected();
  void check_missing();
  void check_together();

 private:
  void problem(const char* code, const std::string& key, const std::string& msg) {
    out_.problems.push_back({code, Where(config_path_, std::nullopt, key), msg});
  }
  void hold(const HfTensor& t, const std::string& key, const std::string& p);
  void check_shape(const HfTensor& t, const SchemaKey& sk);
  const json& layer_config(const std::string& key);
  void check_named_index(const std::string& prefix,
                         const std::map<std::string, std::map<int64_t, std::string>>& patterns);
  void check_missing_key(const SchemaKey& k);
  bool excused(const std::string& pattern, const std::string& concrete) const;
  std::optional<int64_t> layer_count() const;

  const json& config_;
  const std::string& config_path_;
  const ModelSchema& s_;
  const std::string who_;  // the class, its type and transformers' version, as messages name it
  SchemaCheckResult& out_;
  std::set<std::string> present_, memory_present_;
  std::map<std::string, std::set<std::string>> layers_of_;      // pattern -> layer ids that hold it
  std::map<std::string, std::set<std::string>> stack_ids_;      // stack pattern ("model.layers") -> layer ids
  std::map<std::string, std::vector<std::string>> unexpected_;  // pattern -> keys
  // (stack pattern up to its first `#`, that block's number) -> the patterns the block holds -> its key
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::string>> block_holds_;
  // Indices numbered in names: (the `named` prefix, the key's path numbers before that name) ->
  // pattern -> index -> the key.
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::map<int64_t, std::string>>> named_held_;
  std::set<std::string> reported_;  // patterns reported missing by check_missing
  const std::optional<MoeSparsity> sparsity_ = find_moe_sparsity(config_);
  std::map<int64_t, json> pruned_;  // a pruned model's config by a layer's expert count (layer_config)
};

std::optional<int64_t> SchemaChecker::layer_count() const {
  const json* text =
      config_.contains("text_config") && config_["text_config"].is_object() ? &config_["text_config"] : nullptr;
  for (const char* f : {"num_hidden_layers", "num_layers", "n_layer", "n_layers"})
    for (const json* j : {&config_, text})
      if (j && j->contains(f) && (*j)[f].is_number_integer()) return (*j)[f].get<int64_t>();
  return std::nullopt;
}

void SchemaChecker::classify(const std::vector<HfTensor>& tensors) {
  const json* text =
      config_.contains("text_config") && config_["text_config"].is_object() ? &config_["text_config"] : nullptr;
  const bool quantized = config_.contains("quantization_config") || (text && text->contains("quantization_config"));
  const std::optional<int64_t> layers = layer_count();
  static const std::regex kLayer(R"(^(.*?layers)\.(\d+)\.)");
  const std::set<std::string> memory(s_.memory.begin(), s_.memory.end());
  std::set<std::string> all_keys;
  for (const auto& t : tensors) all_keys.insert(t.key);
  const std::set<std::string> beside = codecs_beside(all_keys);
  for (const auto& t : tensors) {
    std::string key = t.key;
    if (beside.count(key)) continue;
    // What transformers' loader tolerates in every model that has these buffers, not persistent
    // now (modeling_utils.py, _adjust_missing_and_unexpected_keys): old checkpoints' copies.
    if (key_ends_with(key, "rotary_emb.inv_freq") || key == "position_ids" || key_ends_with(key, ".position_ids"))
      continue;
    std::smatch m;
    if (layers && std::regex_search(key, m, kLayer) && m[2].length() < 10 && std::stoll(m[2]) >= *layers) continue;
    if (key.rfind("mtp.", 0) == 0 || key.find(".mtp.") != std::string::npos ||
        key.find("mtp_layers.") != std::string::npos)
      continue;
    bool packed = false;
    if (quantized) {
      if (quant_extra(key)) continue;
      // X.scale beside X.weight: an FP8 release's block scale (DeepSeek-V4; transformers' FP8
      // quantizer renames it to X.weight_scale_inv on load), not a module's own `scale`.
      if (key_ends_with(key, ".scale") && all_keys.count(key.substr(0, key.size() - 6) + ".weight")) continue;
      if (std::string u = unpacked_name(key); !u.empty()) key = u, packed = true;
    }
    std::string p = schema_pattern(key);
    const SchemaKey* sk = s_.lookup(p);
    if (sk) p = sk->pattern;
    if (!sk || !condition_holds(config_, sk->when, s_.type)) {
      if (memory.count(p)) {
        memory_present_.insert(p);
        continue;
      }
      // What the class ignores unexpected, searched as transformers searches it: only a key the
      // model does not define (GPT-2's `attn.bias` also matches its own c_attn.bias, which it loads).
      if (regex_search_any(s_.ignore_unexpected, t.key)) continue;
      unexpected_[p].push_back(key);
      continue;
    }
    hold(t, key, p);
    // Shapes: the dims the schema derives from the config; a quantized weight's shape is its packing's.
    if (!packed && (t.dtype == "bfloat16" || t.dtype == "float16" || t.dtype == "float32" || t.dtype == "float64"))
      check_shape(t, *sk);
  }
}

// A key the schema defines, at pattern `p`: where it is held (its block, its numbered name).
void SchemaChecker::hold(const HfTensor& t, const std::string& key, const std::string& p) {
  present_.insert(p);
  if (const auto* n = s_.named_of(p)) {
    // The numbered name's component, counted from the end (a prefix the loader changes may make
    // the key's start another length than the pattern's).
    const size_t after = std::count(p.begin(), p.end(), '.') - std::count(n->first.begin(), n->first.end(), '.');
    const size_t comps = std::count(key.begin(), key.end(), '.') + 1;
    if (comps > after) {
      const size_t at = comps - 1 - after;
      const size_t b = at ? components_end(key, at - 1) + 1 : 0;
      const int64_t index = name_index(key.substr(b, components_end(key, at) - b));
      if (index >= 0) named_held_[{n->first, path_numbers(key, b)}][p].emplace(index, t.key);
    }
  }
  if (const size_t h = p.find(".#."); h != std::string::npos)
    if (std::string id = first_block(key); !id.empty()) block_holds_[{p.substr(0, h), id}].emplace(p, t.key);
  // The block this key is in: its stack (the pattern up to its last `#`) and its numbers there.
  if (const std::string id = block_id(key, p); !id.empty()) {
    layers_of_[p].insert(id);
    stack_ids_[p.substr(0, p.rfind(".#."))].insert(id);
  }
}

// The config a key's dims are derived from: a pruned model's layer's, its experts counted by its
// moe_sparsity_config entry (view/moe_sparsity.h: the router's rows, e_score_correction_bias and
// stacked experts are sliced with them), else config.json.
const json& SchemaChecker::layer_config(const std::string& key) {
  const std::optional<int64_t> layer = sparsity_ ? decoder_layer(key) : std::nullopt;
  const std::optional<int64_t> n = layer ? sparsity_->count(*layer) : std::nullopt;
  if (!n) return config_;
  auto it = pruned_.find(*n);
  if (it == pruned_.end()) it = pruned_.emplace(*n, config_with_experts(config_, *n)).first;
  return it->second;
}

void SchemaChecker::check_shape(const HfTensor& t, const SchemaKey& sk) {
  if (sk.dims.size() != t.shape.size() && !sk.dims.empty() &&
      std::any_of(sk.dims.begin(), sk.dims.end(), [](const std::string& d) { return !d.empty(); })) {
    problem("schema-shape-mismatch", t.key,
            "has " + std::to_string(t.shape.size()) + " dimensions " + shape_text(t.shape) + " but " + who_ +
                " gives it " + std::to_string(sk.dims.size()));
    return;
  }
  const json& config = layer_config(t.key);
  const std::string from = &config == &config_
                               ? std::string(" from config.json")
                               : " from config.json, this layer's experts counted by " + sparsity_->field;
  for (size_t d = 0; d < sk.dims.size() && d < t.shape.size(); ++d) {
    if (sk.dims[d].empty()) continue;
    std::optional<int64_t> want = evaluate_dims(config, sk.dims[d], s_.type);
    if (want && *want != t.shape[d])
      problem("schema-shape-mismatch", t.key,
              "dimension " + std::to_string(d) + " is " + std::to_string(t.shape[d]) + " (shape " +
                  shape_text(t.shape) + ") but " + who_ + " makes it " + sk.dims[d] + " = " + std::to_string(*want) +
                  from);
  }
}

// An index numbered in a name: 0 to the count the config gives it (Inkling's vision
// layers.norm_N: vision_config.n_layers-1), each of its patterns at every index; where the count
// is not known, at every index another of its patterns holds.
void SchemaChecker::check_named_indices() {
  for (const auto& [where, patterns] : named_held_) check_named_index(where.first, patterns);
}

void SchemaChecker::check_named_index(const std::string& prefix,
                                      const std::map<std::string, std::map<int64_t, std::string>>& patterns) {
  const std::pair<std::string, std::string>* named = nullptr;
  for (const auto& n : s_.named)
    if (n.first == prefix) named = &n;
  int64_t count = -1;  // unknown
  if (named && !named->second.empty())
    if (const std::optional<int64_t> c = evaluate_dims(config_, named->second, s_.type);
        c && *c >= 0 && *c <= (1 << 20))
      count = *c;
  std::set<int64_t> any;
  for (const auto& pk : patterns)
    for (const auto& ik : pk.second) any.insert(ik.first);
  const std::string counted = count >= 0 ? " 0 to " + std::to_string(count - 1) + " (" + named->second + " = " +
                                               std::to_string(count) + " from config.json)"
                                         : std::string(" at the indices its other tensors here have");
  for (const auto& [pattern, held] : patterns) {
    std::vector<int64_t> lost, past;
    if (count >= 0) {
      for (int64_t i = 0; i < count; ++i)
        if (!held.count(i)) lost.push_back(i);
      for (const auto& ik : held)
        if (ik.first >= count) past.push_back(ik.first);
    } else {
      for (int64_t i : any)
        if (!held.count(i)) lost.push_back(i);
    }
    // The key named: a held one with its number changed (its digits are the name's last).
    const std::string& some = held.begin()->second;
    const size_t end = components_end(
        some, std::count(some.begin(), some.end(), '.') -
                  (std::count(pattern.begin(), pattern.end(), '.') - std::count(prefix.begin(), prefix.end(), '.')));
    size_t digits = end;
    while (digits > 0 && some[digits - 1] >= '0' && some[digits - 1] <= '9') --digits;
    auto named_key = [&](int64_t i) { return some.substr(0, digits) + std::to_string(i) + some.substr(end); };
    if (!lost.empty())
      problem("schema-key-missing", named_key(lost.front()),
              who_ + " numbers " + pattern + counted + "; index " + index_list(lost) + " here has none");
    if (!past.empty())
      problem("schema-key-unexpected", held.at(past.front()),
              who_ + " numbers " + pattern + counted + "; index " + index_list(past) + " here is past it");
  }
}

// Keys in a layout transformers converts on load that the schema does not map (its
// load_conversions: Dory's two blocks a layer): valid input dcpctl does not read, refused (exit 5).
// Only a key the schema has under no condition (one it has under a flag is that flag's finding).
void SchemaChecker::refuse_load_conversions() const {
  for (const auto& [p, keys] : unexpected_)
    for (const auto& [rx, conversion] : s_.load_conversions) {
      if (s_.find(p)) break;
      std::regex re;
      try {
        re = std::regex(conversion_regex(rx));
      } catch (const std::regex_error&) {
        continue;  // a pattern std::regex reads otherwise than Python: not this key's refusal
      }
      if (std::regex_search(keys.front(), re))
        throw UnsupportedError(Where(config_path_, std::nullopt, keys.front()),
                               "a " + who_ + " folder in a layout transformers converts on load (" + conversion +
                                   " of '" + rx +
                                   "'), which dcpctl does not map: load it with transformers and "
                                   "save_pretrained it, then use that folder");
    }
  // A type whose load renames the schema could not derive: a key it does not define may be a
  // release name transformers renames on load (Kimi K2.5's language_model.model.layers.N.*).
  for (const auto& [p, keys] : unexpected_)
    if (!s_.find(p) && !s_.load_renames_not_derived.empty())
      throw UnsupportedError(Where(config_path_, std::nullopt, keys.front()),
                             "a " + who_ + " folder with a key the schema does not define, '" + keys.front() +
                                 "': transformers renames this type's keys on load (its conversion mapping), and "
                                 "the schema could not derive those renames (" +
                                 s_.load_renames_not_derived +
                                 "), so a release's names are not told from damaged ones; load it with transformers "
                                 "and save_pretrained it, then use that folder");
}

void SchemaChecker::report_unexpected() {
  for (const auto& [p, keys] : unexpected_) {
    const SchemaKey* near = nullptr;
    size_t best = 0;
    for (const auto& k : s_.keys) {
      const size_t d = key_edit_distance(p, k.pattern);
      if (!near || d < best) near = &k, best = d;
    }
    const SchemaKey* sk = s_.find(p);
    std::string msg =
        (keys.size() > 1 ? "and " + std::to_string(keys.size() - 1) + " more like it (" + p + "): " : std::string()) +
        "not a tensor of " + who_;
    if (sk && !sk->when.empty()) {
      msg += ": it has one only with " + sk->when + " in config.json";
      out_.only_with[keys.front()] = sk->when;
    } else if (near && best <= std::max<size_t>(3, p.size() / 5))
      msg += " (the nearest it defines: " + near->pattern + ")";
    problem("schema-key-unexpected", keys.front(), msg);
  }
}

// Whether a missing `pattern` is accounted for: a flag of the config takes it away, the folder
// is in in-memory names, or the class ignores it missing.
bool SchemaChecker::excused(const std::string& pattern, const std::string& concrete) const {
  if (!memory_present_.empty() && std::count(s_.renamed.begin(), s_.renamed.end(), pattern)) return true;
  for (const auto& [p, cond] : s_.absent)
    if (p == pattern && condition_holds(config_, cond, s_.type)) return true;
  return regex_search_any(s_.ignore_missing, concrete);
}

// Missing: what every folder of the type has, but for what the config's flags take away.
void SchemaChecker::check_missing() {
  for (const auto& k : s_.keys) {
    // A key a flag brings (attention_bias=true: every layer's q/k/v/o_proj.bias) is required where
    // config.json sets the flag, as transformers reports it missing there.
    if (!k.required || !condition_holds(config_, k.when, s_.type)) continue;
    std::string concrete = k.pattern;
    for (size_t at = concrete.find('#'); at != std::string::npos; at = concrete.find('#', at))
      concrete.replace(at, 1, "0");
    if (excused(k.pattern, concrete)) continue;
    check_missing_key(k);
  }
}

void SchemaChecker::check_missing_key(const SchemaKey& k) {
  const std::string whose = k.when.empty() ? who_ : who_ + " with " + k.when + " in config.json";
  const size_t h = k.pattern.find(".#.");
  if (h == std::string::npos) {
    if (!present_.count(k.pattern))
      problem("schema-key-missing", k.pattern, "every " + whose + " folder holds this tensor, this one does not");
    return;
  }
  const size_t last = k.pattern.rfind(".#.");
  const std::string stack = k.pattern.substr(0, last);
  const bool nested = h != last;  // T5's block.#.layer.#, experts.# of layer.#
  auto ids = stack_ids_.find(stack);
  if (ids == stack_ids_.end()) return;  // a stack with no layer here: the layer checks report layers
  auto have = layers_of_.find(k.pattern);
  const bool family = layer_kind_family(k.pattern.substr(h + 3));
  if (have == layers_of_.end()) {
    if (!family && !nested) {
      problem("schema-key-missing", k.pattern, "every layer of " + whose + " holds this tensor, no layer here does");
      reported_.insert(k.pattern);
    }
    return;
  }
  // A block lacks it where the blocks it is compared with hold it: every block of a plain stack;
  // in a nested one, the blocks of the same last number (T5's layer.0 holds attention, layer.1
  // the MLP; both a layer_norm).
  auto group = [&](const std::string& id) { return nested ? id.substr(id.rfind('.') + 1) : std::string(); };
  std::set<std::string> held;
  for (const auto& id : have->second) held.insert(group(id));
  std::vector<std::string> lost;
  for (const auto& id : ids->second)
    if (!have->second.count(id) && held.count(group(id))) lost.push_back(id);
  if (!lost.empty() && !family) {
    std::string list;
    for (size_t i = 0; i < lost.size() && i < 16; ++i) list += (i ? ", " : "") + lost[i];
    problem("schema-key-missing", k.pattern,
            "every layer of " + whose + " holds this tensor, layer " + list + " here does not (the others do)");
    reported_.insert(k.pattern);
  }
}

// A block that holds a key of a group holds the group's others (GLM's MoE layer: the router's
// expert bias with its weight and experts); a pattern reported above is not again. The key named
// is the pattern in the first such block, its inner numbers left `#` (no expert's down_proj).
void SchemaChecker::check_together() {
  for (const auto& group : s_.together) {
    const size_t h = group.front().find(".#.");
    if (h == std::string::npos) continue;
    const std::string stack = group.front().substr(0, h);
    // pattern -> the blocks that lack it, each with a key of the group it holds
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> lost;
    for (const auto& [where, held] : block_holds_) {
      if (where.first != stack) continue;
      // The key named as the witness: one the block holds, outside nested numbers where one is (the
      // router's weight rather than an expert's).
      auto any = group.end();
      for (auto g = group.begin(); g != group.end(); ++g)
        if (held.count(*g) &&
            (any == group.end() || std::count(g->begin(), g->end(), '#') < std::count(any->begin(), any->end(), '#')))
          any = g;
      if (any == group.end()) continue;
      for (const auto& g : group) {
        if (held.count(g) || reported_.count(g) || excused(g, key_in_block(g, where.second))) continue;
        lost[g].emplace_back(where.second, held.at(*any));
      }
    }
    for (auto& [g, ids] : lost) {
      std::sort(ids.begin(), ids.end(), [](const auto& a, const auto& b) {
        return a.first.size() != b.first.size() ? a.first.size() < b.first.size() : a.first < b.first;
      });
      std::string list;
      for (size_t i = 0; i < ids.size() && i < 16; ++i) list += (i ? ", " : "") + ids[i].first;
      if (ids.size() > 16) list += ", ... (" + std::to_string(ids.size()) + " in all)";
      std::string named = g;
      named.replace(named.find('#'), 1, ids.front().first);
      problem("schema-key-missing", named,
              "a layer of " + who_ + " that holds " + ids.front().second + " holds " + g + " too; layer " + list +
                  " here does not");
    }
  }
}

}  // namespace

SchemaCheckResult check_hf_schema(const json& config, const std::string& config_path,
                                  const std::vector<HfTensor>& tensors) {
  SchemaCheckResult out;
  const HfSchema& schema = hf_schema();
  const std::string type = config.is_object() ? config.value("model_type", std::string()) : std::string();
  out.summary = {{"model_type", type.empty() ? json() : json(type)},
                 {"class", nullptr},
                 {"schema_model_type", nullptr},
                 {"found_by", nullptr},
                 {"transformers", schema.transformers},
                 {"checked", false},
                 {"why", nullptr}};
  const SchemaMatch match = match_schema(config);
  const ModelSchema* s = match.schema;
  if (!s) {
    if (const ModelSchema* own = type.empty() ? nullptr : schema.of(type)) out.summary["class"] = own->cls;
    const std::string why = match.why + "; its keys are not compared with a model schema";
    out.summary["why"] = why;
    out.notes.push_back({"schema-not-checked", Where(config_path), why});
    return out;
  }
  out.summary["class"] = s->cls;
  out.summary["schema_model_type"] = s->type;
  out.summary["found_by"] = match.found_by;
  out.summary["checked"] = true;
  // Found by architectures: the schema's type, and the config's own.
  const std::string who =
      s->cls + " (model_type " + s->type +
      (s->type != type ? ", found by architectures for " +
                             (type.empty() ? std::string("a config with no model_type") : "model_type " + type)
                       : std::string()) +
      ", transformers " + schema.transformers + ")";
  SchemaChecker c(config, config_path, *s, who, out);
  c.classify(tensors);
  c.check_named_indices();
  c.refuse_load_conversions();
  c.report_unexpected();
  c.check_missing();
  c.check_together();
  return out;
}

}  // namespace dcpctl
