#include "write/manifest.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "item/item_reader.h"
#include "item/window.h"
#include "meta/checkpoint.h"
#include "store/file.h"
#include "util/crc32.h"
#include "util/dtype.h"
#include "util/parallel.h"
#include "util/sha256.h"
#include "write/output.h"
#include "write/write_hash.h"

namespace dcpctl {

namespace {

constexpr uint64_t kHashWindow = 16ull << 20;

// Every tensor of the checkpoint (or file) at `dir`, hashed in C order window by window.
std::map<std::string, std::string> tensor_digests(const std::string& dir, unsigned threads, ManifestAlgorithm alg) {
  Checkpoint ck = open_checkpoint(dir);
  ItemReader reader(ck);
  const std::vector<TensorMeta>& ts = ck.md.tensors;
  std::vector<std::string> digests(ts.size());
  parallel_for(ts.size(), std::max(1u, std::min(threads, 4u)), [&](size_t i) {
    const TensorMeta& t = ts[i];
    if (!t.dtype) return;
    const uint64_t item = itemsize(*t.dtype);
    const std::vector<Window> plan = plan_windows(t.shape, std::max<uint64_t>(1, kHashWindow / item));
    WindowReader windows(reader, nullptr);
    windows.expect(t, plan);
    uint64_t most = 0;
    for (const Window& w : plan) most = std::max(most, w.numel * item);
    std::vector<uint8_t> buf(most), scratch(most);
    Sha256 h;
    uint32_t crc = 0;
    for (const Window& w : plan) {
      windows.fill(t, w, buf.data(), scratch.data());
      if (alg == ManifestAlgorithm::Crc32)
        crc = crc32_update(crc, buf.data(), w.numel * item);
      else
        h.update(buf.data(), w.numel * item);
    }
    digests[i] = alg == ManifestAlgorithm::Crc32 ? crc32_hex(crc) : h.hex();
  });
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < ts.size(); ++i)
    if (!digests[i].empty()) out[ts[i].fqn] = digests[i];
  return out;
}

}  // namespace

namespace {
std::string& tool_version() {
  static std::string v = "unknown";
  return v;
}
}  // namespace

void set_manifest_tool_version(const std::string& version) {
  tool_version() = version;
}
const std::string& manifest_tool_version() {
  return tool_version();
}

Manifest make_manifest(const std::string& staged, const std::string& final_path, const std::string& command,
                       const std::string& source, unsigned threads, bool tensors, uint64_t* read_back,
                       ManifestAlgorithm alg) {
  Manifest m;
  m.algorithm = alg;
  m.tool_version = manifest_tool_version();
  m.command = command;
  m.source = source;
  // What was hashed as it was written is not read again (but for the ranges its writes did not show).
  std::atomic<uint64_t> read{0};
  auto known = [&](const std::string& path) -> std::optional<FileDigest> {
    std::optional<WrittenDigest> w = written_digest(path);
    if (!w) return std::nullopt;
    read += w->read_back;
    return w->digest;
  };
  uint64_t unknown = 0;
  m.files = digest_files(staged, threads, known, &unknown, alg);
  if (read_back) *read_back = read + unknown;
  if (tensors) m.tensors = tensor_digests(staged, threads, alg);
  if (!is_directory(staged) && m.files.size() == 1) {  // a file under its temporary name: listed under its own
    std::string name = final_path.substr(final_path.rfind('/') == std::string::npos ? 0 : final_path.rfind('/') + 1);
    FileDigest d = m.files.begin()->second;
    m.files.clear();
    m.files[name] = d;
  }
  return m;
}

void write_manifest_file(const std::string& path, const Manifest& m, const std::string& beside,
                         UploadSession* uploads) {
  const std::string target = beside.empty() ? manifest_path(path) : beside + "." + kManifestFile;
  const std::string text = m.to_json().dump(2) + "\n";
  OutputFile f(target, uploads);
  f.append(text.data(), text.size());
  f.commit();
}

}  // namespace dcpctl
