#include "gguf/rows.h"

#include <cstring>
#include <stdexcept>

#include "util/numeric.h"

namespace dcpctl::gguf {

int64_t rows_unit(const TensorPlan& p, const std::vector<int64_t>& in) {
  if (in.empty()) return 1;
  if (p.permute_heads > 0) return in[0] / p.permute_heads;
  if (p.kv_b) return p.kv_b_nope + p.kv_b_v;
  if (p.qkv_groups) return in[0];  // Falcon's regrouping moves rows across the whole tensor
  return 1;                        // a row, an element, or an expert (gate_up, transpose, MXFP4: experts are dim 0)
}

bool moves_rows(const TensorPlan& p) {
  return p.permute_heads > 0 || p.kv_b || p.gate_up || p.transpose || p.qkv_groups;
}

std::vector<float> convert_rows(const TensorPlan& p, std::vector<float> x, const std::vector<int64_t>& in,
                                int64_t rows) {
  if (p.shift != 0)
    for (float& v : x) v += p.shift;
  if (!moves_rows(p)) return x;
  std::vector<int64_t> window = in;
  if (!window.empty()) window[0] = rows;
  if (p.permute_heads > 0) {
    // Whole heads: the window's rows / (rows per head) of them, permuted as the tensor's are.
    const int64_t per_head = rows_unit(p, in), cols = rows ? static_cast<int64_t>(x.size()) / rows : 0;
    if (per_head <= 0 || rows % per_head != 0)
      throw std::logic_error("gguf: a window of q/k rows that is not whole heads");
    std::vector<uint8_t> moved =
        permute_rows(reinterpret_cast<const uint8_t*>(x.data()), rows, cols, 4, rows / per_head);
    std::memcpy(x.data(), moved.data(), moved.size());
    return x;
  }
  if (p.qkv_groups) {
    if (in.size() != 2 || rows != in[0])
      throw std::logic_error("gguf: a window of Falcon's query_key_value that is not the whole tensor");
    return falcon_qkv_part(p, x.data(), rows, in[1]);
  }
  if (p.kv_b) {
    const int64_t per = rows_unit(p, in);
    if (rows % per != 0 || in.size() != 2)
      throw std::logic_error("gguf: a window of kv_b_proj that is not whole heads");
    TensorPlan heads = p;
    heads.kv_b_heads = rows / per;
    return kv_b_part(heads, x.data(), in[1]);
  }
  return fused_part(p, x.data(), window);  // whole experts
}

void round_to_half(std::vector<float>& x) {
  std::vector<uint8_t> half(x.size() * 2);
  cast_elements(DType::Float32, DType::Float16, reinterpret_cast<const uint8_t*>(x.data()), half.data(), x.size());
  cast_elements(DType::Float16, DType::Float32, half.data(), reinterpret_cast<uint8_t*>(x.data()), x.size());
}

std::vector<uint8_t> mxfp4_rows(const TensorPlan& p, const uint8_t* blocks, const uint8_t* scales,
                                const std::vector<int64_t>& blocks_shape, int64_t experts) {
  std::vector<int64_t> window = blocks_shape;
  if (!window.empty()) window[0] = experts;
  return mxfp4_repack(p, blocks, scales, window);
}

}  // namespace dcpctl::gguf
