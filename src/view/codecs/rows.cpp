#include "view/codecs/rows.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "meta/geometry.h"
#include "util/error.h"
#include "util/numeric.h"

namespace dcpctl {

namespace {

class RowDecoded final : public DerivedTensor {
 public:
  // `per_row`: the rows of the decoded tensor one index of `packed`'s first dimension holds (a
  // stack's [E, R, P]: R; a 2-D weight: 1).
  RowDecoded(std::string path, TensorMeta packed, std::vector<TensorMeta> aux, int64_t cols, int64_t per_row,
             RowKernel kernel)
      : path_(std::move(path)),
        p_(std::move(packed)),
        aux_(std::move(aux)),
        cols_(cols),
        per_row_(per_row),
        kernel_(std::move(kernel)) {}
  const TensorMeta& follows() const override { return p_; }
  std::vector<const TensorMeta*> inputs() const override {
    std::vector<const TensorMeta*> in{&p_};
    for (const TensorMeta& a : aux_) in.push_back(&a);
    return in;
  }
  void read(const TensorReads& below, size_t chunk, uint64_t from, uint64_t n, void* dst) const override {
    const int64_t r0 = p_.chunk_offsets(chunk)[0] * per_row_, rows = p_.chunk_sizes(chunk)[0] * per_row_;
    read_computed(path_, p_, chunk, static_cast<uint64_t>(rows * cols_), from, n, dst, [&](float* out) {
      std::vector<uint8_t> packed(p_.chunk_numel(chunk) * itemsize(*p_.dtype));
      below.read(p_, chunk, 0, packed.size(), packed.data());
      std::vector<std::vector<uint8_t>> aux;
      for (const TensorMeta& a : aux_) aux.push_back(below.read_whole(a));
      kernel_(packed.data(), r0, rows, aux, out);
    });
  }
  // The stored chunk, the auxiliaries read whole, the chunk's float32 values.
  uint64_t working_bytes(size_t chunk) const override {
    uint64_t need = p_.chunk_numel(chunk) * itemsize(*p_.dtype) +
                    static_cast<uint64_t>(p_.chunk_sizes(chunk)[0] * per_row_ * cols_) * 4;
    for (const TensorMeta& a : aux_) need += whole_read_bytes(a);
    return need;
  }

 private:
  std::string path_;
  TensorMeta p_;
  std::vector<TensorMeta> aux_;
  int64_t cols_;
  int64_t per_row_;
  RowKernel kernel_;
};

// The decoded tensor of `packed` (2-D [N, P] or a stack [E, R, P]) as float32 [..., cols]: each
// chunk of whole rows (of a stack: of whole matrices) one chunk of the same rows.
DecodedTensor decoded_rows(const Checkpoint& ck, const std::string& name, const TensorMeta& packed,
                           const std::vector<const TensorMeta*>& aux, int64_t cols, RowKernel kernel) {
  const size_t nd = packed.ndim();
  TensorMeta v = packed;
  v.fqn = name;
  v.dtype = DType::Float32;
  v.dtype_name = torch_name(DType::Float32);
  v.shape.back() = cols;
  v.chunk_dims.clear();
  for (size_t c = 0; c < packed.num_chunks(); ++c) {
    const int64_t *off = packed.chunk_offsets(c), *size = packed.chunk_sizes(c);
    for (size_t d = 1; d < nd; ++d)
      if (off[d] != 0 || size[d] != packed.shape[d])
        throw UnsupportedError(Where(ck.metadata_path, std::nullopt, packed.fqn),
                               std::string("a quantized weight saved in chunks that split its ") +
                                   (nd == 2 ? "rows" : "matrices") + " (chunk " + std::to_string(c) +
                                   "): dcpctl decodes whole " + (nd == 2 ? "rows" : "matrices") + " of this format");
    std::vector<int64_t> o(nd, 0), s(v.shape);
    o[0] = off[0], s[0] = size[0];
    v.chunk_dims.insert(v.chunk_dims.end(), o.begin(), o.end());
    v.chunk_dims.insert(v.chunk_dims.end(), s.begin(), s.end());
  }
  std::vector<TensorMeta> aux_meta;
  DecodedTensor out;
  for (const TensorMeta* a : aux) {
    aux_meta.push_back(*a);
    out.consumed.push_back(a->fqn);
  }
  out.meta = v;
  const int64_t per_row = nd == 3 ? packed.shape[1] : 1;
  out.tensor =
      std::make_shared<RowDecoded>(ck.metadata_path, packed, std::move(aux_meta), cols, per_row, std::move(kernel));
  return out;
}

}  // namespace

DecodedTensor row_decoded(const Checkpoint& ck, const std::string& name, const TensorMeta& packed,
                          const std::vector<const TensorMeta*>& aux, int64_t cols, RowKernel kernel) {
  if (packed.ndim() != 2 || !packed.dtype)
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, packed.fqn),
                           "a quantized weight of shape " + dims_text(packed.shape) +
                               ": dcpctl decodes 2-D Linear weights of this format");
  return decoded_rows(ck, name, packed, aux, cols, std::move(kernel));
}

DecodedTensor stack_decoded(const Checkpoint& ck, const std::string& name, const TensorMeta& packed,
                            const std::vector<const TensorMeta*>& aux, int64_t cols, RowKernel kernel) {
  if (packed.ndim() != 3 || !packed.dtype)
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, packed.fqn),
                           "a quantized expert stack of shape " + dims_text(packed.shape) +
                               ": dcpctl decodes 3-D stacks [experts, rows, columns] of this format");
  return decoded_rows(ck, name, packed, aux, cols, std::move(kernel));
}

const TensorMeta* tensor_named(const Checkpoint& ck, const std::string& name) {
  // The decoders ask a few names per weight of one table in turn: its index (owning its names) is
  // built once per table and thread; a table at the same place with other names is indexed anew.
  const std::vector<TensorMeta>& ts = ck.md.tensors;
  thread_local const std::vector<TensorMeta>* indexed = nullptr;
  thread_local std::unordered_map<std::string, uint32_t> by_name;
  auto fresh = [&] {
    if (indexed != &ts || by_name.size() > ts.size() || ts.empty()) return false;
    auto f = by_name.find(ts.front().fqn), b = by_name.find(ts.back().fqn);
    return f != by_name.end() && f->second == 0 && b != by_name.end() && b->second == ts.size() - 1;
  };
  if (!fresh()) {
    by_name.clear();
    for (uint32_t i = 0; i < ts.size(); ++i) by_name.emplace(ts[i].fqn, i);
    indexed = &ts;
  }
  auto it = by_name.find(name);
  return it == by_name.end() || it->second >= ts.size() || ts[it->second].fqn != name ? nullptr : &ts[it->second];
}

float e2m1_value(uint8_t code, bool minus_zero) {
  static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = mag[code & 7];
  if (!(code & 8)) return m;
  return m == 0.0f && !minus_zero ? 0.0f : -m;
}

float round_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

float round_to(float f, DType d) {
  if (d == DType::BFloat16) return round_bf16(f);
  if (d == DType::Float16) return f16_to_f32(f32_to_f16(f));
  return f;
}

float float_at(const std::vector<uint8_t>& bytes, DType d, int64_t i) {
  const uint8_t* p = bytes.data();
  switch (d) {
    case DType::Float32: {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      return f;
    }
    case DType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return bf16_to_f32(h);
    }
    case DType::Float16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return f16_to_f32(h);
    }
    case DType::Float8_E4M3FN: return e4m3fn_to_f32(p[i]);
    default: throw std::logic_error("float_at: not a float dtype");
  }
}

}  // namespace dcpctl
