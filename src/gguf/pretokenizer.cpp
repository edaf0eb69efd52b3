// Byte-level pre-tokenizers (gguf/pretokenizer.h).
#include "gguf/pretokenizer.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include <oniguruma.h>
#include <utf8proc.h>

#include "gguf/vocab.h"
#include "util/error.h"

namespace dcpctl::gguf {

using nlohmann::json;

namespace {

// tokenizers' ByteLevel pattern (pre_tokenizers/byte_level.rs).
const char* const kByteLevelPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

[[noreturn]] void refuse_pre_tokenizer(const std::string& where, const std::string& what) {
  throw UnsupportedError(Where(where),
                         "the tokenizer's pre_tokenizer " + what + " is not run by dcpctl (tokenizer.ggml.pre)");
}

// A span of a piece and whether the pattern matched it (tokenizers' Pattern::find_matches).
using PieceMatches = std::vector<std::pair<std::pair<size_t, size_t>, bool>>;

// The matches' spans with the text between them, covering `s`.
PieceMatches matches_covering(const std::string& s, const std::vector<std::pair<size_t, size_t>>& found) {
  PieceMatches m;
  size_t prev = 0;
  for (auto [b, e] : found) {
    if (prev != b) m.push_back({{prev, b}, false});
    m.push_back({{b, e}, true});
    prev = e;
  }
  if (prev != s.size()) m.push_back({{prev, s.size()}, false});
  return m;
}

struct OnigPattern {
  OnigRegex re = nullptr;
  ~OnigPattern() {
    if (re) onig_free(re);
  }
};

PieceMatches onig_matches(const std::string& pattern, const std::string& s, const std::string& where) {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding enc[] = {ONIG_ENCODING_UTF8};
    onig_initialize(enc, 1);
  });
  OnigPattern r;
  OnigErrorInfo info;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  if (int rc = onig_new(&r.re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
      rc != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, rc, &info);
    refuse_pre_tokenizer(
        where, "Split pattern that Oniguruma does not compile (" + std::string(reinterpret_cast<char*>(msg)) + ")");
  }
  std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> region(onig_region_new(),
                                                            [](OnigRegion* g) { onig_region_free(g, 1); });
  const auto* str = reinterpret_cast<const OnigUChar*>(s.data());
  const OnigUChar* end = str + s.size();
  std::vector<std::pair<size_t, size_t>> found;
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= s.size()) {
    const int at = onig_search(r.re, str, end, str + from, end, region.get(), ONIG_OPTION_NONE);
    if (at == ONIG_MISMATCH) break;
    if (at < 0) refuse_pre_tokenizer(where, "Split pattern whose search Oniguruma fails");
    const auto b = static_cast<size_t>(region->beg[0]), e = static_cast<size_t>(region->end[0]);
    if (b == e && have_last && last_end == e) {  // onig's FindMatches: step over one character
      if (from >= s.size()) break;
      const auto lead = static_cast<unsigned char>(s[from]);
      from += lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      continue;
    }
    from = e, have_last = true, last_end = e;
    found.push_back({b, e});
  }
  // tokenizers' SysRegex pattern: an empty text is one unmatched span.
  if (s.empty()) return {{{0, 0}, false}};
  return matches_covering(s, found);
}

// A span for each code point `pred` holds for (tokenizers' Pattern for a char predicate).
PieceMatches code_point_matches(const std::string& s, const std::function<bool(int32_t)>& pred,
                                const std::string& where) {
  std::vector<std::pair<size_t, size_t>> found;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n <= 0) throw FormatError(Where(where), "a text to pre-tokenize that is not UTF-8");
    if (pred(c)) found.push_back({i, i + static_cast<size_t>(n)});
    i += static_cast<size_t>(n);
  }
  return matches_covering(s, found);
}

// NormalizedString::split: the pieces `behavior` keeps, empty ones dropped.
void split_piece(const std::string& s, const PieceMatches& m, const std::string& behavior,
                 std::vector<std::string>& out, const std::string& where) {
  std::vector<std::string> pieces;
  if (behavior == "Isolated") {
    for (const auto& [span, hit] : m) pieces.push_back(s.substr(span.first, span.second - span.first));
  } else if (behavior == "Removed") {
    for (const auto& [span, hit] : m)
      if (!hit) pieces.push_back(s.substr(span.first, span.second - span.first));
  } else if (behavior == "Contiguous") {
    bool prev_hit = false;
    for (const auto& [span, hit] : m) {
      std::string piece = s.substr(span.first, span.second - span.first);
      if (hit && prev_hit && !pieces.empty())
        pieces.back() += piece;
      else
        pieces.push_back(std::move(piece));
      prev_hit = hit;
    }
  } else {
    refuse_pre_tokenizer(where, "Split behavior " + behavior);
  }
  for (std::string& p : pieces)
    if (!p.empty()) out.push_back(std::move(p));
}

