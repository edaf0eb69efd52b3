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

constexpr const char* kBlocksSuffix = "_blocks";

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() > n && s.compare(s.size() - n, std::string::npos, suffix) == 0;
}

// (blocks, scales) pairs: a uint8 X_blocks with a uint8 X_scales beside it.
std::vector<std::pair<uint32_t, uint32_t>> mxfp4_pairs(const Metadata& md, const std::unordered_map<std::string_view, uint32_t>& by_name) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& t = md.tensors[i];
    if (t.dtype != DType::UInt8 || !ends_with(t.fqn, kBlocksSuffix)) continue;
    auto s = by_name.find(t.fqn.substr(0, t.fqn.size() - std::strlen(kBlocksSuffix)) + "_scales");
    if (s != by_name.end() && md.tensors[s->second].dtype == DType::UInt8) out.push_back({i, s->second});
  }
  return out;
}

std::unordered_map<std::string_view, uint32_t> names_of(const Metadata& md) {
  std::unordered_map<std::string_view, uint32_t> by_name;
  by_name.reserve(md.tensors.size());
  for (uint32_t i = 0; i < md.tensors.size(); ++i) by_name.emplace(md.tensors[i].fqn, i);
  return by_name;
}

std::string dims(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// The view's tensor of MXFP4 blocks `b` [..., G, B]: float32 [..., G * 2B], chunk for chunk.
TensorMeta mxfp4_view(const Checkpoint& ck, const TensorMeta& b, const TensorMeta& s) {
  const size_t nd = b.ndim();
  std::vector<int64_t> groups(b.shape.begin(), b.shape.end() - (nd ? 1 : 0));
  if (nd < 2 || s.shape != groups)
    throw FormatError(Where(ck.metadata_path, std::nullopt, s.fqn),
                      "MXFP4 scales of shape " + dims(s.shape) + " are not the groups of blocks '" + b.fqn + "' " + dims(b.shape) +
                          " (the blocks' shape less its last dimension)");
  const int64_t B = b.shape[nd - 1];
  TensorMeta v = b;
  v.dtype = DType::Float32;
  v.dtype_name = torch_name(DType::Float32);
  v.shape = groups;
  v.shape.back() *= 2 * B;
  v.chunk_dims.clear();
  for (size_t c = 0; c < b.num_chunks(); ++c) {
    const int64_t *off = b.chunk_offsets(c), *size = b.chunk_sizes(c);
    if (off[nd - 1] != 0 || size[nd - 1] != B)
      throw UnsupportedError(Where(ck.metadata_path, std::nullopt, b.fqn),
                             "MXFP4 blocks saved in chunks that split a group's " + std::to_string(B) + " bytes (chunk " + std::to_string(c) +
                                 "): dcpctl dequantizes whole groups");
    v.chunk_dims.insert(v.chunk_dims.end(), off, off + nd - 1);
    v.chunk_dims.back() *= 2 * B;
    v.chunk_dims.insert(v.chunk_dims.end(), size, size + nd - 1);
    v.chunk_dims.back() *= 2 * B;
  }
  return v;
}

}  // namespace

void refuse_mxfp4(const Checkpoint& ck, const std::string& what) {
  auto by_name = names_of(ck.md);
  auto pairs = mxfp4_pairs(ck.md, by_name);
  if (pairs.empty()) return;
  const TensorMeta& b = ck.md.tensors[pairs[0].first];
  throw UnsupportedError(Where(ck.metadata_path, std::nullopt, b.fqn),
                         "MXFP4 weights (this one's scales are '" + ck.md.tensors[pairs[0].second].fqn + "', GPT-OSS's format): " + what +
                             " would take their packed bytes for weights; give --dtype (bf16, fp32, ...) to dequantize them first");
}

std::optional<Checkpoint> dequantized_view(const Checkpoint& ck, std::optional<DType> cast, const std::string& assets) {
  if (!cast) return std::nullopt;
  const Metadata& md = ck.md;
  std::unordered_map<std::string_view, uint32_t> by_name = names_of(md);
  std::vector<std::pair<uint32_t, uint32_t>> mx = mxfp4_pairs(md, by_name);
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
  if (pairs.empty() && mx.empty()) return std::nullopt;
  if (is_float8(*cast)) {
    const std::string what = pairs.empty() ? "MXFP4 weights (this one's scales are '" + md.tensors[mx[0].second].fqn + "')"
                                           : "block-scaled float8 weights (this one's scale is '" + md.tensors[pairs[0].first].fqn + kScaleSuffix + "')";
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, md.tensors[pairs.empty() ? mx[0].first : pairs[0].first].fqn),
                           std::string("--dtype ") + torch_name(*cast) + " on " + what +
                               ": dcpctl dequantizes, it does not requantize; give a wider --dtype, or none to keep the weights and scales as they are");
  }
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
  if (block && !pairs.empty()) view.dequant.config = config.path;
  for (const auto& [bi, si] : mx) {
    view.md.tensors[bi] = mxfp4_view(ck, md.tensors[bi], md.tensors[si]);
    view.dequant.mxfp4.push_back({md.tensors[bi], md.tensors[si]});
    is_scale[si] = true;
  }
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
  const size_t mx = mxfp4_pairs(md, names_of(md)).size();
  if (scaled == 0 && mx == 0) return nullptr;
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
  return {{"scaled_weights", scaled}, {"block", block}, {"config", path}, {"float8_unscaled", unscaled}, {"mxfp4", mx}};
}

json describe_dequantized(const Checkpoint& view) {
  const Dequantization& d = view.dequant;
  if (d.empty()) return nullptr;
  return {{"weights", d.weights.size()},
          {"block", d.weights.empty() ? json() : json{d.weights[0].block[0], d.weights[0].block[1]}},
          {"config", d.config.empty() ? json() : json(d.config)},
          {"ignored_scales", d.ignored},
          {"mxfp4", d.mxfp4.size()}};
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
