// fp8-block's DerivedTensors (meta/codecs/fp8_block.cpp describes the format): the decode, a
// float8 weight and its block scale read as float32 (torch's QuantizedHuggingFaceStorageReader's
// arithmetic, view/kernels.h), and the encode, --quantize fp8-block's Linear weights and expert
// stacks as e4m3 blocks beside a float32 weight_scale_inv (transformers 5.23's Fp8Quantize; which
// weights, view/codecs/quantize.h).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>

#include "meta/geometry.h"
#include "meta/pieces.h"
#include "util/error.h"
#include "util/numeric.h"
#include "view/codecs/codecs.h"
#include "view/kernels.h"

namespace dcpctl {

using nlohmann::json;

namespace {

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
      if (*s_.dtype == DType::Float8_E8M0FNU)
        e8m0_to_float(scale.data(), f.size(), f.data());
      else
        std::memcpy(f.data(), scale.data(), f.size() * 4);
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

// A weight's geometry as a stack of matrices: a 2-D weight one matrix, a 3-D expert stack [E, R, C]
// one an expert. "Flat rows" number the rows of all matrices one after another (expert e's row r is
// e * R + r); a stack is quantized only when R is a multiple of the block's rows, so no block
// crosses an expert and the stack's blocks are those of [E * R, C], its scale that of [E * R / bm,
// C / bn] byte for byte (FP8Experts' [E, R / bm, C / bn]).
struct ChunkBox {
  int64_t e0, ne, r0, nr, c0, nc;  // experts, rows, columns (a 2-D weight: expert 0 of 1)
};
ChunkBox chunk_box3(const TensorMeta& t, size_t c) {
  const int64_t *off = t.chunk_offsets(c), *size = t.chunk_sizes(c);
  if (t.ndim() == 2) return {0, 1, off[0], size[0], off[1], size[1]};
  return {off[0], size[0], off[1], size[1], off[2], size[2]};
}
int64_t matrix_rows(const TensorMeta& t) {
  return t.shape[t.ndim() - 2];
}
int64_t flat_rows(const TensorMeta& t) {
  return t.ndim() == 2 ? t.shape[0] : t.shape[0] * t.shape[1];
}

}  // namespace

// Flat rows [a, b) of weight `t` (within one matrix; as the table below has it) as float32, into
// `out` ((b - a) * cols). A chunk that spans every column gives its rows as one byte range; another
// is read whole and the part inside copied.
void read_weight_rows(const TensorReads& below, const TensorMeta& t, int64_t a, int64_t b, float* out) {
  const int64_t cols = t.shape.back(), R = matrix_rows(t), e = a / R;
  a -= e * R;
  b -= e * R;
  const size_t item = itemsize(*t.dtype);
  std::vector<uint8_t> raw;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    const ChunkBox k = chunk_box3(t, c);
    const int64_t r0 = std::max(a, k.r0), r1 = std::min(b, k.r0 + k.nr);
    if (e < k.e0 || e >= k.e0 + k.ne || r0 >= r1 || k.nc == 0) continue;
    const int64_t first = (e - k.e0) * k.nr;  // the expert's first row in the chunk
    if (k.c0 == 0 && k.nc == cols) {
      if (*t.dtype == DType::Float32) {  // straight into the rows: no second copy
        below.read(t, c, static_cast<uint64_t>((first + r0 - k.r0) * cols) * 4,
                   static_cast<uint64_t>((r1 - r0) * cols) * 4, out + (r0 - a) * cols);
        continue;
      }
      raw.resize(static_cast<size_t>((r1 - r0) * cols) * item);
      below.read(t, c, static_cast<uint64_t>((first + r0 - k.r0) * cols) * item, raw.size(), raw.data());
      cast_elements(*t.dtype, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(out + (r0 - a) * cols),
                    static_cast<size_t>((r1 - r0) * cols));
      continue;
    }
    raw.resize(t.chunk_numel(c) * item);
    below.read(t, c, 0, raw.size(), raw.data());
    std::vector<float> f(t.chunk_numel(c));
    cast_elements(*t.dtype, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(f.data()), f.size());
    for (int64_t r = r0; r < r1; ++r)
      std::memcpy(out + (r - a) * cols + k.c0, f.data() + (first + r - k.r0) * k.nc, static_cast<size_t>(k.nc) * 4);
  }
}

