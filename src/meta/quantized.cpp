#include "meta/quantized.h"

#include <cstring>
#include <unordered_map>

#include "meta/checkpoint.h"
#include "meta/keymap.h"
#include "util/error.h"

namespace dcpctl {

using nlohmann::json;

namespace {

bool is_float8(DType d) {
  return d == DType::Float8_E4M3FN || d == DType::Float8_E5M2 || d == DType::Float8_E4M3FNUZ || d == DType::Float8_E5M2FNUZ;
}

int64_t blocks(int64_t n, int64_t b) { return (n + b - 1) / b; }

constexpr const char* kScaleSuffix = "_scale_inv";

// config.json's quantization_config.weight_block_size, when it gives two positive integers.
std::optional<std::pair<int64_t, int64_t>> configured_block(const MapConfig& config) {
  if (!config.json.is_object() || !config.json.contains("quantization_config")) return std::nullopt;
  const json& q = config.json["quantization_config"];
  if (!q.is_object() || !q.contains("weight_block_size")) return std::nullopt;
  const json& b = q["weight_block_size"];
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() || b[0].get<int64_t>() <= 0 ||
      b[1].get<int64_t>() <= 0)
    throw UsageError(Where(config.path), "quantization_config.weight_block_size is not two positive integers: " + b.dump());
  return std::make_pair(b[0].get<int64_t>(), b[1].get<int64_t>());
}

}  // namespace

void refuse_mxfp4(const Checkpoint& ck, const std::string& what) {
  const Metadata& md = ck.md;
  std::unordered_map<std::string_view, uint32_t> by_name;
  by_name.reserve(md.tensors.size());
  for (uint32_t i = 0; i < md.tensors.size(); ++i) by_name.emplace(md.tensors[i].fqn, i);
  static const std::string blocks = "_blocks";
  for (const TensorMeta& t : md.tensors) {
    if (t.dtype != DType::UInt8 || t.fqn.size() <= blocks.size() || t.fqn.compare(t.fqn.size() - blocks.size(), std::string::npos, blocks) != 0)
      continue;
    const std::string scales = t.fqn.substr(0, t.fqn.size() - blocks.size()) + "_scales";
    auto s = by_name.find(scales);
    if (s == by_name.end() || md.tensors[s->second].dtype != DType::UInt8) continue;
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn),
                           "MXFP4 weights (this one's scales are '" + scales + "', GPT-OSS's format): dcpctl does not dequantize MXFP4 yet, so " +
                               what + " cannot make plain weights of them; without --dtype and --map the blocks and scales are written as they are");
  }
}

