#include "plan/precision.h"

#include <fnmatch.h>

#include <algorithm>

#include "check/hf_schema.h"
#include "meta/checkpoint.h"
#include "store/file.h"
#include "util/error.h"
#include "view/maps/keymap_terms.h"

namespace dcpctl {

using nlohmann::json;

// The table's text (src/plan/keep_in_fp32.json, compiled in by CMake: keep_in_fp32_builtin.cpp).
std::string keep_in_fp32_text();

namespace {

std::vector<std::pair<std::string, std::vector<std::string>>> read_lists(const json& j, const char* field) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  if (!j.contains(field) || !j[field].is_object())
    throw FormatError(Where("built-in keep_in_fp32.json"), std::string("no \"") + field + "\" object");
  for (const auto& [type, pats] : j[field].items()) out.emplace_back(type, pats.get<std::vector<std::string>>());
  return out;  // nlohmann's object keeps its keys sorted: binary search below
}

const std::vector<std::string>* find_list(const std::vector<std::pair<std::string, std::vector<std::string>>>& lists,
                                          const std::string& type) {
  auto it = std::lower_bound(lists.begin(), lists.end(), type,
                             [](const auto& e, const std::string& t) { return e.first < t; });
  return it != lists.end() && it->first == type ? &it->second : nullptr;
}

// `pat` (`.` any one character, `*` any run) matches the whole of `s`: the classic wildcard walk,
// backing up to the last `*`.
bool wildcard_full(const std::string& pat, const std::string& s) {
  size_t p = 0, i = 0, star = std::string::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && (pat[p] == '.' || pat[p] == s[i])) {
      ++p;
      ++i;
    } else if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = i;
    } else if (star != std::string::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

// lit[k] {digits} lit[k+1] ... against key[pos..]: each placeholder one or more digits.
bool lits_match(const std::vector<std::string>& lit, size_t k, const std::string& key, size_t pos) {
  if (key.compare(pos, lit[k].size(), lit[k]) != 0) return false;
  pos += lit[k].size();
  if (k + 1 == lit.size()) return pos == key.size();
  size_t end = pos;
  while (end < key.size() && key[end] >= '0' && key[end] <= '9') {
    ++end;
    if (lits_match(lit, k + 1, key, end)) return true;
  }
  return false;
}

}  // namespace

bool cast_narrows(DType d) {
  return d == DType::BFloat16 || d == DType::Float16 || d == DType::Float8_E4M3FN || d == DType::Float8_E5M2 ||
         d == DType::Float8_E4M3FNUZ || d == DType::Float8_E5M2FNUZ;
}

const std::vector<std::string>* KeepInFp32::strict_of(const std::string& model_type) const {
  return find_list(strict, model_type);
}
const std::vector<std::string>* KeepInFp32::fp16_of(const std::string& model_type) const {
  return find_list(fp16, model_type);
}

const KeepInFp32& keep_in_fp32() {
  static const KeepInFp32 table = [] {
    json j = json::parse(keep_in_fp32_text());
    KeepInFp32 t;
    t.transformers = j.at("transformers").get<std::string>();
    t.strict = read_lists(j, "strict");
    t.fp16 = read_lists(j, "fp16");
    return t;
  }();
  return table;
}

bool transformers_pattern_matches(const std::string& pattern, const std::string& key) {
  return wildcard_full("*" + pattern + "*", key);  // re.search: anywhere in the key
}

bool map_pattern_matches(const std::string& pattern, const std::string& key) {
  Pattern p = Pattern::parse(pattern, "key map pattern");
  return lits_match(p.lit, 0, key, 0);
}

