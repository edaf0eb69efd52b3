// Finding and loading libdcpctl_torch.so (see torchlib.h). No LibTorch header here.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "torchlib/torchlib.h"

// Defined by the plugin's objects when a program links them (the tests); null in dcpctl itself.
extern "C" __attribute__((weak)) const dcpctl::torchlib::Api* dcpctl_torchlib_api();

namespace dcpctl::torchlib {

namespace {

std::string executable_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

using EntryFn = const Api* (*)();

const Api* load(std::string& why) {
  if (&::dcpctl_torchlib_api != nullptr) return ::dcpctl_torchlib_api();
  std::vector<std::string> tried;
  if (const char* forced = std::getenv("DCPCTL_TORCH_PLUGIN"); forced && *forced)
    tried.emplace_back(forced);
  else
    tried = plugin_candidates(kPlugin);
  for (const std::string& path : tried) {
    if (!exists(path)) continue;
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      why = path + " does not load: " + (e ? e : "?");
      return nullptr;
    }
    auto entry = reinterpret_cast<EntryFn>(::dlsym(h, kEntry));
    if (!entry) {
      why = path + " lacks " + kEntry;
      return nullptr;
    }
    const Api* api = entry();
    if (!api || api->abi_version != kAbiVersion) {
      why = path + " is from another build of dcpctl (plugin interface " + std::to_string(api ? api->abi_version : 0) +
            ", this dcpctl needs " + std::to_string(kAbiVersion) + ")";
      return nullptr;
    }
    return api;
  }
  why = std::string(kPlugin) + " was not found (looked for ";
  for (size_t i = 0; i < tried.size(); ++i) why += (i ? ", " : "") + tried[i];
  why += ")";
  return nullptr;
}

}  // namespace

std::vector<std::string> plugin_candidates(const std::string& name) {
  std::string dir = executable_dir();
  if (dir.empty()) return {name};
  std::vector<std::string> out{dir + name, dir + "../lib/dcpctl/" + name, dir + "../lib/" + name};
  for (const std::string& p : out)
    if (exists(p)) return {p};
  return out;
}

const Api& api() {
  static std::once_flag once;
  static const Api* loaded = nullptr;
  static std::string why;
  std::call_once(once, [] { loaded = load(why); });
#if DCPCTL_WITHOUT_TORCH
  const char* remedy =
      "; this dcpctl was built without it (-DDCPCTL_WITH_TORCH=OFF, as tools/dev.sh demo builds it on a fresh "
      "machine): build it with LibTorch (tools/dev.sh build), or set DCPCTL_TORCH_PLUGIN to a plugin's path";
#else
  const char* remedy = "; reinstall dcpctl, or set DCPCTL_TORCH_PLUGIN to the plugin's path";
#endif
  if (!loaded)
    throw UnsupportedError(
        Where(), "a torchrun rank needs LibTorch (c10d's process group), which dcpctl loads from its plugin, and " +
                     why + remedy);
  return *loaded;
}

}  // namespace dcpctl::torchlib
