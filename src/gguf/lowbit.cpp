#include "gguf/lowbit.h"

#include <cstring>
#include <regex>
#include <unordered_map>

#include "gguf/model.h"
#include "util/error.h"
#include "util/numeric.h"
#include "view/kernels.h"

namespace dcpctl::gguf {

using nlohmann::json;

namespace {

bool ends_with(const std::string& s, const char* tail) {
  const size_t k = std::strlen(tail);
  return s.size() > k && s.compare(s.size() - k, k, tail) == 0;
}

std::string dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool float8(DType d) {
  return d == DType::Float8_E4M3FN || d == DType::Float8_E5M2;
}

bool scale_dtype(DType d) {
  return d == DType::Float32 || d == DType::BFloat16 || d == DType::Float16 || d == DType::Float8_E8M0FNU;
}

// `block` {b0, b1} of quantization_config, or none (json null or absent).
std::optional<std::pair<int64_t, int64_t>> block_of(const json& b) {
  if (b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer() &&
      b[0].get<int64_t>() > 0 && b[1].get<int64_t>() > 0)
    return std::make_pair(b[0].get<int64_t>(), b[1].get<int64_t>());
  return std::nullopt;
}

// The pairing of a weight and its scale as dequant_simple reads it: with a block size, the scale is
// the weight's blocks (repeat_interleave cut to the weight); without, it broadcasts after
// unsqueezing at the end: one value (the tensor's), or one a row ([rows] or [rows, 1]).
Fp8Source pair(const SourceTensor& w, const SourceTensor& s, size_t scale,
               std::optional<std::pair<int64_t, int64_t>> block, const std::string& where) {
  auto refuse = [&](const std::string& why) -> Fp8Source {
    throw UnsupportedError(Where(where, std::nullopt, w.key),
                           "'" + w.key + "' " + dims(w.shape) + " " + torch_name(w.dtype) + " beside its scale '" +
                               s.key + "' " + dims(s.shape) + " " + torch_name(s.dtype) + ": " + why);
  };
  if (!float8(w.dtype)) return refuse("dcpctl dequantizes float8 weights into a GGUF, not this dtype");
  if (w.shape.size() != 2) return refuse("dcpctl dequantizes 2-D weights into a GGUF, not this one");
  if (!scale_dtype(s.dtype))
    return refuse("a scale of float32, bfloat16, float16 or float8_e8m0fnu is read, not this dtype");
  const int64_t rows = w.shape[0], cols = w.shape[1];
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  Fp8Source p;
  p.scale = scale;
  if (block) {
    const int64_t b0 = block->first, b1 = block->second;
    if (s.shape != std::vector<int64_t>{(rows + b0 - 1) / b0, (cols + b1 - 1) / b1})
      return refuse("the scale is not the weight's " + std::to_string(b0) + " x " + std::to_string(b1) + " blocks");
    p.block[0] = b0, p.block[1] = b1;
  } else if (n == 1 && s.shape.size() <= 2) {
    p.block[0] = rows, p.block[1] = cols;
  } else if (s.shape == std::vector<int64_t>{rows} || s.shape == std::vector<int64_t>{rows, 1}) {
    p.block[0] = 1, p.block[1] = cols;
  } else {
    return refuse(
        "the scale is neither one value, nor one a row, nor given blocks (weight_block_size / block_structure)");
  }
  if (p.block[0] <= 0 || p.block[1] <= 0) return refuse("an empty weight");
  return p;
}

std::string quant_method(const json& config) {
  auto q = config.find("quantization_config");
  if (q == config.end() || !q->is_object()) return "";
  json m = q->value("quant_method", json());
  return m.is_string() ? m.get<std::string>() : "";
}

// compressed-tensors' `format` at the top, or mixed-precision of groups all of it.
bool ct_format(const json& qc, const char* format) {
  const json top = qc.value("format", json()), groups = qc.value("config_groups", json::object());
  if (top == format) return true;
  if (top != "mixed-precision" || !groups.is_object() || groups.empty()) return false;
  for (const auto& [name, g] : groups.items())
    if (g.is_object() && g.value("format", json()) != format) return false;
  return true;
}

bool ct_nvfp4(const json& qc) {
  return ct_format(qc, "nvfp4-pack-quantized");
}

// The NVFP4 weights: each `X<packed_tail>` beside `X.weight_scale` (2-D), with its factors.
void nvfp4_pairs(const std::vector<SourceTensor>& tensors, const std::unordered_map<std::string, size_t>& by_key,
                 bool ct, LowBitSources& out, const std::string& where, bool mx = false) {
  const int64_t group = mx ? 32 : 16;
  const char* packed_tail = ct ? ".weight_packed" : ".weight";
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SourceTensor& w = tensors[i];
    if (!ends_with(w.key, packed_tail)) continue;
    const std::string module = w.key.substr(0, w.key.size() - std::strlen(packed_tail));
    auto s = by_key.find(module + ".weight_scale");
    if (s == by_key.end() || tensors[s->second].shape.size() != 2) continue;
    const SourceTensor& st = tensors[s->second];
    auto refuse = [&](const std::string& why) {
      throw UnsupportedError(Where(where, std::nullopt, w.key),
                             "'" + w.key + "' " + dims(w.shape) + " " + torch_name(w.dtype) + " beside its scale '" +
                                 st.key + "' " + dims(st.shape) + " " + torch_name(st.dtype) + ": " + why);
    };
    if (mx ? (w.dtype != DType::UInt8 || w.shape.size() != 2 ||
              (st.dtype != DType::UInt8 && st.dtype != DType::Float8_E8M0FNU))
           : (w.dtype != DType::UInt8 || w.shape.size() != 2 || st.dtype != DType::Float8_E4M3FN))
      refuse(mx ? "an MXFP4 weight is uint8 [rows, cols / 2] beside a uint8 (E8M0) scale"
                : "an NVFP4 weight is uint8 [rows, cols / 2] beside a float8_e4m3fn scale");
    const int64_t rows = w.shape[0], cols = w.shape[1] * 2;
    if (st.shape != std::vector<int64_t>{rows, cols / group} || cols % (mx ? 32 : 64) != 0)
      refuse(mx ? "the scale is not the weight's 32-value groups"
                : "the scale is not the weight's 16-value blocks, or the columns are not whole 64-value NVFP4 "
                  "super-blocks "
                  "(the converter's _nvfp4_pack groups four blocks)");
    // _generate_nvfp4_tensors stacks Qwen's form of experts (gate_proj, up_proj, down_proj); any
    // other (Mixtral's w1/w2/w3) it passes to map_tensor_name one by one, which has no name for them.
    static const std::regex expert(R"(\.experts\.\d+\.)"),
        qwen_expert(R"(\.experts\.\d+\.(gate|up|down)_proj\.weight(_packed)?$)");
    if (std::regex_search(w.key, expert) && (mx || !std::regex_search(w.key, qwen_expert)))
      refuse(mx ? "MXFP4 experts of one tensor each are not written into a GGUF by dcpctl"
                : "NVFP4 experts not named experts.N.{gate,up,down}_proj: the converter has no tensor for them");
    Fp4Source n;
    n.scale = s->second;
    n.reciprocal = ct;
    n.mxfp4 = mx;
    auto factor = [&](const std::string& key) -> std::optional<size_t> {
      auto f = by_key.find(key);
      if (f == by_key.end()) return std::nullopt;
      const SourceTensor& t = tensors[f->second];
      int64_t count = 1;
      for (int64_t d : t.shape) count *= d;
      if (t.dtype != DType::Float32 || count != 1)
        throw UnsupportedError(Where(where, std::nullopt, t.key), "'" + t.key + "' " + dims(t.shape) + " " +
                                                                      torch_name(t.dtype) +
                                                                      ": an NVFP4 per-tensor scale is one float32");
      out.dropped[f->second] = true;
      return f->second;
    };
    n.scale2 = factor(module + (ct ? ".weight_global_scale" : ".weight_scale_2"));
    n.input_scale = factor(module + (ct ? ".input_global_scale" : ".input_scale"));
    out.fp4[i] = n;
    out.dropped[s->second] = true;
  }
}

}  // namespace

