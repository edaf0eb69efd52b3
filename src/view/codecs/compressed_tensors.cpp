// compressed-tensors' DerivedTensors (meta/codecs/compressed_tensors.cpp describes the formats):
// each quantized weight read as compressed-tensors 0.20.0's own decompressors compute it
// (compressors/*/base.py, quantization/lifecycle/forward_helpers.py `_dequantize`: scale / global
// first, then (q - zero point) and * scale, each rounded to the scale's dtype; NVFP4 and MX decode in
// bfloat16 (unpack_fp4_from_uint8's and unpack_fp6_from_uint8's default, decompress_mx_scale's
// 2^(e-127) in bfloat16)); the
// values are then float32 that hold exactly those, so --dtype float32 writes its bytes and --dtype
// bfloat16 the same values cast. tests/interop/quant_producers.py's ct_formula writes the same rules
// in torch and checks them against the decompressors.
#include <cmath>
#include <cstring>
#include <regex>

#include "meta/geometry.h"
#include "util/error.h"
#include "util/numeric.h"
#include "view/codecs/codecs.h"
#include "view/codecs/rows.h"

namespace dcpctl {

using nlohmann::json;

namespace {

bool ct_applies(const QuantConfig& qc) {
  return qc.quant_method == "compressed-tensors";
}

// compressed-tensors' match_name: "re:PATTERN" as Python's re.match (anchored at the start), a
// class name ("Linear") every Linear, else the module's name itself.
bool matches(const std::string& module, const std::string& target) {
  if (target == "Linear") return true;
  if (target.rfind("re:", 0) == 0) {
    try {
      return std::regex_search(module, std::regex(target.substr(3)), std::regex_constants::match_continuous);
    } catch (const std::regex_error&) {
      return false;
    }
  }
  return module == target;
}

struct Scheme {
  std::string format, strategy, type;
  int64_t bits = 0, group = 0, bh = 0, bw = 0;
  bool symmetric = true;
};

// The config group of `module` (the first whose targets match it), or a refusal naming it.
Scheme scheme_of(const Checkpoint& ck, const std::string& weight, const std::string& module, const QuantConfig& qc) {
  const json& q = qc.raw;
  auto fail = [&](const std::string& why) -> Scheme {
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, weight),
                           "compressed-tensors weight: " + why + " (" + qc.path + ")");
  };
  if (q.contains("ignore") && q["ignore"].is_array())
    for (const json& i : q["ignore"])
      if (i.is_string() && matches(module, i.get<std::string>()))
        return fail("its module '" + module + "' is in quantization_config.ignore, yet its tensors are quantized");
  const std::string top = q.value("format", "");
  const json groups = q.value("config_groups", json::object());  // held: items() of a temporary would dangle
  for (const auto& [name, g] : groups.items()) {
    bool hit = false;
    const json targets = g.value("targets", json::array());
    for (const json& t : targets)
      if (t.is_string() && matches(module, t.get<std::string>())) hit = true;
    if (!hit) continue;
    const json w = g.value("weights", json::object());
    Scheme s;
    s.format = g.contains("format") && g["format"].is_string() ? g["format"].get<std::string>() : top;
    s.strategy = w.value("strategy", "");
    s.type = w.value("type", "");
    s.bits = w.value("num_bits", 0);
    s.group = w.contains("group_size") && w["group_size"].is_number_integer() ? w["group_size"].get<int64_t>() : 0;
    if (w.contains("block_structure") && w["block_structure"].is_array() && w["block_structure"].size() == 2) {
      s.bh = w["block_structure"][0].get<int64_t>();
      s.bw = w["block_structure"][1].get<int64_t>();
    }
    s.symmetric = w.value("symmetric", true);
    if (!ct_format_read(s.format))
      return fail("config group '" + name + "' has format '" + s.format + "', which dcpctl does not decode");
    return s;
  }
  return fail("no config group's targets match its module '" + module + "'");
}

[[noreturn]] void ct_misshapen(const Checkpoint& ck, const TensorMeta& t, const std::string& of,
                               const std::string& want) {
  throw FormatError(Where(ck.metadata_path, std::nullopt, t.fqn), t.dtype_name + " " + dims_text(t.shape) +
                                                                      " does not fit compressed-tensors weight '" + of +
                                                                      "': " + want + " expected");
}

