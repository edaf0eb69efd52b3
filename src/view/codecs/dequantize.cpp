#include "view/codecs/dequantize.h"

#include <cstring>
#include <unordered_map>

#include "meta/derived.h"
#include "meta/readers.h"
#include "util/error.h"
#include "view/codecs/codecs.h"
#include "view/codecs/quantized.h"
#include "view/codecs/unexplained.h"
#include "view/maps/keymap.h"

namespace dcpctl {

using nlohmann::json;

void refuse_mxfp4(const Checkpoint& ck, const std::string& what) {
  auto pairs = mxfp4_codec().pairs(ck.md, tensor_names(ck.md));
  if (pairs.empty()) return;
  const TensorMeta& b = ck.md.tensors[pairs[0].first];
  throw UnsupportedError(
      Where(ck.metadata_path, std::nullopt, b.fqn),
      "MXFP4 weights (this one's scales are '" + ck.md.tensors[pairs[0].second].fqn + "', GPT-OSS's format): " + what +
          " would take their packed bytes for weights; give --dtype (bf16, fp32, ...) to dequantize them first");
}

namespace {

using Pairs = std::vector<std::pair<uint32_t, uint32_t>>;  // (weight, scale) tensor indices

// Each codec's (weight, scale) pairs, in codec_views()' order; a codec that reads only some
// configs (codec_views()' `applies`) asks config.json, read once when one has pairs.
std::vector<Pairs> codec_pairs(const Checkpoint& ck, const NameIndex& by_name, const ModelConfig& model) {
  std::vector<Pairs> pairs;
  std::optional<QuantConfig> config_said;
  for (const CodecView& v : codec_views()) {
    pairs.push_back(v.decode && v.codec->pairs ? v.codec->pairs(ck.md, by_name) : Pairs());
    if (!pairs.back().empty() && v.applies) {
      if (!config_said) config_said = quant_config(model.saved(ck));
      if (!v.applies(*config_said)) pairs.back().clear();
    }
  }
  return pairs;
}

// Scales named as fp8-block's beside weights that are not float8.
std::vector<uint32_t> stray_fp8_scales(const Metadata& md, const NameIndex& by_name) {
  const Codec& fp8 = fp8_block_codec();
  const size_t tail = std::strlen(fp8.scale_suffix);
  std::vector<uint32_t> ignored;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const std::string& n = md.tensors[i].fqn;
    if (!ends_with_longer(n, fp8.scale_suffix)) continue;
    auto w = by_name.find(std::string_view(n).substr(0, n.size() - tail));
    if (w != by_name.end() && !(md.tensors[w->second].dtype && fp8.weight_dtype(*md.tensors[w->second].dtype)))
      ignored.push_back(i);
  }
  return ignored;
}

// A one-byte weight that is not float8 (uint8, int8, F4: packed FP4, int8, ...) beside a scale:
// no codec the config chooses explains it.
void refuse_one_byte_weights(const Checkpoint& ck, const NameIndex& by_name, const std::vector<uint32_t>& ignored,
                             const QuantConfig& qc) {
  const size_t tail = std::strlen(fp8_block_codec().scale_suffix);
  for (uint32_t i : ignored) {
    const std::string& n = ck.md.tensors[i].fqn;
    const TensorMeta& w = ck.md.tensors[by_name.at(std::string_view(n).substr(0, n.size() - tail))];
    if (w.dtype && itemsize(*w.dtype) == 1)
      throw UnsupportedError(
          Where(ck.metadata_path, std::nullopt, w.fqn),
          "a " + w.dtype_name + " weight beside the scale '" + n + "': no codec of the config explains it (" +
              describe_quant_config(qc) +
              "; quantization_config's quant_method, fmt, scale_fmt and weight_block_size choose it); dcpctl does "
              "not dequantize one-byte tensors by guess: leave out --dtype to write them as saved");
  }
}

// The view without the tensors marked: the tensors after one move up, and so does the order.
void drop_tensors(const Metadata& md, const std::vector<bool>& drop, Checkpoint& view) {
  std::vector<uint32_t> moved(md.tensors.size());
  std::vector<TensorMeta> kept;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    moved[i] = static_cast<uint32_t>(kept.size());
    if (!drop[i]) kept.push_back(std::move(view.md.tensors[i]));
  }
  view.md.tensors = std::move(kept);
  std::vector<std::pair<bool, uint32_t>> order;
  for (const auto& [tensor, index] : md.order)
    if (!tensor || !drop[index]) order.push_back({tensor, tensor ? moved[index] : index});
  view.md.order = std::move(order);
}

