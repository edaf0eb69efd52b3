// The precision policy of --dtype: which floating tensors keep their saved dtype when the others
// are cast, and why. A tensor is kept when
//
//   - `--keep-dtype GLOB` matches its output key (a shell glob, fnmatch as --include; any --dtype;
//     a Hugging Face folder output records the globs in its files' headers, meta/keep_dtype_entry.h,
//     so that a later `verify` knows what the user kept);
//   - the model schema says so (check/hf_schema.h): config.json's model is in the schema (by its
//     model_type, or, for a model_type the schema does not hold, by the class its `architectures`
//     names: Kimi-K2's kimi_k2 is DeepseekV3ForCausalLM's) and the output key is one of its
//     on-disk keys; then the schema alone decides, as transformers would leave the tensor loading
//     the folder in bf16 (fp16 for fp16 and fp8), after its load-time renames (hy_v3's
//     `mlp.expert_bias`, T5's `wo` in fp16, float32 buffers); a key the schema does not hold
//     (another writer's names) falls to the rules below;
//   - a key map declares it (`"keep_dtype": true` on a rule, docs/maps.md): either side's pattern
//     matches the output key, for the map in use (--map) and for every built-in map, so a
//     torchtitan checkpoint cast or resharded without --map keeps its `expert_bias` too;
//   - the model keeps it: the checkpoint's config.json names a `model_type` (or a sub-config does:
//     text_config, vision_config, ...; a composite model unions its parts' lists, as transformers'
//     post_init does), and transformers declares the tensor in `_keep_in_fp32_modules_strict` for
//     it (src/plan/keep_in_fp32.json, written by tools/keep_in_fp32.py from the transformers
//     version it names). transformers keeps these in float32 when it loads a model in float16 or
//     bfloat16, and keeps `_keep_in_fp32_modules` too when it loads in float16 only.
//
// The map's and the model's declarations apply when --dtype narrows: to bf16 or fp16 (as
// transformers' dtype plan), and to fp8 (narrower still); `_keep_in_fp32_modules` to fp16 and fp8.
// Casting up (fp32, fp64) keeps nothing but what --keep-dtype names. A kept tensor is written in
// its saved dtype; `--cast-all` casts it anyway, and the summary lists it as cast despite the
// policy, never silently. One exception, for a Hugging Face folder output (`model_output`): a
// tensor kept because transformers keeps it in float32 (the model schema's float32, or its
// keep-in-float32 lists), saved narrower (bf16, fp16), is written in float32, as transformers'
// from_pretrained(dtype=...) upcasts it and save_pretrained writes it (`keeps_float32`): a bf16
// GPT-OSS folder cast to fp16 keeps its norms in float32, not in bf16 beside a float16 config.
//
// Unknown models fail closed. An output that claims to be a model (a Hugging Face folder, which
// carries config.json: `model_output`) cast narrower with a config.json whose model the schema
// finds neither by model_type nor by architectures, of a model_type transformers does not define
// (remote code, a typo), is refused, UnsupportedError (exit 5) naming
// the model type, before anything is written: dcpctl does not know what transformers (or the
// model's remote code) keeps in float32. So is a model_type transformers defines whose classes
// declare no keep-in-float32 list but that the schema could not build (PerceptionLM) or did not
// build (a part of a composite): a class keeps more than its lists say (LFM2-MoE's expert_bias, a
// buffer made float32, stays float32 when transformers loads the model in bfloat16). A type
// transformers defines whose classes do keep tensors in float32 (keep_in_fp32.json lists them) but
// that the schema could not or did not build (Pop2Piano's `wo`, SLANeXt's structure generator) is
// not refused: those lists decide, as transformers' own load casts the rest, and `schema_why`
// says no schema did (a float32 buffer beside the lists would be the residual risk). The user's decision ends the
// refusal: `--keep-dtype GLOB` (what to keep; the lists and maps apply beside it) or `--cast-all`
// (nothing kept). Outputs that
// carry no config.json (a .safetensors file, a .pt, a DCP checkpoint: their reader brings the
// model) and runs with no config.json at all (nothing names a model to decide for) are not
// refused: the lists, the maps and --keep-dtype decide, and `describe()`'s `schema_why` (the
// summary's precision line) says that no schema did and why.
//
// How a transformers pattern matches (core_model_loading.py's build_glob_alternation and dtype
// plan): `*` becomes `.*` and the regex is searched in the key (so "norm" matches every key holding
// "norm", "gate.weight" also "gate_weight"). The table holds only letters, digits, `_`, `.` and `*`
// (the generator refuses anything else), which is all this matcher implements. transformers
// searches the parameter's name after its own key renames (conversion_mapping.py); dcpctl searches
// the output key, which is that name for a Hugging Face folder of most models (not for the few whose
// files use other names, which transformers renames on load).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/dtype.h"
#include "view/maps/keymap.h"

