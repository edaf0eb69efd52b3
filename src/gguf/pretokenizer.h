// A byte-level tokenizer.json `pre_tokenizer` run on a text as Hugging Face tokenizers (0.23) runs
// it, for the pre-tokenizer digest of llama.cpp's converter (gguf/vocab.h: only its check
// text, normalized, is ever split).
//
// The pieces are returned in GPT-2's byte-level alphabet (gguf/vocab.h byte_chars), as ByteLevel
// leaves them; a step after ByteLevel splits that text, as tokenizers' does (Falcon's Digits and
// Split). Supported, as the released byte-level BPE families use them:
//   - Split: a Regex pattern matched by Oniguruma (Debian's libonig 6.9.8: the library, and the
//     version, that tokenizers' onig crate builds; its default syntax, no options; matches found
//     as onig's find_iter finds them, an empty match right after the last one skipped), or a
//     String pattern matched literally; behavior Isolated (matches and the text between them are
//     pieces), Removed (only the text between) or Contiguous (adjacent matches one piece); not
//     inverted;
//   - Digits: each numeric code point (Rust's char::is_numeric: Nd, Nl, No) a piece of its own
//     (individual_digits) or runs of them one piece;
//   - Punctuation: each punctuation code point (ASCII's, or a Unicode P* category) split out as
//     `behavior` says (Falcon's Contiguous: a run of them one piece);
//   - ByteLevel, once: a space prepended to each piece not starting with one (add_prefix_space),
//     GPT-2's pattern Isolated (use_regex), then each byte as its byte-level character;
//   - Sequence of those, each applied to every piece of the one before.
// Empty pieces are dropped, as tokenizers drops them. A pre-tokenizer without exactly one
// ByteLevel step, or anything else (Whitespace, Metaspace, ...), is refused: UnsupportedError
// naming it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dcpctl::gguf {

std::vector<std::string> pre_tokenize(const nlohmann::json& pre_tokenizer, const std::string& text,
                                      const std::string& where);

}  // namespace dcpctl::gguf
