// CRC-32 (zip's) against published check values and Python's zlib.crc32.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "util/crc32.h"

using dcpctl::crc32_update;

TEST_CASE("crc32 check values") {
  CHECK(crc32_update(0, "", 0) == 0u);
  CHECK(crc32_update(0, "123456789", 9) == 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
  // python3 -c "import zlib; print(hex(zlib.crc32(b'The quick brown fox jumps over the lazy dog')))"
  std::string fox = "The quick brown fox jumps over the lazy dog";
  CHECK(crc32_update(0, fox.data(), fox.size()) == 0x414FA339u);
}

TEST_CASE("crc32 fed in pieces equals crc32 of the whole") {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  uint32_t whole = crc32_update(0, data.data(), data.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    uint32_t c = crc32_update(0, data.data(), cut);
    c = crc32_update(c, data.data() + cut, data.size() - cut);
    CHECK(c == whole);
  }
}
