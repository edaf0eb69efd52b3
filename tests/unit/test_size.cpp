// Size parsing (util/size.h): the one reader of every SIZE option, so both spellings that
// consolidate's --max-shard-size/--max-memory and bench's --sizes/--chunk were documented with.
#include <catch2/catch.hpp>

#include <string>

#include "util/error.h"
#include "util/size.h"

using namespace dcpctl;

namespace {

std::string message(const std::string& text, const std::string& what = "--max-memory") {
  try {
    parse_size(text, what);
  } catch (const UsageError& e) {
    return e.what();
  }
  FAIL("no error for '" << text << "'");
  return {};
}

}  // namespace

TEST_CASE("parse_size: decimal and binary units, case-insensitive, plain bytes") {
  const std::string w = "--max-memory";
  CHECK(parse_size("1000", w) == 1000u);
  CHECK(parse_size("4096B", w) == 4096u);
  CHECK(parse_size("5GB", w) == 5000000000u);
  CHECK(parse_size("5gb", w) == 5000000000u);
  CHECK(parse_size("2.5KB", w) == 2500u);
  CHECK(parse_size("4GiB", w) == 4294967296u);
  CHECK(parse_size("512MiB", w) == 536870912u);
  CHECK(parse_size("1.5GiB", w) == 3ull << 29);
  CHECK(parse_size("1TiB", w) == 1099511627776u);
  CHECK(parse_size("16TiB", w) == uint64_t(1) << 44);
  CHECK(parse_size("20TB", w) == 20000000000000u);  // no bench limit here (bench/sizes.h)
  // Blanks around the number and before the unit.
  CHECK(parse_size("5 gb", w) == 5000000000u);
  CHECK(parse_size("64 MiB", w) == 64u << 20);
  CHECK(parse_size(" 1KiB ", w) == 1024u);
  CHECK(parse_size("\t1KiB", w) == 1024u);
}

TEST_CASE("parse_size: fractions are exact, fractions of a byte dropped") {
  const std::string w = "--max-memory";
  CHECK(parse_size("2.5", w) == 2u);
  CHECK(parse_size("1.5B", w) == 1u);
  CHECK(parse_size("1.5KiB", w) == 1536u);
  CHECK(parse_size("0.3GiB", w) == 322122547u);  // 322122547.2
  CHECK(parse_size("4.1MB", w) == 4100000u);     // a double would make it 4099999
  CHECK(parse_size("1.0000001GiB", w) == 1073741931u);
  CHECK(parse_size("1.", w) == 1u);
  CHECK(parse_size(".5KB", w) == 500u);
  CHECK(parse_size("0.000000000001TiB", w) == 1u);                       // 1.0995 bytes
  CHECK(parse_size("1.000000000000000001TiB", w) == uint64_t(1) << 40);  // 18 decimals, the most
  CHECK(parse_size("18446744073709551615", w) == UINT64_MAX);
}

TEST_CASE("parse_size: refusals name the option and the text") {
  for (const char* bad : {"",
                          " ",
                          "0",
                          "0MiB",
                          "0.5",
                          "0.1B",
                          "0.0001KB",
                          "-1",
                          "+1",
                          "GB",
                          "MiB",
                          ".",
                          "1XB",
                          "4MiBs",
                          "4 MiB 2",
                          "1.2.3",
                          "1e3",
                          "0x10",
                          "1,5GB",
                          "18446744073709551616",
                          "20000000000000000000",
                          "16777216TiB",
                          "1.0000000000000000001GiB"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_size(bad, "--max-memory"), UsageError);
  }
  // Less than one byte would read as 0, which --max-memory takes for "automatic".
  CHECK(message("0.5").find("--max-memory '0.5': less than one byte") != std::string::npos);
  CHECK(message("0").find("less than one byte") != std::string::npos);
  CHECK(message("1XB", "--max-shard-size").find("--max-shard-size '1XB': unknown unit 'XB'") != std::string::npos);
  CHECK(message("20000000000000000000").find("too large") != std::string::npos);
}

TEST_CASE("parse_size: a bare K, M, G or T is ambiguous") {
  for (const char* bad : {"4K", "4k", "4M", "1g", "2 T", "1.5G"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_size(bad, "--sizes"), UsageError);
  }
  const std::string m = message("4K", "--sizes");
  CHECK(m.find("--sizes '4K'") != std::string::npos);
  CHECK(m.find("write KiB (binary) or KB (decimal)") != std::string::npos);
}
