// mxfp4's DerivedTensors (meta/codecs/mxfp4.cpp describes the format): the decode, GPT-OSS's
// `_blocks` and `_scales` read as float32 (torch's _dequantize_tensor_mxfp4, view/kernels.h), and
// the encode, --quantize mxfp4: GPT-OSS's stacked MoE experts as MXFP4 `_blocks` and `_scales`
// (OCP MX v1.0's rule; view/codecs/quantize.h).
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>

#include "meta/geometry.h"
#include "meta/pieces.h"
#include "util/error.h"
#include "util/numeric.h"
#include "view/codecs/codecs.h"
#include "view/kernels.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// An MXFP4 weight read as float32: its chunk of blocks and the whole scales, dequantized (two
// values a byte).
class Mxfp4Weight final : public DerivedTensor {
 public:
  Mxfp4Weight(std::string path, TensorMeta blocks, TensorMeta scales)
      : path_(std::move(path)), b_(std::move(blocks)), s_(std::move(scales)) {}
  const TensorMeta& follows() const override { return b_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const uint64_t q = b_.chunk_numel(chunk);
    read_computed(path_, b_, chunk, q * 2, from, n, dst, [&](float* out) {
      std::vector<uint8_t> packed(q);
      below.read(b_, chunk, 0, q, packed.data());
      std::vector<uint8_t> scales = below.read_whole(s_);
      dequantize_mxfp4(packed.data(), chunk_box(b_, chunk), scales.data(), s_.shape, out);
    });
  }
  // The packed chunk, the scales read whole, and the chunk's float32 values when a part is asked.
  uint64_t working_bytes(size_t chunk) const override { return b_.chunk_numel(chunk) * 9 + whole_read_bytes(s_); }

 private:
  std::string path_;
  TensorMeta b_, s_;
};

// The view's tensor of MXFP4 blocks `b` [..., G, B]: float32 [..., G * 2B], chunk for chunk.
TensorMeta mxfp4_float_meta(const Checkpoint& ck, const TensorMeta& b, const TensorMeta& s) {
  const size_t nd = b.ndim();
  std::vector<int64_t> groups(b.shape.begin(), b.shape.end() - (nd ? 1 : 0));
  if (nd < 2 || s.shape != groups)
    throw FormatError(Where(ck.metadata_path, std::nullopt, s.fqn),
                      "MXFP4 scales of shape " + dims_text(s.shape) + " are not the groups of blocks '" + b.fqn + "' " +
                          dims_text(b.shape) + " (the blocks' shape less its last dimension)");
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
                             "MXFP4 blocks saved in chunks that split a group's " + std::to_string(B) +
                                 " bytes (chunk " + std::to_string(c) + "): dcpctl dequantizes whole groups");
    v.chunk_dims.insert(v.chunk_dims.end(), off, off + nd - 1);
    v.chunk_dims.back() *= 2 * B;
    v.chunk_dims.insert(v.chunk_dims.end(), size, size + nd - 1);
    v.chunk_dims.back() *= 2 * B;
  }
  return v;
}

constexpr int64_t kGroup = 32;  // values an E8M0 scale covers
constexpr int64_t kGroupBytes = kGroup / 2;

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

// A stacked expert weight of transformers' GptOssExperts: [E, in, out] (gate_up_proj [E, H, 2F],
// down_proj [E, F, H]), floating.
bool is_expert_stack(const TensorMeta& t) {
  return t.ndim() == 3 && t.dtype && info(*t.dtype).floating &&
         (ends_with(t.fqn, ".experts.gate_up_proj") || ends_with(t.fqn, ".experts.down_proj"));
}

