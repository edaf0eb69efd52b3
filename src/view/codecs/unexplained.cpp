#include "view/codecs/unexplained.h"

#include <cstring>
#include <functional>
#include <optional>

#include "meta/codecs/codecs.h"
#include "store/file.h"
#include "util/error.h"
#include "view/codecs/quantized.h"
#include "view/maps/keymap.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// Parameter names (the last component of a tensor's key) that only quantized formats write, and
// that no codec of codecs() reads: compressed-tensors', ModelOpt's, GPTQ/AWQ's.
constexpr const char* kParams[] = {
    "weight_packed", "weight_global_scale", "weight_zero_point",  "weight_scale_2", "weight_shape",
    "weight_g_idx",  "input_scale",         "input_global_scale", "qweight",        "qzeros"};

std::string last_component(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

bool one_byte_or_f4(const TensorMeta& t) {
  return t.dtype && (itemsize(*t.dtype) == 1 || *t.dtype == DType::Float4_E2M1FN_X2);
}

std::string text(const json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
}

// The scheme config.json declares that no codec explains, or nothing.
std::optional<std::string> unexplained_scheme(const Checkpoint& ck, const MapConfig& config) {
  const json& cfg = config.json;
  if (cfg.is_object() && cfg.contains("quantization_config")) {
    const json& q = cfg["quantization_config"];
    const std::string where = config.path + ": quantization_config";
    if (!q.is_object()) return where + " that is not an object";
    const std::string method = text(q, "quant_method");
    if (method.empty()) return where + " without a quant_method";
    for (const Codec* c : codecs())
      if (c->explains ? c->explains(q, cfg) : (*c->quant_method && method == c->quant_method)) return std::nullopt;
    std::string s = where + ".quant_method '" + method + "'";
    if (!text(q, "format").empty()) s += " (format '" + text(q, "format") + "')";
    if (!text(q, "quant_algo").empty()) s += " (quant_algo '" + text(q, "quant_algo") + "')";
    for (const Codec* c : codecs())
      if (std::string u = c->unread ? c->unread(q) : ""; !u.empty()) s += ": " + u;
    const std::string experts = !text(q, "expert_dtype").empty() ? text(q, "expert_dtype") : text(cfg, "expert_dtype");
    if (!experts.empty()) s += " with expert_dtype '" + experts + "'";
    return s;
  }
  // No quantization_config: a ModelOpt sidecar beside the config (or the checkpoint) says more than
  // config.json does, and the format is never read from it.
  std::string dir = ck.dir;
  if (cfg.is_object()) {
    const size_t slash = config.path.rfind('/');
    dir = slash == std::string::npos ? "." : config.path.substr(0, slash);
  }
  const std::string sidecar = join_path(dir, "hf_quant_config.json");
  if (!path_exists(sidecar)) return std::nullopt;
  json side = json::parse(read_text(sidecar), nullptr, false);
  std::string algo = side.is_object() ? text(side.value("quantization", json::object()), "quant_algo") : "";
  return sidecar + (algo.empty() ? "" : " (quant_algo '" + algo + "')") + " beside " +
         (cfg.is_object() ? config.path + ", which has no quantization_config" : "no config.json") +
         " (dcpctl reads a format from config.json, never from a sidecar)";
}

// The first tensor that says it is quantized in a way no codec reads, and why; or nothing.
std::optional<std::pair<const TensorMeta*, std::string>> unexplained_tensor(const Metadata& md) {
  const NameIndex by_name = tensor_names(md);
  for (const char* p : kParams)  // in kParams' order: a packed weight before its shape
    for (const TensorMeta& t : md.tensors)
      if (last_component(t.fqn) == p)
        return std::make_pair(&t,
                              "a quantization parameter '" + std::string(p) +
                                  "' (compressed-tensors', ModelOpt's, GPTQ's) that nothing in this request decodes");
  for (const TensorMeta& t : md.tensors) {
    if (t.dtype && *t.dtype == DType::Float4_E2M1FN_X2 && ends_with_longer(t.fqn, ".weight"))
      return std::make_pair(&t, std::string("an F4 weight: packed FP4 (E2M1) codes, two a byte, that nothing in "
                                            "this request decodes and that are never cast"));
    if (one_byte_or_f4(t))
      for (const Codec* c : codecs())
        for (const std::string& b : c->beside ? c->beside(t.fqn) : std::vector<std::string>())
          if (by_name.count(b))
            return std::make_pair(&t, "a " + t.dtype_name + " weight beside '" + b + "' (" + c->display +
                                          "), which nothing in this request decodes");
    if (!ends_with_longer(t.fqn, ".weight") || !one_byte_or_f4(t)) continue;
    const std::string module = t.fqn.substr(0, t.fqn.size() - 7);
    if (by_name.count(module + ".scale"))
      return std::make_pair(&t, "a " + t.dtype_name + " weight beside '" + module +
                                    ".scale' (DeepSeek-V4's release names), a scale nothing in this request applies");
    if (by_name.count(module + ".weight_scale") && !fp8_block_codec().weight_dtype(*t.dtype))
      return std::make_pair(
          &t, "a " + t.dtype_name + " weight beside '" + module +
                  ".weight_scale' (ModelOpt's, compressed-tensors'), a scale nothing in this request applies");
  }
  return std::nullopt;
}

// Whether a tensor looks quantized: a parameter of kParams, a one-byte or F4 tensor, a scale's name.
bool looks_quantized(const Metadata& md) {
  for (const TensorMeta& t : md.tensors) {
    const std::string param = last_component(t.fqn);
    for (const char* p : kParams)
      if (param == p) return true;
    if (one_byte_or_f4(t) || param == "scale" || param == "weight_scale") return true;
  }
  return false;
}

// The tensor a refusal of a scheme names: the first packed weight (one byte or F4), else the first
// parameter of kParams (compressed-tensors' int32 `weight_packed`, ...), else the first scale, else
// the first weight, else the first tensor.
const TensorMeta* named_tensor(const Metadata& md) {
  auto is_scale = [](const TensorMeta& t) {
    const std::string param = last_component(t.fqn);
    return param == "scale" || param == "weight_scale" || ends_with_longer(t.fqn, "_scale_inv");
  };
  auto is_weight = [](const TensorMeta& t) { return ends_with_longer(t.fqn, ".weight"); };
  for (const TensorMeta& t : md.tensors)
    if (one_byte_or_f4(t)) return &t;
  for (const char* p : kParams)  // in kParams' order: weight_packed before weight_shape
    for (const TensorMeta& t : md.tensors)
      if (last_component(t.fqn) == p) return &t;
  const std::function<bool(const TensorMeta&)> passes[] = {is_scale, is_weight};
  for (const auto& pass : passes)
    for (const TensorMeta& t : md.tensors)
      if (pass(t)) return &t;
  return md.tensors.empty() ? nullptr : &md.tensors.front();
}

std::string tail_of(const std::string& what) {
  return ": " + what +
         " would take them for plain weights; without --dtype and --quantize the weights and their "
         "scales are written as they are";
}

}  // namespace

