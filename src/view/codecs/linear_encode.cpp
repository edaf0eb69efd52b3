#include "view/codecs/linear_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "meta/geometry.h"
#include "util/error.h"
#include "view/kernels.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// Float32 input bytes a written chunk is computed from. 16 MiB, under glibc's largest mmap
// threshold (32 MiB): a chunk's buffer freed is then reused from the heap for the next chunk, where
// one of 32 MiB was a fresh mapping each time, its pages faulted in and zeroed by the kernel (an
// nvfp4 export of Qwen3-1.7B: 3.9 against 1.9 sys-s, wall 0.71x, peak RSS 169 against 356 MiB;
// docs/performance.md, "Quantizing at the copy's speed").
constexpr uint64_t kChunkInput = 16ull << 20;

// The scales a weight's reads computed, by chunk, until the scale's read of that chunk takes them.
class ScaleCache {
 public:
  void put(size_t chunk, std::vector<uint8_t> s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!taken_.count(chunk)) have_.emplace(chunk, std::move(s));
  }
  bool take(size_t chunk, uint8_t* out, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    taken_.insert(chunk);
    auto it = have_.find(chunk);
    if (it == have_.end() || it->second.size() != n) return false;
    std::memcpy(out, it->second.data(), n);
    have_.erase(it);
    return true;
  }

 private:
  std::mutex mu_;
  std::map<size_t, std::vector<uint8_t>> have_;
  std::set<size_t> taken_;
};

// The global scale of a fused group: the largest |x| over its weights, computed once (each member
// read a band of rows at a time), then global_from_amax.
class GlobalScale {
 public:
  GlobalScale(std::vector<TensorMeta> members, float (*from_amax)(float, DType))
      : members_(std::move(members)), from_amax_(from_amax) {}
  float get(const TensorReads& below) {
    std::call_once(once_, [&] {
      float amax = 0;
      for (const TensorMeta& t : members_) {
        const int64_t N = t.shape[0], K = t.shape[1];
        const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(kChunkInput / (4 * static_cast<uint64_t>(K))));
        std::vector<float> x(static_cast<size_t>(std::min(step, N) * K));
        for (int64_t r = 0; r < N; r += step) {
          const int64_t b = std::min(N, r + step);
          read_weight_rows(below, t, r, b, x.data());
          amax = std::max(amax, abs_max(x.data(), static_cast<size_t>((b - r) * K)));  // NaN skipped, as before
        }
      }
      value_ = from_amax_(amax, *members_.front().dtype);
    });
    return value_;
  }
  uint64_t working_bytes() const {
    uint64_t most = 0;
    for (const TensorMeta& t : members_)
      most = std::max(
          most,
          weight_rows_need(
              t, std::max<int64_t>(1, static_cast<int64_t>(kChunkInput / (4 * static_cast<uint64_t>(t.shape[1]))))));
    return most;
  }
  std::vector<const TensorMeta*> inputs() const {
    std::vector<const TensorMeta*> out;
    for (const TensorMeta& t : members_) out.push_back(&t);
    return out;
  }

 private:
  std::vector<TensorMeta> members_;
  float (*from_amax_)(float, DType);
  std::once_flag once_;
  float value_ = 1;
};

// What one weight's written tensors share.
struct Encoded {
  TensorMeta w;  // the weight as the table below has it
  LinearEncoding enc;
  DType model;
  int64_t rows_per_chunk;  // a multiple of enc.band
  std::shared_ptr<ScaleCache> cache = std::make_shared<ScaleCache>();
  std::shared_ptr<GlobalScale> global;  // null: none

