// The model schema: what transformers' save_pretrained puts on disk for every model type it
// defines, generated from transformers itself (tools/hf_schema.py, src/check/hf_schema.json,
// compiled in; docs/architecture.md, "The model schema"), after llama.cpp's per-architecture tensor
// tables. Per model type: the class its folders name, and each on-disk key with its integer path
// components written `#` (layer, expert and MTP indices), its dims as config fields
// ("hidden_size", "2*intermediate_size", "n_routed_experts+zero_expert_num", or unknown), the dtype
// transformers keeps it in when loading in bfloat16 and in float16 (after its load-time renames,
// in on-disk names), the boolean config value it needs ("tie_word_embeddings=false") and whether
// every folder has it.
//
// check_hf_schema is the part of check_hf_folder (check/hf_checks.h) that compares a folder's keys
// with the schema of its config's model_type:
//   schema-key-unexpected  a key the architecture does not define (a near name: the nearest named),
//                          or an index numbered in a name past the count the config gives it;
//   schema-key-missing     a key every folder of the type has (a norm, the embedding, the head
//                          when not tied), a per-layer key some layers have and others lack, a
//                          key of a block whose module holds another key of its group (`together`:
//                          GLM's mlp.gate.e_score_correction_bias in a layer with mlp.gate.weight),
//                          or an index numbered in a name below the count the config gives it
//                          (Inkling's vision layers.norm_N: vision_config.n_layers-1 of them);
//   schema-shape-mismatch  a dimension the schema derives from a config field disagrees with it.
// Not checked: keys of MTP layers (layers past num_hidden_layers, `mtp.` namespaces: the layer
// checks of check/hf_config_checks.h count them), keys the class ignores on load
// (_keys_to_ignore_on_load_unexpected), quantization's own tensors (scales, packed weights) of a
// config with a quantization_config, per-layer MLP keys absent from every layer (a config's layer
// kinds decide which layers are dense; a layer holding any key of its MoE group is held to all).
//
// A folder in a release layout transformers converts on load (ModelSchema::load_renames:
// DeepSeek-V4's published `embed.weight`, `layers.N.attn.wq_a.weight`, `hc_head_fn`) is checked
// under the save_pretrained names its keys load as (check/hf_checks.h: release_layout), every
// finding naming the folder's own key; lookup finds a release name's schema key, so the precision
// policy keeps what transformers keeps in either layout.
//
// Which schema a config.json is checked against (match_schema): its model_type's, when its
// `architectures` (if any) names that type's class; else, when the schema holds no such model_type
// (remote code: Kimi-K2's `kimi_k2` naming DeepseekV3ForCausalLM), the type whose class its
// `architectures` names, so a remote class that saves other keys is refused by the key checks as
// any folder would be. A model the schema finds neither way, or a known model_type whose
// `architectures` names another class, is a note (schema-not-checked), not a problem; the
// precision policy refuses it for an export that claims to be that model (plan/precision.h).
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "check/hf_config_checks.h"
#include "util/finding.h"

