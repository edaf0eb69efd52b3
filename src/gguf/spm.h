// A SentencePiece tokenizer (tokenizer.model) as llama.cpp's converter writes it into a GGUF
// (tokenizer.ggml.model "llama"; docs/gguf.md, "Tokenizers").
//
// Which path the converter takes (convert_hf_to_gguf.py with conversion/ of llama-cpp-python
// 0.3.36) is decided by the files, not by tokenizer_config.json's class: LlamaModel.set_vocab (Llama,
// Mistral, Mixtral: general.architecture llama) and Qwen2Model.set_vocab (qwen2, and Qwen3Model's
// qwen3) call _set_vocab_sentencepiece first, which takes tokenizer.model whenever the folder holds
// one; only its absence (FileNotFoundError) lets them go on, LlamaModel to _set_vocab_llama_hf (a
// tokenizer.json whose model is a byte-fallback BPE: not written by dcpctl yet, refused) and then
// to _set_vocab_gpt2, Qwen2Model to _set_vocab_gpt2 (gguf/vocab.h). Gemma2Model.set_vocab calls it
// alone (no tokenizer.model: the converter fails, dcpctl refuses) and adds add_space_prefix false
// after its keys. Which an architecture does is its row's Arch::vocab (gguf/model.h); the other
// architectures written here never read tokenizer.model.
//
// _set_vocab_sentencepiece, as written here:
//   - the model read by sentencepiece's own SentencePieceProcessor (Debian's libsentencepiece, the
//     library the converter's Python package wraps): a file it does not load is refused, as the
//     converter fails on it;
//   - n = config.json's vocab_size (0 or absent: the model's piece count); ids 0 .. n - 1 start as
//     `[PAD{id}]`, score -10000.0, type UNUSED; each piece below n then gives its text, score and
//     type (UNKNOWN, CONTROL, UNUSED, BYTE as SentencePiece says, else NORMAL; llama.cpp's token
//     types are SentencePiece's piece types); pieces at or past n are left out;
//   - added_tokens.json {text: id}: each id below n becomes that text, score -1000.0, USER_DEFINED;
//   - tokenizer_config.json's added_tokens_decoder {id: {content, special}}: each id below n becomes
//     its content, score -1000.0, CONTROL when special or when it looks special (the converter's
//     does_token_look_special), else USER_DEFINED with U+2581 turned into spaces;
//   - the keys tokenizer.ggml.model "llama", .pre "default", .tokens, .scores (float32), .token_type,
//     then gguf-py's SpecialVocab(n_vocab = n) without merges (gguf/model.h: add_special_vocab);
//
// Phi3MiniModel.set_vocab (phi3) reads tokenizer.model its own way (unless tokenizer_config.json's
// tokenizer_class is GPT2Tokenizer, Phi-4's: _set_vocab_gpt2): n is config.json's vocab_size (absent:
// the piece count), pieces past n are its IndexError (refused); added_tokens.json as above; then
// tokenizer_config.json's added_tokens_decoder and tokenizer.json's added_tokens, each id (below n,
// else refused) its content unchanged, score -1000.0, CONTROL when special, else USER_DEFINED (no
// does_token_look_special, no U+2581 turned into a space); the same keys and SpecialVocab.
//
// LlamaModel.set_vocab adds, whichever path it takes: before the tokenizer's keys,
// tokenizer_config.json's add_prefix_space, when a boolean, as tokenizer.ggml.add_space_prefix;
// after them, for a vocab_size of 32016 (CodeLlama) or 49152 (Granite's small models), keys of
// their own: refused (add_llama_vocab_keys).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"

namespace dcpctl::gguf {

// Whether tokenizer.json is what LlamaHfVocab takes (_set_vocab_llama_hf: a BPE with byte fallback
// and a Sequence decoder, not Llama 3's ignore_merges BPE).
bool is_llama_hf_tokenizer(const nlohmann::json& tokenizer);

struct SpmVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};
// _create_vocab_sentencepiece of tokenizer.model's bytes `model` (read from `model_path`).
// `added_tokens` (added_tokens.json) and `tokenizer_config` may be null. FormatError when
// SentencePiece does not load the model; UnsupportedError for what the converter does otherwise.
// `phi3_tokenizer` non-null: Phi3MiniModel.set_vocab's own reading instead (below), with that
// tokenizer.json (a null json: none).
SpmVocab spm_vocab(const std::string& model, const std::string& model_path, const nlohmann::json& config,
                   const nlohmann::json& added_tokens, const nlohmann::json& tokenizer_config, const std::string& where,
                   const nlohmann::json* phi3_tokenizer = nullptr);

// LlamaModel.set_vocab's own key before the tokenizer's (general.architecture llama); UnsupportedError
// for the vocabulary sizes it adds keys after them for.
void add_llama_vocab_keys(Header& h, const nlohmann::json& config, const nlohmann::json& tokenizer_config,
                          const std::string& where);

// The keys of _set_vocab_sentencepiece (above). `tokenizer` (tokenizer.json), `added_tokens`,
// `tokenizer_config`: null when absent; `chat_template_jinja` "": none.
void add_spm_tokenizer_keys(Header& h, const nlohmann::json& config, const std::string& model,
                            const std::string& model_path, const nlohmann::json& added_tokens,
                            const nlohmann::json& tokenizer, const nlohmann::json& tokenizer_config,
                            const std::string& chat_template_jinja, const std::string& where, bool phi3 = false);

}  // namespace dcpctl::gguf
