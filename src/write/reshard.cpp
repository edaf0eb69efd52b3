#include "write/reshard.h"

#include "meta/quantized.h"
#include "write/execute.h"
#include "write/formats/format.h"

namespace dcpctl {

using nlohmann::json;

json reshard(const Checkpoint& ck, const ReshardOptions& o) {
  Target target;
  target.format = &formats::dcp;
  target.world_size = o.world_size;
  target.keep_layout = o.layout == Layout::Keep;
  target.max_memory = o.max_memory;
  json command = {{"world_size", o.world_size}, {"layout", static_cast<int>(o.layout)}};
  std::optional<Checkpoint> view = dequantized_view(ck, o.cast, "");
  const Checkpoint& in = view ? *view : ck;
  std::optional<MappedModel> mapped = map_selection(in, o);
  target.map = mapped ? &*mapped : nullptr;
  std::unique_ptr<OutputWriter> writer = formats::dcp.reshard_writer(o);
  return execute({in, o, target, command}, *writer);
}

}  // namespace dcpctl
