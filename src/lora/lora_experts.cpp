#include "lora/lora_experts.h"

#include <algorithm>
#include <cstring>

#include "util/numeric.h"
#include "view/kernels.h"

namespace dcpctl {

namespace {

// The storage of the first chunk of `t` that holds index `i` of its dim 0 (an expert of a stack,
// a row of A): where the planner and the deal (torchrun, --local-files) take the derived chunk to lie.
StorageRef storage_of(const TensorMeta& t, int64_t i) {
  for (size_t c = 0; c < t.num_chunks(); ++c)
    if (i >= t.chunk_offsets(c)[0] && i < t.chunk_offsets(c)[0] + t.chunk_sizes(c)[0]) return t.storage[c];
  return t.storage.at(0);
}

// A tensor of one chunk, its storage that of `like`'s chunk holding index `at` of dim 0 (a derived
// chunk's reads never touch it).
TensorMeta one_chunk(const TensorMeta& like, int64_t at, std::string name, std::vector<int64_t> shape) {
  TensorMeta m;
  m.fqn = std::move(name);
  m.dtype = like.dtype;
  m.dtype_name = like.dtype_name;
  m.chunk_dims.assign(shape.size(), 0);
  m.chunk_dims.insert(m.chunk_dims.end(), shape.begin(), shape.end());
  m.shape = std::move(shape);
  m.storage.push_back(storage_of(like, at));
  return m;
}

// Expert e's A_e (A's rows e·r …, [r, in]) or rows [lo, lo + rows) of its B_e ([rows, r]), as saved.
class ExpertFactor final : public DerivedTensor {
 public:
  ExpertFactor(std::string path, TensorMeta src, TensorMeta out, bool is_b, int64_t e, int64_t experts, int64_t lo)
      : path_(std::move(path)),
        src_(std::move(src)),
        out_(std::move(out)),
        is_b_(is_b),
        e_(e),
        experts_(experts),
        lo_(lo) {}
  const TensorMeta& follows() const override { return src_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const size_t item = itemsize(*src_.dtype);
    read_part(Where(path_, std::nullopt, out_.fqn), "chunk " + std::to_string(chunk), out_.numel() * item, from, n, dst,
              [&](uint8_t* o) {
                const std::vector<uint8_t> whole = below.read_whole(src_);
                const int64_t rows = out_.shape[0], cols = out_.shape[1];
                if (!is_b_) {
                  std::memcpy(o, whole.data() + static_cast<size_t>(e_ * rows * cols) * item,
                              static_cast<size_t>(rows * cols) * item);
                  return;
                }
                for (int64_t r = 0; r < rows; ++r)
                  for (int64_t k = 0; k < cols; ++k)
                    std::memcpy(
                        o + static_cast<size_t>(r * cols + k) * item,
                        whole.data() + static_cast<size_t>((lo_ + r) * cols * experts_ + k * experts_ + e_) * item,
                        item);
              });
  }
  uint64_t working_bytes(size_t) const override { return (src_.numel() + out_.numel()) * itemsize(*src_.dtype); }

