// util/base64.h: RFC 4648's test vectors in both alphabets, random bytes against Python's base64
// (b64encode and urlsafe_b64encode with the padding stripped, the rows below written by Python
// 3.11's base64 module), and every malformed text either decoder refuses.
#include <catch2/catch.hpp>

#include <string>

#include "util/base64.h"

using namespace dcpctl;

namespace {

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

}  // namespace

TEST_CASE("base64: RFC 4648 section 10's vectors, standard and url") {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    INFO(plain);
    CHECK(base64_encode(plain, Base64::Standard) == coded);
    CHECK(base64_decode(coded, Base64::Standard) == std::string(plain));
    std::string url = coded;
    while (!url.empty() && url.back() == '=') url.pop_back();
    CHECK(base64_encode(plain, Base64::Url) == url);
    CHECK(base64_decode(url, Base64::Url) == std::string(plain));
  }
  CHECK(base64_encode(std::string("\xfb\xff\xbf", 3), Base64::Standard) == "+/+/");
  CHECK(base64_encode(std::string("\xfb\xff\xbf", 3), Base64::Url) == "-_-_");
}

TEST_CASE("base64: random bytes as Python's base64 codes them") {
  struct Row {
    const char* hex;
    const char* standard;
    const char* url;
  };
  const Row rows[] = {
      {"", "", ""},
      {"a5", "pQ==", "pQ"},
      {"4dca", "Tco=", "Tco"},
      {"182530", "GCUw", "GCUw"},
      {"bb1d6d13", "ux1tEw==", "ux1tEw"},
      {"2cded6237b", "LN7WI3s=", "LN7WI3s"},
      {"2ed91e3f721f", "LtkeP3If", "LtkeP3If"},
      {"cb1971174494d6", "yxlxF0SU1g==", "yxlxF0SU1g"},
      {"493c9d5c3460be31201e69fedaa0eee8b9997f5c7c2999fdafe593253cd654",
       "STydXDRgvjEgHmn+2qDu6LmZf1x8KZn9r+WTJTzWVA==", "STydXDRgvjEgHmn-2qDu6LmZf1x8KZn9r-WTJTzWVA"},
      {"af4dfad71427a0aeb3fee9232f8af2211f9ee491c5b10becb5563bfc1e6f9342",
       "r0361xQnoK6z/ukjL4ryIR+e5JHFsQvstVY7/B5vk0I=", "r0361xQnoK6z_ukjL4ryIR-e5JHFsQvstVY7_B5vk0I"},
      {"7ecbc8fe2955e5cd8e46dc8ed4b7c2764d2a5a4d767706f85d8690024ad6bda340",
       "fsvI/ilV5c2ORtyO1LfCdk0qWk12dwb4XYaQAkrWvaNA", "fsvI_ilV5c2ORtyO1LfCdk0qWk12dwb4XYaQAkrWvaNA"},
      {"1be9c8cbccc935f6cd1f61226ae15338ae1a34004d33ba0d246ac04c81b1baf23e3bf9eef5f79f2b4934af87f5520b69b94b0d982e85bb5"
       "5b672a872637acd7466fcb60e0e8ff18463b0e4b2ba29703474f064ac68f700f5b02b3dc666f45bdeaa2ccaedcd2b5157410e4dee4af2b3"
       "4f430a073447de636c0e806c957ba684d6431fb5ead7424d09e15d024c5848f23d1fa6f7361d7f618d1532e70e20e2a6668de7f47e8467e"
       "546d53ec8e2a1257bdb256c9b3e4fbb498146ef7030cbf9537252dcceadd764b6a32fbb09adeae109c4a997203975352b878b145c8a42d8"
       "84cf4cfda72d8e1d5dd92589082d852a7122873ee805add58942167a385286195c",
       "G+nIy8zJNfbNH2EiauFTOK4aNABNM7oNJGrATIGxuvI+O/nu9fefK0k0r4f1UgtpuUsNmC6Fu1W2cqhyY3rNdGb8tg4Oj/"
       "GEY7DksropcDR08GSsaPcA9bArPcZm9FveqizK7c0rUVdBDk3uSvKzT0MKBzRH3mNsDoBslXumhNZDH7Xq10JNCeFdAkxYSPI9H6b3Nh1/"
       "YY0VMucOIOKmZo3n9H6EZ+VG1T7I4qEle9slbJs+T7tJgUbvcDDL+VNyUtzOrddktqMvuwmt6uEJxKmXIDl1NSuHixRcikLYhM9M/"
       "actjh1d2SWJCC2FKnEihz7oBa3ViUIWejhShhlc",
       "G-nIy8zJNfbNH2EiauFTOK4aNABNM7oNJGrATIGxuvI-O_nu9fefK0k0r4f1UgtpuUsNmC6Fu1W2cqhyY3rNdGb8tg4Oj_"
       "GEY7DksropcDR08GSsaPcA9bArPcZm9FveqizK7c0rUVdBDk3uSvKzT0MKBzRH3mNsDoBslXumhNZDH7Xq10JNCeFdAkxYSPI9H6b3Nh1_"
       "YY0VMucOIOKmZo3n9H6EZ-VG1T7I4qEle9slbJs-T7tJgUbvcDDL-VNyUtzOrddktqMvuwmt6uEJxKmXIDl1NSuHixRcikLYhM9M_"
       "actjh1d2SWJCC2FKnEihz7oBa3ViUIWejhShhlc"},
  };
  for (const Row& r : rows) {
    INFO(r.hex);
    const std::string bytes = unhex(r.hex);
    CHECK(base64_encode(bytes, Base64::Standard) == r.standard);
    CHECK(base64_encode(bytes, Base64::Url) == r.url);
    CHECK(base64_decode(r.standard, Base64::Standard) == bytes);
    CHECK(base64_decode(r.url, Base64::Url) == bytes);
  }
}

TEST_CASE("base64: malformed text is refused") {
  for (const char* bad : {"Zm9", "Zm9vY", "Zm9v+g", "Zm8", "====", "Z===", "Zm=v", "Zm9v Zm9v", " Zm9v", "Zm9v\n",
                          "Zm-v", "Zm_v", "Zg=a"}) {
    INFO(bad);
    CHECK_FALSE(base64_decode(bad, Base64::Standard));
  }
  for (const char* bad : {"Zm9vY", "Zm9v+g", "Zm9v/g", "Zm8=", "Zg==", " Zm9v", "Zm9v\n"}) {
    INFO(bad);
    CHECK_FALSE(base64_decode(bad, Base64::Url));
  }
}
