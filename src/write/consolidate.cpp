#include "write/consolidate.h"

#include "meta/quantized.h"
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
  std::optional<Checkpoint> view = dequantized_view(ck, o.cast, o.assets_from);
  const Checkpoint* in = view ? &*view : &ck;
  // --lora adapter / merge: the view is what is written, the selection already applied.
  std::optional<Checkpoint> lora;
  ConsolidateOptions lo;
  if (o.lora.mode != LoraMode::Keep) {
    lora = lora_view(*in, o.selection, o.lora);
    in = &*lora;
    lo = o;
    lo.selection = {};
    command["lora"] = {{"mode", static_cast<int>(o.lora.mode)}, {"name", o.lora.name}, {"select", o.selection.prefix}};
  }
  const ConsolidateOptions& opts = lora ? lo : o;
  std::optional<MappedModel> mapped = map_selection(*in, opts);
  target.map = mapped ? &*mapped : nullptr;
  std::unique_ptr<OutputWriter> writer = opts.format->consolidate_writer(opts);
  return execute({*in, opts, target, command, opts.parallel_write, opts.local_files}, *writer);
}

}  // namespace dcpctl