namespace dcpctl {

struct SchemaKey {
  std::string pattern;            // on-disk key, integer components as `#`
  std::vector<std::string> dims;  // per dimension: a formula of config fields, or "" (unknown)
  char keep_bf16 = '-';           // '-' cast to the target, 'f' kept float32, 'i' not floating, ...
  char keep_fp16 = '-';
  bool keep_known = false;  // the generator derived the two above (not for a key two size fields bring)
  // "" or what brings the key: "FIELD=true|false|null|nonempty|set" (FIELD a path into sub-configs,
  // "vision_config.qkv_bias"; `set`: present and not null) or "A!=B" (two size fields that differ)
  std::string when;
  bool required = false;
};

struct ModelSchema {
  std::string type, cls, prefix;
  // The model_type of `cls`'s own config class when it is another type's (MllamaForCausalLM,
  // built for mllama, is mllama_text_model's class; LlamaForCausalLM, built for internlm3, is
  // llama's), else "": the type a config's `architectures` finds for the class is its own.
  std::string class_type;
  std::vector<SchemaKey> keys;                                 // sorted by pattern
  std::vector<std::pair<std::string, std::string>> absent;     // pattern, "FIELD=VALUE" that removes it
  std::vector<std::string> memory, renamed;                    // in-memory names; the on-disk ones they stand for
  std::vector<std::string> ignore_unexpected, ignore_missing;  // Python regexes
  std::vector<std::pair<std::string, std::string>> prefixes;   // on-disk prefix -> the schema's (PrefixChange)
  bool head_untied =
      false;            // the class never ties lm_head.weight: it loads the folder's whatever tie_word_embeddings says
  std::string experts;  // how many experts the per-expert keys number, as config fields ("" unknown)
  // The class has per-expert keys but no config field explains how many it numbers (the schema's
  // "experts": null): the config's expert count is not what transformers saves.
  bool experts_unexplained = false;
  // Keys of one module of a numbered block (`mlp`, `self_attn`) that the same blocks hold in the
  // default build: a block holding one holds them all (an MoE layer's router weight, its expert
  // bias, its experts).
  std::vector<std::vector<std::string>> together;
  // The indices numbered in names rather than as path components (Inkling's vision
  // `model.visual.layers.norm_3.weight`, NLLB-MoE's `experts.expert_12.fc1.weight`): the pattern up
  // to that component, its number `#` ("model.visual.layers.norm_#"), and how many it numbers as
  // config fields ("vision_config.n_layers-1", "num_experts"; "" unknown). Keys below such a prefix
  // are patterns with that `#` ("model.visual.layers.norm_#.weight"); a fixed name with digits
  // (`fc1`, `ln_2`) is not one.
  std::vector<std::pair<std::string, std::string>> named;
  // The release layout transformers converts on load (conversion_mapping.py's renames, applied by
  // from_pretrained; the generator's "load_renames"): release pattern -> the save_pretrained pattern
  // of the same parameter, sorted by release pattern, the `#`s of both in the same order
  // (DeepSeek-V4's `layers.#.ffn.experts.#.w1.weight` -> `model.layers.#.ffn.experts.#.w1.weight`,
  // `embed.weight` -> `model.embed_tokens.weight`). Empty for a type whose save names are the ones
  // its renames read.
  std::vector<std::pair<std::string, std::string>> load_renames;
  // The load-time conversions that read keys neither save_pretrained writes nor load_renames maps
  // (the generator's "load_conversions"): [source regex, conversion class]. A key the schema does not
  // define that matches one is refused (UnsupportedError, exit 5), not called unexpected.
  std::vector<std::pair<std::string, std::string>> load_conversions;
  // Why a type whose names transformers renames on load has no load_renames (the generator's
  // "load_renames_not_derived": Kimi K2.5's release names, which no save_pretrained key pairs
  // with); empty otherwise. A key the schema does not define in such a type may be a release name
  // the renames read: refused (UnsupportedError, exit 5), not called unexpected (exit 3).
  std::string load_renames_not_derived;
  // How the config.json save_pretrained writes counts layers where the model counts them otherwise
  // (the generator's "saved_config": Dory's two blocks a layer, `layer_types` with an "mlp" entry
  // after each layer's kind and its layer counts doubled): per_layer 0 where they agree.
  struct SavedConfig {
    int64_t per_layer = 0;
    std::string list, kind;
    std::vector<std::string> fields;
  } saved_config;
  const SchemaKey* find(const std::string& pattern) const;
  // `pattern` (schema_pattern's) with each index numbered in a name that `named` holds written `#`.
  std::string named_pattern(const std::string& pattern) const;
  // The `named` entry whose prefix `pattern` (the schema's) is under, or null.
  const std::pair<std::string, std::string>* named_of(const std::string& pattern) const;
  // find, with the indices numbered in names, then through `prefixes` (an on-disk prefix the
  // loader changes to the schema's).
  const SchemaKey* lookup(const std::string& pattern) const;
  // The schema's pattern of `key`: the one lookup finds, else schema_pattern(key).
  std::string pattern_of(const std::string& key) const;
  // The save_pretrained pattern of a release `pattern` (load_renames), or "" when it is none.
  std::string save_pattern(const std::string& pattern) const;
  // The save_pretrained name of the release-layout `key` (`layers.3.ffn.experts.0.w1.weight` ->
  // `model.layers.3.ffn.experts.0.w1.weight`), or "" when `key` is not a release name. A tensor
  // beside a renamed weight (an FP8 release's `layers.3.attn.wq_a.scale`, a bias) is renamed with
  // its module (`X.weight`'s), as the loader's renames act on the module path.
  std::string save_name(const std::string& key) const;
};

// A type of the schema as the index holds it: its name, class and class_type, and where its JSON
// object is in the compiled-in text (parsed into a ModelSchema at its first use).
struct SchemaEntry {
  std::string type, cls, class_type;
  size_t begin = 0, end = 0;  // its object in HfSchema::text
};

struct HfSchema {
  std::string transformers, torch;
  std::string text;                                         // the compiled-in JSON
  std::vector<SchemaEntry> index;                           // sorted by type
  std::vector<std::pair<std::string, std::string>> failed;  // type, why it was not built
  std::vector<std::string> skipped;                         // types without a language-model class, sorted
  // The type's schema, parsed from its object at the first call for it (any thread); null when the
  // schema has no such type. A command reads one or two types of the 2.4 MB of them: parsing the
  // whole text took 70 ms of every HF check (most of a tiny model's `verify`; far more under ASan).
  const ModelSchema* of(const std::string& model_type) const;
  // The type whose folders `cls` writes: the one built from the class's own config class where
  // several types share it, else the one type that names it; null when no type does.
  const ModelSchema* of_class(const std::string& cls) const;
  const std::string* failed_reason(const std::string& model_type) const;
  // Why the schema has no entry for `model_type`: not a type transformers defines, could not be
  // built (the reason), or has no language-model class.
  std::string why_not(const std::string& model_type) const;

