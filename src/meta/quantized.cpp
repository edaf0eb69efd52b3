#include "meta/quantized.h"

#include <cstring>
#include <unordered_map>

#include "meta/checkpoint.h"
#include "meta/keymap.h"
#include "util/error.h"

namespace dcpctl {

using nlohmann::json;

bool is_float8(DType d) {
  return d == DType::Float8_E4M3FN || d == DType::Float8_E5M2 || d == DType::Float8_E4M3FNUZ || d == DType::Float8_E5M2FNUZ;
}

int64_t ceil_blocks(int64_t n, int64_t b) { return (n + b - 1) / b; }

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

MapConfig checkpoint_config(const Checkpoint& ck, const std::string& assets) {
  MapConfig config = find_map_config(ck.dir, "", assets);
  for (size_t i = 0; config.json.is_null() && assets.empty() && i < ck.asset_dirs.size(); ++i) config = find_map_config(ck.asset_dirs[i], "", "");
  return config;
}

namespace {

constexpr const char* kBlocksSuffix = "_blocks";

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() > n && s.compare(s.size() - n, std::string::npos, suffix) == 0;
}

}  // namespace

std::vector<std::pair<uint32_t, uint32_t>> mxfp4_pairs(const Metadata& md, const std::unordered_map<std::string_view, uint32_t>& by_name) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& t = md.tensors[i];
    if ((t.dtype != DType::UInt8 && t.dtype != DType::Int8) || !ends_with(t.fqn, kBlocksSuffix)) continue;
    auto s = by_name.find(t.fqn.substr(0, t.fqn.size() - std::strlen(kBlocksSuffix)) + "_scales");
    if (s != by_name.end() &&
        (md.tensors[s->second].dtype == DType::UInt8 || md.tensors[s->second].dtype == DType::Float8_E8M0FNU))
      out.push_back({i, s->second});
  }
  return out;
}

std::unordered_map<std::string_view, uint32_t> tensor_names(const Metadata& md) {
  std::unordered_map<std::string_view, uint32_t> by_name;
  by_name.reserve(md.tensors.size());
  for (uint32_t i = 0; i < md.tensors.size(); ++i) by_name.emplace(md.tensors[i].fqn, i);
  return by_name;
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
  const size_t mx = mxfp4_pairs(md, tensor_names(md)).size();
  if (scaled == 0 && mx == 0) return nullptr;
  json block = nullptr, path = nullptr;
  try {
    MapConfig config = checkpoint_config(ck, "");
    if (auto b = configured_block(config)) {
      block = {b->first, b->second};
      path = config.path;
    }
  } catch (const Error&) {
    // a config.json that is not JSON, or a bad block size: a write with --dtype says so
  }
  return {{"scaled_weights", scaled}, {"block", block}, {"config", path}, {"float8_unscaled", unscaled}, {"mxfp4", mx}};
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
