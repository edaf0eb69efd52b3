#include "util/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace dcpctl {

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

// libcrypto fails here only when out of memory: not a condition of the input.
static void check(int ok, const char* what) {
  if (ok != 1) throw std::runtime_error(std::string("OpenSSL SHA-256: ") + what + " failed");
}

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  if (!ctx_->md) throw std::bad_alloc();
  check(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr), "init");
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t n) {
  if (n) check(EVP_DigestUpdate(ctx_->md, data, n), "update");
}

std::array<uint8_t, 32> Sha256::finish() {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  check(EVP_DigestFinal_ex(ctx_->md, out.data(), &len), "final");
  return out;
}

std::string Sha256::hex() {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : finish()) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

}  // namespace dcpctl
