#include "view/model.h"

#include "view/dequantize.h"
#include "view/lora.h"

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
  }
  return m;
}

}  // namespace dcpctl
