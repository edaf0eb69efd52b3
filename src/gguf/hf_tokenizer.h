// The tokenizer transformers' AutoTokenizer builds from a model folder, as llama.cpp's converter
// loads it to name the pre-tokenizer (gguf/vocab.h): which class it picks and what that class
// keeps of tokenizer.json. Read from transformers 5.23's models/auto/tokenization_auto.py
// (AutoTokenizer.from_pretrained), tokenization_utils_tokenizers.py (TokenizersBackend) and the
// classes' own files, and checked against it (tests/interop/gguf_tokenizers_test.py).
//
// The class: tokenizer_config.json's auto_map is remote code (refused); then, in this order,
//   1. tokenizer_class (or config.json's) LlamaTokenizer(Fast) with a tokenizer.json that says
//      "ByteLevel" anywhere, model_type not in transformers' MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
//      (of the model types here: qwen2): TokenizersBackend;
//   2. a class named and the model type's registered class (TOKENIZER_MAPPING_NAMES, below) another
//      (a "Fast" suffix aside): the registered class if the model type is in that set, else the
//      named one, when that is a class of its own; TokenizersBackend otherwise;
//   3. tokenizer_config.json's class, a "Fast" suffix dropped;
//   4. config.json's tokenizer_class; 5. the model type's registered class, else TokenizersBackend.
// Only the model types dcpctl writes into a GGUF are in the table (llama, mistral, mixtral, qwen2,
// qwen3, qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2, glm4_moe, gpt_oss); another is refused.
// mistral and mixtral register MistralCommonBackend where mistral_common is installed, which loads a
// folder without Mistral's own files (tekken.json) as TokenizersBackend too.
//
// What each class keeps (from tokenizer.json, always: the vocabulary, the merges, the post-processor):
//   - TokenizersBackend (PreTrainedTokenizerFast, PreTrainedTokenizer): tokenizer.json as it is;
//   - Qwen2Tokenizer: normalizer NFC; Split(Qwen2's pattern, Isolated), ByteLevel(use_regex false);
//   - GPT2Tokenizer: no normalizer; ByteLevel (GPT-2's pattern);
//   - CohereTokenizer: NFC; Digits(individual), ByteLevel;  GPTNeoXTokenizer: NFC; ByteLevel;
//   each ByteLevel with tokenizer_config.json's add_prefix_space (default false), each BPE without
//   ignore_merges, dropout, byte fallback or affixes; any other class (LlamaTokenizer's Metaspace,
//   CodeGen, ...) is refused.
// The added tokens (split out of a text before the normalizer and the model, gguf/added_vocab.h):
// tokenizer.json's added_tokens, then tokenizer_config.json's added_tokens_decoder (a content met
// again takes its later flags, as AddedVocabulary::add_tokens re-adds it), then the special tokens
// tokenizer_config.json names that neither holds (special, not normalized, no id). Their ids are
// transformers' only when those not in the model's vocabulary are its next ids in their order
// (tokenizers gives an added token its vocabulary id, else the next free one past the vocabulary,
// whatever tokenizer.json says: 5.24 puts StarCoder's special tokens, ids 0..37 in the release,
// past the vocabulary when they are not in it): otherwise refused, naming the token.
// The post-processor: tokenizer.json's, but when tokenizer_config.json names add_bos_token or
// add_eos_token (or tokenizer.json has none) transformers replaces it by bos_token, the sequence and
// eos_token, each as the flags say (update_post_processor); a token's id is its id in tokenizer.json.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/added_vocab.h"

namespace dcpctl::gguf {

struct LoadedTokenizer {
  std::string cls;            // the class transformers loads: "TokenizersBackend", "Qwen2Tokenizer", ...
  nlohmann::json normalizer;  // null: none
  nlohmann::json pre_tokenizer;
  bool ignore_merges = false;
  std::vector<int64_t> before, after;  // the ids the post-processor puts around the sequence
  std::vector<AddedToken> added;       // split out before the model (gguf/added_vocab.h)
};

// `tok` tokenizer.json, `tconf` tokenizer_config.json (null: none), `config` config.json.
// UnsupportedError naming what dcpctl does not reproduce.
LoadedTokenizer as_transformers_loads(const nlohmann::json& tok, const nlohmann::json& tconf,
                                      const nlohmann::json& config, const std::string& where);

}  // namespace dcpctl::gguf