  int64_t N() const { return w.shape[0]; }
  int64_t K() const { return w.shape[1]; }
  int64_t chunk_rows(size_t c) const {
    return std::min(N() - static_cast<int64_t>(c) * rows_per_chunk, rows_per_chunk);
  }
  uint64_t weight_bytes(size_t c) const {
    return static_cast<uint64_t>(chunk_rows(c) * K() / enc.per_byte) * itemsize(enc.weight_dtype);
  }
  int64_t bands(size_t c) const { return (chunk_rows(c) + enc.band - 1) / enc.band; }
  uint64_t scale_bytes(size_t c) const {
    return static_cast<uint64_t>(bands(c) * enc.scale_cols(K())) * itemsize(enc.scale_dtype(model));
  }
  // Chunk c's rows encoded: the weight's bytes into `w_out` (null: not kept), its scales into `s_out`.
  void compute(const TensorReads& below, size_t c, uint8_t* w_out, uint8_t* s_out) const {
    const float g = global ? global->get(below) : 1.0f;
    const int64_t r0 = static_cast<int64_t>(c) * rows_per_chunk, n = chunk_rows(c);
    std::unique_ptr<float[]> x(new float[static_cast<size_t>(n * K())]);
    read_weight_rows(below, w, r0, r0 + n, x.get());
    const size_t w_band = static_cast<size_t>(enc.band * K() / enc.per_byte) * itemsize(enc.weight_dtype);
    const size_t s_band = static_cast<size_t>(enc.scale_cols(K())) * itemsize(enc.scale_dtype(model));
    std::vector<uint8_t> scratch(w_out ? 0 : w_band);
    for (int64_t b = 0; b * enc.band < n; ++b) {
      const int64_t rows = std::min(enc.band, n - b * enc.band);
      enc.encode(x.get() + b * enc.band * K(), rows, K(), model, g,
                 w_out ? w_out + static_cast<size_t>(b) * w_band : scratch.data(),
                 s_out + static_cast<size_t>(b) * s_band);
    }
  }
  uint64_t need(size_t c) const {
    return weight_rows_need(w, chunk_rows(c)) + weight_bytes(c) + scale_bytes(c) +
           (global ? global->working_bytes() : 0);
  }
};

// What a weight's encoded bytes and its scales share as derived tensors: the weight they follow,
// what one read of a chunk holds (Encoded::need: the same rows make both), what it reads.
class EncodedPart : public DerivedTensor {
 public:
  EncodedPart(std::shared_ptr<const Encoded> e, std::string name) : e_(std::move(e)), name_(std::move(name)) {}
  const TensorMeta& follows() const override { return e_->w; }
  uint64_t working_bytes(size_t chunk) const override { return e_->need(chunk); }
  std::vector<const TensorMeta*> inputs() const override {
    std::vector<const TensorMeta*> in{&e_->w};
    if (e_->global)
      for (const TensorMeta* t : e_->global->inputs()) in.push_back(t);
    return in;
  }

 protected:
  std::shared_ptr<const Encoded> e_;
  std::string name_;
};

class EncodedWeight final : public EncodedPart {
 public:
  using EncodedPart::EncodedPart;
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    read_part(Where("", std::nullopt, name_), "chunk " + std::to_string(chunk), e_->weight_bytes(chunk), from, n, dst,
              [&](uint8_t* out) {
                std::vector<uint8_t> s(e_->scale_bytes(chunk));
                e_->compute(below, chunk, out, s.data());
                e_->cache->put(chunk, std::move(s));
              });
  }
};

class EncodedScale final : public EncodedPart {
 public:
  using EncodedPart::EncodedPart;
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const uint64_t bytes = e_->scale_bytes(chunk);
    read_part(Where("", std::nullopt, name_), "chunk " + std::to_string(chunk), bytes, from, n, dst, [&](uint8_t* out) {
      if (!e_->cache->take(chunk, out, bytes)) e_->compute(below, chunk, nullptr, out);
    });
  }
};

