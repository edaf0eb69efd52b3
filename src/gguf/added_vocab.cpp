// Added tokens split out of a text (gguf/added_vocab.h).
#include "gguf/added_vocab.h"

#include <utility>

#include <utf8proc.h>

#include "gguf/normalizer.h"
#include "util/error.h"

namespace dcpctl::gguf {

using nlohmann::json;

namespace {

struct Pattern {
  std::string text;  // the token's content, normalized for the second pass
  const AddedToken* token;
};

struct Match {
  size_t start, stop;
  const AddedToken* token;
};

// Rust regex's Unicode `\w` (UTS #18: Alphabetic, M, Nd, Pc, Join_Control): Alphabetic as the
// letters, Nl and Other_Alphabetic, whose code points outside the marks are the circled and squared
// Latin letters (So).
bool is_word(utf8proc_int32_t c) {
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return true;
    default: break;
  }
  return c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
         (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
}

// Unicode's White_Space property (Rust regex's `\s`).
bool is_space(utf8proc_int32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point starting at `at` and its length in bytes.
std::pair<utf8proc_int32_t, size_t> char_at(const std::string& s, size_t at, const std::string& where) {
  utf8proc_int32_t c = 0;
  const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data()) + at,
                                              static_cast<utf8proc_ssize_t>(s.size() - at), &c);
  if (n <= 0) throw FormatError(Where(where), "a text to tokenize that is not UTF-8 at byte " + std::to_string(at));
  return {c, static_cast<size_t>(n)};
}

// Where the code point ending at `end` (> 0) starts: UTF-8's continuation bytes are 10xxxxxx.
size_t start_before(const std::string& s, size_t end) {
  size_t at = end - 1;
  while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
  return at;
}

utf8proc_int32_t char_before(const std::string& s, size_t end, const std::string& where) {
  return char_at(s, start_before(s, end), where).first;
}

// Aho-Corasick's leftmost-longest matches: the earliest start, the longest pattern there (the first
// given of equal ones), then on from its end.
std::vector<Match> leftmost_longest(const std::string& s, const std::vector<Pattern>& patterns) {
  std::vector<Match> out;
  for (size_t pos = 0; pos < s.size();) {
    Match best{std::string::npos, 0, nullptr};
    for (const Pattern& p : patterns) {
      const size_t at = p.text.empty() ? std::string::npos : s.find(p.text, pos);
      if (at == std::string::npos) continue;
      if (at < best.start || (at == best.start && at + p.text.size() > best.stop))
        best = {at, at + p.text.size(), p.token};
    }
    if (!best.token) break;
    out.push_back(best);
    pos = best.stop;
  }
  return out;
}

// AddedVocabulary::find_matches: `s` cut into stretches and tokens, the flags applied.
void find_matches(const std::string& s, const std::vector<Pattern>& patterns, std::vector<AddedSplit>& out,
                  const std::string& where) {
  size_t from = 0;
  for (Match m : leftmost_longest(s, patterns)) {
    const AddedToken& t = *m.token;
    if (t.single_word && ((m.start > 0 && is_word(char_before(s, m.start, where))) ||
                          (m.stop < s.size() && is_word(char_at(s, m.stop, where).first))))
      continue;
    if (t.lstrip)  // back over the whitespace before it, not past the previous match
      while (m.start > from && is_space(char_before(s, m.start, where))) m.start = start_before(s, m.start);
    if (t.rstrip)
      while (m.stop < s.size() && is_space(char_at(s, m.stop, where).first)) m.stop += char_at(s, m.stop, where).second;
    if (t.id < 0)
      throw UnsupportedError(Where(where), "added token '" + t.content +
                                               "' has no id dcpctl knows (tokenizer.json's added_tokens, "
                                               "tokenizer_config.json's added_tokens_decoder or the vocabulary)");
    if (from < m.start) out.push_back({s.substr(from, m.start - from), -1});
    out.push_back({s.substr(m.start, m.stop - m.start), t.id});
    from = m.stop;
  }
  if (from < s.size()) out.push_back({s.substr(from), -1});
}

}  // namespace

std::vector<AddedSplit> split_added(const std::vector<AddedToken>& added, const json& normalizer,
                                    const std::string& text, const std::string& where) {
  std::vector<Pattern> raw, normalized;
  for (const AddedToken& t : added)
    if (t.normalized)
      normalized.push_back({normalize(normalizer, t.content, where), &t});
    else
      raw.push_back({t.content, &t});
  std::vector<AddedSplit> first, out;
  find_matches(text, raw, first, where);
  for (AddedSplit& piece : first)
    if (piece.id >= 0)
      out.push_back(std::move(piece));
    else
      find_matches(normalize(normalizer, piece.text, where), normalized, out, where);
  return out;
}

}  // namespace dcpctl::gguf