uint64_t largest_chunk(const TensorMeta& t) {
  uint64_t most = 0;
  for (size_t c = 0; c < t.num_chunks(); ++c) most = std::max(most, t.chunk_numel(c));
  return most;
}

// What reading rows [a, b) holds: their float32 values and their saved bytes, or a whole chunk and
// its float32 copy when a chunk does not span every column.
uint64_t weight_rows_need(const TensorMeta& t, int64_t rows, uint64_t largest) {
  const uint64_t n = static_cast<uint64_t>(rows * t.shape.back()), item = itemsize(*t.dtype);
  return n * (4 + item) + largest * (4 + item);
}

uint64_t weight_rows_need(const TensorMeta& t, int64_t rows) {
  return weight_rows_need(t, rows, largest_chunk(t));
}

namespace {

// The weight_scale_inv of one quantized weight, block row by block row, as its weight's reads
// compute them: the scale's read takes the rows the weight's reads left it and reads the weight
// only for the others, so an export reads each weight once, not once for the fp8 bytes and once
// more for the scale. Held for the view's life: the scale's size (a 128x128 block's 4 bytes per
// 64 KiB of float32 weight), never the weight's.
//
// The executor deals a weight and its scale to different lanes that start together: a weight's
// read claims its block rows before it reads them, and the scale's read waits for rows a read has
// claimed (that read holds its memory and waits for no scale) instead of reading them again; a
// read that fails gives its claim back. Rows no read has claimed yet the scale's read waits for
// once, briefly (kFirstWait: the weight's lane starting), then computes itself. What it writes is
// the same either way; only how often the weight is read depends on the timing.
class Fp8Scales {
 public:
  static constexpr std::chrono::milliseconds kFirstWait{200};
  Fp8Scales(int64_t block_rows, int64_t block_cols)
      : cb_(block_cols),
        inv_(static_cast<size_t>(block_rows * block_cols)),
        have_(static_cast<size_t>(block_rows), false),
        claimed_(static_cast<size_t>(block_rows), 0) {}
  // Block rows [r0, r0 + n): a weight's read is computing them (claim) or gave up (unclaim).
  void claim(int64_t r0, int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t r = r0; r < r0 + n; ++r) ++claimed_[static_cast<size_t>(r)];
  }
  void unclaim(int64_t r0, int64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int64_t r = r0; r < r0 + n; ++r) --claimed_[static_cast<size_t>(r)];
    }
    cv_.notify_all();
  }
  // Block rows [r0, r0 + n) of the scale (448 / amax, as fp8_block_scales gives it), computed.
  void put(int64_t r0, int64_t n, const float* scale) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fp8_inverse_scales(scale, static_cast<size_t>(n * cb_), inv_.data() + r0 * cb_);
      std::fill(have_.begin() + r0, have_.begin() + r0 + n, true);
    }
    cv_.notify_all();
  }
  // Block row r's inverse scales into `inv` (cb values); false when no read computed it (after
  // waiting for a read that claimed it, and once per `first_wait` for one to claim it).
  bool get(int64_t r, float* inv, bool& first_wait) const {
    std::unique_lock<std::mutex> lock(mu_);
    const size_t i = static_cast<size_t>(r);
    if (first_wait && !have_[i] && !claimed_[i]) {
      first_wait = false;
      cv_.wait_for(lock, kFirstWait, [&] { return have_[i] || claimed_[i] > 0; });
    }
    cv_.wait(lock, [&] { return have_[i] || claimed_[i] == 0; });
    if (!have_[i]) return false;
    std::memcpy(inv, inv_.data() + r * cb_, static_cast<size_t>(cb_) * 4);
    return true;
  }

 private:
  int64_t cb_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<float> inv_;
  std::vector<bool> have_;
  std::vector<int> claimed_;
};