// The bound of decoded weight `v` in compressed-tensors form `form` (the codec that writes it, where
// dcpctl does).
std::shared_ptr<ElementBound> ct_bound(const Checkpoint& ck, const Codec& form, const TensorMeta& v, ScaleGrid g,
                                       double (*half_step)(double), double rounding, const std::string& rule) {
  return std::make_shared<ElementBound>(ck.metadata_path, form, v, std::move(g), half_step, rounding, 0.0, rule);
}

float mx_scale(uint8_t e) {  // decompress_mx_scale: 2 ** (e - 127) in bfloat16
  return round_bf16(std::ldexp(1.0f, static_cast<int>(e) - 127));
}

// Element i of a row packed b bits an element in little-endian int32 words (pack_to_int32): bits
// [i*b, i*b + b) of the row, an element that crosses a word taking its high bits from the next.
int64_t unpack_bits(const uint8_t* words, int64_t i, int64_t bits) {
  const int64_t bit = i * bits, w0 = bit / 32, shift = bit % 32;
  uint32_t lo;
  std::memcpy(&lo, words + w0 * 4, 4);
  uint64_t v = lo;
  if (shift + bits > 32) {
    uint32_t hi;
    std::memcpy(&hi, words + (w0 + 1) * 4, 4);
    v |= static_cast<uint64_t>(hi) << 32;
  }
  return static_cast<int64_t>((v >> shift) & ((uint64_t{1} << bits) - 1));
}

// A compressed-tensors weight being decoded: its tensors, its scheme, the tensors that leave with it.
struct CtWeight {
  const Checkpoint& ck;
  const TensorMeta& w;
  const TensorMeta& s;  // weight_scale
  const Scheme& sc;
  std::string module, name;
  std::vector<const TensorMeta*> aux;  // read with each row window: the scale first
  DType S;                             // the scale's dtype (the model's)
};

// float-quantized / naive-quantized: float8_e4m3fn, a scale per tensor, channel, group or block.
DecodedTensor decode_ct_float(CtWeight& in) {
  const Checkpoint& ck = in.ck;
  const TensorMeta &w = in.w, &s = in.s;
  const Scheme& sc = in.sc;
  const std::string& name = in.name;
  std::vector<const TensorMeta*>& aux = in.aux;
  const DType S = in.S;
  const int64_t N = w.shape[0];
  const int64_t K = w.shape[1];
  if (*w.dtype != DType::Float8_E4M3FN || sc.type != "float" || sc.bits != 8)
    ct_misshapen(ck, w, w.fqn, "float8_e4m3fn (float, 8 bits)");
  int64_t bh = 1, bw = 1;  // the block one scale covers
  if (sc.strategy == "tensor")
    bh = N, bw = K;
  else if (sc.strategy == "channel")
    bw = K;
  else if (sc.strategy == "group" && sc.group > 0)
    bw = sc.group;
  else if (sc.strategy == "block" && sc.bh > 0 && sc.bw > 0)
    bh = sc.bh, bw = sc.bw;
  else
    ct_misshapen(ck, w, w.fqn, "a tensor, channel, group or block strategy");
  const int64_t sr = (N + bh - 1) / bh, scols = (K + bw - 1) / bw;
  if (!(S == DType::BFloat16 || S == DType::Float32 || S == DType::Float16) ||
      s.numel() != static_cast<uint64_t>(sr * scols))
    ct_misshapen(ck, s, w.fqn, "a float scale of [" + std::to_string(sr) + ", " + std::to_string(scols) + "] values");
  DecodedTensor d = row_decoded(
      ck, name, w, aux, K,
      [=](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < K; ++j)
            out[r * K + j] =
                round_to(e4m3fn_to_f32(p[r * K + j]) * float_at(a[0], S, ((r0 + r) / bh) * scols + j / bw), S);
      });
  // x / s and the decode in the scale's dtype (the model's)
  const Codec& form = sc.strategy == "channel" ? ct_fp8_dynamic_codec()
                      : sc.strategy == "block" ? ct_fp8_block_codec()
                                               : compressed_tensors_codec();
  d.bound = ct_bound(ck, form, d.meta, scale_grid(s, bh, bw), e4m3_half_ulp, narrow_rounding(S),
                     "s = weight_scale (" + s.dtype_name + ") per " +
                         (sc.strategy == "tensor"    ? std::string("tensor")
                          : sc.strategy == "channel" ? std::string("output channel")
                                                     : std::to_string(bh) + "x" + std::to_string(bw) + " block") +
                         "; e4m3 grid");
  return d;
}

