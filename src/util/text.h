// ASCII text helpers that every layer shares.
#pragma once

#include <string>

namespace dcpctl {

// `s` with its ASCII capitals lowered and every other byte kept, whatever the locale: for what is
// compared case-insensitively by its specification (HTTP header names, size units, hex digests,
// credential settings).
inline std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

}  // namespace dcpctl
