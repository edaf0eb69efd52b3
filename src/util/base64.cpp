#include "util/base64.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace dcpctl {

namespace {

bool in_alphabet(char c, Base64 alphabet) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  return alphabet == Base64::Standard ? c == '+' || c == '/' : c == '-' || c == '_';
}

}  // namespace

std::string base64_encode(std::string_view bytes, Base64 alphabet) {
  if (bytes.size() > (size_t(1) << 30)) throw std::length_error("base64_encode: more than 1 GiB");
  std::string out((bytes.size() + 2) / 3 * 4 + 1, '\0');  // EVP_EncodeBlock writes a NUL after
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  if (alphabet == Base64::Url) {
    while (!out.empty() && out.back() == '=') out.pop_back();
    for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text, Base64 alphabet) {
  // EVP_DecodeBlock strips surrounding whitespace and reads padding anywhere in the last group, so
  // what it takes is checked here first; it counts in int.
  if (text.size() > (size_t(1) << 30)) return std::nullopt;
  size_t pad = 0;
  if (alphabet == Base64::Standard) {
    if (text.size() % 4 != 0) return std::nullopt;
    while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  } else if (text.size() % 4 == 1) {
    return std::nullopt;  // 6 bits cannot end a byte
  }
  for (size_t i = 0; i + pad < text.size(); ++i)
    if (!in_alphabet(text[i], alphabet)) return std::nullopt;
  std::string in(text);
  if (alphabet == Base64::Url) {
    for (char& c : in) c = c == '-' ? '+' : c == '_' ? '/' : c;
    pad = (4 - in.size() % 4) % 4;
    in.append(pad, '=');
  }
  std::string out(in.size() / 4 * 3, '\0');
  if (in.empty()) return out;
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  if (n < 0 || static_cast<size_t>(n) != out.size()) return std::nullopt;
  out.resize(out.size() - pad);  // EVP_DecodeBlock counts the padding's zero bytes
  return out;
}

}  // namespace dcpctl
