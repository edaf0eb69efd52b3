// Kimi K2's tiktoken tokenizer as llama.cpp's converter writes it into a GGUF (docs/gguf.md).
//
// Kimi K2 (DeepseekV3ForCausalLM, general.architecture deepseek2) ships no tokenizer.json: its
// tokenizer is tiktoken.model (one `base64(token) rank` a line) read by its own remote-code class
// (tokenizer_config.json's auto_map: tokenization_kimi.TikTokenTokenizer). convert_hf_to_gguf.py
// (llama-cpp-python 0.3.36's conversion/deepseek.py, DeepseekV2Model.set_vocab) then takes its
// kimi-k2 branch, written here the same way:
//
//   - the ranks as tiktoken's load_tiktoken_bpe reads them (the file's order; a token given twice
//     keeps its first place and its last rank); each token as text through GPT-2's byte-to-unicode
//     alphabet (QwenModel.token_bytes_to_string);
//   - the merges recovered from the ranks (QwenModel.bpe): for each token of more than one byte,
//     its bytes merged lowest rank first (the leftmost on ties) with ranks below its own; when that
//     leaves two parts, "A B" is a merge, in the ranks' order;
//   - the special tokens: the 256 + 2 ids after the ranks (the class's num_reserved_special_tokens
//     + 2), each named by tokenizer_config.json's added_tokens_decoder, else
//     `<|reserved_token_{id}|>`;
//   - tokenizer.ggml.tokens / token_type for ids 0 .. config.json's vocab_size - 1: a special
//     token CONTROL, a rank NORMAL, a missing id `[PAD{id}]` UNUSED (ids past vocab_size left out);
//   - tokenizer.ggml.pre kimi-k2;
//   - gguf-py's SpecialVocab without a tokenizer.json: config.json's `*_token_id` (or its
//     text_config's), tokenizer_config.json's `add_bos/eos/sep_token`, the chat template
//     (tokenizer_config.json's, else chat_template.jinja).
//
// The converter names the tokenizer kimi-k2 by the digest of its encoding of a fixed text (as for
// tokenizer.json, gguf/vocab.h); dcpctl does not run tiktoken's encoding, and names it so by
// its class (is_kimi_tokenizer): a Kimi tokenizer whose ranks were changed, which the converter
// would refuse, is written as kimi-k2.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"

namespace dcpctl::gguf {

// Whether tokenizer_config.json's auto_map names Kimi's tokenizer class
// (tokenization_kimi.TikTokenTokenizer, optionally repository-qualified "REPO--tokenization_kimi...").
bool is_kimi_tokenizer(const nlohmann::json& tokenizer_config);

// The tokenizer keys of the kimi-k2 branch (above) from tiktoken.model's text. UnsupportedError
// (exit 5) naming the line for a line that is not `base64 rank`.
void add_kimi_tokenizer_keys(Header& h, const nlohmann::json& config, const std::string& tiktoken,
                             const nlohmann::json& tokenizer_config, const std::string& chat_template_jinja,
                             const std::string& where);

}  // namespace dcpctl::gguf