// tokenizers' is_punc: Rust's char::is_ascii_punctuation, or a Unicode punctuation category (P*).
bool is_punctuation(int32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return true;
    default: return false;
  }
}

// ByteLevel: a space prepended, GPT-2's pattern, then each byte as its byte-level character.
std::vector<std::string> byte_level(const json& pt, const std::vector<std::string>& in, const std::string& where) {
  std::vector<std::string> split;
  for (std::string s : in) {
    if (pt.value("add_prefix_space", true) && s.rfind(' ', 0) != 0) s = " " + s;
    if (pt.value("use_regex", true))
      split_piece(s, onig_matches(kByteLevelPattern, s, where), "Isolated", split, where);
    else if (!s.empty())
      split.push_back(s);
  }
  for (std::string& s : split) {
    std::string mapped;
    for (unsigned char b : s) mapped += byte_chars()[b];
    s = std::move(mapped);
  }
  return split;
}

bool rust_is_numeric(int32_t c) {
  const utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

// One pre-tokenizer over every piece.
std::vector<std::string> apply_pre_tokenizer(const json& pt, const std::vector<std::string>& in,
                                             const std::string& where) {
  const std::string type = pt.is_object() ? pt.value("type", std::string()) : std::string();
  std::vector<std::string> out;
  if (type == "Split") {
    const json pattern = pt.value("pattern", json());
    if (pt.value("invert", false)) refuse_pre_tokenizer(where, "Split inverted");
    const std::string behavior = pt.value("behavior", std::string());
    for (const std::string& s : in) {
      if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        split_piece(s, onig_matches(pattern["Regex"].get<std::string>(), s, where), behavior, out, where);
      } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string() &&
                 !pattern["String"].get<std::string>().empty()) {
        const std::string lit = pattern["String"].get<std::string>();
        std::vector<std::pair<size_t, size_t>> found;
        for (size_t at = s.find(lit); at != std::string::npos; at = s.find(lit, at + lit.size()))
          found.push_back({at, at + lit.size()});
        split_piece(s, matches_covering(s, found), behavior, out, where);
      } else {
        refuse_pre_tokenizer(where, "Split without a OnigPattern or String pattern");
      }
    }
    return out;
  }
  if (type == "Digits") {
    const std::string behavior = pt.value("individual_digits", false) ? "Isolated" : "Contiguous";
    for (const std::string& s : in) split_piece(s, code_point_matches(s, rust_is_numeric, where), behavior, out, where);
    return out;
  }
  if (type == "Punctuation") {
    const std::string behavior = pt.value("behavior", std::string("Isolated"));
    for (const std::string& s : in) split_piece(s, code_point_matches(s, is_punctuation, where), behavior, out, where);
    return out;
  }
  if (type == "ByteLevel") return byte_level(pt, in, where);
  refuse_pre_tokenizer(where, type.empty() ? std::string("without a type") : type);
}

}  // namespace

std::vector<std::string> pre_tokenize(const json& pre, const std::string& text, const std::string& where) {
  std::vector<json> steps;
  if (pre.is_object() && pre.value("type", std::string()) == "Sequence") {
    const json list = pre.value("pretokenizers", json());
    if (!list.is_array()) refuse_pre_tokenizer(where, "Sequence without its pretokenizers");
    for (const json& p : list) steps.push_back(p);
  } else if (!pre.is_null()) {
    steps.push_back(pre);
  }
  const auto byte_levels = std::count_if(steps.begin(), steps.end(), [](const json& p) {
    return p.is_object() && p.value("type", std::string()) == "ByteLevel";
  });
  if (byte_levels != 1) refuse_pre_tokenizer(where, "without one ByteLevel step (a byte-level BPE's)");
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.push_back(text);
  for (const json& s : steps) pieces = apply_pre_tokenizer(s, pieces, where);
  return pieces;
}

}  // namespace dcpctl::gguf
