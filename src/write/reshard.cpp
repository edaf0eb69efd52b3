#include "write/reshard.h"

#include "plan/format.h"
#include "view/model.h"
#include "write/execute.h"

namespace dcpctl {

using nlohmann::json;

json reshard(const Checkpoint& ck, const ReshardOptions& o) {
  Target target;
  const Format& format = o.format ? *o.format : formats::dcp;
  target.format = &format;
  target.world_size = o.world_size;
  target.keep_layout = o.layout == Layout::Keep;
  target.max_memory = o.max_memory;
  json command = {{"world_size", o.world_size},
                  {"layout", static_cast<int>(o.layout)},
                  {"format", std::string(format.name)},
                  {"iteration", o.iteration ? json(*o.iteration) : json()}};
  if (!o.quantize.scheme.empty())
    command["quantize"] = {{"scheme", o.quantize.scheme},
                           {"block", {o.quantize.block[0], o.quantize.block[1]}},
                           {"skip", o.quantize.skip}};
  const Model model = build_model(ck, model_request(o, "", {}));
  ReshardOptions opts = o;
  opts.selection = model.selection();  // none left once the key map applied it
  std::unique_ptr<OutputWriter> writer = format.reshard_writer(opts);
  return execute({model.checkpoint(), opts, model, target, command}, *writer);
}

}  // namespace dcpctl
