#include "util/span_reader.h"

namespace dcpctl {

std::string_view SpanReader::line(const char* what) {
  const void* nl = std::memchr(span_.data + pos_, '\n', remaining());
  if (!nl) fail(std::string("unterminated ") + what + " (no newline before end of data)");
  size_t len = static_cast<size_t>(static_cast<const uint8_t*>(nl) - (span_.data + pos_));
  std::string_view s(reinterpret_cast<const char*>(span_.data + pos_), len);
  pos_ += len + 1;
  return s;
}

void SpanReader::fail_short(uint64_t n, const char* what) const {
  fail(std::string(what) + " of " + std::to_string(n) + " bytes runs past the end of the data (" +
       std::to_string(remaining()) + " bytes left)");
}

}  // namespace dcpctl