// Expert `e` of 3-D tensor `t` ([E, in, out], as the table below has it) as float32, into `out`
// (in * out values). A chunk spanning dims 1 and 2 gives the expert as one byte range; another is
// read whole and its part of the expert copied.
void read_expert(const TensorReads& below, const TensorMeta& t, int64_t e, float* out) {
  const int64_t in = t.shape[1], cols = t.shape[2];
  const size_t item = itemsize(*t.dtype);
  std::vector<uint8_t> raw;
  std::vector<float> f;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    const int64_t *off = t.chunk_offsets(c), *size = t.chunk_sizes(c);
    if (e < off[0] || e >= off[0] + size[0] || size[1] == 0 || size[2] == 0) continue;
    if (off[1] == 0 && size[1] == in && off[2] == 0 && size[2] == cols) {
      raw.resize(static_cast<size_t>(in * cols) * item);
      below.read(t, c, static_cast<uint64_t>((e - off[0]) * in * cols) * item, raw.size(), raw.data());
      cast_elements(*t.dtype, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(out),
                    static_cast<size_t>(in * cols));
      continue;
    }
    raw.resize(t.chunk_numel(c) * item);
    below.read(t, c, 0, raw.size(), raw.data());
    f.resize(t.chunk_numel(c));
    cast_elements(*t.dtype, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(f.data()), f.size());
    const float* slab = f.data() + (e - off[0]) * size[1] * size[2];
    for (int64_t i = 0; i < size[1]; ++i)
      std::memcpy(out + (off[1] + i) * cols + off[2], slab + i * size[2], static_cast<size_t>(size[2]) * 4);
  }
}

// The scales of the experts whose `_blocks` were computed and whose `_scales` were not yet read:
// a `_blocks` read leaves its expert's scales here and the `_scales` read takes them, so each
// expert is read and quantized once. Each entry is 1/64 of its expert's float32 values; all the
// view's entries together stay under kMaxHeld (past it a `_scales` read computes its own).
class Mxfp4Scales {
 public:
  static constexpr uint64_t kMaxHeld = 64ull << 20;
  void put(const std::string& stack, int64_t e, const uint8_t* scales, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (held_ + n > kMaxHeld || by_expert_.count({stack, e})) return;
    by_expert_[{stack, e}].assign(scales, scales + n);
    held_ += n;
  }
  bool take(const std::string& stack, int64_t e, uint8_t* out, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_expert_.find({stack, e});
    if (it == by_expert_.end() || it->second.size() != n) return false;
    std::memcpy(out, it->second.data(), n);
    held_ -= n;
    by_expert_.erase(it);
    return true;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<std::string, int64_t>, std::vector<uint8_t>> by_expert_;
  uint64_t held_ = 0;
};

// Expert `e`'s [out, G] scales alone, from its [in, out] values (no transpose, no E2M1 rounding).
void expert_scales(const TensorReads& below, const TensorMeta& t, int64_t e, uint8_t* scales) {
  std::vector<float> x(static_cast<size_t>(t.shape[1] * t.shape[2]));
  read_expert(below, t, e, x.data());
  mxfp4_column_scales(x.data(), t.shape[1], t.shape[2], scales);
}

uint64_t expert_need(const TensorMeta& t) {
  const uint64_t n = static_cast<uint64_t>(t.shape[1] * t.shape[2]), item = itemsize(*t.dtype);
  uint64_t most = 0;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    const int64_t *off = t.chunk_offsets(c), *size = t.chunk_sizes(c);
    if (!(off[1] == 0 && size[1] == t.shape[1] && off[2] == 0 && size[2] == t.shape[2]))
      most = std::max(most, t.chunk_numel(c) * (4 + item));
  }
  // the saved bytes, the float32 expert, the other part (blocks or scales) and
  // quantize_mxfp4_columns' tile of 16 packed rows (at most n / 2 bytes)
  return n * (item + 4) + n / 2 + n / 2 + most;
}

// An expert stack's `_blocks` (scales = false) or `_scales`, one chunk an expert.
class Mxfp4Part final : public DerivedTensor {
 public:
  Mxfp4Part(TensorMeta stack, bool scales, std::shared_ptr<Mxfp4Scales> computed)
      : t_(std::move(stack)), scales_(scales), computed_(std::move(computed)) {}
  const TensorMeta& follows() const override { return t_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const uint64_t groups = static_cast<uint64_t>(t_.shape[2] * (t_.shape[1] / kGroup));
    const uint64_t bytes = scales_ ? groups : groups * kGroupBytes;
    const int64_t e = static_cast<int64_t>(chunk);
    read_part(Where("", std::nullopt, t_.fqn + (scales_ ? "_scales" : "_blocks")), "expert " + std::to_string(chunk),
              bytes, from, n, dst, [&](uint8_t* out) {
                if (scales_) {
                  if (!computed_->take(t_.fqn, e, out, groups)) expert_scales(below, t_, e, out);
                  return;
                }
                // GPT-OSS's orientation [out, in]: each group is 32 consecutive `in` values of an
                // output row, quantized from the [in, out] values as they are (no transpose).
                std::vector<float> x(static_cast<size_t>(t_.shape[1] * t_.shape[2]));
                read_expert(below, t_, e, x.data());
                std::vector<uint8_t> scales(groups);
                quantize_mxfp4_columns(x.data(), t_.shape[1], t_.shape[2], out, scales.data());
                computed_->put(t_.fqn, e, scales.data(), scales.size());
              });
  }
  uint64_t working_bytes(size_t) const override { return expert_need(t_); }