class EncodedGlobal final : public DerivedTensor {
 public:
  explicit EncodedGlobal(std::shared_ptr<const Encoded> e, std::string name)
      : e_(std::move(e)), name_(std::move(name)) {}
  const TensorMeta& follows() const override { return e_->w; }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    read_part(Where("", std::nullopt, name_), "chunk " + std::to_string(chunk), 4, from, n, dst, [&](uint8_t* out) {
      const float g = e_->global->get(below);
      std::memcpy(out, &g, 4);
    });
  }
  uint64_t working_bytes(size_t) const override { return e_->global->working_bytes(); }
  std::vector<const TensorMeta*> inputs() const override { return e_->global->inputs(); }

 private:
  std::shared_ptr<const Encoded> e_;
  std::string name_;
};

// The weight's shape, {N, K} as int64 (compressed-tensors' weight_shape).
class EncodedShape final : public DerivedTensor {
 public:
  EncodedShape(TensorMeta w, std::string name) : w_(std::move(w)), name_(std::move(name)) {}
  const TensorMeta& follows() const override { return w_; }
  void read(const TensorReads&, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    read_part(Where("", std::nullopt, name_), "chunk " + std::to_string(chunk), 16, from, n, dst, [&](uint8_t* out) {
      const int64_t dims[2] = {w_.shape[0], w_.shape[1]};
      std::memcpy(out, dims, 16);
    });
  }
  uint64_t working_bytes(size_t) const override { return 16; }
  std::vector<const TensorMeta*> inputs() const override { return {}; }

 private:
  TensorMeta w_;
  std::string name_;
};

// The storage of the chunk of `t` that holds row r (a derived chunk's reads never touch it; the
// planner and the deal ask where it lies).
StorageRef row_storage(const TensorMeta& t, int64_t r) {
  for (size_t c = 0; c < t.num_chunks(); ++c)
    if (r >= t.chunk_offsets(c)[0] && r < t.chunk_offsets(c)[0] + t.chunk_sizes(c)[0]) return t.storage[c];
  return t.storage.at(0);
}

// A written tensor of `rows` x `cols` in chunks of `per_chunk` rows (the weight's chunks of
// `w_per_chunk` rows, whose storage each takes).
TensorMeta written_meta(const TensorMeta& w, const std::string& name, DType dtype, int64_t rows, int64_t cols,
                        int64_t per_chunk, int64_t w_per_chunk) {
  TensorMeta m;
  m.fqn = name;
  m.dtype = dtype;
  m.dtype_name = torch_name(dtype);
  m.shape = {rows, cols};
  for (int64_t r = 0, c = 0; r < rows; r += per_chunk, ++c) {
    m.chunk_dims.insert(m.chunk_dims.end(), {r, 0, std::min(per_chunk, rows - r), cols});
    m.storage.push_back(row_storage(w, c * w_per_chunk));
  }
  if (rows == 0) {
    m.chunk_dims = {0, 0, 0, cols};
    m.storage.push_back(w.storage.at(0));
  }
  return m;
}

// encode_linears's steps: the Linear weights chosen (the others kept, each with its reason), each
// replaced by its codec's tensors in place, the order and planner paths following.
class LinearEncoder {
 public:
  LinearEncoder(const Checkpoint& ck, const QuantizeRequest& rq, const LinearEncoding& enc)
      : ck_(ck),
        rq_(rq),
        enc_(enc),
        codec_(*enc.codec),
        md_(ck.md),
        by_name_(tensor_names(md_)),
        view_(ck),
        table_(table_over(ck.derived)),
        written_(md_.tensors.size()) {}

