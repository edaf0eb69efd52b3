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
#include "meta/manifest.h"
#include "store/file.h"
#include "util/parallel.h"
#include "util/text.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxManifestBytes = 64ull << 20;

bool hex_digest(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  return true;
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

  std::optional<json> read = read_listing(r.manifest, kMaxManifestBytes, "integrity-invalid", r.problems);
  if (!read) return r;
  const json& j = *read;
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

  std::vector<ListedFile> entries;
  std::set<std::string> listed;
  for (const auto& [name, digest] : j["files"].items()) {
    ++r.files;
    listed.insert(name);
    if (!listed_name_inside(name)) {  // megatron lists the directory's own files by name
      invalid(name, "names '" + name + "', outside the checkpoint directory");
      continue;
    }
    if (!digest.is_string() || !hex_digest(digest.get<std::string>())) {
      invalid(name, "digest " + digest.dump() + " is not 64 hexadecimal digits");
      continue;
    }
    entries.push_back({join_path(dir, name), ascii_lower(digest.get<std::string>()), std::nullopt});
  }

  check_listed_files(entries, threads, {"integrity-missing", "integrity-mismatch", kIntegrityManifestFile, "the save"},
                     r.problems, r.bytes_read);

  for (const std::string& name : list_dir(dir)) {
    std::string p = join_path(dir, name);
    if (name == kIntegrityManifestFile || listed.count(name) || is_directory(p)) continue;
    r.warnings.push_back({"integrity-unlisted", Where(p),
                          std::string("not listed in ") + kIntegrityManifestFile + ": nothing vouches for it"});
  }
  return r;
}

}  // namespace dcpctl