std::optional<Checkpoint> dequantized_view(const Checkpoint& ck, std::optional<DType> cast, const std::string& assets) {
  if (!cast) return std::nullopt;
  refuse_mxfp4(ck, std::string("--dtype ") + torch_name(*cast));
  const Metadata& md = ck.md;
  std::unordered_map<std::string_view, uint32_t> by_name;
  by_name.reserve(md.tensors.size());
  for (uint32_t i = 0; i < md.tensors.size(); ++i) by_name.emplace(md.tensors[i].fqn, i);
  // (weight, scale) pairs: a float8 tensor W with a W_scale_inv beside it.
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& w = md.tensors[i];
    if (!w.dtype || !is_float8(*w.dtype)) continue;
    auto s = by_name.find(w.fqn + kScaleSuffix);
    if (s != by_name.end()) pairs.push_back({i, s->second});
  }
  // Scales of weights that are not float8.
  std::vector<uint32_t> ignored;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const std::string& n = md.tensors[i].fqn;
    if (n.size() <= std::strlen(kScaleSuffix) || n.compare(n.size() - std::strlen(kScaleSuffix), std::string::npos, kScaleSuffix) != 0) continue;
    auto w = by_name.find(std::string_view(n).substr(0, n.size() - std::strlen(kScaleSuffix)));
    if (w != by_name.end() && !(md.tensors[w->second].dtype && is_float8(*md.tensors[w->second].dtype))) ignored.push_back(i);
  }
  if (pairs.empty()) return std::nullopt;
  const TensorMeta& first = md.tensors[pairs[0].first];
  if (is_float8(*cast))
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, first.fqn),
                           std::string("--dtype ") + torch_name(*cast) + " on block-scaled float8 weights (this one's scale is '" + first.fqn +
                               kScaleSuffix + "'): dcpctl dequantizes, it does not requantize; give a wider --dtype, or none to keep the weights and scales as they are");
  MapConfig config = find_map_config(ck.dir, "", assets);
  for (size_t i = 0; config.json.is_null() && assets.empty() && i < ck.asset_dirs.size(); ++i) config = find_map_config(ck.asset_dirs[i], "", "");
  std::optional<std::pair<int64_t, int64_t>> block = configured_block(config);

  Checkpoint view = ck;
  std::vector<bool> is_scale(md.tensors.size(), false);
  for (const auto& [wi, si] : pairs) {
    const TensorMeta& w = md.tensors[wi];
    const TensorMeta& s = md.tensors[si];
    if (w.ndim() != 2)
      throw UnsupportedError(Where(ck.metadata_path, std::nullopt, w.fqn),
                             "a block-scaled float8 weight of " + std::to_string(w.ndim()) +
                                 " dimensions: dcpctl dequantizes 2-D weights, as torch's QuantizedHuggingFaceStorageReader does; "
                                 "without --dtype the weights and their scales are written as they are");
    if (!s.dtype || *s.dtype != DType::Float32 || s.ndim() != 2)
      throw FormatError(Where(ck.metadata_path, std::nullopt, s.fqn),
                        "the scale of float8 weight '" + w.fqn + "' is " + s.dtype_name + " of " + std::to_string(s.ndim()) +
                            " dimensions; a block scale is 2-D float32");
    int64_t b0 = block ? block->first : 128, b1 = block ? block->second : 128;
    if (s.shape[0] != blocks(w.shape[0], b0) || s.shape[1] != blocks(w.shape[1], b1))
      throw FormatError(Where(ck.metadata_path, std::nullopt, s.fqn),
                        "shape [" + std::to_string(s.shape[0]) + ", " + std::to_string(s.shape[1]) + "] is not the " + std::to_string(b0) + "x" +
                            std::to_string(b1) + " blocks of weight '" + w.fqn + "' [" + std::to_string(w.shape[0]) + ", " +
                            std::to_string(w.shape[1]) + "]: [" + std::to_string(blocks(w.shape[0], b0)) + ", " +
                            std::to_string(blocks(w.shape[1], b1)) + "]" +
                            (block ? " (block size from " + config.path + ")" : " (no quantization_config.weight_block_size found: 128x128 assumed, as torch's reader does; " + config.path + ")"));
    ScaledWeight sw;
    sw.weight = w;
    sw.scale = s;
    sw.block[0] = b0;
    sw.block[1] = b1;
    view.dequant.weights.push_back(std::move(sw));
    is_scale[si] = true;
    TensorMeta& v = view.md.tensors[wi];
    v.dtype = DType::Float32;
    v.dtype_name = torch_name(DType::Float32);
  }
  if (block) view.dequant.config = config.path;
  for (uint32_t i : ignored) {
    is_scale[i] = true;
    view.dequant.ignored.push_back(md.tensors[i].fqn);
  }
  // The scales leave the view; the tensors after one move up.
  std::vector<uint32_t> moved(md.tensors.size());
  std::vector<TensorMeta> kept;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    moved[i] = static_cast<uint32_t>(kept.size());
    if (!is_scale[i]) kept.push_back(std::move(view.md.tensors[i]));
  }
  view.md.tensors = std::move(kept);
  std::vector<std::pair<bool, uint32_t>> order;
  for (const auto& [tensor, index] : md.order)
    if (!tensor || !is_scale[index]) order.push_back({tensor, tensor ? moved[index] : index});
  view.md.order = std::move(order);
  return view;
}

json describe_quantization(const Checkpoint& ck) {
  const Metadata& md = ck.md;
  std::unordered_map<std::string_view, uint32_t> by_name;
  by_name.reserve(md.tensors.size());
  for (uint32_t i = 0; i < md.tensors.size(); ++i) by_name.emplace(md.tensors[i].fqn, i);
  uint64_t scaled = 0, unscaled = 0;
  for (const TensorMeta& t : md.tensors) {
    if (!t.dtype || !is_float8(*t.dtype)) continue;
    if (by_name.count(t.fqn + kScaleSuffix)) ++scaled;
    else ++unscaled;
  }
  if (scaled == 0) return nullptr;
  json block = nullptr, path = nullptr;
  try {
    MapConfig config = find_map_config(ck.dir, "", "");
    for (size_t i = 0; config.json.is_null() && i < ck.asset_dirs.size(); ++i) config = find_map_config(ck.asset_dirs[i], "", "");
    if (auto b = configured_block(config)) {
      block = {b->first, b->second};
      path = config.path;
    }
  } catch (const Error&) {
    // a config.json that is not JSON, or a bad block size: a write with --dtype says so
  }
  return {{"scaled_weights", scaled}, {"block", block}, {"config", path}, {"float8_unscaled", unscaled}};
}

json describe_dequantized(const Checkpoint& view) {
  const Dequantization& d = view.dequant;
  if (d.empty()) return nullptr;
  return {{"weights", d.weights.size()},
          {"block", {d.weights[0].block[0], d.weights[0].block[1]}},
          {"config", d.config.empty() ? json() : json(d.config)},
          {"ignored_scales", d.ignored}};
}

std::string dequantized_config(const std::string& config_text, DType dtype) {
  json j = json::parse(config_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return config_text;
  j.erase("quantization_config");
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
