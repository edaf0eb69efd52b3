#include "view/model.h"

#include <atomic>

#include "item/item_reader.h"
#include "util/dtype.h"
#include "util/error.h"
#include "view/codecs/dequantize.h"
#include "view/codecs/quantize.h"
#include "view/codecs/quantized.h"
#include "view/codecs/unexplained.h"
#include "view/maps/map_view.h"

namespace dcpctl {

namespace {

// Whether every value of a floating-point or integer tensor is zero (a sign bit alone counts as
// zero: -0.0). Read chunk by chunk; the tensors a map drops by value are small (a router's bias).
bool all_zeros(const ItemReader& reader, const TensorMeta& t) {
  if (!t.dtype) return false;  // a dtype dcpctl does not know: not shown to be zeros
  const size_t item = itemsize(*t.dtype);
  const bool floating = info(*t.dtype).floating;
  std::vector<uint8_t> buf;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    buf.resize(static_cast<size_t>(t.chunk_numel(c)) * item);
    reader.read_chunk(t, c, buf.data());
    for (size_t i = 0; i < buf.size(); i += item)
      for (size_t b = 0; b < item; ++b) {
        // little-endian: the sign bit is the top bit of the last byte
        const uint8_t v = floating && b == item - 1 ? buf[i + b] & 0x7f : buf[i + b];
        if (v) return false;
      }
  }
  return true;
}

// A map's rule that drops a tensor only when it holds nothing (view/maps/keymap.h's drop_when_zeros):
// read it; a non-zero one would change the model the output claims to be (a router's bias moves
// which experts a token goes to), so it is refused, exit 5, unless --exclude leaves it out.
void check_zero_drops(const Checkpoint& in, const MappedModel& mm) {
  if (mm.zero_checked.empty()) return;
  ItemReader reader(in);
  std::vector<std::string> bad;
  for (const auto& key : mm.zero_checked) {
    const TensorMeta* t = nullptr;
    for (const auto& x : in.md.tensors)
      if (x.fqn == key) t = &x;
    if (t && !all_zeros(reader, *t)) bad.push_back(key);
  }
  if (bad.empty()) return;
  std::string text =
      "map " + mm.name + " (" + mm.from + "->" + mm.to + ") drops " + std::to_string(bad.size()) +
      " tensor(s) only when all zeros, and they are not: the " + mm.to +
      " model has no such tensor, so the output would compute otherwise than the checkpoint; nothing is written";
  for (const auto& k : bad) text += "\n    " + k;
  text += "\n  leave them out on purpose with --exclude GLOB";
  throw UnsupportedError(Where(in.dir), text);
}

// The LoRA module's view maker (install_lora_view); null without the module.
std::atomic<LoraViewMaker> g_lora_view{nullptr};

}  // namespace

void install_lora_view(LoraViewMaker make) {
  g_lora_view.store(make, std::memory_order_release);
}

std::string lora_module_left_out() {
  return "--lora adapter and --lora merge are the LoRA module's (src/lora/), which this build of dcpctl left out: "
         "configure it with -DDCPCTL_WITH_LORA=ON";
}

Model build_model(const Checkpoint& ck, const ModelRequest& rq) {
  Model m;
  m.saved_ = &ck;
  m.selection_ = rq.selection;
  m.config_ = std::make_shared<ModelConfig>(rq.config, rq.assets);
  const ModelConfig& config = *m.config_;
  if (std::optional<Checkpoint> view = dequantized_view(ck, rq.cast, config)) m.own_ = std::move(view);
  if (rq.lora.mode != LoraMode::Keep) {
    const LoraViewMaker lora_view = g_lora_view.load(std::memory_order_acquire);
    if (!lora_view) throw UnsupportedError(Where(ck.dir), lora_module_left_out());
    // The view is what is written, the selection already applied.
    m.own_ = lora_view(m.checkpoint(), m.selection_, rq.lora, config);
    m.selection_ = {};
  }
  if (!rq.map.empty()) {
    const Checkpoint& in = m.checkpoint();
    refuse_mxfp4(in, "--map " + rq.map);
    m.key_map_ = std::make_shared<const KeyMap>(load_key_map(rq.map));
    const MapConfig map_config = config.map(in.dir);
    MappedModel map = apply_key_map(*m.key_map_, in.md, select_items(in.md, m.selection_), map_config, rq.map_from);
    if (rq.fit_map) rq.fit_map(ck, map, map_config);
    if (rq.check_map) rq.check_map(ck, map, map_config);
    map.excluded = excluded_keys(in.md, m.selection_);
    check_zero_drops(in, map);
    // The outputs are the table (view/maps/map_view.h): written, they are planned from their parts;
    // a view after the map reads them as tensors.
    m.own_ = mapped_view(in, std::move(map), rq.quantize.scheme.empty() ? MapTable::Written : MapTable::Read);
    m.selection_ = {};
  }
  if (!rq.quantize.scheme.empty()) {
    QuantizeRequest q = rq.quantize;
    // The config.json the map's parameters came from (map(): --config, --assets) decides first,
    // else the checkpoint's own (saved()).
    if (q.config.is_null() && !rq.map.empty()) q.config = config.map(ck.dir).json;
    if (q.config.is_null()) q.config = config.saved(m.checkpoint()).json;
    // Without --dtype nothing was dequantized: weights no codec reads are refused, not encoded.
    if (!rq.cast) refuse_unexplained_quantization(m.checkpoint(), config, "--quantize " + q.scheme);
    m.own_ = quantized_view(m.checkpoint(), q);
  }
  return m;
}

}  // namespace dcpctl
