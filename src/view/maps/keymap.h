// Key maps: how one model family's weights are named and laid out by two conventions (torchtitan
// and Hugging Face), as data. A map is JSON (docs/maps.md has the schema; src/maps/ the built-in
// ones, compiled into the binary):
//
//   {"schema": "dcpctl-map/1", "name": "torchtitan-llama3", "description": "...",
//    "sides": ["torchtitan", "hf"],
//    "params": {"n_heads": {"config": "num_attention_heads"},
//               "head_dim": {"config": "head_dim", "default": "hidden_size / num_attention_heads"}},
//    "rules": [
//      {"torchtitan": "tok_embeddings.weight", "hf": "model.embed_tokens.weight"},
//      {"torchtitan": "layers.{L}.attention.wq.weight", "hf": "model.layers.{L}.self_attn.q_proj.weight",
//       "rope": {"heads": "n_heads", "head_dim": "head_dim"}},
//      {"hf": "model.layers.{L}.self_attn.rotary_emb.inv_freq"},
//      {"torchtitan": "layers.{L}.attention.wqkv.weight", "dim": 0,
//       "hf": [{"key": "...q_proj.weight", "size": "n_heads * head_dim", "rope": {...}}, ...]},
//      {"torchtitan": "layers.{L}.moe.experts.w1", "hf": "model.layers.{L}.mlp.experts.{E}.gate_proj.weight",
//       "experts": {"dim": 0, "count": "n_experts"}}]}
//
// `{NAME}` in a pattern matches a decimal integer and carries over to the other side. A rule with
// both sides renames; with one side it names keys that side has and the other lacks (dropped when
// mapping from that side). `rope`: the tensor's dim-0 rows are `heads` groups of `head_dim` rows,
// held by the first side in the interleaved RoPE order and by the second in the halves order
// (torchtitan's `_permute` one way, `_reverse_permute` the other). A list side with `dim`: the one
// tensor is the concatenation along `dim` of the listed ones (split one way, joined the other).
// `experts`: the one tensor stacks `count` tensors along a new dimension `dim`, which the other
// side holds one key each ({E} = 0 .. count-1). `transpose`: each tensor of one side is its
// counterpart's with the last two dims swapped (grouped experts [E, out, in] <-> [E, in, out]); on a
// list rule, each part is, and `dim` is a dimension of the one joined tensor; under a stack, each
// entry is. `interleave`: along a dimension, halves on the first side, alternating on the second. `tied` {SIDE: KEY}:
// from SIDE, a missing key of a tied model is made from KEY (lm_head from the embedding). Parameters come from
// config.json (the first key of a list that is present), else `default`; expressions are integer arithmetic (+ - * /
// and parentheses) over parameters, config keys and integers.
//
// The direction follows the input: the side whose patterns the input's tensor keys match. What a
// map yields is geometry only, from .metadata: each output tensor as parts (boxes of saved
// tensors and where they land), a MappedModel, which view/maps/map_view.h makes the model's table (the
// one path: every command reads and plans the map's outputs there; the write planner turns a
// written output's parts into pieces, meta/pieces.h). No byte moves here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/geometry.h"
#include "meta/metadata.h"
#include "meta/pieces.h"
#include "meta/select.h"

