// verify of a GGUF file (or a split's shards read as one: gguf/reader.cpp) against what
// llama.cpp's loader asks of its architecture (gguf/model.h's expected_tensors, for the
// architectures dcpctl writes: llama, qwen2, qwen3, qwen3moe, deepseek2, glm4moe, gpt-oss, gemma2, gemma3, phi3,
// granite, olmo2, starcoder2, command-r, falcon, mistral3, mpt), from the file's own keys (block_count,
// embedding_length, feed_forward_length, head counts, key/value lengths, expert counts and lengths, the vocabulary's
// size):
//   gguf-tensor-unexpected  a tensor the architecture does not have (llama.cpp: "wrong number of
//                           tensors"), or a layer's past block_count;
//   gguf-tensor-missing     a tensor it needs (llama.cpp: "missing tensor");
//   gguf-shape-mismatch     a tensor of another shape than the keys give (llama.cpp: "tensor has
//                           wrong shape"); a dimension from a key the file lacks is not compared;
// each naming the tensor, its file and its data's offset there (a missing one the first file).
// Another architecture is a note (gguf-arch-not-checked): llama.cpp has many more than these.
#pragma once

#include "meta/checkpoint.h"
#include "meta/readers.h"

namespace dcpctl {

using GgufArchReport = LayoutFindings;

GgufArchReport check_gguf_arch(const Checkpoint& ck);

}  // namespace dcpctl