bool w4a16_nvfp4_config(const json& config) {
  return quant_method(config) == "modelopt" &&
         config["quantization_config"].value("quant_algo", json()) == "W4A16_NVFP4";
}

bool ct_mxfp4_config(const json& config) {
  return quant_method(config) == "compressed-tensors" &&
         ct_format(config["quantization_config"], "mxfp4-pack-quantized");
}

std::vector<uint8_t> mxfp4_pack(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols) {
  // compressed-tensors' row of cols / 2 bytes is OpenAI's blocks [groups, 16] (byte i: values 2i
  // low, 2i + 1 high), its scales OpenAI's: the repack GPT-OSS's experts get.
  TensorPlan p;
  p.mxfp4 = true;
  return mxfp4_repack(p, packed, scale, {1, rows, cols / 32, 16});
}

bool nvfp4_config(const json& config) {
  const std::string m = quant_method(config);
  if (m == "compressed-tensors") return ct_nvfp4(config["quantization_config"]);
  if (m == "modelopt") {
    const json algo = config["quantization_config"].value("quant_algo", json());
    return algo == "NVFP4" || algo == "W4A16_NVFP4";
  }
  return false;
}

std::vector<uint8_t> nvfp4_pack(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols) {
  const int64_t blocks = cols / 16;
  std::vector<uint8_t> out(static_cast<size_t>(rows * (cols / 64) * 36));
  uint8_t* o = out.data();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < blocks; b += 4) {
      for (int64_t k = 0; k < 4; ++k) *o++ = scale[r * blocks + b + k] & 0x7F;
      for (int64_t k = 0; k < 4; ++k) {
        // vals[2i] is byte i's low nibble, vals[2i + 1] its high; qs[j] = vals[j] | vals[j + 8] << 4.
        const uint8_t* w = packed + r * (cols / 2) + (b + k) * 8;
        for (int j = 0; j < 8; ++j) {
          const uint8_t lo = (w[j / 2] >> (4 * (j % 2))) & 0x0F, hi = (w[4 + j / 2] >> (4 * (j % 2))) & 0x0F;
          *o++ = static_cast<uint8_t>(lo | hi << 4);
        }
      }
    }
  return out;
}

