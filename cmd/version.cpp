#include "cmd/version.h"

#include <dlfcn.h>

#include "build_info.h"

namespace dcpctl::cli {
namespace {

// CUDA is probed through the driver library at run time, so the binary runs (and says so)
// on machines without a GPU or driver.
std::string cuda_status() {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return "not usable (no NVIDIA driver: libcuda.so.1 not found)";
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(h, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(h, "cuDeviceGetCount"));
  std::string s;
  int n = 0;
  if (!init || !count) s = "not usable (driver library lacks cuInit)";
  else if (int rc = init(0); rc != 0) s = "not usable (cuInit failed with error " + std::to_string(rc) + ")";
  else if (count(&n) != 0 || n == 0) s = "not usable (no CUDA device)";
  else s = "usable (" + std::to_string(n) + " device" + (n > 1 ? "s" : "") + ")";
  ::dlclose(h);
  return s;
}

}  // namespace

std::string version_text() {
  return std::string("dcpctl ") + DCPCTL_VERSION + "\nLibTorch " + DCPCTL_LIBTORCH_VERSION + " (" +
         DCPCTL_LIBTORCH_SOURCE + ")\nCUDA toolkit at build: " + DCPCTL_CUDA_TOOLKIT + "\nCUDA: " + cuda_status();
}

}  // namespace dcpctl::cli
