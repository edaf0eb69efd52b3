// A GGUF's block types read for their values (`--dtype` over a .gguf: consolidate, reshard, cast):
// the opaque-type decoder the GGUF module installs in the readers' table's gguf row
// (meta/readers.h's decode_opaque; view/codecs/dequantize.h asks it first).
//
// Each tensor of a type gguf/bound.h decodes (Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, NVFP4, Q1_0,
// Q2_0) becomes a float32 tensor of the same name and shape (torch's order, as the reader gives it),
// its one chunk computed from the stored blocks as ggml's dequantize_row_* computes it (the values
// gguf-py's quants.dequantize gives, where it decodes the type). Names stay the GGUF's: no Q/K row
// is un-permuted. Any other block type (Q2_K, Q3_K, IQ*, TQ*, MXFP4, Q4_1, Q8_1, Q8_K) stays opaque,
// so a command that reads its values refuses it (exit 5, naming the tensor and the type). A read
// decodes the whole blocks that hold the range asked (a GGUF row is whole blocks), from those
// blocks' stored bytes alone.
#pragma once

#include "meta/checkpoint.h"

namespace dcpctl::gguf {

// `ck` (a checkpoint of layout gguf) with its decodable block tensors as float32; its table's view
// "dequantized" says what the dequantize view's does (no float8 or MXFP4 weights) and {"gguf": n,
// "types": {type: tensors}}.
Checkpoint decoded_view(const Checkpoint& ck);

}  // namespace dcpctl::gguf