// A quantized weight: its chunk's fp8 bytes, from the rows of the whole blocks around it.
class Fp8Weight final : public DerivedTensor {
 public:
  Fp8Weight(TensorMeta w, int64_t bm, int64_t bn, std::shared_ptr<Fp8Scales> scales)
      : w_(std::move(w)), bm_(bm), bn_(bn), scales_(std::move(scales)), largest_(largest_chunk(w_)) {}
  const TensorMeta& follows() const override { return w_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const ChunkBox k = chunk_box3(w_, chunk);
    const uint64_t bytes = w_.chunk_numel(chunk);  // one byte an element
    read_part(Where("", std::nullopt, w_.fqn), "chunk " + std::to_string(chunk), bytes, from, n, dst, [&](uint8_t* q) {
      const int64_t R = matrix_rows(w_), cols = w_.shape.back();
      // Each matrix (expert) of the chunk: flat rows [a, b) around its rows, claimed for the scale
      // (Fp8Scales) until computed, or given back when the read fails.
      auto rows_of = [&](int64_t e) {
        const int64_t top = e * R + k.r0;  // the chunk's first flat row in it
        return std::pair<int64_t, int64_t>{top / bm_ * bm_, std::min((e + 1) * R, (top + k.nr + bm_ - 1) / bm_ * bm_)};
      };
      int64_t e = k.e0;
      for (int64_t f = k.e0; f < k.e0 + k.ne; ++f) {
        auto [a, b] = rows_of(f);
        scales_->claim(a / bm_, (b - a + bm_ - 1) / bm_);
      }
      struct Unclaim {
        const Fp8Weight& w;
        decltype(rows_of)& rows;
        int64_t& from;
        int64_t end;
        ~Unclaim() {
          for (int64_t f = from; f < end; ++f) {
            auto [a, b] = rows(f);
            w.scales_->unclaim(a / w.bm_, (b - a + w.bm_ - 1) / w.bm_);
          }
        }
      } unclaim{*this, rows_of, e, k.e0 + k.ne};
      // The rows, every value of which read_rows writes: not zeroed first (a page faulted in is
      // written once).
      size_t most = 0;
      for (int64_t f = k.e0; f < k.e0 + k.ne; ++f) {
        auto [a, b] = rows_of(f);
        most = std::max(most, static_cast<size_t>((b - a) * cols));
      }
      std::unique_ptr<float[]> rows(new float[most]);
      float* x = rows.get();
      std::vector<float> scale;
      for (; e < k.e0 + k.ne; ++e) {
        const int64_t top = e * R + k.r0;
        const auto [a, b] = rows_of(e);
        read_weight_rows(below, w_, a, b, x);
        const int64_t block_rows = (b - a + bm_ - 1) / bm_;
        scale.resize(static_cast<size_t>(block_rows * ((cols + bn_ - 1) / bn_)));
        fp8_block_scales(x, b - a, cols, bm_, bn_, scale.data());
        scales_->put(a / bm_, block_rows, scale.data());
        scales_->unclaim(a / bm_, block_rows);
        quantize_fp8_box(x, cols, bm_, bn_, scale.data(), top - a, top - a + k.nr, k.c0, k.c0 + k.nc,
                         q + (e - k.e0) * k.nr * k.nc);
      }
    });
  }
  uint64_t working_bytes(size_t chunk) const override {
    const int64_t rows = chunk_box3(w_, chunk).nr + 2 * bm_;
    return weight_rows_need(w_, rows, largest_) + 2 * w_.chunk_numel(chunk);
  }

 private:
  TensorMeta w_;
  int64_t bm_, bn_;
  std::shared_ptr<Fp8Scales> scales_;
  uint64_t largest_;
};

