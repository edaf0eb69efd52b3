// A GGUF tensor converted in windows of its inputs' rows (issue 82 item 3), so that what a
// conversion holds is a window, not the tensor: Qwen3-1.7B's 151,936 x 2,048 embedding at q8_0
// needed 2.2 GB whole, more than the default --max-memory.
//
// Why a window gives the bytes of the whole: every ggml type is encoded block by block along a
// row (the last dimension), and a block never crosses a row (a tensor's rows are whole blocks,
// gguf/gguf.h's row_type), so the encoding of whole rows is the encoding of the tensor cut at
// those rows. What the converter does to the rows before encoding (gguf/model.h's
// TensorPlan) moves them only inside a unit of the input's first dimension, and each unit's rows
// land together in order in the output, so the output of consecutive units is consecutive too:
//   - a plain tensor, and one of a layer's experts stacked (each input written after the one
//     before it): a row (an element of a 1-D tensor);
//   - LlamaModel.permute of q/k: a head's 2 x half rows (rows / heads);
//   - DeepseekV2Model's kv_b split: a head's nope + v rows (k_b transposes within the head);
//   - GPT-OSS's fused experts (a transpose, the even / odd rows of gate_up) and transformers'
//     in-memory gate_up_proj (its first / second half of rows): an expert;
//   - GPT-OSS's MXFP4 repack: an expert of its blocks and scales;
//   - Falcon's query_key_value regrouping: the whole tensor (its rows move across all of it).
// Only the values the converter computes (rope_freqs: head_dim / 2 floats) are made whole.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/model.h"

namespace dcpctl::gguf {

// How many indices of its first dimension an input of shape `in` (of plan `p`) is converted in
// together; a window holds a whole number of them. 1 for a tensor of no dimension.
int64_t rows_unit(const TensorPlan& p, const std::vector<int64_t>& in);

// Whether the plan moves its input's values before they are encoded (a float32 copy of the window
// is made for it).
bool moves_rows(const TensorPlan& p);

// The float32 values written for a window of `rows` consecutive indices of the first dimension of
// an input of shape `in` (whole units), from `x`, the window's float32 values: x itself (moved
// out) when the plan moves nothing, else the window's part of the output, permuted, split or
// transposed; a plan's shift added to each value first, in float32 (a float16 source's sum is
// rounded to float16 by the caller, which knows the source's type).
std::vector<float> convert_rows(const TensorPlan& p, std::vector<float> x, const std::vector<int64_t>& in,
                                int64_t rows);

// Each value rounded to float16 and back (a float16 source's shifted norm: TensorPlan::shift).
void round_to_half(std::vector<float>& x);

// The MXFP4 bytes (mxfp4_repack) of a window of `experts` consecutive experts of a plan `p.mxfp4`,
// from those experts' blocks and scales (blocks_shape: the whole input's).
std::vector<uint8_t> mxfp4_rows(const TensorPlan& p, const uint8_t* blocks, const uint8_t* scales,
                                const std::vector<int64_t>& blocks_shape, int64_t experts);

}  // namespace dcpctl::gguf