// pack-quantized: 1- to 8-bit integers packed in int32 words, a scale per channel or group.
DecodedTensor decode_ct_packed(CtWeight& in) {
  const Checkpoint& ck = in.ck;
  const TensorMeta &w = in.w, &s = in.s;
  const Scheme& sc = in.sc;
  const std::string& module = in.module;
  const std::string& name = in.name;
  std::vector<const TensorMeta*>& aux = in.aux;
  const DType S = in.S;
  const int64_t N = w.shape[0];
  const int64_t b = sc.bits, words = w.shape[1];
  if (*w.dtype != DType::Int32 || sc.type != "int" || b < 1 || b > 8)
    ct_misshapen(ck, w, w.fqn, "int32 words of 1- to 8-bit integers");
  const int64_t K = words * 32 / b;  // checked against weight_shape when read
  const int64_t gsz = sc.strategy == "channel" ? K : sc.group;
  if (gsz <= 0 || !(sc.strategy == "channel" || sc.strategy == "group"))
    ct_misshapen(ck, w, w.fqn, "a channel or group strategy");
  const int64_t groups = (K + gsz - 1) / gsz;
  if (s.ndim() != 2 || s.shape[0] != N || s.shape[1] != groups ||
      !(S == DType::BFloat16 || S == DType::Float32 || S == DType::Float16))
    ct_misshapen(ck, s, w.fqn, "a float scale [" + std::to_string(N) + ", " + std::to_string(groups) + "]");
  const TensorMeta* shape = tensor_named(ck, module + ".weight_shape");
  if (!shape || shape->dtype != DType::Int64 || shape->numel() != 2)
    throw FormatError(Where(ck.metadata_path, std::nullopt, w.fqn),
                      "compressed-tensors packed weight without its int64 '" + module + ".weight_shape'");
  aux.insert(aux.begin() + 1, shape);
  const TensorMeta* zp = tensor_named(ck, module + ".weight_zero_point");
  if (!sc.symmetric) {
    if (!zp || zp->dtype != DType::Int32 || zp->ndim() != 2 || zp->shape[1] != groups || zp->shape[0] * 32 < N * b)
      throw FormatError(Where(ck.metadata_path, std::nullopt, w.fqn),
                        "asymmetric compressed-tensors weight without its packed int32 '" + module +
                            ".weight_zero_point' [" + std::to_string((N * b + 31) / 32) + ", " +
                            std::to_string(groups) + "]");
    aux.insert(aux.begin() + 2, zp);
  } else if (zp) {
    throw FormatError(Where(ck.metadata_path, std::nullopt, zp->fqn),
                      "a zero point beside a symmetric scheme's weight");
  }
  const bool asym = !sc.symmetric;
  const int64_t zrows = asym ? zp->shape[0] : 0;
  const std::string where = ck.metadata_path, wname = w.fqn;
  DecodedTensor dec = row_decoded(
      ck, name, w, aux, K,
      [=](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
        int64_t dims[2];
        std::memcpy(dims, a[1].data(), 16);
        if (dims[0] != N || dims[1] != K)
          throw UnsupportedError(Where(where, std::nullopt, wname),
                                 "weight_shape [" + std::to_string(dims[0]) + ", " + std::to_string(dims[1]) +
                                     "] is not [" + std::to_string(N) + ", " + std::to_string(K) +
                                     "], what its packed words hold: dcpctl decodes rows whose " + std::to_string(b) +
                                     "-bit elements fill their int32 words");
        const int64_t off = int64_t{1} << (b - 1);
        std::vector<uint8_t> column(static_cast<size_t>(zrows) * 4);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < K; ++j) {
            const int64_t g = j / gsz;
            float d = static_cast<float>(unpack_bits(p + r * words * 4, j, b) - off);
            if (asym) {
              // the zero points of column g, packed down the rows: gather the column's words
              for (int64_t z = 0; z < zrows; ++z)
                std::memcpy(column.data() + z * 4, a[2].data() + (z * groups + g) * 4, 4);
              d = round_to(d - static_cast<float>(unpack_bits(column.data(), r0 + r, b) - off), S);
            }
            out[r * K + j] = round_to(d * float_at(a[0], S, (r0 + r) * groups + g), S);
          }
      });
  // Symmetric: round to nearest on the integer grid, x / s in the scale's dtype (the model's).
  // Asymmetric: no bound implemented (the audit refuses it, naming the weight).
  if (!asym)
    dec.bound =
        ct_bound(ck, sc.strategy == "group" && b == 4 ? ct_w4a16_codec() : compressed_tensors_codec(), dec.meta,
                 scale_grid(s, 1, gsz), int_half_step, narrow_rounding(S),
                 "s = weight_scale (" + s.dtype_name + ") per " +
                     (sc.strategy == "channel" ? std::string("output channel") : std::to_string(gsz) + " values") +
                     "; INT" + std::to_string(b) + " grid");
  return dec;
}

