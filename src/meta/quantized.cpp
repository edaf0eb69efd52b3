#include "meta/quantized.h"

#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "meta/checkpoint.h"
#include "meta/keymap.h"
#include "util/error.h"

namespace dcpctl {

using nlohmann::json;

const std::vector<Codec>& codec_table() {
  using D = DType;
  using F = CodecFamily;
  static const std::vector<Codec> table = {
      {"fp8-block e4m3 float32", F::Fp8Block, "fp8", "e4m3", "float", D::Float8_E4M3FN, D::Float32, "", kScaleSuffix,
       true},
      {"fp8-block e4m3 ue8m0", F::Fp8Block, "fp8", "e4m3", "ue8m0", D::Float8_E4M3FN, D::Float8_E8M0FNU, "",
       kScaleSuffix, false},
      {"fp8-block e5m2 float32", F::Fp8Block, "fp8", "e5m2", "float", D::Float8_E5M2, D::Float32, "", kScaleSuffix,
       false},
      {"fp8-block e5m2 ue8m0", F::Fp8Block, "fp8", "e5m2", "ue8m0", D::Float8_E5M2, D::Float8_E8M0FNU, "", kScaleSuffix,
       false},
      // torch's float8 variants without a release format of their own, read as the e4m3 / e5m2 rows
      {"fp8-block e4m3fnuz float32", F::Fp8Block, "fp8", "e4m3", "float", D::Float8_E4M3FNUZ, D::Float32, "",
       kScaleSuffix, false},
      {"fp8-block e4m3fnuz ue8m0", F::Fp8Block, "fp8", "e4m3", "ue8m0", D::Float8_E4M3FNUZ, D::Float8_E8M0FNU, "",
       kScaleSuffix, false},
      {"fp8-block e5m2fnuz float32", F::Fp8Block, "fp8", "e5m2", "float", D::Float8_E5M2FNUZ, D::Float32, "",
       kScaleSuffix, false},
      {"fp8-block e5m2fnuz ue8m0", F::Fp8Block, "fp8", "e5m2", "ue8m0", D::Float8_E5M2FNUZ, D::Float8_E8M0FNU, "",
       kScaleSuffix, false},
      {"mxfp4 U8 U8", F::Mxfp4, "mxfp4", "", "", D::UInt8, D::UInt8, "_blocks", "_scales", true},
      {"mxfp4 U8 F8_E8M0", F::Mxfp4, "mxfp4", "", "", D::UInt8, D::Float8_E8M0FNU, "_blocks", "_scales", false},
      {"mxfp4 I8 U8", F::Mxfp4, "mxfp4", "", "", D::Int8, D::UInt8, "_blocks", "_scales", false},
      {"mxfp4 I8 F8_E8M0", F::Mxfp4, "mxfp4", "", "", D::Int8, D::Float8_E8M0FNU, "_blocks", "_scales", false},
      // safetensors F4 (shapes count the 4-bit elements): read and written as a dtype; no
      // release pairs it with a scale dcpctl dequantizes yet, so no view reads it as a weight.
      {"F4", F::F4, "", "", "", D::Float4_E2M1FN_X2, D::Float8_E8M0FNU, "", "_scale", false},
  };
  return table;
}

const Codec& writing_codec(CodecFamily family) {
  for (const Codec& c : codec_table())
    if (c.family == family && c.writes) return c;
  throw std::logic_error("no codec writes this family");
}

const Codec* find_codec(CodecFamily family, DType weight, DType scale) {
  for (const Codec& c : codec_table())
    if (c.family == family && c.weight == weight && c.scale == scale) return &c;
  return nullptr;
}

QuantConfig quant_config(const MapConfig& config) {
  QuantConfig q;
  q.path = config.path;
  q.found = !config.json.is_null();
  q.block = configured_block(config);
  if (!config.json.is_object() || !config.json.contains("quantization_config")) return q;
  const json& c = config.json["quantization_config"];
  if (!c.is_object()) return q;
  q.present = true;
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

json written_quant_config(const Codec& codec, const int64_t block[2], const json& not_convert) {
  if (codec.family == CodecFamily::Mxfp4)
    return {{"modules_to_not_convert", not_convert}, {"quant_method", codec.quant_method}};
  return {{"quant_method", codec.quant_method},
          {"fmt", codec.fmt},
          {"activation_scheme", "dynamic"},
          {"weight_block_size", {block[0], block[1]}},
          {"modules_to_not_convert", not_convert}};
}

bool is_float8(DType d) {
  for (const Codec& c : codec_table())
    if (c.family == CodecFamily::Fp8Block && c.weight == d) return true;
  return false;
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
    if (!t.dtype || !ends_with(t.fqn, kBlocksSuffix)) continue;
    auto s = by_name.find(t.fqn.substr(0, t.fqn.size() - std::strlen(kBlocksSuffix)) + "_scales");
    if (s != by_name.end() && md.tensors[s->second].dtype &&
        find_codec(CodecFamily::Mxfp4, *t.dtype, *md.tensors[s->second].dtype))
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
