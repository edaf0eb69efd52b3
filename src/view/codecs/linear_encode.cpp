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

constexpr uint64_t kChunkInput = 32ull << 20;  // float32 input bytes a written chunk is computed from

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
    for (const TensorMeta& t : members_) most = std::max(most, weight_rows_need(t, std::max<int64_t>(1, static_cast<int64_t>(kChunkInput / (4 * static_cast<uint64_t>(t.shape[1]))))));
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
                 w_out ? w_out + static_cast<size_t>(b) * w_band : scratch.data(), s_out + static_cast<size_t>(b) * s_band);
    }
  }
  uint64_t need(size_t c) const {
    return weight_rows_need(w, chunk_rows(c)) + weight_bytes(c) + scale_bytes(c) + (global ? global->working_bytes() : 0);
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
  explicit EncodedGlobal(std::shared_ptr<const Encoded> e, std::string name) : e_(std::move(e)), name_(std::move(name)) {}
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

}  // namespace

Checkpoint encode_linears(const Checkpoint& ck, const QuantizeRequest& rq, const LinearEncoding& enc) {
  const Codec& codec = *enc.codec;
  const Metadata& md = ck.md;
  const NameIndex by_name = tensor_names(md);
  Checkpoint view = ck;
  std::shared_ptr<DerivedTable> table = table_over(ck.derived);
  json kept = json::array(), ignore = json::array();
  std::vector<std::string> keep_dtype;
  std::vector<TensorMeta> out;
  std::vector<std::pair<bool, uint32_t>> order;
  std::vector<std::vector<uint32_t>> written(md.tensors.size());  // tensor -> its output indices
  size_t quantized = 0;
  auto keep = [&](const TensorMeta& t, const std::string& module, const std::string& why) {
    kept.push_back({{"key", t.fqn}, {"reason", why}});
    if (std::find(ignore.begin(), ignore.end(), module) == ignore.end()) ignore.push_back(module);
  };
  // The weights to encode, then the global scales of their fused groups.
  std::vector<uint32_t> chosen;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& t = md.tensors[i];
    const bool weight = ends_with_longer(t.fqn, ".weight");
    if (!t.dtype || !(weight || t.ndim() == 3)) continue;
    const std::string module = t.fqn.substr(0, t.fqn.rfind('.'));
    const bool scaled = by_name.count(t.fqn + "_scale") || by_name.count(t.fqn + "_scale_inv") ||
                        by_name.count(module + ".weight_scale") || by_name.count(module + ".weight_scale_inv");
    if (scaled || (info(*t.dtype).floating && itemsize(*t.dtype) == 1))
      throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t.fqn),
                             "--quantize on a weight that is already quantized (" + t.dtype_name +
                                 "): give --dtype to dequantize the checkpoint first, or export it as it is");
    if (!info(*t.dtype).floating) continue;
    if (t.ndim() == 3) {
      keep(t, module,
           std::string("a 3-D stack (") + codec.display + " is written for each expert's Linear weight: --map writes Hugging "
           "Face's per-expert keys)");
      continue;
    }
    if (!weight || t.ndim() != 2) continue;
    if (std::string why = fp8_kept_reason(t.fqn, rq); !why.empty()) {
      keep(t, module, why);
      continue;
    }
    if (t.shape[1] % enc.group != 0) {
      keep(t, module, "its " + std::to_string(t.shape[1]) + " input columns are not a multiple of " + codec.display +
                          "'s group of " + std::to_string(enc.group));
      continue;
    }
    chosen.push_back(i);
  }
  std::map<std::string, std::shared_ptr<GlobalScale>> globals;
  if (enc.global_from_amax) {
    std::map<std::string, std::vector<TensorMeta>> groups;
    for (uint32_t i : chosen) groups[fused_group(md.tensors[i].fqn)].push_back(md.tensors[i]);
    for (auto& [key, members] : groups) globals[key] = std::make_shared<GlobalScale>(std::move(members), enc.global_from_amax);
  }
  size_t next = 0;
  for (uint32_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& t = md.tensors[i];
    if (next >= chosen.size() || chosen[next] != i) {
      written[i].push_back(static_cast<uint32_t>(out.size()));
      out.push_back(t);
      continue;
    }
    ++next;
    const std::string module = t.fqn.substr(0, t.fqn.size() - 7);
    auto e = std::make_shared<Encoded>();
    e->w = t;
    e->enc = enc;
    e->model = *t.dtype;
    const int64_t N = t.shape[0], K = t.shape[1];
    const int64_t bands = std::max<int64_t>(1, static_cast<int64_t>(kChunkInput / (4 * static_cast<uint64_t>(std::max<int64_t>(K, 1)) *
                                                                                    static_cast<uint64_t>(enc.band))));
    e->rows_per_chunk = bands * enc.band;
    if (enc.global_from_amax) e->global = globals.at(fused_group(t.fqn));
    const std::string wname = module + "." + enc.weight_name, sname = module + "." + enc.scale_name;
    const DType sdt = enc.scale_dtype(*t.dtype);
    written[i].push_back(static_cast<uint32_t>(out.size()));
    out.push_back(written_meta(t, wname, enc.weight_dtype, N, K / enc.per_byte, e->rows_per_chunk, e->rows_per_chunk));
    table->tensors[wname] = {std::make_shared<EncodedWeight>(e, wname), ck.derived};
    written[i].push_back(static_cast<uint32_t>(out.size()));
    out.push_back(written_meta(t, sname, sdt, (N + enc.band - 1) / enc.band, enc.scale_cols(K),
                               e->rows_per_chunk / enc.band, e->rows_per_chunk));
    table->tensors[sname] = {std::make_shared<EncodedScale>(e, sname), ck.derived};
    keep_dtype.push_back(wname);
    keep_dtype.push_back(sname);
    std::vector<std::string> names{wname, sname};
    if (*enc.global_name) {
      const std::string gname = module + "." + enc.global_name;
      written[i].push_back(static_cast<uint32_t>(out.size()));
      out.push_back(written_meta(t, gname, DType::Float32, 1, 1, 1, 1));
      out.back().shape = enc.global_scalar ? std::vector<int64_t>{} : std::vector<int64_t>{1};
      out.back().chunk_dims = enc.global_scalar ? std::vector<int64_t>{} : std::vector<int64_t>{0, 1};
      table->tensors[gname] = {std::make_shared<EncodedGlobal>(e, gname), ck.derived};
      keep_dtype.push_back(gname);
      names.push_back(gname);
    }
    if (*enc.shape_name) {
      const std::string shname = module + "." + enc.shape_name;
      written[i].push_back(static_cast<uint32_t>(out.size()));
      out.push_back(written_meta(t, shname, DType::Int64, 1, 2, 1, 1));
      out.back().shape = {2};
      out.back().chunk_dims = {0, 2};
      table->tensors[shname] = {std::make_shared<EncodedShape>(t, shname), ck.derived};
      keep_dtype.push_back(shname);
      names.push_back(shname);
    }
    if (md.has_planner_data)
      if (auto p = md.planner_data.find(t.fqn); p != md.planner_data.end()) {
        view.md.planner_data.erase(t.fqn);
        for (const std::string& n : names) {
          std::vector<PathElem> path = p->second;
          if (!path.empty() && !path.back().is_index) path.back().key = n.substr(n.rfind('.') + 1);
          view.md.planner_data[n] = path;
        }
      }
    ++quantized;
  }
  for (const auto& [tensor, idx] : md.order) {
    if (!tensor) {
      order.push_back({false, idx});
      continue;
    }
    for (uint32_t j : written[idx]) order.push_back({true, j});
  }
  view.md.tensors = std::move(out);
  view.md.order = std::move(order);
  // A tied head: compressed-tensors would target transformers' lm_head Linear, so it is ignored.
  list_tied_head(rq.config, by_name.count("lm_head.weight") != 0, ignore);
  const int64_t block[2] = {enc.band, enc.block_cols};
  json config = codec.written_config(codec.written_row(), block, ignore);
  if (codec.written_files) table->output.quantization_files = codec.written_files(config);
  return quantized_result(std::move(view), std::move(table), rq.scheme, block, quantized, std::move(kept),
                          std::move(config), std::move(keep_dtype), codec.quant_method);
}

}  // namespace dcpctl
