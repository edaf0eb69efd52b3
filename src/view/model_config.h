// The model's config.json, one per command: build_model() (view/model.h) makes it from --config,
// --assets and where the checkpoint is, keeps it on the Model, and every view, check and writer
// asks it instead of searching the disk again. Each file is read at most once (the first rule that
// looks at it reads it; the others get the same text), so one export opens config.json once.
//
// Where it is looked for, in one order:
//
//   1. --config FILE                          (a map's parameters; UsageError when not a file)
//   2. --assets DIR/config.json               (consolidate's --assets)
//   3. beside the checkpoint                  (its folder)
//   4. a `sharded/` folder's parent           (HF's consolidation: the shards in sharded/)
//   5. the trainer's asset folders            (a step folder, then its run folder: Checkpoint::asset_dirs)
//
// Today's readers each take a part of that order, and where they differ the difference is kept (an
// output changed by it would change a written file) and named here, one rule each:
//
//   map()     1 | 2, 3, 4 (a path with a slash before "sharded"). Not a JSON object: UsageError.
//             (was find_map_config: the key map's parameters and variant, --quantize after --map)
//   saved()   2, 3, 4; without --assets then 5 (each asset folder as 3, 4). Never 1: --config is the
//             map's, not how the checkpoint was saved. Not a JSON object: UsageError. (was
//             checkpoint_config: the saved quantization_config for --dtype's dequantize, --quantize,
//             the DCP output's config.json, the check for quantized weights no codec reads, inspect)
//   policy()  1 | 2, 3, 4 (base name "sharded"), 5 even with --assets. Not a JSON object: passed over.
//             (was find_policy_config: --dtype's precision policy, plan/precision.h)
//   heads_tries()  1, the adapter config's base_model_name_or_path/config.json, 2, 3, the folder
//             above the checkpoint (any name); one without num_attention_heads and hidden_size (or
//             not JSON) is passed over. (torchtune --lora: q/k lora_B's RoPE rows, view/lora/lora_torchtune.h)
//   The copied config.json (write/assets.h's find_assets): 2 alone when given, else 3, 4 (only for
//   HF's consolidated layout), 5; found by the asset listing, its text read here (file()). When one
//   is found and --config was given, --config's is written in its place: the weights were shaped by
//   its parameters, and a config.json that disagrees with them would not load (--assets still gives
//   the tokenizer and the rest); when none is found, --config's is written.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dcpctl {

struct Checkpoint;
struct MapConfig;

// One config.json's text as read, and its JSON (discarded when it is not JSON).
struct ConfigFile {
  std::string path;
  std::string text;
  nlohmann::json json;  // is_object() or not: each rule decides what a non-object means
};

class ModelConfig {
 public:
  ModelConfig() = default;  // no --config, no --assets: a checkpoint's own (inspect, the audit)
  // `config`: --config FILE; `assets`: --assets DIR. Nothing is read until a rule asks.
  ModelConfig(std::string config, std::string assets) : config_(std::move(config)), assets_(std::move(assets)) {}

  // --config FILE as given ("" without one).
  const std::string& given() const { return config_; }
  // The file at `path`, read once for the command: null when there is none (no such file, a folder).
  std::shared_ptr<const ConfigFile> file(const std::string& path) const;

  // The rules above, for the checkpoint at `ck` (its dir, asset_dirs; views keep them).
  MapConfig map(const std::string& checkpoint_dir) const;
  MapConfig saved(const Checkpoint& ck) const;
  MapConfig policy(const Checkpoint& ck) const;  // json null, path "": none
  // The heads' files in order (`base_config`: the adapter config's base folder's config.json, or "").
  std::vector<std::string> heads_tries(const Checkpoint& ck, const std::string& base_config) const;

 private:
  MapConfig first_object(const std::vector<std::string>& tries) const;
  std::string config_, assets_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::shared_ptr<const ConfigFile>> files_;
};

}  // namespace dcpctl
