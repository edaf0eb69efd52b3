#include "report/integrity.h"

#include <sys/stat.h>

#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/frameworks.h"
#include "meta/layouts.h"
#include "store/file.h"
#include "util/parallel.h"
#include "util/sha256.h"
#include "util/text.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxManifestBytes = 64ull << 20;
constexpr size_t kReadWindow = 1u << 20;  // megatron reads 1 MiB at a time too

bool hex_digest(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  return true;
}

// A name megatron could have written: relative, no '..' component (it lists the directory's own
// files by name; a hostile manifest must not make verify read outside it).
bool inside(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  size_t start = 0;
  while (true) {
    size_t slash = name.find('/', start);
    std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part == ".." || part.empty()) return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

std::string short_hex(const std::string& h) {
  return h.substr(0, 16) + "...";
}

}  // namespace

IntegrityReport check_integrity_manifest(const std::string& dir, unsigned threads) {
  IntegrityReport r;
  if (!is_directory(dir)) return r;
  r.manifest = join_path(dir, kIntegrityManifestFile);
  if (!path_exists(r.manifest)) return r;
  r.present = true;
  auto invalid = [&](const std::string& key, const std::string& msg) {
    r.problems.push_back({"integrity-invalid", Where(r.manifest, std::nullopt, key), msg});
  };

  json j;
  try {
    ReadFile f(r.manifest);
    if (f.size() > kMaxManifestBytes) {
      invalid("", "is " + std::to_string(f.size()) + " bytes, more than dcpctl reads of a manifest (64 MiB)");
      return r;
    }
    std::string text(f.size(), '\0');
    f.read_at(0, text.data(), text.size());
    j = json::parse(text, nullptr, false);
  } catch (const Error& e) {
    r.problems.push_back({"io-error", e.where(), e.detail()});
    return r;
  }
  if (j.is_discarded() || !j.is_object()) {
    invalid("", "is not a JSON object (megatron-core writes {\"algorithm\": \"sha256\", \"files\": {name: digest}})");
    return r;
  }
  // megatron reads a missing algorithm as sha256 and refuses any other.
  r.algorithm = "sha256";
  if (j.contains("algorithm")) {
    if (!j["algorithm"].is_string() || j["algorithm"].get<std::string>() != "sha256") {
      invalid("", "algorithm " + j["algorithm"].dump() + " is not sha256, the only one megatron-core writes or checks");
      return r;
    }
  }
  if (!j.contains("files") || !j["files"].is_object()) {
    invalid("", "has no \"files\" object");
    return r;
  }

  struct Entry {
    std::string name, path, expected;
  };
  std::vector<Entry> entries;
  std::set<std::string> listed;
  for (const auto& [name, digest] : j["files"].items()) {
    ++r.files;
    listed.insert(name);
    if (!inside(name)) {
      invalid(name, "names '" + name + "', outside the checkpoint directory");
      continue;
    }
    if (!digest.is_string() || !hex_digest(digest.get<std::string>())) {
      invalid(name, "digest " + digest.dump() + " is not 64 hexadecimal digits");
      continue;
    }
    entries.push_back({name, join_path(dir, name), ascii_lower(digest.get<std::string>())});
  }

  std::mutex mu;
  parallel_for(entries.size(), std::max(1u, threads), [&](size_t i) {
    const Entry& e = entries[i];
    Finding found;
    uint64_t read = 0;
    if (PathInfo st = stat_path(e.path); st.kind == PathInfo::missing && (st.err == ENOENT || is_remote_path(e.path))) {
      found = {"integrity-missing", Where(e.path),
               "listed in " + std::string(kIntegrityManifestFile) + " but not there"};
    } else {
      try {
        ReadFile f(e.path);
        Sha256 h;
        std::unique_ptr<uint8_t[]> buf(new uint8_t[kReadWindow]);
        for (uint64_t at = 0; at < f.size();) {
          size_t n = static_cast<size_t>(std::min<uint64_t>(kReadWindow, f.size() - at));
          f.read_at(at, buf.get(), n);
          h.update(buf.get(), n);
          at += n;
        }
        read = f.size();
        std::string got = h.hex();
        if (got != e.expected)
          found = {"integrity-mismatch", Where(e.path),
                   "SHA-256 " + short_hex(got) + " differs from " + short_hex(e.expected) + " recorded in " +
                       kIntegrityManifestFile + ": the file changed after the save"};
      } catch (const Error& err) {
        found = {"io-error", err.where(), err.detail()};
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    r.bytes_read += read;
    if (!found.code.empty()) r.problems.push_back(std::move(found));
  });

  for (const std::string& name : list_dir(dir)) {
    std::string p = join_path(dir, name);
    if (name == kIntegrityManifestFile || listed.count(name) || is_directory(p)) continue;
    r.warnings.push_back({"integrity-unlisted", Where(p),
                          std::string("not listed in ") + kIntegrityManifestFile + ": nothing vouches for it"});
  }
  return r;
}

}  // namespace dcpctl
