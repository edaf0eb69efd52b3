// dcpctl diff SOURCE model.gguf: a GGUF file against the model it was written from (issue 71 item 2;
// docs/gguf.md, "Diff against the source").
//
// SOURCE is what `consolidate -o model.gguf` (or llama.cpp's convert_hf_to_gguf.py) read: an HF
// folder, a .safetensors file, a DCP checkpoint of a Hugging Face model, or a trainer's checkpoint
// through --map (the same maps). Its config.json (beside it, or --assets DIR) names the
// architecture. The source's tensors are planned into GGUF tensors by the writer's own plan
// (gguf/model.h's plan_tensors: the one table of llama.cpp's names, the Q/K row permutation,
// the experts stacked per layer, DeepSeek's kv_b split, GPT-OSS's fused gate_up split, Llama 3's
// rope_freqs computed from config.json), so each GGUF tensor is compared, under its GGUF name, with
// the float32 values the writer quantizes for it, in the file's layout: equivalent to undoing each
// transform on the file's side (each is a bijection of elements), and the blocks a bound is per are
// the file's own. Each tensor's type is decoded as ggml decodes it and each element held to its
// type's bound (gguf/bound.h), whatever type the file chose for it (llama-quantize's mixes
// too). The file's name is the key; "source_keys" lists the Hugging Face tensors it was made from.
//
// Per tensor: identical (every element within its bound: bound "gguf", "codec" the type, "inexact"
// the elements not bit-equal), values_changed (some element beyond it, the worst measured),
// shape_changed, only_in_a (a tensor the source makes that the file lacks), only_in_b (a file
// tensor the source does not make), tied (the file has no output.weight, config.json ties it, and
// the source's head is within the bound of token_embd). A type not decoded (Q2_K, IQ*, MXFP4, ...)
// is UnsupportedError (exit 5) naming the tensor; so is what plan_tensors refuses. Each tensor is
// read whole (as the writer converts it), within --max-memory, its blocks checked by --threads
// threads. The keys config.json makes ({arch}.*, general.architecture: the writer's
// add_model_keys) are compared with the file's as values: identical, values_changed, only_in_a.
#pragma once

#include "compare/diff.h"

namespace dcpctl {

// Whether `in` is a GGUF file (layout gguf).
bool is_gguf(const Input& in);

// diff of the GGUF `file` against `source` (diff A B with one side a GGUF: `file_is_a` when it is A).
DiffResult diff_gguf(Input& source, Input& file, const DiffOptions& o, bool file_is_a);

}  // namespace dcpctl