  Checkpoint run() && {
    choose();
    make_globals();
    size_t next = 0;
    for (uint32_t i = 0; i < md_.tensors.size(); ++i) {
      if (next < chosen_.size() && chosen_[next] == i) {
        ++next;
        encode(i);
      } else {
        written_[i].push_back(static_cast<uint32_t>(out_.size()));
        out_.push_back(md_.tensors[i]);
      }
    }
    std::vector<std::pair<bool, uint32_t>> order;
    for (const auto& [tensor, idx] : md_.order) {
      if (!tensor) {
        order.push_back({false, idx});
        continue;
      }
      for (uint32_t j : written_[idx]) order.push_back({true, j});
    }
    view_.md.tensors = std::move(out_);
    view_.md.order = std::move(order);
    // A tied head: compressed-tensors would target transformers' lm_head Linear, so it is ignored.
    list_tied_head(rq_.config, by_name_.count("lm_head.weight") != 0, ignore_);
    const int64_t block[2] = {enc_.band, enc_.block_cols};
    json config = codec_.written_config(codec_.written_row(), block, ignore_);
    if (codec_.written_files) table_->output.quantization_files = codec_.written_files(config);
    return quantized_result(std::move(view_), std::move(table_), rq_.scheme, block, quantized_, std::move(kept_),
                            std::move(config), std::move(keep_dtype_), codec_.quant_method);
  }

 private:
  void keep(const TensorMeta& t, const std::string& module, const std::string& why) {
    kept_.push_back({{"key", t.fqn}, {"reason", why}});
    if (std::find(ignore_.begin(), ignore_.end(), module) == ignore_.end()) ignore_.push_back(module);
  }

  // The weights to encode: 2-D floating Linear weights whose rows hold whole groups.
  void choose() {
    for (uint32_t i = 0; i < md_.tensors.size(); ++i) {
      const TensorMeta& t = md_.tensors[i];
      const bool weight = ends_with_longer(t.fqn, ".weight");
      if (!t.dtype || !(weight || t.ndim() == 3)) continue;
      const std::string module = t.fqn.substr(0, t.fqn.rfind('.'));
      const bool scaled = by_name_.count(t.fqn + "_scale") || by_name_.count(t.fqn + "_scale_inv") ||
                          by_name_.count(module + ".weight_scale") || by_name_.count(module + ".weight_scale_inv");
      if (scaled || (info(*t.dtype).floating && itemsize(*t.dtype) == 1))
        throw UnsupportedError(Where(ck_.metadata_path, std::nullopt, t.fqn),
                               "--quantize on a weight that is already quantized (" + t.dtype_name +
                                   "): give --dtype to dequantize the checkpoint first, or export it as it is");
      if (!info(*t.dtype).floating) continue;
      if (t.ndim() == 3) {
        keep(t, module,
             std::string("a 3-D stack (") + codec_.display +
                 " is written for each expert's Linear weight: --map writes Hugging "
                 "Face's per-expert keys)");
        continue;
      }
      if (!weight || t.ndim() != 2) continue;
      if (std::string why = fp8_kept_reason(t.fqn, rq_); !why.empty()) {
        keep(t, module, why);
        continue;
      }
      if (t.shape[1] % enc_.group != 0) {
        keep(t, module,
             "its " + std::to_string(t.shape[1]) + " input columns are not a multiple of " + codec_.display +
                 "'s group of " + std::to_string(enc_.group));
        continue;
      }
      chosen_.push_back(i);
    }
  }

  // The global scales of the chosen weights' fused groups.
  void make_globals() {
    if (!enc_.global_from_amax) return;
    std::map<std::string, std::vector<TensorMeta>> groups;
    for (uint32_t i : chosen_) groups[fused_group(md_.tensors[i].fqn)].push_back(md_.tensors[i]);
    for (auto& [key, members] : groups)
      globals_[key] = std::make_shared<GlobalScale>(std::move(members), enc_.global_from_amax);
  }

  // One tensor the output holds in source tensor `i`'s place, read through `derived`.
  void add(uint32_t i, TensorMeta meta, std::shared_ptr<DerivedTensor> derived, std::vector<std::string>& names) {
    written_[i].push_back(static_cast<uint32_t>(out_.size()));
    table_->tensors[meta.fqn] = {std::move(derived), ck_.derived};
    keep_dtype_.push_back(meta.fqn);
    names.push_back(meta.fqn);
    out_.push_back(std::move(meta));
  }

