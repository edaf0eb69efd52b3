#include "cmd/version.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "build_info.h"

namespace dcpctl::cli {
namespace {

// "570.86.15" from /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX [Open ]Kernel Module
// [for x86_64]  570.86.15  Release Build ..."): the first dotted number after "Module"; "" without one.
std::string kernel_driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line, word;
  if (!std::getline(f, line)) return "";
  std::istringstream in(line.substr(std::min(line.size(), line.find("Module"))));
  while (in >> word)
    if (word.find('.') != std::string::npos && word.find_first_not_of("0123456789.") == std::string::npos) return word;
  return "";
}

// CUDA is probed through the driver library at run time (dlopen, never linked), so the binary
// runs (and says so) on machines without a GPU or driver. Prints the driver's version and one
// line per device, so that a report made on a GPU machine names what it ran on.
std::string cuda_status() {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return "not usable (no NVIDIA driver: libcuda.so.1 not found)";
  auto sym = [h](const char* name) { return ::dlsym(h, name); };
  auto init = reinterpret_cast<int (*)(unsigned)>(sym("cuInit"));
  auto count = reinterpret_cast<int (*)(int*)>(sym("cuDeviceGetCount"));
  auto driver = reinterpret_cast<int (*)(int*)>(sym("cuDriverGetVersion"));
  auto get = reinterpret_cast<int (*)(int*, int)>(sym("cuDeviceGet"));
  auto name = reinterpret_cast<int (*)(char*, int, int)>(sym("cuDeviceGetName"));
  auto mem = reinterpret_cast<int (*)(size_t*, int)>(sym("cuDeviceTotalMem_v2"));
  auto attr = reinterpret_cast<int (*)(int*, int, int)>(sym("cuDeviceGetAttribute"));
  std::string s;
  int n = 0, v = 0;
  if (!init || !count)
    s = "not usable (driver library lacks cuInit)";
  else if (int rc = init(0); rc != 0)
    s = "not usable (cuInit failed with error " + std::to_string(rc) + ")";
  else if (count(&n) != 0 || n == 0)
    s = "not usable (no CUDA device)";
  else
    s = "usable (" + std::to_string(n) + " device" + (n > 1 ? "s" : "") + ")";
  std::string drv = kernel_driver_version();  // cuDriverGetVersion needs no cuInit
  if (driver && driver(&v) == 0 && v > 0)
    drv += (drv.empty() ? "CUDA " : ", CUDA ") + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  if (!drv.empty()) s += "; driver " + drv;
  for (int i = 0; i < n && get && name; ++i) {
    int dev = 0, major = 0, minor = 0;
    char buf[256] = {0};
    size_t bytes = 0;
    if (get(&dev, i) != 0 || name(buf, sizeof buf - 1, dev) != 0) continue;
    s += "\nCUDA device " + std::to_string(i) + ": " + buf;
    if (mem && mem(&bytes, dev) == 0) {
      char gib[32];
      std::snprintf(gib, sizeof gib, ", %.1f GiB", static_cast<double>(bytes) / (1u << 30));
      s += gib;
    }
    // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
    if (attr && attr(&major, 75, dev) == 0 && attr(&minor, 76, dev) == 0)
      s += ", compute capability " + std::to_string(major) + "." + std::to_string(minor);
  }
  ::dlclose(h);
  return s;
}

}  // namespace

std::string version_text() {
  return std::string("dcpctl ") + DCPCTL_VERSION + "\nLibTorch " + DCPCTL_LIBTORCH_VERSION + " (" +
         DCPCTL_LIBTORCH_SOURCE + ")\nCUDA toolkit at build: " + DCPCTL_CUDA_TOOLKIT + "\nCUDA: " + cuda_status();
}

}  // namespace dcpctl::cli
