#include "write/consolidate.h"

#include "store/file.h"
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
  const bool hf = o.format == &formats::hf_folder;
  // A model beside optimizer state (write/model_subtree.h): an HF folder takes the model alone.
  json subtree = nullptr;
  if (o.selection.empty() && o.map.empty() && o.lora.mode == LoraMode::Keep)
    if (std::optional<ModelSubtree> m = model_subtree(ck.md)) {
      subtree = {{"option", m->option}, {"beside", m->beside}, {"taken", hf}};
      if (hf) {
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
    command["quantize"] = {{"scheme", o.quantize.scheme}, {"block", {o.quantize.block[0], o.quantize.block[1]}}, {"skip", o.quantize.skip}};
  const Model model = build_model(ck, rq);
  opts.selection = model.selection();
  // A tied model's export leaves out a head equal to the embedding (write/tied_head.h).
  std::optional<Checkpoint> untied;
  json tied_left_out = nullptr;
  // Every rank compares the two the same way; under --local-files a rank may not see their files,
  // and the head is kept (equal, it passes the folder's check).
  if (hf && !o.local_files)
    if (const std::string config = copied_config(ck, o, model.config()); !config.empty())
      if (std::optional<TiedHead> t = tied_head_to_drop(config, model.checkpoint(), opts.selection)) {
        tied_left_out = {{"key", t->head}, {"equal_to", t->embedding}};
        if (!(untied = without_tied_head(model.checkpoint(), *t))) opts.selection.exclude.push_back(t->head);
        command["tied_head"] = t->head;
      }
  std::unique_ptr<OutputWriter> writer = opts.format->consolidate_writer(opts);
  json r = execute({untied ? *untied : model.checkpoint(), opts, model, target, command, opts.parallel_write, opts.local_files}, *writer);
  r["model_subtree"] = subtree;
  if (r.contains("tie_word_embeddings") && r["tie_word_embeddings"].is_object())
    r["tie_word_embeddings"]["left_out"] = tied_left_out;
  return r;
}

}  // namespace dcpctl
