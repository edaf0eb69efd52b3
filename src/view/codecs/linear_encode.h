// The encoders of the codecs that quantize every Linear weight row by row (compressed-tensors'
// and ModelOpt's forms: view/codecs/ct_*.cpp): what picks the weights, names the tensors written
// and computes them, shared; each codec gives its kernel and names (a LinearEncoding).
//
// Each 2-D floating `X.weight` [N, K] that the carve-outs of view/codecs/quantize.h leave (and whose K is
// a multiple of the codec's group) becomes `X.<weight_name>` [N, K / per_byte] of the codec's dtype
// beside `X.<scale_name>` [ceil(N / band), scale_cols(K)] (and, for a codec with a global scale,
// `X.<global_name>` float32 [1] or [], one value shared by the weight's fused group: q/k/v, gate/up,
// w1/w3; for compressed-tensors' pack-quantized, `X.<shape_name>` int64 [2]). Every other tensor is written as it is;
// the 2-D weights kept and 3-D expert stacks (no such codec has a stacked form) are listed with their reason, their
// modules in the config's `ignore`. A weight already quantized (float8, or beside a scale) is refused (exit 5).
//
// The written tensors come in chunks of whole bands of rows (about 32 MiB of float32 input each):
// a chunk of the weight reads its rows once (as float32, from the table below), encodes them and
// leaves their scales for the scale's read of the same rows, which reads the rows itself only when
// the weight's read has not run (nothing waits). Memory: a chunk's rows in float32, never the
// checkpoint; a global scale reads its group's weights once, a band at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "view/codecs/codecs.h"
#include "view/kernels.h"

namespace dcpctl {

struct LinearEncoding {
  const Codec* codec = nullptr;
  int64_t band = 1;        // rows that share a row of scales (a block's rows; 1: per row)
  int64_t group = 1;       // K is a multiple of it, else the weight is kept (an MX or NVFP4 group)
  int64_t per_byte = 1;    // values a stored element holds (2: E2M1 pairs)
  int64_t block_cols = 0;  // the columns a scale covers, for --json's block (0: a whole row)
  const char* weight_name = "weight";
  DType weight_dtype = DType::Float8_E4M3FN;
  const char* scale_name = "weight_scale";
  // The scale's dtype for a weight of dtype `model`.
  DType (*scale_dtype)(DType model) = nullptr;
  // The scale's columns for a weight of K columns.
  std::function<int64_t(int64_t K)> scale_cols;
  // `rows` (at most band) rows of K values of dtype `model` (as float32, `x` row-major) encoded:
  // their stored elements into `w` (rows * K / per_byte) and their row of scales into `s`
  // (scale_cols(K) elements of scale_dtype(model)); `global`: the weight's global scale (1 where the
  // codec has none).
  // (std::function: an encoder whose group is the user's, --quantize-group, binds it.)
  std::function<void(const float* x, int64_t rows, int64_t K, DType model, float global, uint8_t* w, uint8_t* s)>
      encode;
  // A codec with a global scale: its name (X.<global_name>, float32 [1]) and its value from the
  // largest |x| of the weight's fused group (weights of dtype `model`).
  const char* global_name = "";
  float (*global_from_amax)(float amax, DType model) = nullptr;
  // The global scale's shape: false [1] (compressed-tensors), true [] (ModelOpt's scalar).
  bool global_scalar = false;
  // A codec that records the weight's shape beside it: its name (X.<shape_name>, int64 [2] = {N, K},
  // compressed-tensors' weight_shape); "": none.
  const char* shape_name = "";
};

// The rows of a group-scaled encoder (nvfp4 in both forms, mxfp8, mxfp4), the part they share: per
// row of x [rows, K], the groups' amax (view/kernels.h's group_abs_max), each group's scale byte
// s[r * G + g] = scale_of(amax, divisor) with the divisor its values take, the quotients x / divisor
// (divide_by_groups), then codes(q, r) writes row r's codes from the K quotients.
template <class ScaleOf, class Codes>
void encode_groups(const float* x, int64_t rows, int64_t K, int64_t group, uint8_t* s, ScaleOf scale_of, Codes codes) {
  const int64_t G = K / group;
  thread_local std::vector<float> q, amax, divisor;
  q.resize(static_cast<size_t>(K));
  amax.resize(static_cast<size_t>(G));
  divisor.resize(static_cast<size_t>(G));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * K;
    group_abs_max(row, K, group, amax.data());
    for (int64_t g = 0; g < G; ++g)
      s[r * G + g] = scale_of(amax[static_cast<size_t>(g)], divisor[static_cast<size_t>(g)]);
    divide_by_groups(row, K, group, divisor.data(), q.data());
    codes(q, r);
  }
}

// --quantize with a LinearEncoding's codec: the checkpoint with its Linear weights encoded.
Checkpoint encode_linears(const Checkpoint& ck, const QuantizeRequest& rq, const LinearEncoding& enc);

// An OCP MX layout (view/codecs/ct_mx.cpp), without its codec and kernel: groups of 32 values, a
// uint8 E8M0 weight_scale [N, K / 32] beside X.weight e4m3 [N, K] (MXFP8) or X.weight_packed uint8
// [N, K / 2] (MXFP4, E2M1 pairs). compressed-tensors' and ModelOpt's MXFP8 differ only in the
// exponent rule of their kernels.
LinearEncoding mx_layout(bool fp4);

// Helpers of the kernels: torch.finfo(d).eps (compressed-tensors' scale for an all-zero group), and
// v stored as one element of `d` (float32, bfloat16, float16, float8) at `out`.
float dtype_eps(DType d);
void store_scalar(float v, DType d, uint8_t* out);

}  // namespace dcpctl