// A quantized weight's weight_scale_inv, one chunk: the block rows its weight's reads computed,
// and the others computed here a block row at a time.
class Fp8ScaleInv final : public DerivedTensor {
 public:
  Fp8ScaleInv(TensorMeta w, int64_t bm, int64_t bn, std::shared_ptr<Fp8Scales> scales)
      : w_(std::move(w)), bm_(bm), bn_(bn), scales_(std::move(scales)), largest_(largest_chunk(w_)) {}
  const TensorMeta& follows() const override { return w_; }
  void read(const TensorReads& below, size_t, uint64_t from, uint64_t n, void* dst) const override {
    const int64_t rows = flat_rows(w_), cols = w_.shape.back(), cb = (cols + bn_ - 1) / bn_,
                  rb = (rows + bm_ - 1) / bm_;
    const uint64_t bytes = static_cast<uint64_t>(rb * cb) * 4;
    read_part(Where("", std::nullopt, w_.fqn + fp8_block_codec().scale_suffix), "scale", bytes, from, n, dst,
              [&](uint8_t* out) {
                float* inv = reinterpret_cast<float*>(out);
                std::vector<float> x, scale(static_cast<size_t>(cb));
                bool first_wait = true;
                for (int64_t r = 0; r < rows; r += bm_) {
                  if (scales_->get(r / bm_, inv + (r / bm_) * cb, first_wait)) continue;
                  const int64_t b = std::min(rows, r + bm_);
                  x.resize(static_cast<size_t>((b - r) * cols));
                  read_weight_rows(below, w_, r, b, x.data());
                  fp8_block_scales(x.data(), b - r, cols, bm_, bn_, scale.data());
                  scales_->put(r / bm_, 1, scale.data());
                  fp8_inverse_scales(scale.data(), scale.size(), inv + (r / bm_) * cb);
                }
              });
  }
  uint64_t working_bytes(size_t) const override {
    const uint64_t cb = static_cast<uint64_t>((w_.shape.back() + bn_ - 1) / bn_),
                   rb = static_cast<uint64_t>((flat_rows(w_) + bm_ - 1) / bm_);
    return weight_rows_need(w_, bm_, largest_) + (rb + 1) * cb * 4;
  }

 private:
  TensorMeta w_;
  int64_t bm_, bn_;
  std::shared_ptr<Fp8Scales> scales_;
  uint64_t largest_;
};

const char* const kExpertProjections[] = {"gate_up_proj", "up_proj", "down_proj"};

// The projection name of an expert stack `experts.P` of transformers' FP8Experts, or "".
std::string expert_projection(const std::string& key) {
  for (const char* p : kExpertProjections)
    if (key.size() > std::strlen(p) + 9 &&
        key.compare(key.size() - std::strlen(p) - 9, std::string::npos, std::string(".experts.") + p) == 0)
      return p;
  return "";
}

// The first of `keys` config `c` has (transformers' _first_attr), as an integer; -1 when none is
// there or it is not an integer.
int64_t first_int(const json& c, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (c.contains(k)) return c[k].is_number_integer() ? c[k].get<int64_t>() : -1;
  return -1;
}

