// CRC-32 (zip's) against published check values and Python's zlib.crc32; SHA-256 at the end.
#include <algorithm>
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

namespace {
// One bit at a time, straight from the definition: the reference the fast paths are held to.
uint32_t crc32_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}
}  // namespace

TEST_CASE("crc32 equals the bitwise definition at every length and alignment on every path this CPU runs") {
  // Lengths from 0 to past many 128-byte folds, at every offset of a 16-byte line, so that
  // each carry-less path (PCLMULQDQ from 64 bytes, VPCLMULQDQ from 128, a multiple of 16 each)
  // and zlib's tail all run, through each implementation this CPU has.
  std::vector<uint8_t> data(2600 + 16);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  using dcpctl::crc32_update_via;
  using dcpctl::Crc32Path;
  for (Crc32Path path : {Crc32Path::Zlib, Crc32Path::Clmul, Crc32Path::Vclmul}) {
    if (path > dcpctl::crc32_best_path()) {
      WARN("this CPU does not run CRC-32 path " << static_cast<int>(path) << ": not checked here");
      continue;
    }
    CAPTURE(static_cast<int>(path));
    size_t mismatches = 0;
    for (size_t off = 0; off < 16; ++off)
      for (size_t n = 0; n <= 2600; n += (n < 600 ? 1 : 37))
        if (crc32_update_via(path, 0, data.data() + off, n) != crc32_bitwise(data.data() + off, n)) ++mismatches;
    CHECK(mismatches == 0);
    // Continuing from a previous value: pieces of odd sizes across the fast paths' boundaries.
    uint32_t c = 0;
    size_t at = 0;
    for (size_t piece : {63, 64, 65, 1, 200, 15, 16, 17, 500, 127, 128, 129, 255, 256, 257, 500}) {
      c = crc32_update_via(path, c, data.data() + at, piece);
      at += piece;
    }
    CHECK(c == crc32_bitwise(data.data(), at));
    // All-zero and all-one buffers (the register's inversion must not be lost).
    std::vector<uint8_t> zeros(4096, 0), ones(4096, 0xFF);
    CHECK(crc32_update_via(path, 0, zeros.data(), zeros.size()) == crc32_bitwise(zeros.data(), zeros.size()));
    CHECK(crc32_update_via(path, 0, ones.data(), ones.size()) == crc32_bitwise(ones.data(), ones.size()));
  }
  CHECK(crc32_update(0, data.data(), data.size()) == crc32_bitwise(data.data(), data.size()));
}

// SHA-256 (util/sha256.h: the SHA-NI kernel, and OpenSSL's EVP) against FIPS 180-4's examples, fed whole and in pieces.
#include "util/sha256.h"

TEST_CASE("sha256 test vectors, whole and in pieces") {
  using dcpctl::Sha256;
  const bool native = GENERATE(true, false);  // the SHA-NI kernel (where the CPU has it), OpenSSL
  Sha256::use_native_for_testing(native);
  CHECK(Sha256::of("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256::of("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(Sha256::of(two) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;  // one million 'a', in pieces of odd sizes
  std::string a(997, 'a');
  size_t left = 1000000;
  while (left) {
    size_t k = std::min(left, a.size());
    h.update(a.data(), k);
    left -= k;
  }
  CHECK(h.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  Sha256::use_native_for_testing(true);
}

// The SHA-NI kernel and update_pair against OpenSSL's EVP_Digest (an implementation not dcpctl's):
// every length around a block's edges, and pairs fed in pieces that leave each stream a different
// number of bytes into a block, so the joint blocks start at different offsets of the two inputs.
#include <openssl/evp.h>

#include "random_bytes.h"

namespace {
std::string openssl_sha256(const uint8_t* p, size_t n) {
  unsigned char md[32];
  unsigned int len = 0;
  REQUIRE(EVP_Digest(p, n, md, &len, EVP_sha256(), nullptr) == 1);
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < len; ++i) s += digits[md[i] >> 4], s += digits[md[i] & 15];
  return s;
}
}  // namespace

TEST_CASE("sha256: the SHA-NI kernel and update_pair equal OpenSSL's digest") {
  using dcpctl::Sha256;
  const bool native = GENERATE(true, false);
  Sha256::use_native_for_testing(native);
  CAPTURE(native, Sha256::pairs());
  const std::vector<uint8_t> data = random_bytes(300000, 7);
  for (size_t n : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4096, 65537, 300000}) {
    CAPTURE(n);
    Sha256 h;
    h.update(data.data(), n);
    CHECK(h.hex() == openssl_sha256(data.data(), n));
  }
  // Two streams over different bytes: a head fed alone to each (0-130 bytes), then pairs of
  // pieces of varied sizes, then a tail alone; each must equal its bytes' digest.
  const uint8_t* a = data.data();
  const uint8_t* b = data.data() + 150001;
  for (size_t head_a : {0, 1, 63, 64, 100}) {
    for (size_t head_b : {0, 5, 64, 130}) {
      Sha256 x, y;
      x.update(a, head_a);
      y.update(b, head_b);
      size_t at_a = head_a, at_b = head_b, piece = 1;
      while (at_a + piece < 140000 && at_b + piece < 140000) {
        Sha256::update_pair(x, a + at_a, y, b + at_b, piece);
        at_a += piece, at_b += piece;
        piece = piece * 7 % 9973 + 1;
      }
      x.update(a + at_a, 140000 - at_a);
      y.update(b + at_b, 149999 - at_b);
      CAPTURE(head_a, head_b);
      CHECK(x.hex() == openssl_sha256(a, 140000));
      CHECK(y.hex() == openssl_sha256(b, 149999));
    }
  }
  Sha256::use_native_for_testing(true);
}