 private:
  std::string path_;
  TensorMeta src_, out_;
  bool is_b_;
  int64_t e_, experts_, lo_;
};

// Rows [lo, lo + rows) of expert e of a merged stack W [E, out, in]: W_e + s·B_e·A_e over those rows.
class ExpertMergedRows final : public DerivedTensor {
 public:
  ExpertMergedRows(std::string path, TensorMeta w, TensorMeta a, TensorMeta b, TensorMeta out, int64_t e, int64_t lo,
                   int64_t experts, float scale)
      : path_(std::move(path)),
        w_(std::move(w)),
        a_(std::move(a)),
        b_(std::move(b)),
        out_(std::move(out)),
        e_(e),
        lo_(lo),
        experts_(experts),
        scale_(scale) {}
  const TensorMeta& follows() const override { return w_; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const DType dt = *w_.dtype;
    const uint64_t numel = out_.numel();
    read_part(Where(path_, std::nullopt, out_.fqn), "chunk " + std::to_string(chunk), numel * itemsize(dt), from, n,
              dst, [&](uint8_t* o) {
                const Box box{{e_, lo_, 0}, {1, out_.shape[0], out_.shape[1]}};
                const std::vector<uint8_t> raw = read_box(below, w_, box);
                std::vector<float> v(numel), a = read_whole_float(below, a_), b = read_whole_float(below, b_);
                cast_elements(dt, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(v.data()), numel);
                add_lora_expert_deltas(v.data(), box, a.data(), a_.shape[1], b.data(), b_.shape[0],
                                       a_.shape[0] / experts_, experts_, scale_, false, lora_delta_dtype(*b_.dtype));
                cast_elements(DType::Float32, dt, reinterpret_cast<const uint8_t*>(v.data()), o, numel);
              });
  }
  // A and B whole (as saved and as float32), one expert's B, the rows as read and as float32, and
  // a chunk of W read whole when the rows are not one run of it.
  uint64_t working_bytes(size_t) const override {
    const uint64_t item = itemsize(*w_.dtype);
    uint64_t most = 0;
    for (size_t c = 0; c < w_.num_chunks(); ++c) most = std::max(most, w_.chunk_numel(c) * item);
    return a_.numel() * (itemsize(*a_.dtype) + 4) + b_.numel() * (itemsize(*b_.dtype) + 4) +
           b_.numel() / static_cast<uint64_t>(experts_) * 4 + out_.numel() * (item + 4) * 2 + most;
  }

 private:
  std::string path_;
  TensorMeta w_, a_, b_, out_;
  int64_t e_, lo_, experts_;
  float scale_;
};

}  // namespace

std::vector<float> read_whole_float(const TensorReads& below, const TensorMeta& t) {
  std::vector<uint8_t> raw = below.read_whole(t);
  std::vector<float> out(t.numel());
  cast_elements(*t.dtype, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(out.data()), out.size());
  return out;
}

std::vector<std::string> expert_projections(const std::string& param) {
  if (param == "gate_up_proj") return {"gate_proj", "up_proj"};
  if (param == "down_proj") return {"down_proj"};
  return {};
}

std::vector<ExpertTensor> expert_adapter(const std::string& path, const std::string& module, const std::string& param,
                                         const TensorMeta& a, const TensorMeta& b, int64_t experts) {
  const std::vector<std::string> projs = expert_projections(param);
  const int64_t rank = a.shape[0] / experts, in = a.shape[1];
  const int64_t rows = b.shape[0] / static_cast<int64_t>(projs.size());
  std::vector<ExpertTensor> out;
  for (int64_t e = 0; e < experts; ++e)
    for (size_t p = 0; p < projs.size(); ++p) {
      const std::string stem = module + "." + std::to_string(e) + "." + projs[p];
      TensorMeta ma = one_chunk(a, e * rank, stem + ".lora_A.weight", {rank, in});
      TensorMeta mb = one_chunk(b, static_cast<int64_t>(p) * rows, stem + ".lora_B.weight", {rows, rank});
      auto fa = std::make_shared<ExpertFactor>(path, a, ma, false, e, experts, 0);
      auto fb = std::make_shared<ExpertFactor>(path, b, mb, true, e, experts, static_cast<int64_t>(p) * rows);
      out.push_back({std::move(ma), std::move(fa)});
      out.push_back({std::move(mb), std::move(fb)});
    }
  return out;
}

std::vector<ExpertTensor> expert_merged(const std::string& path, const std::string& module, const std::string& param,
                                        const TensorMeta& w, const TensorMeta& a, const TensorMeta& b, int64_t experts,
                                        float scale) {
  const std::vector<std::string> projs = expert_projections(param);
  const int64_t rows = w.shape[1] / static_cast<int64_t>(projs.size()), in = w.shape[2];
  std::vector<ExpertTensor> out;
  for (int64_t e = 0; e < experts; ++e)
    for (size_t p = 0; p < projs.size(); ++p) {
      TensorMeta m = one_chunk(w, e, module + "." + std::to_string(e) + "." + projs[p] + ".weight", {rows, in});
      auto t = std::make_shared<ExpertMergedRows>(path, w, a, b, m, e, static_cast<int64_t>(p) * rows, experts, scale);
      out.push_back({std::move(m), std::move(t)});
    }
  return out;
}

}  // namespace dcpctl
