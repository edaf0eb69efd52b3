// The converter's pre-tokenizer digest (gguf/vocab.h).
#include "gguf/vocab.h"

#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "util/error.h"
#include "util/sha256.h"

namespace dcpctl::gguf {

using nlohmann::json;

// conversion/base.py's chktxt, byte for byte (UTF-8): the converter names a pre-tokenizer by the
// SHA-256 of its encoding of this text, so the digest cannot be computed without it. From llama.cpp
// (MIT License, Copyright (c) 2023-2026 The ggml authors), as shipped in llama-cpp-python 0.3.36.
const char* const kCheckText =
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫\ufe0f (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 \?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!\?\?\?\?\?\? I've been 'told he's there, 'RE you sure\? 'M not sure I'll make it, 'D you like some tea\? We'Ve a'lL";

namespace {

// Llama 3's split pattern, and Qwen2's (one digit a piece).
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class Class { Letter, Number, Space, Newline, Other };

// The classes Oniguruma's \p{L}, \p{N} and \s give the code points of kCheckText. Only kCheckText is
// ever classified, so its non-ASCII letters are listed (Cyrillic, Khmer consonants, CJK); its other
// non-ASCII code points (emoji, U+200D, U+FE0F, Khmer vowel signs, U+FF5E) are none of the three.
Class class_of(char32_t c) {
  if (c == '\n' || c == '\r') return Class::Newline;
  if (c == ' ' || c == '\t' || c == '\v' || c == '\f') return Class::Space;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Class::Letter;
  if (c >= '0' && c <= '9') return Class::Number;
  if (c < 0x80) return Class::Other;
  static const char32_t letters[] = {0x411, 0x430, 0x433, 0x435, 0x438, 0x43a, 0x43b, 0x43d, 0x43e, 0x440,
                                     0x441, 0x449, 0x44a, 0x1780, 0x1785, 0x178f, 0x1793, 0x1796, 0x179f,
                                     0x17a2, 0x4f5c, 0x5728, 0x5929, 0x5de5, 0x60f3, 0x6211};
  static const char32_t others[] = {0x17b6, 0x17b7, 0x17c1, 0x17c2, 0x17cb, 0x200d, 0x2705, 0xfe0f,
                                    0xff5e, 0x1f32b, 0x1f601, 0x1f636, 0x1f680, 0x1f999};
  for (char32_t l : letters)
    if (c == l) return Class::Letter;
  for (char32_t o : others)
    if (c == o) return Class::Other;
  throw std::logic_error("gguf: a code point outside the check text was classified");
}

struct Text {
  std::vector<char32_t> cp;
  std::vector<size_t> at;  // byte offset of each code point, and the end
  std::vector<Class> cls;
};

Text decode(const std::string& s) {
  Text t;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = n == 1 ? b : b & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) c = c << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    t.at.push_back(i);
    t.cp.push_back(c);
    t.cls.push_back(class_of(c));
    i += n;
  }
  t.at.push_back(s.size());
  return t;
}

// The length (in code points) of the pattern's match at `i`, Oniguruma's leftmost alternative with
// its backtracking written out; `digits` is \p{N}'s repeat (3 or 1).
size_t match_at(const Text& t, size_t i, size_t digits) {
  const size_t n = t.cp.size();
  auto is = [&](size_t k, Class c) { return k < n && t.cls[k] == c; };
  auto ws = [&](size_t k) { return is(k, Class::Space) || is(k, Class::Newline); };
  auto lower = [&](size_t k) { return k < n && t.cp[k] < 0x80 ? static_cast<char32_t>(t.cp[k] | 0x20) : char32_t{0}; };
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (t.cp[i] == '\'') {
    const char32_t a = lower(i + 1), b = lower(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t k = i;
    if (!is(k, Class::Newline) && !is(k, Class::Letter) && !is(k, Class::Number) && is(k + 1, Class::Letter)) ++k;
    if (is(k, Class::Letter)) {
      while (is(k, Class::Letter)) ++k;
      return k - i;
    }
  }
  // \p{N}{1,digits}
  if (is(i, Class::Number)) {
    size_t k = i;
    while (k - i < digits && is(k, Class::Number)) ++k;
    return k - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  {
    size_t k = i + (t.cp[i] == ' ' ? 1 : 0);
    if (is(k, Class::Other)) {
      while (is(k, Class::Other)) ++k;
      while (is(k, Class::Newline)) ++k;
      return k - i;
    }
  }
  size_t r = i;
  while (ws(r)) ++r;
  // \s*[\r\n]+ : up to the last newline of the run
  for (size_t k = r; k-- > i;)
    if (is(k, Class::Newline)) return k + 1 - i;
  // \s+(?!\S) : the run to the end, or all of it but its last
  if (r > i && (r == n || r - i >= 2)) return r == n ? r - i : r - i - 1;
  // \s+
  if (r > i) return r - i;
  throw std::logic_error("gguf: the split pattern matched nothing");
}


[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw UnsupportedError(Where(where), "llama.cpp's converter names a tokenizer by its output, and dcpctl cannot run this one: " +
                                           what + " (tokenizer.ggml.pre)");
}

bool absent_or(const json& j, const char* key, const json& want) { return !j.contains(key) || j[key].is_null() || j[key] == want; }

// The ids the post-processor puts before and after the sequence.
void template_ids(const json& pp, std::vector<int64_t>& before, std::vector<int64_t>& after, const std::string& where) {
  const std::string type = pp.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& p : pp.value("processors", json::array())) template_ids(p, before, after, where);
    return;
  }
  if (type != "TemplateProcessing") refuse(where, "post_processor " + type);
  bool seen = false;
  for (const json& piece : pp.at("single")) {
    if (piece.contains("Sequence")) {
      if (seen || piece["Sequence"].value("id", "") != "A") refuse(where, "a TemplateProcessing other than special tokens around A");
      seen = true;
    } else if (piece.contains("SpecialToken")) {
      const std::string id = piece["SpecialToken"].at("id").get<std::string>();
      for (const json& x : pp.at("special_tokens").at(id).at("ids")) (seen ? after : before).push_back(x.get<int64_t>());
    } else {
      refuse(where, "a TemplateProcessing piece it does not know");
    }
  }
  if (!seen) refuse(where, "a TemplateProcessing without its sequence");
}

}  // namespace

