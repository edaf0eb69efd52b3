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
  const Checkpoint& in = view ? *view : ck;
  std::optional<MappedModel> mapped = map_selection(in, o);
  target.map = mapped ? &*mapped : nullptr;
  std::unique_ptr<OutputWriter> writer = o.format->consolidate_writer(o);
  return execute({in, o, target, command, o.parallel_write, o.local_files}, *writer);
}

}  // namespace dcpctl