// nvfp4-pack-quantized / mxfp4-pack-quantized: two E2M1 codes a byte.
DecodedTensor decode_ct_fp4(CtWeight& in) {
  const Checkpoint& ck = in.ck;
  const TensorMeta &w = in.w, &s = in.s;
  const Scheme& sc = in.sc;
  const std::string& module = in.module;
  const std::string& name = in.name;
  std::vector<const TensorMeta*>& aux = in.aux;
  const int64_t N = w.shape[0];
  const bool nv = sc.format[0] == 'n';
  const int64_t bytes = w.shape[1], K = bytes * 2, g = nv ? 16 : 32;
  if (*w.dtype != DType::UInt8) ct_misshapen(ck, w, w.fqn, "uint8 (two E2M1 codes a byte)");
  if (s.shape != std::vector<int64_t>{N, K / g} || K % g || s.dtype != (nv ? DType::Float8_E4M3FN : DType::UInt8))
    ct_misshapen(ck, s, w.fqn,
                 std::string(nv ? "float8_e4m3fn" : "uint8 (E8M0)") + " [" + std::to_string(N) + ", " +
                     std::to_string(K / g) + "]");
  if (nv) {
    const TensorMeta* gs = tensor_named(ck, module + ".weight_global_scale");
    if (!gs || gs->dtype != DType::Float32 || gs->numel() != 1)
      throw FormatError(Where(ck.metadata_path, std::nullopt, w.fqn),
                        "NVFP4 weight without its float32 '" + module + ".weight_global_scale'");
    aux.insert(aux.begin() + 1, gs);
  }
  DecodedTensor d = row_decoded(
      ck, name, w, aux, K,
      [=](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
        const float global = nv ? float_at(a[1], DType::Float32, 0) : 1.0f;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < K; ++j) {
            const uint8_t byte = p[r * bytes + j / 2];
            const uint8_t code = (j & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 15);
            const uint8_t sb = a[0][(r0 + r) * (K / g) + j / g];
            const float scale = nv ? e4m3fn_to_f32(sb) / global : mx_scale(sb);
            out[r * K + j] = round_bf16(e2m1_value(code, true) * scale);
          }
      });
  // decoded in bfloat16 (x / s in the model's dtype, at most as narrow)
  ScaleGrid sg = scale_grid(s, 1, nv ? 16 : 32);
  sg.e8m0 = !nv;
  if (nv) sg.global = *aux[1], sg.divide_by_global = true;
  auto bound = ct_bound(ck, nv ? ct_nvfp4_codec() : ct_mxfp4_codec(), d.meta, std::move(sg), e2m1_half_step, 0x1p-8,
                        nv ? "s = weight_scale (e4m3, per 16 values) / weight_global_scale; E2M1 grid"
                           : "s = 2^(weight_scale - 127) per 32 values; E2M1 grid");
  if (nv) bound->saturating(6, 3);  // the e4m3 block scale's own rounding (bound.h)
  d.bound = std::move(bound);
  return d;
}

// E2M3's value of a 6-bit code (compressors/mxfp6/helpers.py kE2M3ToFloat, the sign bit 5): m / 8
// for the first 8 magnitudes, (1 + m / 8) 2^e above.
float e2m3_value(uint32_t code) {
  const uint32_t c = code & 0x1F;
  const float mag = c < 8 ? c / 8.0f : std::ldexp(1.0f + (c & 7) / 8.0f, static_cast<int>(c >> 3) - 1);
  return code & 0x20 ? -mag : mag;
}