const std::vector<std::string>& byte_chars() {
  static const std::vector<std::string> chars = [] {
    std::vector<std::string> out(256);
    unsigned next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const unsigned c = printable ? b : next++;
      std::string u;
      if (c < 0x80) {
        u += static_cast<char>(c);
      } else {
        u += static_cast<char>(0xC0 | (c >> 6));
        u += static_cast<char>(0x80 | (c & 0x3F));
      }
      out[b] = u;
    }
    return out;
  }();
  return chars;
}

std::string pre_digest(const json& tok, const json& config, const std::string& where) {
  if (config.is_object()) {
    const std::string cls = config.value("tokenizer_class", "");
    if (!cls.empty() && cls != "PreTrainedTokenizerFast" && cls != "TokenizersBackend")
      refuse(where, "tokenizer_class " + cls + " (transformers may rebuild its pre-tokenizer)");
    if (config.contains("add_bos_token") || config.contains("add_eos_token"))
      refuse(where, "tokenizer_config.json's add_bos_token / add_eos_token");
  }
  if (!tok.is_object()) refuse(where, "no tokenizer.json object");
  if (tok.contains("normalizer") && !tok["normalizer"].is_null()) refuse(where, "a normalizer");
  // The pre-tokenizer: Split(pattern, Isolated) then ByteLevel without its own regex.
  const json& pre = tok.value("pre_tokenizer", json());
  size_t digits = 0;
  if (pre.value("type", "") == "Sequence" && pre.value("pretokenizers", json::array()).size() == 2) {
    const json& split = pre["pretokenizers"][0];
    const json& bl = pre["pretokenizers"][1];
    const std::string pattern = split.value("pattern", json::object()).value("Regex", "");
    if (split.value("type", "") == "Split" && split.value("behavior", "") == "Isolated" && !split.value("invert", false) &&
        bl.value("type", "") == "ByteLevel" && !bl.value("add_prefix_space", true) && !bl.value("use_regex", true))
      digits = pattern == kLlama3Pattern ? 3 : pattern == kQwen2Pattern ? 1 : 0;
  }
  if (digits == 0) refuse(where, "a pre_tokenizer other than Llama 3's or Qwen2's split pattern with ByteLevel");
  const json& model = tok.value("model", json());
  if (model.value("type", "") != "BPE") refuse(where, "a model other than BPE");
  if (!absent_or(model, "dropout", json()) || model.value("byte_fallback", false) ||
      !absent_or(model, "continuing_subword_prefix", "") || !absent_or(model, "end_of_word_suffix", ""))
    refuse(where, "BPE with dropout, byte fallback or subword affixes");
  const bool ignore_merges = model.value("ignore_merges", false);
  const std::string text = kCheckText;
  for (const json& a : tok.value("added_tokens", json::array()))
    if (text.find(a.value("content", "")) != std::string::npos) refuse(where, "an added token found in the check text");

  std::map<std::string, int64_t> vocab;
  for (const auto& [k, v] : model.at("vocab").items()) vocab[k] = v.get<int64_t>();
  std::map<std::pair<std::string, std::string>, size_t> rank;
  size_t r = 0;
  for (const json& m : model.at("merges")) {
    std::pair<std::string, std::string> p;
    if (m.is_array()) {
      p = {m.at(0).get<std::string>(), m.at(1).get<std::string>()};
    } else {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) refuse(where, "a merge without a space");
      p = {s.substr(0, sp), s.substr(sp + 1)};
    }
    rank.emplace(std::move(p), r++);
  }

  std::vector<int64_t> ids, after;
  if (tok.contains("post_processor") && !tok["post_processor"].is_null()) template_ids(tok["post_processor"], ids, after, where);
  const Text t = decode(text);
  for (size_t i = 0; i < t.cp.size();) {
    const size_t len = match_at(t, i, digits);
    std::vector<std::string> sym;
    for (size_t b = t.at[i]; b < t.at[i + len]; ++b) sym.push_back(byte_chars()[static_cast<unsigned char>(text[b])]);
    i += len;
    std::string whole;
    for (const std::string& s : sym) whole += s;
    if (ignore_merges && vocab.count(whole)) {
      ids.push_back(vocab[whole]);
      continue;
    }
    for (;;) {
      size_t best = SIZE_MAX, at = 0;
      for (size_t k = 0; k + 1 < sym.size(); ++k) {
        auto it = rank.find({sym[k], sym[k + 1]});
        if (it != rank.end() && it->second < best) best = it->second, at = k;
      }
      if (best == SIZE_MAX) break;
      sym[at] += sym[at + 1];
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    for (const std::string& s : sym) {
      auto it = vocab.find(s);
      if (it == vocab.end()) refuse(where, "a symbol missing from the vocabulary ('" + s + "')");
      ids.push_back(it->second);
    }
  }
  ids.insert(ids.end(), after.begin(), after.end());
  std::string list = "[";
  for (size_t k = 0; k < ids.size(); ++k) list += (k ? ", " : "") + std::to_string(ids[k]);
  list += "]";
  return Sha256::of(list);
}

std::string pre_name(const std::string& digest) {
  // The converter's table (conversion/base.py), the digests checked by tools/gguf_oracle.py.
  static const std::map<std::string, std::string> names{
      {"0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5", "llama-bpe"},
      {"e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "qwen2"},
      // GLM's (the converter's rows for glm-4-9b-hf, GLM-4.5-Air and GLM-4.7-Flash): Llama 3's split
      // pattern over GLM's own vocabulary; not checked here, as no GLM vocabulary is at hand (a
      // digest dcpctl computes otherwise than transformers matches none and is refused).
      {"a1336059768a55c99a734006ffb02203cd450fed003e9a71886c88acf24fdbc2", "glm4"},
      {"9ca2dd618e8afaf09731a7cf6e2105b373ba6a1821559f258b272fe83e6eb902", "glm4"},
      {"cdf5f35325780597efd76153d4d1c16778f766173908894c04afc20108536267", "glm4"},
  };
  auto it = names.find(digest);
  return it == names.end() ? "" : it->second;
}

}  // namespace dcpctl::gguf
