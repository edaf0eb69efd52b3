#include "objstore/curl_api.h"

#include <dlfcn.h>

#include <string>

#include "util/error.h"

namespace dcpctl::store {

namespace {

constexpr unsigned kMinVersion = 0x075500;  // 7.85.0

template <typename F>
bool take(void* lib, const char* library, const char* name, F& f, std::string& error) {
  f = reinterpret_cast<F>(::dlsym(lib, name));
  if (!f) error = std::string(library) + " has no " + name;
  return f != nullptr;
}

}  // namespace

CurlLoad load_curl(const char* library) {
  CurlLoad l;
  // Never closed: the process keeps it (and its connections) until it exits.
  void* lib = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = ::dlerror();
    l.error = std::string("cannot load ") + library + " (" + (why ? why : "not found") + ")";
    return l;
  }
  auto fail = [&](std::string why) {
    l = CurlLoad{};
    l.error = std::move(why);
    ::dlclose(lib);
    return l;
  };
  CurlApi& a = l.api;
  decltype(&curl_version_info) version_info = nullptr;
  decltype(&curl_global_init) global_init = nullptr;
  auto has = [&](const char* name, auto& f) { return take(lib, library, name, f, l.error); };
  const bool ok = has("curl_version_info", version_info) && has("curl_global_init", global_init) &&
                  has("curl_easy_init", a.easy_init) && has("curl_easy_cleanup", a.easy_cleanup) &&
                  has("curl_easy_reset", a.easy_reset) && has("curl_easy_setopt", a.easy_setopt) &&
                  has("curl_easy_getinfo", a.easy_getinfo) && has("curl_easy_perform", a.easy_perform) &&
                  has("curl_easy_strerror", a.easy_strerror) && has("curl_slist_append", a.slist_append) &&
                  has("curl_slist_free_all", a.slist_free_all);
  if (!ok) return fail(l.error);
  const curl_version_info_data* v = version_info(CURLVERSION_NOW);
  if (!v || v->version_num < kMinVersion)
    return fail(std::string(library) + " is libcurl " + (v && v->version ? v->version : "of an unknown version") +
                "; dcpctl needs 7.85.0 or later");
  if (CURLcode rc = global_init(CURL_GLOBAL_DEFAULT); rc != CURLE_OK)
    return fail(std::string("libcurl's global initialisation failed: ") + a.easy_strerror(rc));
  return l;
}

const CurlApi& curl(const std::string& path) {
  static const CurlLoad loaded = load_curl(kCurlLibrary);
  if (!loaded.error.empty())
    throw UnsupportedError(
        Where(path),
        loaded.error + ": s3:// and gs:// paths need libcurl 7.85 or later (Debian, Ubuntu: apt-get install libcurl4)");
  return loaded.api;
}

}  // namespace dcpctl::store
