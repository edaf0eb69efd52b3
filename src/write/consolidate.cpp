#include "write/consolidate.h"

#include <algorithm>
#include <set>

#include "store/file.h"
#include "util/error.h"
#include "view/lora/lora_config.h"
#include "view/model.h"
#include "write/assets.h"
#include "write/execute.h"
#include "write/model_subtree.h"
#include "write/tied_head.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// The config.json an HF folder output will hold (its text, as the model read it), or "" when none
// is copied.
std::string copied_config(const Checkpoint& ck, const ConsolidateOptions& o, const ModelConfig& model) {
  if (!o.copy_assets) return "";
  for (const Asset& a : find_assets(ck, o.assets_from, &model).files)
    if (a.name == "config.json") return a.text ? *a.text : read_text(a.source);
  return "";
}

// An HF folder without --map whose tensors bear another framework's names (torchtune's
// `layers.N.attn.q_proj.weight`, torchtitan's, Megatron's) that a built-in map takes to Hugging
// Face's: from_pretrained would load none of them, and the folder's own check would refuse it once
// written. Valid input this export does not cover without the map: exit 5, before anything is
// written, naming the map (with --lora keep, the adapters' keys aside, and --lora merge named).
// Only a folder with a config.json claims to be a model (--no-assets writes tensors alone).
void refuse_framework_names(const Checkpoint& ck, const Selection& sel, LoraMode lora, const std::string& config_text,
                            const std::string& output) {
  if (config_text.empty()) return;
  std::set<int> adapters;
  if (lora == LoraMode::Keep)
    for (const LoraLayer& l : find_lora(ck.md).layers)
      for (int t : {l.a, l.b, l.b_bias, l.magnitude})
        if (t >= 0) adapters.insert(t);
  std::vector<std::string> keys;
  for (const SelectedItem& it : select_items(ck.md, sel))
    if (it.tensor && !adapters.count(static_cast<int>(it.index))) keys.push_back(it.key);
  const json config = config_text.empty() ? json() : json::parse(config_text, nullptr, false);
  const std::vector<std::string> maps = maps_to_hf_for(keys, config.is_discarded() ? json() : config);
  if (maps.empty()) return;
  const KeyMap m = load_key_map(maps[0]);
  const std::string side = m.sides[0] == "hf" ? m.sides[1] : m.sides[0];
  std::string names;
  for (const std::string& n : maps) names += (names.empty() ? "" : ", ") + n;
  const std::string flags = std::string(adapters.empty() ? "" : "--lora merge ") + "--map " + maps[0];
  throw UnsupportedError(
      Where(output), "the checkpoint's tensors are " + side + "'s names (" + keys[0] +
                         ", ...), not a Hugging Face model's: " +
                         "from_pretrained would load none of them. The built-in map" + (maps.size() > 1 ? "s " : " ") +
                         names + " take" + (maps.size() > 1 ? "" : "s") + " them to Hugging Face's: give " + flags +
                         (maps.size() > 1 ? " (or another of them, for the model config.json names)" : "") +
                         (adapters.empty() ? std::string()
                                           : " (the checkpoint holds LoRA adapters: --lora merge folds them in, --lora "
                                             "adapter writes them alone)") +
                         "; nothing was written");
}

}  // namespace

json consolidate(const Checkpoint& ck, const ConsolidateOptions& o) {
  Target target;
  target.format = o.format;
  target.max_shard_size = o.max_shard_size;
  target.threads = std::max(1u, o.threads);
  target.window = o.window;
  target.max_memory = o.max_memory;
  json command = {{"format", std::string(o.format->name)},
                  {"max_shard_size", o.max_shard_size},
                  {"flat", o.flat},
                  {"keep_unsafe", o.keep_unsafe_values},
                  {"assets", o.copy_assets},
                  {"assets_from", o.assets_from},
                  {"lightning_meta", o.lightning_meta}};
  if (o.lora.mode != LoraMode::Keep)
    command["lora"] = {{"mode", static_cast<int>(o.lora.mode)}, {"name", o.lora.name}, {"select", o.selection.prefix}};
  ConsolidateOptions opts = o;
  const bool whole_model = o.format->whole_model;
  // A model beside optimizer state (write/model_subtree.h): a whole model's output takes the model alone.
  json subtree = nullptr;
  if (o.selection.empty() && o.map.empty() && o.lora.mode == LoraMode::Keep)
    if (std::optional<ModelSubtree> m = model_subtree(ck.md)) {
      subtree = {{"option", m->option}, {"beside", m->beside}, {"taken", whole_model}};
      if (whole_model) {
        opts.selection = m->selection;
        if (o.note)
          o.note("the checkpoint holds the model beside " + m->beside +
                 ": a Hugging Face folder is the model, so "
                 "it is written as with " +
                 m->option + " (give --select or --include to choose otherwise)");
      } else if (o.note) {
        o.note("the checkpoint holds the model beside " + m->beside + ", all of which is written; " + m->option +
               " writes the model alone");
      }
    }
  if (subtree.is_object()) command["model_subtree"] = subtree["option"];
  ModelRequest rq = model_request(opts, opts.assets_from, opts.lora);
  if (!o.quantize.scheme.empty())
    command["quantize"] = {{"scheme", o.quantize.scheme},
                           {"block", {o.quantize.block[0], o.quantize.block[1]}},
                           {"skip", o.quantize.skip}};
  const Model model = build_model(ck, rq);
  opts.selection = model.selection();
  if (whole_model && o.map.empty())
    refuse_framework_names(model.checkpoint(), opts.selection, o.lora.mode, copied_config(ck, o, model.config()),
                           o.output);
  // A tied model's export leaves out a head equal to the embedding (write/tied_head.h).
  std::optional<Checkpoint> untied;
  json tied_left_out = nullptr;
  // Every rank compares the two the same way; under --local-files a rank may not see their files,
  // and the head is kept (equal, it passes the folder's check).
  if (whole_model && !o.local_files)
    if (const std::string config = copied_config(ck, o, model.config()); !config.empty())
      if (std::optional<TiedHead> t = tied_head_to_drop(config, model.checkpoint(), opts.selection)) {
        tied_left_out = {{"key", t->head}, {"equal_to", t->embedding}};
        if (!(untied = without_tied_head(model.checkpoint(), *t))) opts.selection.exclude.push_back(t->head);
        command["tied_head"] = t->head;
      }
  std::unique_ptr<OutputWriter> writer = opts.format->consolidate_writer(opts);
  json r = execute(
      {untied ? *untied : model.checkpoint(), opts, model, target, command, opts.parallel_write, opts.local_files},
      *writer);
  r["model_subtree"] = subtree;
  if (r.contains("tie_word_embeddings") && r["tie_word_embeddings"].is_object())
    r["tie_word_embeddings"]["left_out"] = tied_left_out;
  return r;
}

}  // namespace dcpctl