namespace dcpctl {

// What a rule says of its two sides; the direction of the mapping decides what is done
// (view/maps/keymap_rules.cpp: a concatenation is split one way and joined the other).
enum class RuleShape {
  OneToOne,  // a pattern on each side (or on one: keys the other side lacks)
  Concat,    // a list of parts on one side, joined along `dim` into the other side's tensor
             // (`groups` times over; with a stack, each entry of the stack so)
  Experts,   // one side stacks `count` tensors the other holds one key each
};

// A parsed map (the JSON above), checked when loaded.
struct KeyMap {
  std::string name, description, source;  // source: "built-in" or the file it came from
  std::vector<std::string> models;        // "models": the families it covers (optional)
  std::string sides[2];
  // "model": {SIDE: [PREFIX, ...]}: which of a side's tensor keys are the model's weights
  // (megatron's `embedding.`, `decoder.`, `output_layer.`; Hugging Face's `model.`, `lm_head.`).
  // Mapping from that side, a model key no rule covers is refused (apply_key_map); what lies
  // outside (optimizer, rng, schedulers, trainer state) is left out and listed. A map without
  // "model" counts every tensor key as the model.
  std::vector<std::string> model[2];
  bool has_model = false;
  // A family's map (schema dcpctl-map/2, expanded when loaded: docs/maps.md "Families and
  // variants"): the family's name (empty for a dcpctl-map/1 map), and the variants this name
  // allows. A variant is chosen per checkpoint (choose_variant): config.json's model_type, else
  // the checkpoint's keys, else the default; rules tagged with other variants are left out and
  // the variant's params replace the family's.
  std::string family;
  struct Variant {
    std::string name, description;
    std::vector<std::string> model_types;
    // the Hugging Face classes it writes (`"classes"`): a remote-code config (auto_map) whose
    // model_type no variant lists chooses the variant of the class its `architectures` names
    // (Kimi-K2's kimi_k2 is DeepseekV3ForCausalLM's)
    std::vector<std::string> classes;
    nlohmann::json params = nlohmann::json::object();
    bool is_default = false;
    // `"args"`: how the variant's Hugging Face config reads the training arguments a checkpoint of
    // the other side carries (megatron.json: the attention and RoPE checked, the router, and each
    // model_type's config class defaults); read by check/megatron_args.h, null when the file has none.
    nlohmann::json args;
  };
  std::vector<Variant> variants;
  nlohmann::json params;  // name -> {"config": key | [keys], "default": expr}
  struct Part {
    std::string pattern;
    std::string size;     // expression (a list side's parts)
    nlohmann::json rope;  // null or {"heads", "head_dim"}
  };
  struct Rule {
    RuleShape shape = RuleShape::OneToOne;
    std::vector<Part> side[2];  // empty: the rule names keys of the other side only
    bool list[2] = {false, false};
    int64_t dim = 0;         // a list side: the dimension the parts join along
    nlohmann::json rope;     // a 1:1 rule's row permutation
    nlohmann::json experts;  // null or {"dim", "count"} ("experts" or "stack" in the file)
    std::string groups;      // a list rule: the concatenation repeats this many times (expression), or ""
    bool transpose = false;  // each tensor of one side is the other's with its last two dims swapped
    // "interleave": N: along dimension N of one entry (a stack's entry: the tensor without the
    // stack's dims; in the first side's frame when transposed) the first side holds two halves one
    // after the other ([gate; up]) and the second the same slices alternating (gate 0, up 0, gate 1,
    // ...: GPT-OSS's gate_up_proj, Megatron-Bridge's GPTOSSMLPGateUpProjMapping). -1: none.
    int64_t interleave = -1;
    // "tied": {SIDE: KEY}: mapping from SIDE, when the input lacks this 1:1 rule's key, config.json
    // says tie_word_embeddings: true and the input has KEY, the output is a copy of KEY (the
    // adapters' from_hf: lm_head.weight from model.embed_tokens.weight). Empty: none.
    std::string tied[2];
    // A one-sided rule's "reason" (required): why the other side has no such tensor, reported
    // beside each key it drops.
    std::string reason;
    // "drop_when": "zeros" on a one-sided rule: its keys are dropped only when every value is zero
    // (a load-balancing bias the trainer starts at zeros and the other side has no tensor for);
    // build_model reads them (MappedModel::zero_checked) and refuses one that is not, exit 5.
    bool drop_when_zeros = false;
    // "zeros": {"beside": PATTERN, "shape": [expr, ...], "dtype": NAME} on a "drop_when" rule: mapping
    // to the rule's side, its key is written as zeros of that shape and dtype (what the trainer
    // starts it at: torchtitan's expert_bias_E) for every output key `beside` matches, with the
    // same placeholder values (the router weight of each MoE layer). Empty: never written.
    std::string zeros_beside;
    std::vector<std::string> zeros_shape;
    std::string zeros_dtype;
    bool keep_dtype = false;            // "keep_dtype": true: --dtype keeps its tensors' saved dtype (plan/precision.h)
    std::vector<std::string> variants;  // a family's rule: the variants it belongs to (empty: every one)
    size_t index = 0;                   // position in "rules", for messages
  };
  std::vector<Rule> rules;
};

// A built-in map by name, or a map file (a path ending in .json, or any existing file).
// UsageError (exit 2) naming the choices when there is no such map, and when the file is not a
// valid map (naming the rule and the field).
KeyMap load_key_map(const std::string& name_or_path);
// The built-in maps, in name order (a family's own name and its aliases each one).
std::vector<KeyMap> builtin_key_maps();

// A family's map for one checkpoint: the variant config.json's model_type names (none when the
// family has no variant for that model_type: only the untagged rules are left, so what a variant
// would name is refused as uncovered; but a remote-code config, with `auto_map`, whose
// `architectures` names a variant's class takes that variant, as transformers' class is the model
// it claims to be), else the one whose own rules match most of `keys`, else the default.
// `*chosen` is its name ("" for none), `*why` how it was chosen. A map without variants comes
// back as it is.
KeyMap choose_variant(const KeyMap& map, const nlohmann::json& config, const std::vector<std::string>& keys,
                      std::string* chosen, std::string* why);
// The built-in maps that take `keys` from another framework's names to Hugging Face's: those with
// an "hf" side whose other side's rules match every key under that side's model prefixes, and match
// more of `keys` than the hf side's rules do (torchtune's `layers.N.attn.q_proj.weight` are no Hugging
// Face model's). Where some of them list config.json's class among their "models" (its
// `architectures`, else its model_type's `...ForCausalLM`), only those (a torchtune Llama is also every key of the
// Qwen2 map); a family's aliases count once. Patterns are only matched: no parameter is read, nothing is mapped. In
// name order; empty: none.
std::vector<std::string> maps_to_hf_for(const std::vector<std::string>& keys, const nlohmann::json& config);
// The rule kinds a map uses, sorted: drop, rename, rope, concat, groups, stack, offset, transpose, interleave, tied.
std::vector<std::string> rule_kinds(const KeyMap& map);
// The "args" of `variant` (the default variant's when `variant` is "" or has none), its
// "config_defaults" the union over every variant of `map`, so a model_type's class defaults are
// found whichever variant an alias allows; null when no variant of `map` has "args".
nlohmann::json variant_args(const KeyMap& map, const std::string& variant);

// Where a map's parameters come from: config.json's content, and its path for messages.
struct MapConfig {
  nlohmann::json json;  // null: none was found
  std::string path;     // the file, or a sentence of where dcpctl looked
};

// A map's config.json is the model's (view/model_config.h's map()), read by build_model().

// MapPart and MappedTensor, an output tensor made of boxes of saved ones: meta/pieces.h.

// Whether `mt` is one whole saved tensor under a new name (no rows reordered, no dimension
// dropped or added, nothing split or joined): it can be planned and read as that tensor.
bool renames_whole(const Metadata& md, const MappedTensor& mt);

struct MappedModel {
  std::string name, from, to;         // the map, and the sides mapped from and to
  std::vector<MappedTensor> tensors;  // in the input's order (split parts in order)
  size_t inputs = 0;                  // input keys the outputs are made of
  std::vector<std::string> left_out;  // selected keys no rule covers (tensors and other items)
  std::vector<std::string> dropped;   // input keys a one-sided rule drops
  std::vector<std::string> reasons;   // beside each of `dropped`: its rule's reason
  std::vector<std::string>
      zero_checked;                   // of `dropped`: those its rule drops only when all zeros (checked by build_model)
  std::vector<std::string> missing;   // output keys a rule would make but some input is missing
  std::vector<std::string> model;     // the input side's model namespaces; empty: every tensor key
  std::vector<std::string> excluded;  // keys --exclude left out (set by the caller: excluded_keys)
  // Each output written as zeros (a "zeros" rule, MappedTensor::zeros) -> its rule's reason: why
  // zeros are that tensor (the trainer starts it so; a router bias of zeros shifts no choice).
  nlohmann::json zero_reasons = nlohmann::json::object();
  std::string tied;             // a config with tie_word_embeddings: what it says, else empty
  std::string config;           // the config.json the parameters came from ("" if none needed)
  std::string family, variant;  // a family's map: the variant chosen ("" : none fits), and why
  std::string variant_from;
  // Each parameter the rules used: name -> {"value", "from"}: config.json's key (or the alias
  // transformers reads it through, or text_config's), the tensors' shapes, or the map's default.
  nlohmann::json params = nlohmann::json::object();
  // Megatron -> Hugging Face only (set by build_model: check/megatron_args.h): the checkpoint's
  // Megatron-LM args compared with config.json: where they came from ("" : none, `args_note` says
  // why) and each field compared. `args_checked` null: not such a map (--json says null for all three).
  std::string args_from, args_note;
  nlohmann::json args_checked;
  nlohmann::json variant_args;  // variant_args() of the map and the variant chosen (not in --json)
  // torchtitan -> Hugging Face only (check/titan_config.h): the run's own job config compared with
  // config.json: {from, model, flavor, checked, note}; null: not such a map (--json's `trainer_config`).
  nlohmann::json trainer_config;
  // Rows of the vocabulary cut as the framework's padding (check/megatron_vocab.h): {vocab_size,
  // rows, rows_dropped, tensors, rule, rule_from}; null: none (--json's `vocab`).
  nlohmann::json vocab;
  // Hugging Face -> Megatron for Megatron-LM (check/megatron_vocab.h's pad_megatron_vocab): the
  // fields of the argparse.Namespace the megatron format writes as the common state's `args`, and
  // where they came from; null: no args written (--json's `megatron_args`: {from, fields, set}).
  nlohmann::json megatron_args;
  nlohmann::json describe() const;  // the `map` object of --json
};

// Applies `map` to the selected items of `md`. UsageError (exit 2) when no key matches either side,
// when a parameter a matched rule needs cannot be found (naming it and where dcpctl looked), or
// when a tensor's shape does not fit the rule (rows not heads x head_dim, split sizes not summing
// to the dimension). UnsupportedError (exit 5) when it would lose a model weight: a selected
// tensor key in the input side's model namespaces that no rule covers, or one taken into an
// output that could not be made (an input of it missing). The message names the map and every
// such key; `--exclude GLOB` is how a user leaves one out on purpose.
// `from`, when given: the side the input must be mapped from (diff maps its second input only
// when it is on the first's side); UsageError, before any refusal, when its keys choose the other.
MappedModel apply_key_map(const KeyMap& map, const Metadata& md, const std::vector<SelectedItem>& items,
                          const MapConfig& config, const std::string& from = "");

// The output box `out` of a mapped tensor, as pieces of saved chunks: declared in meta/pieces.h
// (plan_mapped_pieces).

}  // namespace dcpctl