void refuse_unexplained_quantization(const Checkpoint& ck, const ModelConfig& model, const std::string& what) {
  refuse_unexplained_scheme(ck, model, what);
  refuse_unexplained_tensors(ck, model, what);
}

void refuse_unexplained_scheme(const Checkpoint& ck, const ModelConfig& model, const std::string& what) {
  const Metadata& md = ck.md;
  if (!looks_quantized(md)) return;
  const MapConfig config = model.saved(ck);
  if (std::optional<std::string> scheme = unexplained_scheme(ck, config)) {
    const TensorMeta* t = named_tensor(md);
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t ? t->fqn : ""),
                           "quantized weights in a scheme no codec of dcpctl reads (" + *scheme + ")" + tail_of(what));
  }
}

void refuse_unexplained_tensors(const Checkpoint& ck, const ModelConfig& model, const std::string& what) {
  const Metadata& md = ck.md;
  if (!looks_quantized(md)) return;
  const std::string tail = tail_of(what);
  if (auto t = unexplained_tensor(md)) {
    const MapConfig config = model.saved(ck);
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t->first->fqn),
                           t->second + " (" + (config.json.is_object() ? config.path : std::string("no config.json")) +
                               "; --dtype dequantizes the formats a codec reads)" + tail);
  }
  // A packed or one-byte weight with no scale at all, where config.json says the checkpoint is
  // quantized: its scale is missing (a float8 weight cast alone would be off by the whole scale).
  const NameIndex by_name = tensor_names(md);
  for (const TensorMeta& t : md.tensors) {
    if (!ends_with_longer(t.fqn, ".weight") || !one_byte_or_f4(t) || *t.dtype == DType::Bool) continue;
    const std::string stem = t.fqn.substr(0, t.fqn.size() - 7);
    if (by_name.count(t.fqn + "_scale_inv") || by_name.count(t.fqn + "_scale") || by_name.count(stem + ".scale"))
      continue;
    const MapConfig config = model.saved(ck);
    if (!config.json.is_object() || !config.json.contains("quantization_config")) return;
    const std::string module = t.fqn.substr(0, t.fqn.size() - 7);
    throw FormatError(Where(ck.metadata_path, std::nullopt, t.fqn),
                      "a " + t.dtype_name + " weight with no scale beside it (no '" + module + ".weight_scale_inv', '" +
                          module + ".weight_scale' or '" + module + ".scale') while " + config.path +
                          " says the checkpoint is quantized: its scale is missing" + tail);
  }
}

}  // namespace dcpctl
