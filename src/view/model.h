// The model a command reads: a checkpoint's saved tensors rewritten by views, in one order.
//
//   saved        what `.metadata` or the safetensors headers say (meta/checkpoint.h)
//   dequantize   --dtype over fp8 / MXFP4 weights: float32 weights, the scales gone (view/codecs/dequantize.h)
//   lora         --lora adapter | merge: the adapter alone, or the merged weights (the LoRA module's
//                view, lora/lora.h, installed by lora/register.h)
//   map          --map: the key map's tensors, parts of the tensors above (view/maps/keymap.h), as a
//                table (view/maps/map_view.h); written, each is planned from its parts (plan/plan.h)
//   quantize     --quantize fp8-block | mxfp4: weights as FP8 blocks / MXFP4 and their scales (view/codecs/quantize.h)
//   cast         --dtype: the written dtype of each floating tensor (plan/checks.h, in the plan)
//
// The model's config.json is found and read once, here (view/model_config.h: --config, --assets,
// beside the checkpoint, a sharded/ folder's parent, the trainer's folders, the adapter's base, in
// one order with its named exceptions), kept on the Model; every view, check (the precision policy,
// the HF folder's checks) and writer (the config.json copied beside the weights) asks it.
//
// Each view maps the table below it to a new one (meta/derived.h); what a view computes is a
// DerivedTensor the item reader hands its reads to, and the memory model charges (plan/memory.h).
// consolidate, reshard, cast, diff and stats build their model here; inspect and verify read the
// saved table (no view applies to them). A new view is a file in src/view/ and one step below.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "meta/checkpoint.h"
#include "meta/select.h"
#include "util/dtype.h"
#include "view/codecs/quantize.h"
#include "view/lora/lora_config.h"
#include "view/maps/keymap.h"
#include "view/model_config.h"

namespace dcpctl {

struct ModelRequest {
  Selection selection;        // --select
  std::optional<DType> cast;  // --dtype: quantized weights are dequantized first
  std::string config;         // --config FILE: the model's config.json
  std::string assets;         // consolidate's --assets DIR: its config.json, the assets copied
  LoraRequest lora;           // --lora and its options
  QuantizeRequest quantize;   // --quantize (scheme "": none)
  std::string map;            // --map NAME|FILE
  std::string map_from;       // the side the map must map from (apply_key_map's `from`); "" : the input's
  // Asked of --map's output before its view is made (`saved`: the checkpoint as saved, `config`: the
  // config.json the map's parameters came from); it may throw, and may add to the map's --json. The
  // exports set it (write/execute.h's model_request: check/megatron_args.h, which sits above view/).
  std::function<void(const Checkpoint& saved, MappedModel& map, const MapConfig& config)> check_map;
  // Asked first, by every command that maps (exports, diff, stats): fits the map's outputs to
  // config.json where the framework's own rule says how (check/megatron_vocab.h: Megatron's padded
  // vocabulary cut to vocab_size); it may throw, and may add to the map's --json.
  std::function<void(const Checkpoint& saved, MappedModel& map, const MapConfig& config)> fit_map;
};

class Model {
 public:
  // The table every step after the views reads: the checkpoint itself when no view applied.
  const Checkpoint& checkpoint() const { return own_ ? *own_ : *saved_; }
  // What is left to select in it: the request's selection, or none once the LoRA view or the
  // key map applied it.
  const Selection& selection() const { return selection_; }
  // The model's config.json (view/model_config.h), read once for every reader of this command.
  const ModelConfig& config() const { return *config_; }
  // --map's key map as loaded (before its variant is chosen), for the precision policy's keep_dtype
  // rules; null without --map.
  const KeyMap* key_map() const { return key_map_.get(); }

 private:
  friend Model build_model(const Checkpoint& ck, const ModelRequest& rq);
  const Checkpoint* saved_ = nullptr;
  std::optional<Checkpoint> own_;
  Selection selection_;
  std::shared_ptr<const ModelConfig> config_ = std::make_shared<ModelConfig>();
  std::shared_ptr<const KeyMap> key_map_;
};

// The views `rq` asks for over `ck` (which must outlive the model), in the order above. Throws what
// each view refuses (view/codecs/dequantize.h, lora/lora.h, view/maps/keymap.h's apply_key_map), and
// UnsupportedError (exit 5) for --map over MXFP4 weights no --dtype dequantized, and for --lora
// adapter | merge in a build without the LoRA module (lora_module_left_out()).
Model build_model(const Checkpoint& ck, const ModelRequest& rq);

// The LoRA view (--lora adapter | merge) is the LoRA module's (src/lora/): lora/register.h installs
// its maker here (lora/lora.h's lora_view).
using LoraViewMaker = Checkpoint (*)(const Checkpoint& ck, const Selection& selection, const LoraRequest& rq,
                                     const ModelConfig& model);
void install_lora_view(LoraViewMaker make);
// What a build without the LoRA module says of --lora adapter | merge (exit 5).
std::string lora_module_left_out();

}  // namespace dcpctl