// Why 3-D floating tensor `t` is not quantized ("": it is, expert by expert). transformers 5.23
// loads fp8 expert stacks as FP8Experts (integrations/finegrained_fp8.py): `X.experts.gate_up_proj`
// [E, 2I, H] (or `up_proj` [E, I, H]) and `down_proj` [E, H, I], each beside `_scale_inv` [E,
// ceil(out / bm), ceil(in / bn)] (gate_up_proj's at least 2 rows), E = num_local_experts or
// num_experts, I = moe_intermediate_size or intermediate_size, H = hidden_size, no bias. Its
// dequantize=True path (Fp8Dequantize) derives the block from the scale grid, so a partial block
// would load wrong: a stack is quantized only when its blocks are whole.
std::string fp8_stack_reason(const TensorMeta& t, const std::unordered_map<std::string_view, uint32_t>& by_name,
                             const QuantizeRequest& rq) {
  if (std::string why = fp8_kept_reason(t.fqn, rq); !why.empty()) return why;
  const std::string proj = expert_projection(t.fqn);
  if (proj.empty())
    return "a 3-D tensor that is not a stacked expert projection (transformers' FP8Experts: experts.gate_up_proj, "
           "up_proj, down_proj)";
  if (by_name.count(t.fqn + "_bias")) return "a stacked expert projection with a bias (FP8Experts has none)";
  const json& c = language_config(rq.config);
  const int64_t E = first_int(c, {"num_local_experts", "num_experts"}), H = first_int(c, {"hidden_size"}),
                I = first_int(c, {"moe_intermediate_size", "intermediate_size"});
  if (E <= 0 || H <= 0 || I <= 0)
    return "a stacked expert projection whose orientation config.json does not tell (it gives no num_local_experts "
           "or num_experts, hidden_size, moe_intermediate_size or intermediate_size)";
  const int64_t out = proj == "down_proj" ? H : proj == "gate_up_proj" ? 2 * I : I, in = proj == "down_proj" ? I : H;
  if (t.shape == std::vector<int64_t>{E, in, out} && in != out)
    return "a stacked expert projection [E, in, out] " + dims_text(t.shape) + " (FP8Experts holds [E, out, in])";
  if (t.shape != std::vector<int64_t>{E, out, in})
    return "a stacked expert projection of shape " + dims_text(t.shape) + ", not FP8Experts' [E, out, in] " +
           dims_text({E, out, in}) + " from config.json";
  if (out % rq.block[0] != 0 || in % rq.block[1] != 0)
    return "a stacked expert projection with partial " + std::to_string(rq.block[0]) + "x" +
           std::to_string(rq.block[1]) +
           " blocks (transformers' Fp8Dequantize derives the block from the scale grid: only whole blocks load)";
  if (proj == "gate_up_proj" && out / rq.block[0] < 2)
    return "a gate_up_proj of one block row (FP8Experts keeps at least 2 scale rows)";
  return "";
}

// Each 3-D floating tensor's reason to be kept ("": quantized): fp8_stack_reason, and an experts
// module is quantized whole or not at all (FP8Experts replaces the module: a kept projection keeps
// the others, with its reason).
std::unordered_map<uint32_t, std::string> fp8_stack_reasons(
    const Metadata& md, const std::unordered_map<std::string_view, uint32_t>& by_name, const QuantizeRequest& rq) {
  std::unordered_map<uint32_t, std::string> why;
  std::unordered_map<std::string, std::string> module_kept;  // experts module -> a projection's reason
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& t = md.tensors[i];
    if (t.ndim() != 3 || !t.dtype || !info(*t.dtype).floating) continue;
    why[i] = fp8_stack_reason(t, by_name, rq);
    const std::string proj = expert_projection(t.fqn);
    if (!proj.empty() && !why[i].empty()) {
      const std::string module = t.fqn.substr(0, t.fqn.size() - proj.size() - 1);
      module_kept.emplace(module, t.fqn.substr(module.size() + 1) + " is kept: " + why[i]);
    }
  }
  for (auto& [i, reason] : why) {
    const std::string proj = expert_projection(md.tensors[i].fqn);
    if (!reason.empty() || proj.empty()) continue;
    auto m = module_kept.find(md.tensors[i].fqn.substr(0, md.tensors[i].fqn.size() - proj.size() - 1));
    if (m != module_kept.end()) reason = "its experts module's " + m->second;
  }
  return why;
}