// mxfp6-pack-quantized: four E2M3 codes in three bytes (unpack_fp6_from_uint8), an E8M0 scale per 32;
// MXFP6PackedCompressor.decompress's dequantize in bfloat16.
DecodedTensor decode_ct_fp6(CtWeight& in) {
  const Checkpoint& ck = in.ck;
  const TensorMeta &w = in.w, &s = in.s;
  const int64_t N = w.shape[0], bytes = w.shape[1], K = bytes / 3 * 4;
  if (*w.dtype != DType::UInt8 || bytes % 3) ct_misshapen(ck, w, w.fqn, "uint8 (four E2M3 codes in three bytes)");
  if (K % 32 || s.dtype != DType::UInt8 || s.shape != std::vector<int64_t>{N, K / 32})
    ct_misshapen(ck, s, w.fqn, "uint8 (E8M0) [" + std::to_string(N) + ", " + std::to_string(K / 32) + "]");
  DecodedTensor d = row_decoded(
      ck, in.name, w, in.aux, K,
      [=](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < K; j += 4) {
            const uint8_t* b = p + r * bytes + j / 4 * 3;
            const uint32_t word = b[0] | (b[1] << 8) | (static_cast<uint32_t>(b[2]) << 16);
            const float scale = mx_scale(a[0][(r0 + r) * (K / 32) + j / 32]);
            for (int k = 0; k < 4; ++k) out[r * K + j + k] = round_bf16(e2m3_value(word >> (6 * k) & 0x3F) * scale);
          }
      });
  ScaleGrid g = scale_grid(s, 1, 32);
  g.e8m0 = true;
  d.bound = ct_bound(ck, compressed_tensors_codec(), d.meta, std::move(g), e2m3_half_step, 0x1p-8,
                     "s = 2^(weight_scale - 127) per 32 values; E2M3 grid");
  return d;
}

// mxfp8-quantized: float8_e4m3fn, an E8M0 scale per 32.
DecodedTensor decode_ct_mxfp8(CtWeight& in) {
  const Checkpoint& ck = in.ck;
  const TensorMeta &w = in.w, &s = in.s;
  const std::string& name = in.name;
  std::vector<const TensorMeta*>& aux = in.aux;
  const int64_t N = w.shape[0];
  const int64_t K = w.shape[1];
  if (*w.dtype != DType::Float8_E4M3FN) ct_misshapen(ck, w, w.fqn, "float8_e4m3fn");
  if (K % 32 || s.dtype != DType::UInt8 || s.shape != std::vector<int64_t>{N, K / 32})
    ct_misshapen(ck, s, w.fqn, "uint8 (E8M0) [" + std::to_string(N) + ", " + std::to_string(K / 32) + "]");
  DecodedTensor d = row_decoded(
      ck, name, w, aux, K,
      [=](const uint8_t* p, int64_t r0, int64_t rows, const std::vector<std::vector<uint8_t>>& a, float* out) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < K; ++j)
            out[r * K + j] = round_bf16(e4m3fn_to_f32(p[r * K + j]) * mx_scale(a[0][(r0 + r) * (K / 32) + j / 32]));
      });
  ScaleGrid g = scale_grid(s, 1, 32);
  g.e8m0 = true;
  d.bound = ct_bound(ck, ct_mxfp8_codec(), d.meta, std::move(g), e4m3_half_ulp, 0x1p-8,  // decoded in bfloat16
                     "s = 2^(weight_scale - 127) per 32 values; e4m3 grid");
  return d;
}

DecodedTensor decode_ct(const Checkpoint& ck, const TensorMeta& w, const TensorMeta& s, const QuantConfig& qc) {
  const bool packed = ends_with_longer(w.fqn, ".weight_packed");
  const std::string module = w.fqn.substr(0, w.fqn.size() - (packed ? 14 : 7));
  const Scheme sc = scheme_of(ck, w.fqn, module, qc);
  if (w.ndim() != 2) ct_misshapen(ck, w, w.fqn, "a 2-D Linear weight");
  CtWeight in{ck, w, s, sc, module, module + ".weight", {&s}, s.dtype ? *s.dtype : DType::Float32};
  for (const char* extra : {".input_scale", ".input_global_scale", ".input_zero_point"})
    if (const TensorMeta* t = tensor_named(ck, module + extra)) in.aux.push_back(t);  // leave with the weight
  if (sc.format == "float-quantized" || sc.format == "naive-quantized") return decode_ct_float(in);
  if (sc.format == "pack-quantized") return decode_ct_packed(in);
  if (sc.format == "nvfp4-pack-quantized" || sc.format == "mxfp4-pack-quantized") return decode_ct_fp4(in);
  if (sc.format == "mxfp6-pack-quantized") return decode_ct_fp6(in);
  return decode_ct_mxfp8(in);
}

}  // namespace

CodecView compressed_tensors_codec_view() {
  CodecView v;
  v.codec = &compressed_tensors_codec();
  v.applies = ct_applies;
  v.decode = decode_ct;
  v.said = "compressed_tensors";
  return v;
}

}  // namespace dcpctl
