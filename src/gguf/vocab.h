// The name llama.cpp's converter gives a BPE tokenizer's pre-tokenizer (`tokenizer.ggml.pre`).
//
// convert_hf_to_gguf.py (llama-cpp-python 0.3.36's, conversion/base.py get_vocab_base_pre) does not
// read the pre-tokenizer from tokenizer.json: it encodes a fixed text (`chktxt`, below) with the
// tokenizer transformers loads from the folder, special tokens added as its post-processor adds
// them, takes the SHA-256 of Python's str() of the list of ids ("[128000, 198, 720]") and looks
// that digest up in a table of the tokenizers llama.cpp implements; a digest it does not know is an
// error. dcpctl computes the same digest by running the same tokenizer on the same text, for the
// tokenizers it can run exactly, and refuses the others (UnsupportedError, exit 5, naming what):
//
//   - the tokenizer transformers loads (gguf/hf_tokenizer.h): the class AutoTokenizer picks for the
//     folder (tokenizer_config.json's tokenizer_class and config.json's model_type) and what that
//     class keeps of tokenizer.json or builds anew (Qwen2Tokenizer's NFC and split pattern, ...),
//     the post-processor it ends with (add_bos_token / add_eos_token);
//   - its normalizer (gguf/normalizer.h: NFC, NFKC, ..., by utf8proc), then its pre-tokenizer
//     (gguf/pretokenizer.h: Split patterns run by Oniguruma, Digits, ByteLevel);
//   - model: BPE over GPT-2's byte-to-unicode alphabet, no dropout, no byte fallback, no
//     continuing-subword prefix or end-of-word suffix, `ignore_merges` honoured (a whole piece in
//     the vocabulary is one token, as Llama 3's tokenizer says), merges applied lowest rank first,
//     the leftmost on ties; every symbol left must be in the vocabulary;
//   - added tokens: split out of the text first, as tokenizers splits them (gguf/added_vocab.h:
//     the normalized and the raw ones, lstrip, rstrip, single_word), with the ids transformers
//     gives them (gguf/hf_tokenizer.h); the normalizer, pre-tokenizer and model then run on each
//     stretch between them;
//   - post_processor: none, ByteLevel (adds nothing), TemplateProcessing whose `single` is special
//     tokens around one Sequence A, or a Sequence of those.
//
// A digest the converter's table does not name is refused as the converter refuses it (pre_name).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dcpctl::gguf {

// The text the converter encodes.
extern const char* const kCheckText;

// The SHA-256 (hex) of str(ids) for kCheckText under this tokenizer, as the converter computes it.
// `tokenizer_config` is tokenizer_config.json (null: none), `config` config.json (its model_type
// decides transformers' class). UnsupportedError naming what is not reproduced.
std::string pre_digest(const nlohmann::json& tokenizer, const nlohmann::json& tokenizer_config,
                       const nlohmann::json& config, const std::string& where);

// GPT-2's bytes_to_unicode (byte-level BPE; QwenModel.token_bytes_to_string): each byte as the UTF-8
// of the code point that spells it.
const std::vector<std::string>& byte_chars();

// "llama-bpe", "qwen2", ...: the converter's name for a digest; "" for one it does not name here.
std::string pre_name(const std::string& digest);

}  // namespace dcpctl::gguf
