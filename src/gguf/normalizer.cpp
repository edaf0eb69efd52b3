// tokenizer.json normalizers (gguf/normalizer.h).
#include "gguf/normalizer.h"

#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "util/error.h"

namespace dcpctl::gguf {

using nlohmann::json;

namespace {

[[noreturn]] void refuse_normalizer(const std::string& where, const std::string& what) {
  throw UnsupportedError(Where(where),
                         "the tokenizer's normalizer " + what + " is not run by dcpctl (tokenizer.ggml.pre)");
}

std::string utf8proc_mapped(const std::string& text, int options, const std::string& where) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0)
    throw FormatError(Where(where), std::string("a text to normalize that utf8proc refuses: ") + utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string rust_lowercase(const std::string& text, const std::string& where) {
  std::string out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    if (n <= 0) throw FormatError(Where(where), "a text to rust_lowercase that is not UTF-8");
    p += n, left -= n;
    utf8proc_uint8_t buf[8];
    if (c == 0x130) {  // SpecialCasing.txt: İ -> i + COMBINING DOT ABOVE
      out += "i\xcc\x87";
      continue;
    }
    const utf8proc_ssize_t m = utf8proc_encode_char(utf8proc_tolower(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(m));
  }
  return out;
}

}  // namespace

std::string normalize(const json& n, const std::string& text, const std::string& where) {
  if (n.is_null()) return text;
  if (!n.is_object() || !n.contains("type") || !n["type"].is_string()) refuse_normalizer(where, "without a type");
  const std::string type = n["type"].get<std::string>();
  if (type == "NFC") return utf8proc_mapped(text, UTF8PROC_COMPOSE, where);
  if (type == "NFD") return utf8proc_mapped(text, UTF8PROC_DECOMPOSE, where);
  if (type == "NFKC") return utf8proc_mapped(text, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, where);
  if (type == "NFKD") return utf8proc_mapped(text, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, where);
  if (type == "Lowercase") return rust_lowercase(text, where);
  if (type == "Sequence") {
    const json list = n.value("normalizers", json());
    if (!list.is_array()) refuse_normalizer(where, "Sequence without its normalizers");
    std::string s = text;
    for (const json& each : list) s = normalize(each, s, where);
    return s;
  }
  if (type == "Prepend") {
    if (!n.contains("prepend") || !n["prepend"].is_string()) refuse_normalizer(where, "Prepend without its string");
    return text.empty() ? text : n["prepend"].get<std::string>() + text;
  }
  if (type == "Replace") {
    const json pattern = n.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
        !n.contains("content") || !n["content"].is_string())
      refuse_normalizer(where, "Replace with a pattern other than a String");
    const std::string from = pattern["String"].get<std::string>(), to = n["content"].get<std::string>();
    if (from.empty()) refuse_normalizer(where, "Replace of an empty String");
    std::string out;
    size_t at = 0;
    for (size_t hit; (hit = text.find(from, at)) != std::string::npos; at = hit + from.size())
      out += text.substr(at, hit - at) + to;
    return out + text.substr(at);
  }
  refuse_normalizer(where, type);
}

}  // namespace dcpctl::gguf