namespace dcpctl {

struct Checkpoint;
struct ModelSchema;

// One pattern of the policy and why it keeps what it matches.
struct KeepRule {
  enum Kind { User, Map, Model } kind = User;
  std::string pattern;  // a shell glob (User), a map pattern (Map), a transformers pattern (Model)
  std::string reason;   // "--keep-dtype '*.bias'", "key map torchtitan-deepseek-v3 rule 57", ...
};

// What the policy is made of.
struct PrecisionInputs {
  std::optional<DType> cast;            // --dtype
  nlohmann::json config;                // the model's config.json (null: none found)
  std::string config_path;              // where it was read, or "" for none
  std::vector<KeyMap> maps;             // maps whose keep_dtype rules count (--map's, the built-in ones)
  std::vector<std::string> keep_globs;  // --keep-dtype
  bool cast_all = false;                // --cast-all
  bool model_output = false;            // the output carries config.json (an HF folder): unknown models refused
};

class PrecisionPolicy {
 public:
  PrecisionPolicy() = default;  // keeps nothing
  explicit PrecisionPolicy(const PrecisionInputs& in);

  // Why tensor `key` keeps its saved dtype under --dtype, or "" when nothing keeps it. User globs
  // are asked first, then the model schema (for a key it holds), then the model's list, then the
  // maps (the first match gives the reason).
  std::string reason(const std::string& key) const;
  bool cast_all() const { return cast_all_; }
  // Whether kept tensor `key` is one transformers loads in float32 into a Hugging Face folder
  // output: the reason() that keeps it is the model schema's float32 or a transformers
  // keep-in-float32 list, not --keep-dtype or a map's keep_dtype alone. (False for other outputs.)
  bool keeps_float32(const std::string& key) const;
  const std::vector<std::string>& model_types() const { return model_types_; }
  const std::vector<KeepRule>& rules() const { return rules_; }
  // The `policy` object of the --json summary's `cast`: config, model_types, transformers, schema
  // ({model_type, class, transformers, found_by: "model_type" | "architectures"} or null),
  // schema_why (why no schema decides, or null when one does or the cast narrows nothing),
  // keep_dtype, cast_all.
  nlohmann::json describe() const;

 private:
  // rules_[i] made ready to match: a Model pattern as the whole-key wildcard "*P*", a Map
  // pattern's literal pieces between its placeholders.
  struct Compiled {
    std::string wildcard;
    std::vector<std::string> lits;
  };
  void add(KeepRule::Kind kind, const std::string& pattern, std::string reason);
  // What decides `key`, in reason()'s order: a --keep-dtype rule; else the model schema's keep
  // character for a key it holds; else the first of transformers' lists and the maps' rules that
  // matches; else nothing.
  struct Decision {
    const KeepRule* rule = nullptr;
    std::optional<char> schema;
  };
  Decision decide(const std::string& key) const;

  std::vector<KeepRule> rules_;
  std::vector<Compiled> compiled_;
  std::vector<std::string> model_types_, keep_globs_;
  std::string config_path_;
  bool cast_all_ = false;
  bool model_output_ = false;
  const ModelSchema* schema_ = nullptr;  // the config's model in the model schema (check/hf_schema.h)
  std::string found_by_, schema_why_;    // how it was found; why none was (narrowing casts only)
  bool schema_fp16_ = false;             // its float16 column (fp16, fp8), else bfloat16's
};

// Whether a cast to `d` narrows (bf16, fp16, fp8): the model's and the maps' declarations apply.
bool cast_narrows(DType d);

// config.json's model_type and those of its sub-configs (objects one level down that carry one),
// each once, in order.
std::vector<std::string> config_model_types(const nlohmann::json& config);

// The transformers table compiled in (src/plan/keep_in_fp32.json).
struct KeepInFp32 {
  std::string transformers;  // the version it was read from
  // model_type -> patterns: `_keep_in_fp32_modules_strict` (bf16 and fp16), `_keep_in_fp32_modules` (fp16)
  std::vector<std::pair<std::string, std::vector<std::string>>> strict, fp16;
  const std::vector<std::string>* strict_of(const std::string& model_type) const;
  const std::vector<std::string>* fp16_of(const std::string& model_type) const;
};
const KeepInFp32& keep_in_fp32();

// transformers' match of a `_keep_in_fp32_modules*` pattern: regex search, `.` any character,
// `*` any run of characters.
bool transformers_pattern_matches(const std::string& pattern, const std::string& key);
// A key map pattern ({NAME} and {NAME + EXPR} placeholders) against a whole key, each placeholder
// matching a run of digits (an offset is not checked: a kept tensor of the MTP block is kept
// whatever its layer number).
bool map_pattern_matches(const std::string& pattern, const std::string& key);

}  // namespace dcpctl
