// A tokenizer.json `normalizer` applied to a text as Hugging Face tokenizers (0.23) applies it, for
// the pre-tokenizer digest of llama.cpp's converter (gguf/vocab.h: only its check text is
// ever normalized).
//
// Supported, as the released byte-level BPE families use them (docs/gguf.md, "Tokenizers"):
//   - NFC, NFD, NFKC, NFKD: Unicode normalization by utf8proc (Debian's libutf8proc, 2.8: Unicode
//     15). tokenizers uses the Rust crate unicode-normalization; normalization of an assigned code
//     point is frozen by Unicode's stability policy, so the two agree but on code points assigned
//     after utf8proc's Unicode version (none in the check text);
//   - Sequence: its normalizers in order (an empty one changes nothing: DeepSeek's);
//   - Lowercase: each code point's lowercase (Rust's char::to_lowercase: utf8proc's simple mapping,
//     U+0130 to "i\u0307", its one unconditional multi-code-point mapping; no final-sigma rule);
//   - Prepend (to a non-empty text), Replace with a String pattern (every occurrence, left to right).
// Anything else (Replace with a Regex, Strip, StripAccents, BertNormalizer, Precompiled, Nmt) is
// refused: UnsupportedError naming it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dcpctl::gguf {

// `text` (UTF-8) under `normalizer` (null: unchanged). UnsupportedError naming what is not run,
// FormatError for a text that is not UTF-8.
std::string normalize(const nlohmann::json& normalizer, const std::string& text, const std::string& where);

}  // namespace dcpctl::gguf