std::vector<std::string> config_model_types(const json& config) {
  std::vector<std::string> out;
  auto add = [&](const json& j) {
    if (j.is_object() && j.contains("model_type") && j["model_type"].is_string()) {
      std::string t = j["model_type"].get<std::string>();
      if (!t.empty() && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
  };
  add(config);
  if (config.is_object())
    for (const auto& [k, v] : config.items()) add(v);
  return out;
}

PrecisionPolicy::PrecisionPolicy(const PrecisionInputs& in)
    : keep_globs_(in.keep_globs), config_path_(in.config_path), cast_all_(in.cast_all), model_output_(in.model_output) {
  model_types_ = config_model_types(in.config);
  if (!in.cast) return;
  for (const auto& g : in.keep_globs) add(KeepRule::User, g, "--keep-dtype '" + g + "'");
  if (!cast_narrows(*in.cast)) return;
  const KeepInFp32& table = keep_in_fp32();
  const bool fp16_list = *in.cast != DType::BFloat16;  // fp16 and fp8: transformers' fp16 list too
  if (in.config.is_null()) {
    schema_why_ =
        "no config.json was found, so no model schema decides: kept only what --keep-dtype and the key "
        "maps' keep_dtype rules name";
  } else {
    const SchemaMatch match = match_schema(in.config);
    schema_ = match.schema;
    found_by_ = match.found_by;
    if (!schema_) {
      const std::string type =
          in.config.is_object() && in.config.contains("model_type") && in.config["model_type"].is_string()
              ? in.config["model_type"].get<std::string>()
              : std::string();
      const std::string model =
          type.empty() ? std::string("a model whose config.json names no model_type") : "model_type " + type;
      // An export that claims to be a model the schema does not know, cast without the user's say:
      // refused (exit 5, with the way out), nothing written, where a wrong dtype may follow: a
      // model_type transformers does not define (remote code), or one it defines whose classes
      // declare no keep-in-float32 list (PerceptionLM, which the schema could not build; a part of a
      // composite): a class keeps more than its lists say (LFM2-MoE's expert_bias, a buffer made
      // float32, stays float32 in transformers' bfloat16 load), which only building the model shows.
      // A type transformers defines whose classes do keep tensors in float32 but which the schema
      // could not build or did not build (its "failed" and "skipped": Pop2Piano's `wo`, SLANeXt's
      // structure generator) is cast as transformers casts it, its lists (keep_in_fp32.json, read
      // from every class of the type) deciding, and schema_why says no schema did. (A model_type
      // the schema holds, under another class than its own, is known: its lists apply.)
      const HfSchema& schema = hf_schema();
      const bool defined = !type.empty() && (schema.failed_reason(type) ||
                                             std::binary_search(schema.skipped.begin(), schema.skipped.end(), type));
      const bool listed = table.strict_of(type) || table.fp16_of(type);
      const bool type_known = !type.empty() && (schema.of(type) || (defined && listed));
      if (in.model_output && !type_known && !in.cast_all && in.keep_globs.empty())
        throw UnsupportedError(
            Where(in.config_path),
            "--dtype " + std::string(torch_name(*in.cast)) + " of a Hugging Face folder of " + model +
                ": no model schema says which of its tensors transformers keeps in float32 when it loads it in " +
                (fp16_list ? "float16" : "bfloat16") + " (" + match.why +
                "); nothing written. Say which tensors to keep in their saved dtype with --keep-dtype GLOB "
                "(repeatable, "
                "e.g. '*e_score_correction_bias' for a router bias; transformers' lists and the key maps' keep_dtype "
                "rules apply beside it), or cast every floating tensor with --cast-all");
      schema_why_ = "no model schema decides (" + match.why + "): kept what " +
                    (in.keep_globs.empty() ? std::string() : "--keep-dtype, ") +
                    "transformers' keep-in-float32 lists and the key maps' keep_dtype rules name";
    }
  }
  schema_fp16_ = fp16_list;
  // transformers' lists, for keys the schema does not hold: the config's types', and the schema's
  // type's where the schema was found by the class (a remote model_type has no lists of its own).
  std::vector<std::string> list_types = model_types_;
  if (schema_ && std::find(list_types.begin(), list_types.end(), schema_->type) == list_types.end())
    list_types.push_back(schema_->type);
  for (const auto& type : list_types) {
    if (const auto* pats = table.strict_of(type))
      for (const auto& p : *pats)
        add(KeepRule::Model, p,
            "transformers " + table.transformers + " " + type + " _keep_in_fp32_modules_strict '" + p + "'");
    if (fp16_list)
      if (const auto* pats = table.fp16_of(type))
        for (const auto& p : *pats)
          add(KeepRule::Model, p,
              "transformers " + table.transformers + " " + type + " _keep_in_fp32_modules '" + p + "'");
  }
  for (const KeyMap& m : in.maps)
    for (const auto& r : m.rules) {
      if (!r.keep_dtype) continue;
      for (int s = 0; s < 2; ++s)
        for (const auto& part : r.side[s])
          add(KeepRule::Map, part.pattern, "key map " + m.name + " rule " + std::to_string(r.index) + " (keep_dtype)");
    }
}

void PrecisionPolicy::add(KeepRule::Kind kind, const std::string& pattern, std::string reason) {
  rules_.push_back({kind, pattern, std::move(reason)});
  Compiled c;
  if (kind == KeepRule::Model) c.wildcard = "*" + pattern + "*";  // re.search: anywhere in the key
  if (kind == KeepRule::Map) c.lits = Pattern::parse(pattern, "key map pattern").lit;
  compiled_.push_back(std::move(c));
}

PrecisionPolicy::Decision PrecisionPolicy::decide(const std::string& key) const {
  // --keep-dtype first; then the model schema, for a key it holds (its on-disk names: what
  // transformers keeps after its load-time renames); then transformers' lists and the maps.
  for (size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].kind == KeepRule::User && ::fnmatch(rules_[i].pattern.c_str(), key.c_str(), 0) == 0)
      return {&rules_[i], std::nullopt};
  if (schema_)
    if (std::optional<char> keep = schema_keep(*schema_, key, schema_fp16_)) return {nullptr, keep};
  for (size_t i = 0; i < rules_.size(); ++i) {
    const KeepRule& r = rules_[i];
    if ((r.kind == KeepRule::Model && wildcard_full(compiled_[i].wildcard, key)) ||
        (r.kind == KeepRule::Map && lits_match(compiled_[i].lits, 0, key, 0)))
      return {&r, std::nullopt};
  }
  return {};
}

std::string PrecisionPolicy::reason(const std::string& key) const {
  const Decision d = decide(key);
  if (d.rule) return d.rule->reason;
  if (!d.schema || *d.schema == '-' || *d.schema == 'i') return {};
  return "transformers " + hf_schema().transformers + " " + schema_->cls + " (model_type " + schema_->type +
         ") keeps " + schema_->named_pattern(schema_pattern(key)) + " in " +
         (*d.schema == 'f' ? "float32" : std::string(1, *d.schema)) + " when it loads in " +
         (schema_fp16_ ? "float16" : "bfloat16") + " (model schema)";
}

bool PrecisionPolicy::keeps_float32(const std::string& key) const {
  if (!model_output_) return false;
  // the schema's float32, or a transformers keep-in-float32 list; not --keep-dtype (the saved dtype,
  // as asked) nor a map's keep_dtype alone
  const Decision d = decide(key);
  return d.schema ? *d.schema == 'f' : d.rule && d.rule->kind == KeepRule::Model;
}

json PrecisionPolicy::describe() const {
  return {{"config", config_path_.empty() ? json() : json(config_path_)},
          {"model_types", model_types_},
          {"transformers", keep_in_fp32().transformers},
          {"schema", schema_ ? json{{"model_type", schema_->type},
                                    {"class", schema_->cls},
                                    {"transformers", hf_schema().transformers},
                                    {"found_by", found_by_}}
                             : json()},
          {"schema_why", schema_why_.empty() ? json() : json(schema_why_)},
          {"keep_dtype", keep_globs_},
          {"cast_all", cast_all_}};
}

}  // namespace dcpctl
