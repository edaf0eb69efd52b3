// A text split around a tokenizer's added tokens as Hugging Face tokenizers (0.23) splits it before
// pre-tokenization (AddedVocabulary::extract_and_normalize), for the pre-tokenizer digest of
// llama.cpp's converter (gguf/vocab.h: only its check text is ever split):
//
//   1. the tokens with `normalized` false (special tokens mostly) are found in the raw text;
//   2. each stretch between them is normalized on its own (the tokenizer's normalizer), and the
//      tokens with `normalized` true, each normalized the same way, are found in it;
//   3. what is left between tokens goes on to the pre-tokenizer and the model, stretch by stretch.
//
// Finding is Aho-Corasick's leftmost-longest over every token of the pass: the earliest match, the
// longest at that place, then on from its end, the matches never overlapping. Each match is then
// judged by its token's flags (AddedVocabulary::find_matches):
//   - single_word: dropped (the text stays for the model) when a word character (Rust regex's
//     Unicode `\w`: Alphabetic, marks, Nd, Pc, Join_Control) touches it on either side;
//   - lstrip: takes the whitespace (Unicode White_Space) before it, back to the previous match's end;
//   - rstrip: takes the whitespace after it.
// The text between matches is a stretch, an empty one dropped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dcpctl::gguf {

// An AddedToken as tokenizers keeps it, with the id transformers' tokenizer gives it.
struct AddedToken {
  std::string content;
  int64_t id = -1;  // -1: none known (a match of it is refused)
  bool special = false, normalized = true, lstrip = false, rstrip = false, single_word = false;
};

// A piece of the split text: an added token's id, or a normalized stretch for the pre-tokenizer.
struct AddedSplit {
  std::string text;  // the stretch, normalized (for a token: the text it matched)
  int64_t id = -1;   // the token's id; -1: a stretch
};

// `text` (UTF-8, raw) split as above; `normalizer` tokenizer.json's (gguf/normalizer.h; null:
// none). UnsupportedError for a matched token without an id, or a normalizer not run.
std::vector<AddedSplit> split_added(const std::vector<AddedToken>& added, const nlohmann::json& normalizer,
                                    const std::string& text, const std::string& where);

}  // namespace dcpctl::gguf
