#include "view/model.h"

#include "view/dequantize.h"
#include "view/lora.h"
#include "view/map_view.h"
#include "view/quantize.h"
#include "meta/codecs/unexplained.h"
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
  if (!rq.map.empty()) {
    const Checkpoint& in = m.checkpoint();
    refuse_mxfp4(in, "--map " + rq.map);
    m.map_ = apply_key_map(load_key_map(rq.map), in.md, select_items(in.md, m.selection_),
                           find_map_config(in.dir, rq.map_config, rq.map_assets), rq.map_from);
    m.map_->excluded = excluded_keys(in.md, m.selection_);
    // A view after the map reads its outputs as a table (view/map_view.h); without one, the
    // planner plans the map's parts straight from the table below (plan/plan.h).
    if (!rq.quantize.scheme.empty()) {
      m.own_ = mapped_view(in, *m.map_);
      m.map_.reset();
      m.selection_ = {};
    }
  }
  if (!rq.quantize.scheme.empty()) {
    QuantizeRequest q = rq.quantize;
    // The config.json the map's parameters came from (--config, --assets) decides first.
    if (q.config.is_null() && !rq.map.empty()) q.config = find_map_config(ck.dir, rq.map_config, rq.map_assets).json;
    if (q.config.is_null()) q.config = checkpoint_config(m.checkpoint(), rq.assets).json;
    // Without --dtype nothing was dequantized: weights no codec reads are refused, not encoded.
    if (!rq.cast) refuse_unexplained_quantization(m.checkpoint(), rq.assets, "--quantize " + q.scheme);
    m.own_ = quantized_view(m.checkpoint(), q);
  }
  return m;
}

}  // namespace dcpctl