  struct Parsed;  // the types parsed so far, behind a lock
  std::shared_ptr<Parsed> parsed;
};
// The compiled-in schema (read once, at the first use).
const HfSchema& hf_schema();

// The schema a config.json's model is checked against and how it was found (see above).
struct SchemaMatch {
  const ModelSchema* schema = nullptr;
  std::string found_by;  // "model_type" or "architectures"; "" when none
  std::string why;       // when none: why ("model_type kimi_k2 is not one transformers 5.23.0 defines, ...")
};
SchemaMatch match_schema(const nlohmann::json& config);

// `key` with every integer path component replaced by `#` (as the schema writes its patterns; an
// index numbered in a name is the schema's to know: ModelSchema::lookup, pattern_of).
std::string schema_pattern(const std::string& key);

// config.json as its config class reads it back, where the model schema says the saved file
// counts layers otherwise (ModelSchema::saved_config: Dory's `layer_types` of attention and mlp
// blocks, its counts doubled, are halved as DoryConfig.__post_init__ halves them); else `config`.
nlohmann::json config_as_loaded(const nlohmann::json& config);

// match_schema(config).schema: the schema of config.json's own model, or null.
const ModelSchema* schema_for_config(const nlohmann::json& config);

// Whether the model of `config` (its schema `s`) has `key`: its pattern is in the schema and the
// config flag it needs, if any, holds (M2M-100 has model.decoder.embed_tokens.weight on disk only
// with tie_word_embeddings false).
bool schema_defines(const ModelSchema& s, const nlohmann::json& config, const std::string& key);

// The dtype transformers leaves `key` in when it loads the model in `target` ("bfloat16",
// "float16"): 'f' float32, '-' the target, 'i' not a floating tensor; nullopt when the schema has
// no such key (a name transformers renames on load, for which its in-memory lists apply).
std::optional<char> schema_keep(const ModelSchema& s, const std::string& key, bool fp16);

// Whether transformers keeps `key` of config.json's model in `tensor_dtype` when it loads it in
// `config_dtype` (the post-write dtype check's exception: what the precision policy kept).
bool schema_keeps_dtype(const nlohmann::json& config, const std::string& key, const std::string& tensor_dtype,
                        const std::string& config_dtype);

// How many experts the per-expert keys (`experts.J.`) of config.json's model number on disk, from
// the schema's formula and the config, with the formula; nullopt when the schema does not say.
std::optional<std::pair<int64_t, std::string>> schema_expert_count(const nlohmann::json& config);

// Whether the schema holds config.json's model with per-expert keys whose number no config field
// explains (ERNIE-4.5-VL numbers its text and vision experts in one list, twice moe_num_experts):
// the config's expert count is then no measure of the folder's numbering.
bool schema_expert_count_unexplained(const nlohmann::json& config);

// Whether the schema holds `key` of config.json's model (unconditionally: no flag brings it) with a
// config field for some dimension but none for dimension `dim`: that dimension is not a field the
// config names (Kyutai's embedding: vocab_size + num_codebooks * codebook_vocab_size + 1 rows, a
// product), so it is no measure of it.
bool schema_dim_unexplained(const nlohmann::json& config, const std::string& key, size_t dim);

// Dimension `dim` of `key` of config.json's model as the schema derives it from the config, with
// its formula ("decoder_vocab_size", "text_config.vocab_size+8"); nullopt when the schema does
// not hold the model or the key, gives no formula for that dimension, or the config lacks a field.
std::optional<std::pair<int64_t, std::string>> schema_dim(const nlohmann::json& config, const std::string& key,
                                                          size_t dim);

// The layout of a folder's keys against its schema `s` (see load_renames above): each key in the
// release layout -> its save_pretrained name. `layout` is "save_pretrained" when no key is a release
// name, else kReleaseLayout; `collisions` the pairs of keys that load as one parameter (a release
// name beside its own save_pretrained name: from_pretrained keeps one of the two).
inline constexpr const char* kReleaseLayout = "release (transformers load-time renames)";
struct KeyLayout {
  std::string layout = "save_pretrained";
  std::map<std::string, std::string> save_names;                // release key -> save_pretrained name
  std::vector<std::pair<std::string, std::string>> collisions;  // (key, the other key of that name)
};
KeyLayout key_layout(const ModelSchema& s, const std::vector<std::string>& keys);
// The release name of a save_pretrained `key` (load_renames read backwards: a missing key named as
// the folder's layout names it), or "" where the schema has none.
std::string release_name(const ModelSchema& s, const std::string& key);

struct SchemaCheckResult {
  Findings problems, notes;
  // {"model_type" (config.json's), "class", "schema_model_type" (the schema's type: another one when
  // found by architectures), "found_by" ("model_type", "architectures" or null), "transformers",
  // "checked": bool, "why"}
  nlohmann::json summary;
  // A schema-key-unexpected finding whose keys the model has only under a config setting config.json
  // does not make: the finding's key -> that setting ("mlp_bias=true").
  std::map<std::string, std::string> only_with;
};
SchemaCheckResult check_hf_schema(const nlohmann::json& config, const std::string& config_path,
                                  const std::vector<HfTensor>& tensors);

}  // namespace dcpctl