// Every pair decoded into the view: the weight in its decoded dtype, its scale and whatever else
// the codec consumed left out.
Checkpoint decoded_view(const Checkpoint& ck, const NameIndex& by_name, const std::vector<Pairs>& pairs,
                        const std::vector<uint32_t>& ignored, const QuantConfig& qc, const MapConfig& config) {
  const Metadata& md = ck.md;
  const std::vector<CodecView>& codecs = codec_views();
  Checkpoint view = ck;
  std::shared_ptr<DerivedTable> table = table_over(ck.derived);
  std::vector<bool> is_scale(md.tensors.size(), false);
  json said = json::object();
  size_t fp8_weights = 0;
  for (size_t k = 0; k < codecs.size(); ++k) {
    for (const auto& [wi, si] : pairs[k]) {
      DecodedTensor d = codecs[k].decode(ck, md.tensors[wi], md.tensors[si], qc);
      table->output.decoded[d.meta.fqn] = {codecs[k].codec, d.bound};
      table->tensors[d.meta.fqn] = {std::move(d.tensor), ck.derived};
      if (d.meta.fqn != md.tensors[wi].fqn) table->tensors.erase(md.tensors[wi].fqn);
      view.md.tensors[wi] = std::move(d.meta);
      is_scale[si] = true;
      for (const std::string& c : d.consumed)
        if (auto it = by_name.find(c); it != by_name.end()) is_scale[it->second] = true;
    }
    if (codecs[k].decode) said[codecs[k].said] = pairs[k].size();
    if (codecs[k].codec == &fp8_block_codec()) fp8_weights = pairs[k].size();
  }
  std::vector<std::string> ignored_names;
  for (uint32_t i : ignored) {
    is_scale[i] = true;
    ignored_names.push_back(md.tensors[i].fqn);
  }
  drop_tensors(md, is_scale, view);
  // An entry carried from the table below for a tensor this view drops leaves with it.
  for (uint32_t i = 0; i < md.tensors.size(); ++i)
    if (is_scale[i]) table->tensors.erase(md.tensors[i].fqn);
  // fp8-block's block size and where it came from.
  const std::optional<std::pair<int64_t, int64_t>>& block = qc.block;
  said["block"] = fp8_weights == 0 ? json() : json{block ? block->first : 128, block ? block->second : 128};
  said["config"] = block && fp8_weights > 0 ? json(config.path) : json();
  said["ignored_scales"] = ignored_names;
  table->views["dequantized"] = said;
  table->output.dequantized = true;
  view.derived = std::move(table);
  return view;
}

}  // namespace

std::optional<Checkpoint> dequantized_view(const Checkpoint& ck, std::optional<DType> cast, const ModelConfig& model) {
  if (!cast) return std::nullopt;
  // A layout whose tensors hold their own scales (a GGUF's block types): its module decodes them.
  if (auto decode = layout_reader(ck.layout).decode_opaque) return decode(ck);
  const std::string what = std::string("--dtype ") + torch_name(*cast);
  refuse_unexplained_scheme(ck, model, what);
  const Metadata& md = ck.md;
  const NameIndex by_name = tensor_names(md);
  const std::vector<CodecView>& codecs = codec_views();
  const std::vector<Pairs> pairs = codec_pairs(ck, by_name, model);
  const CodecView* first = nullptr;  // the first codec with weights here
  for (size_t k = 0; k < codecs.size() && !first; ++k)
    if (!pairs[k].empty()) first = &codecs[k];
  const std::vector<uint32_t> ignored = stray_fp8_scales(md, by_name);
  if (!first) {
    refuse_unexplained_tensors(ck, model, what);
    return std::nullopt;
  }
  if (fp8_block_codec().weight_dtype(*cast)) {
    const auto& [wi, si] = pairs[static_cast<size_t>(first - codecs.data())][0];
    throw UnsupportedError(
        Where(ck.metadata_path, std::nullopt, md.tensors[wi].fqn),
        std::string("--dtype ") + torch_name(*cast) + " on " + first->codec->display + " weights (this one's " +
            first->codec->scale_is + " '" + md.tensors[si].fqn +
            "'): dcpctl dequantizes, it does not requantize; give a wider --dtype, or none to keep the weights and "
            "scales as they are");
  }
  MapConfig config = model.saved(ck);
  const QuantConfig qc = quant_config(config);
  for (size_t k = 0; k < codecs.size(); ++k)
    if (!pairs[k].empty() && codecs[k].confirm) codecs[k].confirm(ck, pairs[k], qc);
  refuse_one_byte_weights(ck, by_name, ignored, qc);
  Checkpoint view = decoded_view(ck, by_name, pairs, ignored, qc, config);
  // What is left that still says it is quantized (a parameter no codec consumed, a packed weight
  // beside a scale no codec read) is refused, not cast.
  refuse_unexplained_tensors(view, model, what);
  return view;
}

}  // namespace dcpctl
