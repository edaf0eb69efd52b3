// A quantized 2-D weight decoded row by row: what the codecs of compressed-tensors, ModelOpt and
// DeepSeek-V4's FP4 experts share (view/codecs/compressed_tensors.cpp, modelopt.cpp,
// deepseek_v4.cpp).
//
// The stored weight `packed` is [N, P] (P bytes or words of a row: packed codes, float8 values,
// int32 words) and decodes to float32 [N, K]; its auxiliary tensors (scales, global scales, zero
// points) are read whole. Each chunk of `packed` that spans whole rows becomes a chunk of the same
// rows of the decoded tensor, computed by the codec's kernel from the chunk's bytes and the
// auxiliaries; a chunk that splits a row's bytes is refused (exit 5), as no writer of these formats
// saves one (an HF folder holds each tensor whole).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "view/codecs/codecs.h"

namespace dcpctl {

// Rows [r0, r0 + rows) of the weight from their stored bytes `packed` (rows x P, as saved) and the
// auxiliaries' bytes (in the order given), as float32 into `out` (rows x K).
using RowKernel = std::function<void(const uint8_t* packed, int64_t r0, int64_t rows,
                                     const std::vector<std::vector<uint8_t>>& aux, float* out)>;

// The decoded tensor `name` (float32 [N, K]) of `packed` with `aux`, computed by `kernel`; its
// DecodedTensor consumes the auxiliaries (they leave the view with the packed weight's scale).
DecodedTensor row_decoded(const Checkpoint& ck, const std::string& name, const TensorMeta& packed,
                          const std::vector<const TensorMeta*>& aux, int64_t cols, RowKernel kernel);

// The same of an expert stack `packed` [E, R, P] decoding to float32 [E, R, cols]: the kernel sees
// its rows flat (expert e's row r is row e * R + r), each chunk of whole experts one chunk.
DecodedTensor stack_decoded(const Checkpoint& ck, const std::string& name, const TensorMeta& packed,
                            const std::vector<const TensorMeta*>& aux, int64_t cols, RowKernel kernel);

// The tensor of `ck` named `name`, or null (an index of the table, built once per table and thread).
const TensorMeta* tensor_named(const Checkpoint& ck, const std::string& name);

// Helpers of the kernels. E2M1 codes (0..15: sign, 2-bit exponent, 1-bit mantissa) as float, the
// code of -0 (8) as -0.0 (`minus_zero`) or +0.0.
float e2m1_value(uint8_t code, bool minus_zero);
// f rounded to bfloat16 (nearest, ties to even; NaN kept) and widened back.
float round_bf16(float f);
// f rounded to `d` (float32: itself; bfloat16; float16) and widened back.
float round_to(float f, DType d);
// Element i of a float tensor's bytes (float32, bfloat16, float16, float8 e4m3fn) as float32.
float float_at(const std::vector<uint8_t>& bytes, DType d, int64_t i);

}  // namespace dcpctl
