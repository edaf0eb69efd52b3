#include "view/dequantize.h"

#include <cstring>
#include <unordered_map>

#include "meta/derived.h"
#include "meta/geometry.h"
#include "meta/keymap.h"
#include "meta/pieces.h"
#include "meta/quantized.h"
#include "util/error.h"
#include "view/kernels.h"

namespace dcpctl {

using nlohmann::json;

namespace {

uint64_t largest_chunk_bytes(const TensorMeta& t) {
  uint64_t most = 0;
  for (size_t c = 0; c < t.num_chunks(); ++c) most = std::max(most, t.chunk_numel(c) * itemsize(*t.dtype));
  return most;
}

// What TensorReads::read_whole holds for `t`: the whole tensor and one chunk of it at a time.
uint64_t whole_read_bytes(const TensorMeta& t) {
  return t.numel() * itemsize(*t.dtype) + largest_chunk_bytes(t);
}

// Bytes [from, from + n) of a computed chunk of `values` float32s (n = UINT64_MAX: to its end),
// which `compute` writes whole; `saved` names it in messages.
void read_computed(const std::string& path, const TensorMeta& saved, size_t chunk, uint64_t values, uint64_t from,
                   uint64_t n, void* dst, const std::function<void(float*)>& compute) {
  read_part(Where(path, std::nullopt, saved.fqn), "chunk " + std::to_string(chunk), values * 4, from, n, dst,
            [&](uint8_t* out) { compute(reinterpret_cast<float*>(out)); });
}

// A block-scaled fp8 weight read as float32: its chunk and its whole scale, as the table below has
// them, dequantized.
class Fp8BlockWeight final : public DerivedTensor {
 public:
  Fp8BlockWeight(std::string path, TensorMeta weight, TensorMeta scale, int64_t b0, int64_t b1)
      : path_(std::move(path)), w_(std::move(weight)), s_(std::move(scale)), block_{b0, b1} {}
  const TensorMeta& follows() const override { return w_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const uint64_t numel = w_.chunk_numel(chunk);
    read_computed(path_, w_, chunk, numel, from, n, dst, [&](float* out) {
      std::vector<uint8_t> q(numel);
      below.read(w_, chunk, 0, numel, q.data());
      std::vector<uint8_t> scale = below.read_whole(s_);
      std::vector<float> f(s_.numel());
      if (*s_.dtype == DType::Float8_E8M0FNU) e8m0_to_float(scale.data(), f.size(), f.data());
      else std::memcpy(f.data(), scale.data(), f.size() * 4);
      // A stack of experts [E, R, C] (scale [E, R / b0, C / b1]): each expert's part of the chunk
      // as a 2-D weight; a 2-D weight: one.
      const Box box = chunk_box(w_, chunk);
      const size_t lead = box.sizes.size() - 2;
      const Box part{{box.offsets.begin() + lead, box.offsets.end()}, {box.sizes.begin() + lead, box.sizes.end()}};
      const int64_t experts = lead ? box.sizes[0] : 1, first = lead ? box.offsets[0] : 0;
      const int64_t per_scale = s_.shape[lead] * s_.shape[lead + 1];
      for (int64_t e = 0; e < experts; ++e)
        dequantize_fp8_blocks(*w_.dtype, q.data() + e * part.numel(), part, f.data() + (first + e) * per_scale,
                              s_.shape[lead + 1], block_, out + e * part.numel());
    });
  }
  // The fp8 chunk, the scale read whole and as float32, and the chunk's float32 values when a part is asked.
  uint64_t working_bytes(size_t chunk) const override {
    return w_.chunk_numel(chunk) * 5 + whole_read_bytes(s_) + s_.numel() * 4;
  }

