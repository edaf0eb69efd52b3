#include "view/codecs/quantized.h"

#include "meta/checkpoint.h"
#include "util/error.h"
#include "view/maps/keymap.h"
#include "view/model_config.h"
#include "view/moe_sparsity.h"

namespace dcpctl {

using nlohmann::json;

QuantConfig quant_config(const MapConfig& config) {
  QuantConfig q;
  q.path = config.path;
  q.found = !config.json.is_null();
  q.block = configured_block(config);
  q.root = config.json;
  if (!config.json.is_object() || !config.json.contains("quantization_config")) return q;
  const json& c = config.json["quantization_config"];
  if (!c.is_object()) return q;
  q.present = true;
  q.raw = c;
  auto text = [&](const char* k) { return c.contains(k) && c[k].is_string() ? c[k].get<std::string>() : ""; };
  q.quant_method = text("quant_method");
  q.fmt = text("fmt");
  q.scale_fmt = text("scale_fmt");
  if (c.contains("modules_to_not_convert") && c["modules_to_not_convert"].is_array())
    for (const json& m : c["modules_to_not_convert"])
      if (m.is_string()) q.modules_to_not_convert.push_back(m.get<std::string>());
  return q;
}

std::string describe_quant_config(const QuantConfig& q) {
  if (!q.found) return "no config.json (" + q.path + ")";
  return q.path + " has quantization_config.quant_method " +
         (q.quant_method.empty() ? "absent" : "'" + q.quant_method + "'");
}

int64_t ceil_blocks(int64_t n, int64_t b) {
  return (n + b - 1) / b;
}

std::optional<std::pair<int64_t, int64_t>> configured_block(const MapConfig& config) {
  if (!config.json.is_object() || !config.json.contains("quantization_config")) return std::nullopt;
  const json& q = config.json["quantization_config"];
  if (!q.is_object() || !q.contains("weight_block_size")) return std::nullopt;
  const json& b = q["weight_block_size"];
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
      b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
    throw UsageError(Where(config.path),
                     "quantization_config.weight_block_size is not two positive integers: " + b.dump());
  return std::make_pair(b[0].get<int64_t>(), b[1].get<int64_t>());
}

json describe_quantization(const Checkpoint& ck) {
  const Metadata& md = ck.md;
  const NameIndex by_name = tensor_names(md);
  const Codec& fp8 = fp8_block_codec();
  const uint64_t scaled = fp8.pairs(md, by_name).size();
  uint64_t unscaled = 0;
  for (const TensorMeta& t : md.tensors)
    if (t.dtype && fp8.weight_dtype(*t.dtype)) ++unscaled;
  unscaled -= scaled;
  const size_t mx = mxfp4_codec().pairs(md, by_name).size();
  // Every codec's weights by its name (a weight two codecs pair is counted under each; config.json's
  // scheme says which reads it).
  json per_codec = json::object();
  for (const Codec* c : codecs())
    if (c->pairs)
      if (size_t n = c->pairs(md, by_name).size()) per_codec[c->name] = n;
  if (scaled == 0 && mx == 0 && per_codec.empty()) return nullptr;
  json block = nullptr, path = nullptr, scheme = nullptr;
  try {
    MapConfig config = ModelConfig().saved(ck);
    if (auto b = configured_block(config)) {
      block = {b->first, b->second};
      path = config.path;
    }
    const QuantConfig qc = quant_config(config);
    if (qc.present) {
      std::string s = qc.quant_method.empty() ? "(no quant_method)" : qc.quant_method;
      for (const char* k : {"format", "quant_algo", "expert_dtype"})
        if (qc.raw.contains(k) && qc.raw[k].is_string()) s += std::string(" ") + k + " " + qc.raw[k].get<std::string>();
      if (!qc.raw.contains("expert_dtype") && qc.root.is_object() && qc.root.contains("expert_dtype") &&
          qc.root["expert_dtype"].is_string())
        s += " expert_dtype " + qc.root["expert_dtype"].get<std::string>();
      scheme = s;
      path = config.path;
    }
  } catch (const Error&) {
    // a config.json that is not JSON, or a bad block size: a write with --dtype says so
  }
  return {{"scaled_weights", scaled},    {"block", block}, {"config", path},
          {"float8_unscaled", unscaled}, {"mxfp4", mx},    {"scheme", scheme},
          {"codecs", per_codec}};
}

std::string dequantized_config(const std::string& config_text, DType dtype) {
  json j = json::parse(config_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return config_text;
  // A pruned MoE model's per-layer expert counts (view/moe_sparsity.h) describe the weights, not
  // their quantization: where a layer's differs from the model's own count they are kept, in a
  // compressed-tensors quantization_config that quantizes nothing (QuantizationConfig(config_groups={},
  // moe_sparsity_config=...)); where every layer's is the model's, the config says it all and
  // transformers 5.24, which fails on a compressed-tensors config without config groups, loads it.
  const std::optional<MoeSparsity> sparsity = find_moe_sparsity(j);
  const bool per_layer = sparsity && sparsity->field.rfind("quantization_config", 0) == 0 && sparsity->differs_from(j);
  const json counts = per_layer ? j["quantization_config"]["moe_sparsity_config"] : json();
  j.erase("quantization_config");
  if (per_layer)
    j["quantization_config"] = {
        {"quant_method", "compressed-tensors"}, {"config_groups", json::object()}, {"moe_sparsity_config", counts}};
  bool set = false;
  for (const char* k : {"torch_dtype", "dtype"})
    if (j.contains(k)) {
      j[k] = torch_name(dtype);
      set = true;
    }
  if (!set) j["dtype"] = torch_name(dtype);
  return j.dump(2) + "\n";
}

}  // namespace dcpctl
