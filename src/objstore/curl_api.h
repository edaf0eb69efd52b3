// libcurl, opened on the first request that needs it.
//
// dcpctl does not link libcurl: only s3:// and gs:// paths (and the credential chains behind
// them) make HTTP requests, and libcurl brings 26 more shared objects on Debian 12 (GnuTLS,
// nghttp2, libssh2, Kerberos, LDAP, IDN...) that every process, however local its work, loaded
// and relocated at start: 19 ms of a cold start (page cache dropped) and most of the dynamic
// loader's work warm. The first call to curl() opens libcurl.so.4 (the library's soname since
// 7.16, 2006) with dlopen, takes the functions dcpctl calls, checks the version (7.85 or later:
// CURLOPT_AWS_SIGV4, CURLOPT_PROTOCOLS_STR) and runs curl_global_init; where any of that fails,
// every call throws an UnsupportedError (exit 5, as for a missing LibTorch plugin) saying what is
// missing (on Debian and Ubuntu, the package libcurl4).
#pragma once

#include <curl/curl.h>

#include <string>

namespace dcpctl::store {

struct CurlApi {
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_cleanup) easy_cleanup;
  decltype(&curl_easy_reset) easy_reset;
  decltype(&curl_easy_setopt) easy_setopt;  // (CURL*, CURLoption, ...): the value as libcurl reads it
  decltype(&curl_easy_getinfo) easy_getinfo;
  decltype(&curl_easy_perform) easy_perform;
  decltype(&curl_easy_strerror) easy_strerror;
  decltype(&curl_slist_append) slist_append;
  decltype(&curl_slist_free_all) slist_free_all;
};

// What opening `library` gives: its functions, or why it cannot serve (not found, a function
// missing, older than 7.85, curl_global_init failed). curl() opens kCurlLibrary once.
inline constexpr const char* kCurlLibrary = "libcurl.so.4";
struct CurlLoad {
  CurlApi api{};
  std::string error;  // empty when it loaded
};
CurlLoad load_curl(const char* library);

// The loaded library; throws UnsupportedError naming `path` (what the request was for) when it cannot be
// loaded (the same error every time).
const CurlApi& curl(const std::string& path = {});

}  // namespace dcpctl::store