 private:
  TensorMeta t_;
  bool scales_;
  std::shared_ptr<Mxfp4Scales> computed_;
};

// `t`'s storage for expert `e`: that of the first chunk holding it (a derived chunk's reads never
// touch it; the planner and the deal ask where it lies).
StorageRef expert_storage(const TensorMeta& t, int64_t e) {
  for (size_t c = 0; c < t.num_chunks(); ++c)
    if (e >= t.chunk_offsets(c)[0] && e < t.chunk_offsets(c)[0] + t.chunk_sizes(c)[0]) return t.storage[c];
  return t.storage.at(0);
}

TensorMeta part_meta(const TensorMeta& t, const std::string& name, DType dtype, std::vector<int64_t> expert_shape) {
  TensorMeta m;
  m.fqn = name;
  m.dtype = dtype;
  m.dtype_name = torch_name(dtype);
  m.shape = {t.shape[0]};
  m.shape.insert(m.shape.end(), expert_shape.begin(), expert_shape.end());
  for (int64_t e = 0; e < t.shape[0]; ++e) {
    m.chunk_dims.push_back(e);
    m.chunk_dims.insert(m.chunk_dims.end(), expert_shape.size(), 0);
    m.chunk_dims.push_back(1);
    m.chunk_dims.insert(m.chunk_dims.end(), expert_shape.begin(), expert_shape.end());
    m.storage.push_back(expert_storage(t, e));
  }
  return m;
}

// A module name with its layer numbers as `*` (model.layers.3.self_attn -> model.layers.*.self_attn).
std::string any_layer(const std::string& module) {
  static const std::regex layer(R"((^|\.)(layers|h|blocks)\.\d+(\.|$))");
  return std::regex_replace(module, layer, "$1$2.*$3");
}

// GPT-OSS's modules_to_not_convert: each kept module, layers as `*`, raised to its parent while no
// quantized module lies under the parent (model.layers.*.self_attn.q_proj -> model.layers.*.self_attn).
json not_convert_list(const std::vector<std::string>& kept, const std::vector<std::string>& quantized) {
  auto holds_quantized = [&](const std::string& parent) {
    return std::any_of(quantized.begin(), quantized.end(),
                       [&](const std::string& q) { return q.rfind(parent + ".", 0) == 0; });
  };
  json out = json::array();
  std::set<std::string> seen;
  for (const std::string& k : kept) {
    std::string m = any_layer(k);
    for (size_t dot; (dot = m.rfind('.')) != std::string::npos && !holds_quantized(m.substr(0, dot));)
      m = m.substr(0, dot);
    if (seen.insert(m).second) out.push_back(m);
  }
  return out;
}

// --dtype: confirmed only when config.json says so (quant_method "mxfp4"): a uint8 X_blocks beside
// X_scales is GPT-OSS's layout by name alone, and another format (int4 pairs, FP4 with other
// scales, a model's own uint8 buffers) with those names would be dequantized into garbage.
void confirm_mxfp4(const Checkpoint& ck, const std::vector<std::pair<uint32_t, uint32_t>>& mx, const QuantConfig& qc) {
  const Metadata& md = ck.md;
  if (qc.quant_method != mxfp4_codec().quant_method)
    throw UnsupportedError(
        Where(ck.metadata_path, std::nullopt, md.tensors[mx[0].first].fqn),
        md.tensors[mx[0].first].dtype_name + " blocks beside '" + md.tensors[mx[0].second].fqn +
            "' are laid out as GPT-OSS's MXFP4, but the config does not say they are: " + describe_quant_config(qc) +
            "; dcpctl does not dequantize one-byte tensors by guess: give the release's config.json (--assets DIR) "
            "with "
            "quantization_config.quant_method \"mxfp4\", or leave out --dtype to write them as saved");
}

