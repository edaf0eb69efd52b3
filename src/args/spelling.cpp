#include "args/spelling.h"

#include <cctype>

namespace dcpctl {

namespace {

bool flag_char(char c) {
  return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-';
}

}  // namespace

std::string spell(Spelling s, const std::string& text) {
  if (s == Spelling::Cli) return text;
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    // A flag: "--" then a lower-case letter, not inside a word ("a--b" is left alone).
    const bool starts = text.compare(i, 2, "--") == 0 && i + 2 < text.size() &&
                        std::islower(static_cast<unsigned char>(text[i + 2])) &&
                        (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1])));
    if (!starts) {
      out += text[i++];
      continue;
    }
    for (i += 2; i < text.size() && flag_char(text[i]); ++i) out += text[i] == '-' ? '_' : text[i];
  }
  return out;
}

UsageError usage_error(Spelling s, Where where, const std::string& text) {
  return UsageError(std::move(where), spell(s, text));
}

}  // namespace dcpctl
