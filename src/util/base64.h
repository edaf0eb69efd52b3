// Base64 (RFC 4648) through OpenSSL's EVP_EncodeBlock and EVP_DecodeBlock, in the two alphabets
// dcpctl meets: the standard one with '=' padding (§4: tiktoken's BPE files) and base64url
// without padding (§5: the JWTs of GCS service-account credentials).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dcpctl {

enum class Base64 {
  Standard,  // A-Z a-z 0-9 + /, padded with '=' to a multiple of 4
  Url,       // A-Z a-z 0-9 - _, no padding
};

std::string base64_encode(std::string_view bytes, Base64 alphabet);

// nullopt unless `text` is base64 of this alphabet exactly: its characters only, '=' only as the
// padding of a standard text's last group (one or two), no padding in a url text, no length that
// leaves 6 bits over. Bits past the last whole byte are not checked (Python's base64 does not).
std::optional<std::string> base64_decode(std::string_view text, Base64 alphabet);

}  // namespace dcpctl