// --dtype: blocks `b` [..., G, B] beside scales `s` as float32 [..., G * 2B], chunk for chunk.
DecodedTensor decode_mxfp4(const Checkpoint& ck, const TensorMeta& b, const TensorMeta& s, const QuantConfig&) {
  TensorMeta v = mxfp4_float_meta(ck, b, s);
  // The bound: one E8M0 scale per group of 2B values; torchao's rule quantizes a group whose amax is
  // below 2^-124 with 2^-126 and stores byte 0 (2^-127): such a group's values are off by up to 5 *
  // 2^-127, room the floor gives.
  ScaleGrid grid = scale_grid(s, 1, 2 * b.shape.back());
  grid.e8m0 = true;
  auto bound = std::make_shared<ElementBound>(
      ck.metadata_path, mxfp4_codec(), v, std::move(grid), mxfp4_codec().half_step, 0.0, 0x1p-124,
      "s = 2^(_scales - 127) per " + std::to_string(2 * b.shape.back()) + " values (OCP MX); E2M1 grid, saturating");
  return {std::move(v), std::make_shared<Mxfp4Weight>(ck.metadata_path, b, s), {}, std::move(bound)};
}

// --quantize mxfp4 (view/codecs/quantize.h).
namespace {

// A stack mxfp4 can write: GPT-OSS's experts [E, in, out], whose input dimension holds whole groups.
void check_gpt_oss_stack(const Checkpoint& ck, const TensorMeta& t, const std::string& model_type) {
  if (model_type != "gpt_oss")
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn),
                           "--quantize mxfp4 writes GPT-OSS's layout (its experts [E, in, out] transposed to "
                           "_blocks [E, out, in / 32, 16]), and config.json's model_type is " +
                               (model_type.empty() ? std::string("absent") : "'" + model_type + "'") +
                               ": dcpctl does not guess another model's expert orientation; give --assets DIR with "
                               "a gpt_oss config.json, or --quantize fp8-block");
  if (t.shape[1] % kGroup != 0)
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn),
                           "--quantize mxfp4: the experts' input dimension " + std::to_string(t.shape[1]) +
                               " is not a multiple of 32 (one E8M0 scale per 32 values)");
}

// The stack's planner path (its state_dict nesting) given to its _blocks and _scales.
void rename_stack_path(const Metadata& md, const TensorMeta& t, const TensorMeta& b, const TensorMeta& s,
                       Checkpoint& view) {
  if (!md.has_planner_data) return;
  auto p = md.planner_data.find(t.fqn);
  if (p == md.planner_data.end()) return;
  for (const TensorMeta* m : {&b, &s}) {
    std::vector<PathElem> path = p->second;
    if (!path.empty() && !path.back().is_index) path.back().key += m->fqn.substr(t.fqn.size());
    view.md.planner_data[m->fqn] = path;
  }
  view.md.planner_data.erase(t.fqn);
}

}  // namespace