// --dtype: the dequantize view's float32 tensor for fp8 weight `w` beside scale `s`, its shape and
// chunks; the block from `qc` (config.json's weight_block_size), else 128 x 128 as torch's reader
// assumes.
DecodedTensor decode_fp8_block(const Checkpoint& ck, const TensorMeta& w, const TensorMeta& s, const QuantConfig& qc) {
  const std::optional<std::pair<int64_t, int64_t>>& block = qc.block;
  if (w.ndim() != 2 && w.ndim() != 3)
    throw UnsupportedError(
        Where(ck.metadata_path, std::nullopt, w.fqn),
        "a block-scaled float8 weight of " + std::to_string(w.ndim()) +
            " dimensions: dcpctl dequantizes 2-D weights and 3-D expert stacks (transformers' FP8Experts); "
            "without --dtype the weights and their scales are written as they are");
  if (!s.dtype || !fp8_block_codec().row(*w.dtype, *s.dtype) || s.ndim() != w.ndim())
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
            (block ? " (block size from " + qc.path + ")"
                   : " (no quantization_config.weight_block_size found: 128x128 assumed, as torch's reader does; " +
                         qc.path + ")"));
  DecodedTensor out{w, std::make_shared<Fp8BlockWeight>(ck.metadata_path, w, s, b0, b1), {}, nullptr};
  out.meta.dtype = DType::Float32;
  out.meta.dtype_name = torch_name(DType::Float32);
  if (*w.dtype == DType::Float8_E4M3FN) {  // the e4m3 grid's bound (e5m2 and the fnuz variants: none)
    ScaleGrid grid = scale_grid(s, b0, b1);
    grid.e8m0 = *s.dtype == DType::Float8_E8M0FNU;
    const std::string tail = s.fqn.substr(s.fqn.rfind('.') + 1);
    out.bound = std::make_shared<ElementBound>(ck.metadata_path, fp8_block_codec(), out.meta, std::move(grid),
                                               fp8_block_codec().half_step, 0.0, 0.0,
                                               "s = " + tail + " (" + s.dtype_name + ") per " + std::to_string(b0) +
                                                   "x" + std::to_string(b1) + " block; e4m3 grid");
  }
  return out;
}

