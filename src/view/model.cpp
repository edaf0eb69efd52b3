#include "view/model.h"

#include "view/dequantize.h"
#include "view/lora.h"
#include "view/quantize.h"
#include "meta/quantized.h"
#include "util/error.h"

namespace dcpctl {

Model build_model(const Checkpoint& ck, const ModelRequest& rq) {
  Model m;
  m.saved_ = &ck;
  m.selection_ = rq.selection;
  if (std::optional<Checkpoint> view = dequantized_view(ck, rq.cast, rq.assets)) m.own_ = std::move(view);
  if (rq.lora.mode != LoraMode::Keep) {
    // The view is what is written, the selection already applied.
    m.own_ = lora_view(m.checkpoint(), m.selection_, rq.lora);
    m.selection_ = {};
  }
  if (!rq.quantize.scheme.empty()) {
    // The map's outputs are parts of the tensors above (geometry the planner assembles), not a
    // table a view can read yet: quantizing comes after the map, so the two do not go together.
    if (!rq.map.empty())
      throw UnsupportedError(Where(ck.dir), "--quantize with --map: dcpctl quantizes a checkpoint already in the output's names; map it first "
                                            "(consolidate --map M -o DIR/), then quantize that folder (consolidate DIR/ --quantize ...)");
    QuantizeRequest q = rq.quantize;
    if (q.config.is_null()) q.config = checkpoint_config(m.checkpoint(), rq.assets).json;
    m.own_ = quantized_view(m.checkpoint(), q);
  }
  if (!rq.map.empty()) {
    const Checkpoint& in = m.checkpoint();
    refuse_mxfp4(in, "--map " + rq.map);
    m.map_ = apply_key_map(load_key_map(rq.map), in.md, select_items(in.md, m.selection_),
                           find_map_config(in.dir, rq.map_config, rq.map_assets), rq.map_from);
    m.map_->excluded = excluded_keys(in.md, m.selection_);
  }
  return m;
}

}  // namespace dcpctl