 private:
  std::string path_;  // the checkpoint's metadata, for messages
  TensorMeta w_, s_;
  int64_t block_[2];
};

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
TensorMeta mxfp4_view(const Checkpoint& ck, const TensorMeta& b, const TensorMeta& s) {
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

}  // namespace

void refuse_mxfp4(const Checkpoint& ck, const std::string& what) {
  auto by_name = tensor_names(ck.md);
  auto pairs = mxfp4_pairs(ck.md, by_name);
  if (pairs.empty()) return;
  const TensorMeta& b = ck.md.tensors[pairs[0].first];
  throw UnsupportedError(
      Where(ck.metadata_path, std::nullopt, b.fqn),
      "MXFP4 weights (this one's scales are '" + ck.md.tensors[pairs[0].second].fqn + "', GPT-OSS's format): " + what +
          " would take their packed bytes for weights; give --dtype (bf16, fp32, ...) to dequantize them first");
}

std::optional<Checkpoint> dequantized_view(const Checkpoint& ck, std::optional<DType> cast, const std::string& assets) {
  if (!cast) return std::nullopt;
  const Metadata& md = ck.md;
  std::unordered_map<std::string_view, uint32_t> by_name = tensor_names(md);
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
    if (n.size() <= std::strlen(kScaleSuffix) ||
        n.compare(n.size() - std::strlen(kScaleSuffix), std::string::npos, kScaleSuffix) != 0)
      continue;
    auto w = by_name.find(std::string_view(n).substr(0, n.size() - std::strlen(kScaleSuffix)));
    if (w != by_name.end() && !(md.tensors[w->second].dtype && is_float8(*md.tensors[w->second].dtype)))
      ignored.push_back(i);
  }
  if (pairs.empty() && mx.empty()) return std::nullopt;
  if (is_float8(*cast)) {
    const std::string what = pairs.empty()
                                 ? "MXFP4 weights (this one's scales are '" + md.tensors[mx[0].second].fqn + "')"
                                 : "block-scaled float8 weights (this one's scale is '" +
                                       md.tensors[pairs[0].first].fqn + kScaleSuffix + "')";
    throw UnsupportedError(
        Where(ck.metadata_path, std::nullopt, md.tensors[pairs.empty() ? mx[0].first : pairs[0].first].fqn),
        std::string("--dtype ") + torch_name(*cast) + " on " + what +
            ": dcpctl dequantizes, it does not requantize; give a wider --dtype, or none to keep the weights and "
            "scales as they are");
  }
  MapConfig config = checkpoint_config(ck, assets);
  const QuantConfig qc = quant_config(config);
  const std::optional<std::pair<int64_t, int64_t>>& block = qc.block;
  // One-byte tensors are MXFP4 only when the config says so: a uint8 X_blocks beside X_scales is
  // GPT-OSS's layout by name alone, and another format (int4 pairs, FP4 with other scales, a
  // model's own uint8 buffers) with those names would be dequantized into garbage.
  if (!mx.empty() && qc.quant_method != writing_codec(CodecFamily::Mxfp4).quant_method)
    throw UnsupportedError(
        Where(ck.metadata_path, std::nullopt, md.tensors[mx[0].first].fqn),
        md.tensors[mx[0].first].dtype_name + " blocks beside '" + md.tensors[mx[0].second].fqn +
            "' are laid out as GPT-OSS's MXFP4, but the config does not say they are: " + describe_quant_config(qc) +
            "; dcpctl does not dequantize one-byte tensors by guess: give the release's config.json (--assets DIR) "
            "with "
            "quantization_config.quant_method \"mxfp4\", or leave out --dtype to write them as saved");
  // A one-byte weight that is not float8 (uint8, int8, F4: packed FP4, int8, ...) beside a scale:
  // no row of the codec table the config chooses explains it.
  for (uint32_t i : ignored) {
    const std::string& n = md.tensors[i].fqn;
    const TensorMeta& w = md.tensors[by_name.at(std::string_view(n).substr(0, n.size() - std::strlen(kScaleSuffix)))];
    if (w.dtype && itemsize(*w.dtype) == 1)
      throw UnsupportedError(
          Where(ck.metadata_path, std::nullopt, w.fqn),
          "a " + w.dtype_name + " weight beside the scale '" + n + "': no codec of the config explains it (" +
              describe_quant_config(qc) +
              "; quantization_config's quant_method, fmt, scale_fmt and weight_block_size choose it); dcpctl does "
              "not dequantize one-byte tensors by guess: leave out --dtype to write them as saved");
  }
  Checkpoint view = ck;
  std::shared_ptr<DerivedTable> table = table_over(ck.derived);
  auto add = [&](const std::string& name, std::shared_ptr<const DerivedTensor> t) {
    table->tensors[name] = {std::move(t), ck.derived};
  };
  size_t weights = 0;
  std::vector<std::string> ignored_names;
  std::vector<bool> is_scale(md.tensors.size(), false);
  for (const auto& [wi, si] : pairs) {
    const TensorMeta& w = md.tensors[wi];
    const TensorMeta& s = md.tensors[si];
    if (w.ndim() != 2 && w.ndim() != 3)
      throw UnsupportedError(
          Where(ck.metadata_path, std::nullopt, w.fqn),
          "a block-scaled float8 weight of " + std::to_string(w.ndim()) +
              " dimensions: dcpctl dequantizes 2-D weights and 3-D expert stacks (transformers' FP8Experts); "
              "without --dtype the weights and their scales are written as they are");
    if (!s.dtype || !find_codec(CodecFamily::Fp8Block, *w.dtype, *s.dtype) || s.ndim() != w.ndim())
      throw FormatError(Where(ck.metadata_path, std::nullopt, s.fqn),
                        "the scale of float8 weight '" + w.fqn + "' is " + s.dtype_name + " of " +
                            std::to_string(s.ndim()) +
                            " dimensions; a block scale is float32 or float8_e8m0fnu "
                            "(scale_fmt ue8m0) of the weight's " +
                            std::to_string(w.ndim()));
    int64_t b0 = block ? block->first : 128, b1 = block ? block->second : 128;
    const size_t lead = w.ndim() - 2;
    std::vector<int64_t> want(w.shape.begin(), w.shape.begin() + static_cast<std::ptrdiff_t>(lead));
    want.push_back(ceil_blocks(w.shape[lead], b0));
    want.push_back(ceil_blocks(w.shape[lead + 1], b1));
    if (s.shape != want)
      throw FormatError(
          Where(ck.metadata_path, std::nullopt, s.fqn),
          "shape " + dims_text(s.shape) + " is not the " + std::to_string(b0) + "x" + std::to_string(b1) +
              " blocks of weight '" + w.fqn + "' " + dims_text(w.shape) + ": " + dims_text(want) +
              (block ? " (block size from " + config.path + ")"
                     : " (no quantization_config.weight_block_size found: 128x128 assumed, as torch's reader does; " +
                           config.path + ")"));
    add(w.fqn, std::make_shared<Fp8BlockWeight>(ck.metadata_path, w, s, b0, b1));
    ++weights;
    is_scale[si] = true;
    TensorMeta& v = view.md.tensors[wi];
    v.dtype = DType::Float32;
    v.dtype_name = torch_name(DType::Float32);
  }
  for (const auto& [bi, si] : mx) {
    view.md.tensors[bi] = mxfp4_view(ck, md.tensors[bi], md.tensors[si]);
    add(md.tensors[bi].fqn, std::make_shared<Mxfp4Weight>(ck.metadata_path, md.tensors[bi], md.tensors[si]));
    is_scale[si] = true;
  }
  for (uint32_t i : ignored) {
    is_scale[i] = true;
    ignored_names.push_back(md.tensors[i].fqn);
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
  // An entry carried from the table below for a tensor this view drops leaves with it.
  for (uint32_t i = 0; i < md.tensors.size(); ++i)
    if (is_scale[i]) table->tensors.erase(md.tensors[i].fqn);
  table->views["dequantized"] = {
      {"weights", weights},
      {"block", weights == 0 ? json() : json{block ? block->first : 128, block ? block->second : 128}},
      {"config", block && !pairs.empty() ? json(config.path) : json()},
      {"ignored_scales", ignored_names},
      {"mxfp4", mx.size()}};
  table->output["dequantized"] = true;
  view.derived = std::move(table);
  return view;
}

}  // namespace dcpctl