// --quantize fp8-block (view/codecs/quantize.h).
Checkpoint fp8_quantized_view(const Checkpoint& ck, const QuantizeRequest& rq) {
  const int64_t bm = rq.block[0], bn = rq.block[1];
  if (bm <= 0 || bn <= 0) throw UsageError(Where(), "--quantize-block: two positive integers, RxC (128x128)");
  // The row written: e4m3 beside a float32 weight_scale_inv (Fp8Weight / Fp8ScaleInv compute those).
  const Codec& codec = fp8_block_codec();
  const CodecRow& row = codec.written_row();
  const Metadata& md = ck.md;
  auto by_name = tensor_names(md);
  Checkpoint view = ck;
  std::shared_ptr<DerivedTable> table = table_over(ck.derived);
  json kept = json::array(), not_convert = json::array();
  std::vector<std::string> keep_dtype;
  std::vector<TensorMeta> tensors;
  std::vector<std::pair<bool, uint32_t>> order;
  std::vector<uint32_t> moved(md.tensors.size());
  std::vector<std::pair<uint32_t, TensorMeta>> scales;  // after which new index
  size_t quantized = 0;
  std::unordered_map<uint32_t, std::string> stack_reasons = fp8_stack_reasons(md, by_name, rq);
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& t = md.tensors[i];
    moved[i] = static_cast<uint32_t>(tensors.size());
    tensors.push_back(t);
    const bool weight = t.fqn.size() > 7 && t.fqn.compare(t.fqn.size() - 7, 7, ".weight") == 0;
    const bool stack = t.ndim() == 3 && t.dtype && info(*t.dtype).floating;
    if (!stack && (!weight || t.ndim() != 2 || !t.dtype)) continue;
    if (codec.weight_dtype(*t.dtype) || by_name.count(t.fqn + codec.scale_suffix) ||
        (weight && by_name.count(t.fqn.substr(0, t.fqn.size() - 7) + ".weight_scale_inv")))
      throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn),
                             "--quantize on a weight that is already quantized (" + t.dtype_name +
                                 "): give --dtype to dequantize the checkpoint first, or export it as it is");
    if (!info(*t.dtype).floating) continue;
    // The module transformers would replace: X of X.weight, X.experts of X.experts.gate_up_proj.
    const std::string module = t.fqn.substr(0, stack ? t.fqn.rfind('.') : t.fqn.size() - 7);
    if (std::string why = stack ? stack_reasons[i] : fp8_kept_reason(t.fqn, rq); !why.empty()) {
      kept.push_back({{"key", t.fqn}, {"reason", why}});
      if (!stack || std::find(not_convert.begin(), not_convert.end(), module) == not_convert.end())
        not_convert.push_back(module);
      continue;
    }
    TensorMeta& q = tensors.back();
    q.dtype = row.weight;
    q.dtype_name = torch_name(row.weight);
    const int64_t rb = (flat_rows(t) + bm - 1) / bm, cb = (t.shape.back() + bn - 1) / bn;
    auto computed = std::make_shared<Fp8Scales>(rb, cb);
    table->tensors[t.fqn] = {std::make_shared<Fp8Weight>(t, bm, bn, computed), ck.derived};
    TensorMeta s;
    s.fqn = t.fqn + codec.scale_suffix;  // X.weight_scale_inv, X.experts.gate_up_proj_scale_inv
    s.dtype = row.scale;
    s.dtype_name = torch_name(row.scale);
    s.shape = stack ? std::vector<int64_t>{t.shape[0], t.shape[1] / bm, cb} : std::vector<int64_t>{rb, cb};
    s.chunk_dims = std::vector<int64_t>(s.shape.size(), 0);
    s.chunk_dims.insert(s.chunk_dims.end(), s.shape.begin(), s.shape.end());
    // A derived tensor's reads never touch its storage; the planner and the deal ask where its
    // chunk lies: where its weight's first chunk does.
    s.storage = {t.storage.at(0)};
    table->tensors[s.fqn] = {std::make_shared<Fp8ScaleInv>(t, bm, bn, computed), ck.derived};
    keep_dtype.push_back(t.fqn);
    keep_dtype.push_back(s.fqn);
    if (md.has_planner_data)
      if (auto p = md.planner_data.find(t.fqn); p != md.planner_data.end()) {
        std::vector<PathElem> path = p->second;
        if (!path.empty() && !path.back().is_index) path.back().key += codec.scale_suffix;
        view.md.planner_data[s.fqn] = path;
      }
    scales.push_back({i, std::move(s)});
    ++quantized;
  }
  // Each scale right after its weight, in the table and in the state_dict order.
  std::vector<TensorMeta> out;
  std::vector<uint32_t> index(md.tensors.size());
  std::vector<int64_t> scale_at(md.tensors.size(), -1);
  size_t si = 0;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    index[i] = static_cast<uint32_t>(out.size());
    out.push_back(std::move(tensors[moved[i]]));
    if (si < scales.size() && scales[si].first == i) {
      scale_at[i] = static_cast<int64_t>(out.size());
      out.push_back(std::move(scales[si++].second));
    }
  }
  for (const auto& [tensor, idx] : md.order) {
    order.push_back({tensor, tensor ? index[idx] : idx});
    if (tensor && scale_at[idx] >= 0) order.push_back({true, static_cast<uint32_t>(scale_at[idx])});
  }
  view.md.tensors = std::move(out);
  view.md.order = std::move(order);
  // A tied head: transformers would still make lm_head an FP8Linear (the releases list it as kept).
  list_tied_head(rq.config, by_name.count("lm_head.weight") != 0, not_convert);
  return quantized_result(std::move(view), std::move(table), rq.scheme, rq.block, quantized, std::move(kept),
                          codec.written_config(row, rq.block, not_convert), std::move(keep_dtype));
}

}  // namespace

CodecView fp8_block_codec_view() {
  CodecView v;
  v.codec = &fp8_block_codec();
  v.decode = decode_fp8_block;
  v.said = "weights";
  v.quantize = fp8_quantized_view;
  return v;
}

}  // namespace dcpctl
