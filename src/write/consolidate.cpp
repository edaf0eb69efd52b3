#include "write/consolidate.h"

#include "view/model.h"
#include "write/execute.h"

namespace dcpctl {

using nlohmann::json;

json consolidate(const Checkpoint& ck, const ConsolidateOptions& o) {
  Target target;
  target.format = o.format;
  target.max_shard_size = o.max_shard_size;
  target.threads = std::max(1u, o.threads);
  target.window = o.window;
  target.max_memory = o.max_memory;
  json command = {{"format", std::string(o.format->name)}, {"max_shard_size", o.max_shard_size}, {"flat", o.flat},
                  {"keep_unsafe", o.keep_unsafe_values}, {"assets", o.copy_assets}, {"assets_from", o.assets_from},
                  {"lightning_meta", o.lightning_meta}};
  if (o.lora.mode != LoraMode::Keep)
    command["lora"] = {{"mode", static_cast<int>(o.lora.mode)}, {"name", o.lora.name}, {"select", o.selection.prefix}};
  ModelRequest rq = model_request(o, o.assets_from, o.lora);
  rq.quantize = o.quantize;
  if (!o.quantize.scheme.empty()) command["quantize"] = {{"scheme", o.quantize.scheme}, {"block", {o.quantize.block[0], o.quantize.block[1]}}, {"skip", o.quantize.skip}};
  const Model model = build_model(ck, rq);
  ConsolidateOptions opts = o;
  opts.selection = model.selection();
  target.map = model.map();
  std::unique_ptr<OutputWriter> writer = opts.format->consolidate_writer(opts);
  return execute({model.checkpoint(), opts, target, command, opts.parallel_write, opts.local_files}, *writer);
}

}  // namespace dcpctl
