// libcurl opened at run time (objstore/curl_api.h): the system's libcurl.so.4 serves; a library that
// is missing, or is not libcurl, is refused with what is wrong, never a crash on a null function.
#include <catch2/catch.hpp>

#include <string>

#include "objstore/curl_api.h"

using namespace dcpctl::store;

TEST_CASE("curl api: the system's libcurl loads, every function taken") {
  CurlLoad l = load_curl(kCurlLibrary);
  REQUIRE(l.error.empty());
  const CurlApi& a = l.api;
  for (bool has : {a.easy_init != nullptr, a.easy_cleanup != nullptr, a.easy_reset != nullptr, a.easy_setopt != nullptr,
                   a.easy_getinfo != nullptr, a.easy_perform != nullptr, a.easy_strerror != nullptr,
                   a.slist_append != nullptr, a.slist_free_all != nullptr})
    CHECK(has);
  CURL* h = a.easy_init();
  REQUIRE(h);
  CHECK(a.easy_setopt(h, CURLOPT_URL, "http://127.0.0.1:1/") == CURLE_OK);
  CHECK(a.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK);  // 7.85's, checked at load
  CHECK(std::string(a.easy_strerror(CURLE_OK)) == "No error");
  a.easy_cleanup(h);
  CHECK_NOTHROW(curl("s3://bucket/ckpt"));
}

TEST_CASE("curl api: a library that is missing or is not libcurl is refused, saying why") {
  CurlLoad missing = load_curl("libdcpctl-no-such-curl.so.4");
  CHECK(missing.error.rfind("cannot load libdcpctl-no-such-curl.so.4 (", 0) == 0);
  CHECK(missing.api.easy_init == nullptr);
  CurlLoad zlib = load_curl("libz.so.1");  // loads, but holds none of libcurl's functions
  CHECK(zlib.error == "libz.so.1 has no curl_version_info");
  CHECK(zlib.api.easy_setopt == nullptr);
}