Checkpoint mxfp4_quantized_view(const Checkpoint& ck, const QuantizeRequest& rq) {
  // The row written: uint8 _blocks beside uint8 _scales (Mxfp4Part computes those).
  const Codec& codec = mxfp4_codec();
  const CodecRow& row = codec.written_row();
  const Metadata& md = ck.md;
  auto by_name = tensor_names(md);
  if (auto mx = codec.pairs(md, by_name); !mx.empty())
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, md.tensors[mx[0].first].fqn),
                           "--quantize on weights that are already quantized (MXFP4 blocks beside '" +
                               md.tensors[mx[0].second].fqn +
                               "'): give --dtype to dequantize the checkpoint first, or export it as it is");
  const std::string model_type =
      rq.config.is_object() && rq.config.contains("model_type") && rq.config["model_type"].is_string()
          ? rq.config["model_type"].get<std::string>()
          : "";
  Checkpoint view = ck;
  std::shared_ptr<DerivedTable> table = table_over(ck.derived);
  auto computed = std::make_shared<Mxfp4Scales>();  // every stack's
  json kept = json::array();
  std::vector<std::string> keep_dtype;
  std::vector<std::string> kept_modules, quantized_modules;
  std::vector<TensorMeta> out;
  std::vector<uint32_t> index(md.tensors.size());
  std::vector<int64_t> scale_at(md.tensors.size(), -1);
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& t = md.tensors[i];
    index[i] = static_cast<uint32_t>(out.size());
    if (t.dtype && (fp8_block_codec().weight_dtype(*t.dtype) || by_name.count(t.fqn + fp8_block_codec().scale_suffix)))
      throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn),
                             "--quantize on a weight that is already quantized (" + t.dtype_name +
                                 "): give --dtype to dequantize the checkpoint first, or export it as it is");
    if (!is_expert_stack(t)) {
      out.push_back(t);
      const bool weight = ends_with(t.fqn, ".weight") && t.ndim() >= 2 && t.dtype && info(*t.dtype).floating;
      if (weight) {
        std::string why = fp8_kept_reason(t.fqn, rq);
        kept.push_back(
            {{"key", t.fqn}, {"reason", why.empty() ? "not a stacked MoE expert (mxfp4 quantizes those)" : why}});
        kept_modules.push_back(t.fqn.substr(0, t.fqn.size() - 7));
      }
      continue;
    }
    for (const std::string& g : rq.skip)
      if (fnmatch(g.c_str(), t.fqn.c_str(), 0) == 0) {
        kept.push_back({{"key", t.fqn}, {"reason", "--quantize-skip '" + g + "'"}});
        kept_modules.push_back(t.fqn);
        out.push_back(t);
        break;
      }
    if (out.size() > index[i]) continue;
    check_gpt_oss_stack(ck, t, model_type);
    const int64_t O = t.shape[2], G = t.shape[1] / kGroup;
    TensorMeta b = part_meta(t, t.fqn + codec.weight_suffix, row.weight, {O, G, kGroupBytes});
    TensorMeta s = part_meta(t, t.fqn + codec.scale_suffix, row.scale, {O, G});
    table->tensors[b.fqn] = {std::make_shared<Mxfp4Part>(t, false, computed), ck.derived};
    table->tensors[s.fqn] = {std::make_shared<Mxfp4Part>(t, true, computed), ck.derived};
    table->tensors.erase(t.fqn);
    keep_dtype.push_back(b.fqn);
    keep_dtype.push_back(s.fqn);
    rename_stack_path(md, t, b, s, view);
    quantized_modules.push_back(any_layer(t.fqn));
    out.push_back(std::move(b));
    scale_at[i] = static_cast<int64_t>(out.size());
    out.push_back(std::move(s));
  }
  if (quantized_modules.empty())
    throw UnsupportedError(Where(ck.dir),
                           "--quantize mxfp4 quantizes stacked MoE experts (`*.experts.gate_up_proj`, "
                           "`*.experts.down_proj`, 3-D, as transformers' GPT-OSS keeps them), and this "
                           "checkpoint has none to quantize");
  std::vector<std::pair<bool, uint32_t>> order;
  for (const auto& [tensor, idx] : md.order) {
    order.push_back({tensor, tensor ? index[idx] : idx});
    if (tensor && scale_at[idx] >= 0) order.push_back({true, static_cast<uint32_t>(scale_at[idx])});
  }
  view.md.tensors = std::move(out);
  view.md.order = std::move(order);
  std::sort(quantized_modules.begin(), quantized_modules.end());
  quantized_modules.erase(std::unique(quantized_modules.begin(), quantized_modules.end()), quantized_modules.end());
  size_t stacks = 0;
  for (const std::string& k : keep_dtype) stacks += ends_with(k, codec.weight_suffix);
  const int64_t group[2] = {1, kGroup};
  json config = codec.written_config(row, rq.block, not_convert_list(kept_modules, quantized_modules));
  return quantized_result(std::move(view), std::move(table), rq.scheme, group, stacks, std::move(kept),
                          std::move(config), std::move(keep_dtype));
}

}  // namespace

CodecView mxfp4_codec_view() {
  CodecView v;
  v.codec = &mxfp4_codec();
  v.confirm = confirm_mxfp4;
  v.decode = decode_mxfp4;
  v.said = "mxfp4";
  v.quantize = mxfp4_quantized_view;
  return v;
}

}  // namespace dcpctl
