// A file of `n` pseudo-random bytes (random_bytes(n, seed)) in `dir`, removed when the test ends:
// for the tests of reads past and through the page cache (the build tree takes O_DIRECT, tmpfs
// does not).
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "random_bytes.h"

struct TempFile {
  std::string path;
  std::vector<uint8_t> bytes;
  TempFile(const std::string& dir, size_t n, unsigned seed = 7) : bytes(random_bytes(n, seed)) {
    path = dir + "/dcpctl-test-file-XXXXXX";
    int fd = ::mkstemp(path.data());
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, bytes.data(), n) == static_cast<ssize_t>(n));
    ::close(fd);
  }
  ~TempFile() { std::remove(path.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
};
