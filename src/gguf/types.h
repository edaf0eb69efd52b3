// ggml's tensor types as a GGUF file names them (ggml.h's `ggml_type` of llama.cpp as vendored by
// llama-cpp-python 0.3.36; gguf-py 0.19.0's GGMLQuantizationType and GGML_QUANT_SIZES, which stop
// at Q1_0 = 41: Q2_0 = 42 is ggml's alone): every type a file may hold, so that a reader can lay out
// and check any file, whether or not dcpctl decodes the type (gguf/bound.h decodes some).
#pragma once

#include <cstdint>
#include <optional>

#include "util/dtype.h"

namespace dcpctl::gguf {

struct GgmlType {
  uint32_t id;                 // ggml_type
  const char* name;            // "Q8_0": gguf-py's name
  uint32_t block;              // elements per block (1 for plain types); a row holds whole blocks
  uint32_t block_bytes;        // bytes per block
  std::optional<DType> plain;  // the torch dtype of a plain type (F32, F16, BF16, I8 ... F64); none for a block type
};

// The type of `id`, or null for an id ggml does not define (or has removed: 4, 5, 31-33, 36-38).
const GgmlType* ggml_type(uint32_t id);

}  // namespace dcpctl::gguf
