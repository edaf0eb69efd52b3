// The terms a key map's rules are written in (view/maps/keymap.h): key patterns with {NAME}
// placeholders, and integer parameters from config.json. Shared by the map's loader (which checks
// every pattern when the map is read) and the rule kinds (view/maps/keymap_rules.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "view/maps/keymap.h"

namespace dcpctl {

// UsageError (exit 2): the map in `source` breaks the schema (docs/maps.md).
[[noreturn]] void bad_map(const std::string& source, const std::string& what);

class Params;

// Literal text and {NAME} placeholders, each matching a decimal integer (at most 18 digits);
// a pattern matches a whole key. The same name twice must match the same digits. A placeholder
// may carry an offset, `{NAME + EXPR}` (EXPR: an expression over the map's parameters): it holds
// NAME's value plus EXPR, so matching subtracts EXPR (a key whose number is smaller does not
// match) and filling adds it: DeepSeek's MTP block `mtp_layers.{M}` is Hugging Face's
// `model.layers.{M + num_hidden_layers}`.
struct Pattern {
  std::vector<std::string> lit;  // lit[0] {names[0]} lit[1] ... {names[k-1]} lit[k]
  std::vector<std::string> names;
  std::vector<std::string> offsets;  // per placeholder: EXPR, or "" for none

  // UsageError naming `source` for an unclosed, empty or stray brace, or two placeholders side
  // by side (their digits could not be told apart).
  static Pattern parse(const std::string& s, const std::string& source);
  // Matches `key`, filling the placeholders' values (names -> digits). Offsets are evaluated
  // only once the rest of the key matched (a parameter is asked for only then), through
  // `params`, which a pattern with offsets needs.
  bool match(const std::string& key, std::map<std::string, std::string>& vals, Params* params = nullptr) const;
  // The key for these values; a placeholder without one stays "{NAME}".
  std::string fill(const std::map<std::string, std::string>& vals, Params* params = nullptr) const;
  bool has_offsets() const;
};

// A map's parameters: config.json keys, defaults, and integer expressions over them (+ - * /
// and parentheses, `/` of integers; a name is a parameter of the map, else a config key). Each
// is resolved once, when a rule first needs it; one that cannot be is a UsageError naming it,
// what needed it and where dcpctl looked for config.json.
//
// A config key is read as transformers reads it: as written; else through transformers'
// `attribute_map` of the config's model_type, both ways (asked for `num_experts`, a Qwen3-MoE
// config written by transformers 5.23 answers with its `num_local_experts`, and the reverse for a
// release's config.json); else the same in a nested `text_config` (a multimodal release keeps the
// language model's numbers there). A parameter with `"shape"` that config.json lacks comes from
// the input's tensors: `{"key": PATTERN, "dim": N}` is dimension N of the first tensor PATTERN
// matches, `{"key": PATTERN, "count": "NAME"}` one more than the largest value placeholder NAME
// takes among the keys PATTERN matches (layers, experts).
class Params {
 public:
  Params(const KeyMap& map, const MapConfig& config) : map_(map), config_(config) {}
  // `why` says what needs the value, for the message when it cannot be had.
  int64_t eval(const std::string& expr, const std::string& why);
  // Whether some value came from config.json (the summary then names the file).
  bool used_config() const { return used_config_; }
  // The input's tensor keys and shapes, for parameters read from shapes; not owned.
  void set_shapes(const std::vector<std::pair<std::string, std::vector<int64_t>>>* shapes) { shapes_ = shapes; }
  // Each parameter resolved so far: name -> {"value", "from"} (config.json KEY, an alias of it,
  // a shape, the default), for --json's map.params.
  const nlohmann::json& sources() const { return sources_; }

 private:
  int64_t sum(const std::string& e, size_t& p, const std::string& why);
  int64_t product(const std::string& e, size_t& p, const std::string& why);
  int64_t atom(const std::string& e, size_t& p, const std::string& why);
  int64_t name(const std::string& n, const std::string& why);
  std::optional<int64_t> config_int(const std::string& k);
  std::optional<int64_t> shape_int(const nlohmann::json& spec);

  const KeyMap& map_;
  const MapConfig& config_;
  const std::vector<std::pair<std::string, std::vector<int64_t>>>* shapes_ = nullptr;
  std::unordered_map<std::string, int64_t> values_;
  std::set<std::string> active_;  // being resolved: a parameter defined in terms of itself
  bool used_config_ = false;
  std::string from_;  // where the last config_int / shape_int value came from
  nlohmann::json sources_ = nlohmann::json::object();
};

// transformers' attribute_map of a model_type ({ALIAS: NAME}; src/view/maps/config_aliases.json, written
// by tools/config_aliases.py); null when it declares none.
const nlohmann::json& config_aliases(const std::string& model_type);

}  // namespace dcpctl