  // Weight `i` as its codec's tensors: the codes, the scales, a global scale and a shape where the
  // format has them.
  void encode(uint32_t i) {
    const TensorMeta& t = md_.tensors[i];
    const std::string module = t.fqn.substr(0, t.fqn.size() - 7);
    auto e = std::make_shared<Encoded>();
    e->w = t;
    e->enc = enc_;
    e->model = *t.dtype;
    const int64_t N = t.shape[0], K = t.shape[1];
    const int64_t bands =
        std::max<int64_t>(1, static_cast<int64_t>(kChunkInput / (4 * static_cast<uint64_t>(std::max<int64_t>(K, 1)) *
                                                                 static_cast<uint64_t>(enc_.band))));
    e->rows_per_chunk = bands * enc_.band;
    if (enc_.global_from_amax) e->global = globals_.at(fused_group(t.fqn));
    const std::string wname = module + "." + enc_.weight_name, sname = module + "." + enc_.scale_name;
    std::vector<std::string> names;
    add(i, written_meta(t, wname, enc_.weight_dtype, N, K / enc_.per_byte, e->rows_per_chunk, e->rows_per_chunk),
        std::make_shared<EncodedWeight>(e, wname), names);
    add(i,
        written_meta(t, sname, enc_.scale_dtype(*t.dtype), (N + enc_.band - 1) / enc_.band, enc_.scale_cols(K),
                     e->rows_per_chunk / enc_.band, e->rows_per_chunk),
        std::make_shared<EncodedScale>(e, sname), names);
    if (*enc_.global_name) {
      const std::string gname = module + "." + enc_.global_name;
      TensorMeta g = written_meta(t, gname, DType::Float32, 1, 1, 1, 1);
      g.shape = enc_.global_scalar ? std::vector<int64_t>{} : std::vector<int64_t>{1};
      g.chunk_dims = enc_.global_scalar ? std::vector<int64_t>{} : std::vector<int64_t>{0, 1};
      add(i, std::move(g), std::make_shared<EncodedGlobal>(e, gname), names);
    }
    if (*enc_.shape_name) {
      const std::string shname = module + "." + enc_.shape_name;
      TensorMeta sh = written_meta(t, shname, DType::Int64, 1, 2, 1, 1);
      sh.shape = {2};
      sh.chunk_dims = {0, 2};
      add(i, std::move(sh), std::make_shared<EncodedShape>(t, shname), names);
    }
    rename_planner_path(t, names);
    ++quantized_;
  }

  // The weight's planner path (its state_dict nesting) given to each tensor written for it.
  void rename_planner_path(const TensorMeta& t, const std::vector<std::string>& names) {
    if (!md_.has_planner_data) return;
    auto p = md_.planner_data.find(t.fqn);
    if (p == md_.planner_data.end()) return;
    view_.md.planner_data.erase(t.fqn);
    for (const std::string& n : names) {
      std::vector<PathElem> path = p->second;
      if (!path.empty() && !path.back().is_index) path.back().key = n.substr(n.rfind('.') + 1);
      view_.md.planner_data[n] = path;
    }
  }

  const Checkpoint& ck_;
  const QuantizeRequest& rq_;
  const LinearEncoding& enc_;
  const Codec& codec_;
  const Metadata& md_;
  const NameIndex by_name_;
  Checkpoint view_;
  std::shared_ptr<DerivedTable> table_;
  json kept_ = json::array(), ignore_ = json::array();
  std::vector<std::string> keep_dtype_;
  std::vector<TensorMeta> out_;
  std::vector<std::vector<uint32_t>> written_;  // tensor -> its output indices
  std::vector<uint32_t> chosen_;
  std::map<std::string, std::shared_ptr<GlobalScale>> globals_;
  size_t quantized_ = 0;
};

}  // namespace

Checkpoint encode_linears(const Checkpoint& ck, const QuantizeRequest& rq, const LinearEncoding& enc) {
  return LinearEncoder(ck, rq, enc).run();
}

}  // namespace dcpctl