void scale_to_float(DType dtype, const uint8_t* bytes, size_t n, float* out) {
  if (dtype == DType::Float8_E8M0FNU) return e8m0_to_float(bytes, n, out);
  if (dtype == DType::Float32) return void(std::memcpy(out, bytes, n * 4));
  cast_elements(dtype, DType::Float32, bytes, reinterpret_cast<uint8_t*>(out), n);
}

LowBitSources converter_dequant(const json& config, const std::vector<SourceTensor>& tensors,
                                const std::string& where) {
  LowBitSources out;
  out.dropped.assign(tensors.size(), false);
  auto qc_it = config.find("quantization_config");
  if (qc_it == config.end() || !qc_it->is_object()) return out;
  const json& qc = *qc_it;
  const json method = qc.value("quant_method", json());
  if (method.is_null()) return out;
  const std::string m = method.is_string() ? method.get<std::string>() : method.dump();
  std::unordered_map<std::string, size_t> by_key;
  for (size_t i = 0; i < tensors.size(); ++i) by_key[tensors[i].key] = i;
  auto fail = [&](const std::string& why) {
    throw UnsupportedError(Where(where), "quantization_config (quant_method '" + m + "'): " + why);
  };
  // Each `X<scale_tail>` beside its weight `X<weight_tail>`: dequantized; the scale leaves.
  auto pairs = [&](const char* scale_tail, const char* weight_tail, std::optional<std::pair<int64_t, int64_t>> block) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::string& k = tensors[i].key;
      if (!ends_with(k, scale_tail)) continue;
      auto w = by_key.find(k.substr(0, k.size() - std::strlen(scale_tail)) + weight_tail);
      if (w == by_key.end()) continue;
      out.fp8[w->second] = pair(tensors[w->second], tensors[i], i, block, where);
      out.dropped[i] = true;
    }
  };
  auto drop = [&](std::initializer_list<const char*> tails) {
    for (size_t i = 0; i < tensors.size(); ++i)
      for (const char* t : tails)
        if (ends_with(tensors[i].key, t)) out.dropped[i] = true;
  };
  if (m == "mxfp4") return out;  // GPT-OSS's experts: repacked, not dequantized (gguf/model.h)
  if (m == "fp8") {
    const json bs = qc.value("weight_block_size", json());
    if (!bs.is_null() && !block_of(bs)) fail("weight_block_size " + bs.dump() + " is not two positive integers");
    for (size_t i = 0; i < tensors.size(); ++i)
      if (ends_with(tensors[i].key, ".qscale_weight") || ends_with(tensors[i].key, ".qscale_act"))
        throw UnsupportedError(
            Where(where, std::nullopt, tensors[i].key),
            "'" + tensors[i].key + "': Mistral's own fp8 format (qscale_weight) is not read into a GGUF by dcpctl");
    pairs("_scale_inv", "", block_of(bs));
    drop({".activation_scale", "_activation_scale"});
    return out;
  }
  if (m == "compressed-tensors" && ct_format(qc, "mxfp4-pack-quantized")) {
    nvfp4_pairs(tensors, by_key, true, out, where, true);
    drop({".k_scale", ".v_scale"});
    return out;
  }
  if (m == "compressed-tensors" && ct_nvfp4(qc)) {
    nvfp4_pairs(tensors, by_key, true, out, where);
    drop({".k_scale", ".v_scale"});
    return out;
  }
  if (m == "compressed-tensors") {
    const std::string format = qc.value("format", json()).is_string() ? qc["format"].get<std::string>() : "";
    const json groups = qc.value("config_groups", json::object());
    if (format != "float-quantized" && format != "int-quantized" && format != "naive-quantized")
      fail("format '" + format +
           "' is not written into a GGUF by dcpctl (it dequantizes float-quantized FP8 as llama.cpp's converter does)");
    if (!groups.is_object() || groups.size() != 1)
      fail("config_groups has " + std::to_string(groups.is_object() ? groups.size() : 0) +
           " groups: llama.cpp's converter reads one (\"Can't handle multiple config groups\")");
    const json w = groups.begin()->value("weights", json::object());
    const std::string strategy = w.value("strategy", json()).is_string() ? w["strategy"].get<std::string>() : "";
    if (strategy != "channel" && strategy != "block")
      fail("weights strategy '" + strategy + "': llama.cpp's converter dequantizes strategy channel or block only");
    if (!w.value("group_size", json()).is_null()) fail("weights group_size is set: llama.cpp's converter asserts none");
    const json bs = w.value("block_structure", json());
    if (strategy == "block" && !block_of(bs)) fail("strategy block without a block_structure of two positive integers");
    pairs(".weight_scale", ".weight", strategy == "block" ? block_of(bs) : std::nullopt);
    return out;
  }
  if (m == "modelopt") {
    const json algo = qc.value("quant_algo", json());
    if (algo == "NVFP4" || algo == "W4A16_NVFP4") nvfp4_pairs(tensors, by_key, false, out, where);
    // ModelOpt's FP8 scales are one value; a 2-D weight_scale is NVFP4's, not dequantized.
    for (size_t i = 0; i < tensors.size(); ++i)
      if (ends_with(tensors[i].key, ".weight_scale") && tensors[i].shape.size() >= 2 && !out.dropped[i])
        throw UnsupportedError(
            Where(where, std::nullopt, tensors[i].key),
            "'" + tensors[i].key + "' is ModelOpt's NVFP4 block scale: not written into a GGUF by dcpctl yet");
    for (size_t i = 0; i < tensors.size(); ++i)  // the FP8 ones: the NVFP4 scales were taken above
      if (ends_with(tensors[i].key, ".weight_scale") && !out.dropped[i])
        if (auto w = by_key.find(tensors[i].key.substr(0, tensors[i].key.size() - 6)); w != by_key.end()) {
          out.fp8[w->second] = pair(tensors[w->second], tensors[i], i, std::nullopt, where);
          out.dropped[i] = true;
        }
    for (size_t i = 0; i < tensors.size(); ++i)
      if (ends_with(tensors[i].key, ".weight_scale") &&
          !by_key.count(tensors[i].key.substr(0, tensors[i].key.size() - 6)))
        out.dropped[i] = true;
    drop({".input_scale", ".k_scale", ".v_scale"});
    return out;
  }
  fail(
      "not written into a GGUF by dcpctl (it reads fp8, compressed-tensors float-quantized, modelopt FP8 and GPT-OSS's "
      "mxfp4)");
  return out;
}

}  // namespace dcpctl::gguf
