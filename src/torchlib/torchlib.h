// LibTorch behind a plugin. The dcpctl binary does not link LibTorch: loading libtorch_cpu
// (~450 MB, its static initialisers and relocations) costs 0.2 s of CPU, and from a cold cache
// 236 MB of reads and 0.4 s, which no command outside torchrun pays. What dcpctl takes from
// LibTorch lives in libdcpctl_torch.so, loaded on first use:
//   - the process group under torchrun (c10d's TCPStore and ProcessGroupGloo),
//   - caffe2's PyTorchStreamReader and PyTorchStreamWriter, the torch.save zip container: dcpctl
//     reads and writes archives itself (item/zip_directory.h, write/torch_zip_writer.h); these are
//     the oracles tests/unit/test_zip_directory.cpp and test_torch_zip_writer.cpp check them against.
// Everything around them (record checks, pickles, streaming CRCs, the commit protocol) stays in
// the library proper; the plugin is the thinnest layer over LibTorch that could be drawn.
//
// Programs that link the plugin's objects directly (the test binaries) use them without dlopen:
// the entry point below is declared weak, so it resolves to their copy when present.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "store/source.h"
#include "util/error.h"

namespace dcpctl {
// The process group's interface is dist/'s (dist/group.h); the plugin implements it.
class Group;
struct LaunchEnv;
enum class Backend;
}  // namespace dcpctl

namespace dcpctl::torchlib {

// A torch.save archive's zip directory. Errors are FormatError naming `where` (or the error the
// ByteSource raised while the directory was read).
class ZipIndex {
 public:
  virtual ~ZipIndex() = default;
  virtual std::vector<std::string> records() = 0;
  virtual bool has(const std::string& name) = 0;
  virtual uint64_t size(const std::string& name) = 0;           // of the record's bytes
  virtual uint64_t offset(const std::string& name) = 0;         // of the record's bytes in the source
  virtual uint64_t header_offset(const std::string& name) = 0;  // of its zip local header
};

// Writes records in order through `sink`, which must not throw (miniz is C) and returns the
// bytes it took. Errors are IoError naming `where`.
class ZipWriter {
 public:
  virtual ~ZipWriter() = default;
  // A null `data` with n > 0 makes miniz write the record's metadata only, and hand the sink a
  // null pointer for its n bytes.
  virtual void record(const std::string& name, const void* data, size_t n) = 0;
  virtual void finish() = 0;
};

using Sink = std::function<size_t(const void*, size_t)>;

// What the plugin exports. Both sides are built from the same sources by the same compiler, so
// C++ types cross; abi_version guards against a plugin left over from another build.
struct Api {
  uint32_t abi_version;
  const char* torch_version;
  std::unique_ptr<ZipIndex> (*open_zip)(std::shared_ptr<const ByteSource> src, const Where& where);
  std::unique_ptr<ZipWriter> (*zip_writer)(Sink sink, const Where& where);
  std::unique_ptr<Group> (*connect_group)(const LaunchEnv& env, std::chrono::seconds timeout, Backend backend);
};

inline constexpr uint32_t kAbiVersion = 1;
inline constexpr const char* kPlugin = "libdcpctl_torch.so";
inline constexpr const char* kEntry = "dcpctl_torchlib_api";

// The plugin's API, loaded on first call (thread-safe). Throws UnsupportedError naming every
// place it looked when the plugin is missing or does not load.
const Api& api();

// Where dcpctl looks for its plugins (`name`): beside the executable (the build tree), then
// ../lib/dcpctl/ and ../lib/ (an installed prefix, a release archive); the first that exists.
std::vector<std::string> plugin_candidates(const std::string& name);

// Inside the plugin (torchlib/plugin/c10d_group.cpp): the c10d process group behind Api::connect_group.
std::unique_ptr<Group> connect_store_group(const LaunchEnv& env, std::chrono::seconds timeout, Backend backend);

}  // namespace dcpctl::torchlib

extern "C" const dcpctl::torchlib::Api* dcpctl_torchlib_api();
