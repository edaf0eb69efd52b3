// A torchtitan run's own job config against the config.json its checkpoint is exported under.
//
// torchtitan 0.3 writes the whole job config when `debug.save_config_file` is set (trainer.py,
// Trainer.Config.maybe_log, called by Trainer.__init__ once the process group is up): rank 0 writes
// `os.path.join(dump_folder, debug.save_config_file)` as `json.dump(config.to_dict(), f, indent=2)`.
// Trainer.Config.to_dict() holds every field of the job (`dump_folder`, `checkpoint`, `training`,
// `debug`, ...) and `model_spec` as {"name", "flavor", "model": model_spec.model.to_dict()}: the
// model's nested Config (dims, each layer's attention, RoPE, norms, MoE router), written by
// Configurable.Config.to_dict with no class names. The checkpoints go to
// `<dump_folder>/<checkpoint.folder>/step-N` (components/checkpointer/dcp.py), so a relative
// save_config_file lies in the run folder's parent (the dump folder), or below it.
//
// Where it is looked for (find_titan_job_config), the file's name being the user's choice: every
// regular file of at most 16 MiB in the step folder's run folder and in the run folder's parent
// (the dump folder), by content: a JSON object with `model_spec` {name, flavor, model} and
// `checkpoint` {folder}, whose checkpoint.folder's last component is the run folder's name (another
// job's file in a shared dump folder is not this run's). None found, a remote checkpoint (s3://,
// gs://), or two that describe different models: nothing compared, and --json says why. A
// save_config_file into a sub-folder (`configs/job.json`) or elsewhere is not looked for.
//
// What is compared (check_titan_job_config) is data: src/check/titan_config.json, per torchtitan
// model name (model_spec.name: llama3, qwen3, deepseek_v3), a list of rows:
//
//   {"config": FIELD, "titan": PATH | [PATH, ...]}   config.json's FIELD against the model's PATHs
//       "count": true                                 the PATH is a list: its length (layers)
//       "values": {TITAN: CONFIG, ...}                a value spelled otherwise (RoPE scaling "llama"
//                                                     is rope_type "llama3"); one not listed: skipped
//       "when": {"titan": PATH, "is": VALUE}          only when the model's PATH holds VALUE
//   {"fixed": VALUE, "what": TEXT, "titan": PATH}     no config.json field: the Hugging Face class
//                                                     fixes VALUE (Qwen3-MoE's softmax router)
//
// A PATH is dotted into model_spec.model, `[*]` taking every element of a list (`layers[*].attention.
// rope.theta`); a null or absent value is no claim (a dense layer has no `moe`), every other value
// must agree with config.json. FIELD `rope:NAME` is a RoPE setting: `rope_parameters.NAME`, the top
// level, then `rope_scaling.NAME` (transformers' older spellings), as check/megatron_args does. A
// FIELD config.json leaves out is its config class's default where the model's "config_defaults"
// lists it for config.json's model_type (transformers 5.23's classes), else not compared. Floats
// agree within a relative 1e-6. A model name the table does not list (gpt_oss, qwen3_5, a user's
// own), a flavor torchtitan does not know, and any field the rows do not name make no claim: the
// flavor is never read, only the model's values.
//
// A contradiction is UnsupportedError (exit 5, as check/megatron_args: the checkpoint is intact,
// config.json does not describe the model trained), naming config.json's path, field and value, the
// job config's file, field and value, before anything is written.
//
// Not compared: what the rows do not list (torchtitan's init, sharding and attention backends; MLA's
// q_lora_rank (0 in torchtitan, null in transformers), YaRN's mscale; group-limited routing; the MTP
// blocks; partial rotary); the training settings (steps, optimizer) are not the model's.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace dcpctl {

struct Checkpoint;
struct MappedModel;
struct MapConfig;

struct TitanJobConfig {
  std::string path;       // the file
  nlohmann::json values;  // Trainer.Config.to_dict() as torchtitan wrote it
};

// The job config beside the checkpoint folder `checkpoint_dir` (a step folder), or nullopt (`note`
// then says where dcpctl looked and why none was taken).
std::optional<TitanJobConfig> find_titan_job_config(const std::string& checkpoint_dir, std::string* note = nullptr);

// The rows of src/check/titan_config.json's model `model_name`, or null when it lists none.
nlohmann::json titan_config_rows(const std::string& model_name);

// What was compared: one {"config", "titan", "value", "config_from"} per agreeing row. UnsupportedError
// (exit 5) naming `config_path` and every contradiction; UsageError when `rows` is malformed.
nlohmann::json check_titan_job_config(const TitanJobConfig& job, const nlohmann::json& config,
                                      const std::string& config_path, const nlohmann::json& rows);

// The check of a --map output (view/model.h's ModelRequest::check_map): for a torchtitan -> Hugging
// Face map, finds the run's job config and checks it against `config`, filling `map`'s
// trainer_config ({from, model, flavor, checked, note}: its --json); any other map is left as it is.
void check_titan_map(const Checkpoint& saved, MappedModel& map, const MapConfig& config);

}  // namespace dcpctl
