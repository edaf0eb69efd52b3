#include "meta/manifest.h"

#include <cerrno>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "store/file.h"
#include "util/crc32.h"
#include "util/io_buffer.h"
#include "util/parallel.h"
#include "util/sha256.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxManifestBytes = 256ull << 20;
constexpr size_t kReadWindow = 8u << 20;  // aligned: each read_direct starts on a block

bool hex_digest(const json& v, size_t digits) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() != digits) return false;
  for (char c : v.get_ref<const std::string&>())
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The folder the manifest's names are relative to: `path` itself, or a file's folder.
std::string base_dir(const std::string& path) {
  if (is_directory(path)) return path;
  std::string p = path;
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

// Read past the page cache where the filesystem allows it (ReadFile::read_direct): the output was
// just written past it and synced, and hashing it must not fill the cache with it again
// (memory-large-items checks that a consolidate leaves its output uncached).
FileDigest hash_file(const std::string& path, ManifestAlgorithm alg) {
  ReadFile f(path);
  if (alg == ManifestAlgorithm::Crc32) return {f.size(), crc32_hex(crc_file_range(f, 0, f.size()))};
  Sha256 h;
  hash_file_range(f, 0, f.size(), h);
  return {f.size(), h.hex()};
}

size_t digest_digits(ManifestAlgorithm a) {
  return a == ManifestAlgorithm::Crc32 ? 8 : 64;
}
const char* digest_label(ManifestAlgorithm a) {
  return a == ManifestAlgorithm::Crc32 ? "CRC-32" : "SHA-256";
}

// The files a manifest of `path` covers: a folder's regular files (the manifest excepted), or the file.
std::vector<std::string> covered(const std::string& path) {
  if (!is_directory(path)) return {base_name(path)};
  std::vector<std::string> names;
  for (const std::string& n : list_dir(path))
    if (n != kManifestFile && stat_path(join_path(path, n)).kind == PathInfo::file) names.push_back(n);
  return names;
}

}  // namespace

const char* algorithm_name(ManifestAlgorithm a) {
  return a == ManifestAlgorithm::Crc32 ? "crc32" : "sha256";
}

std::optional<ManifestAlgorithm> algorithm_named(const std::string& name) {
  if (name == "crc32") return ManifestAlgorithm::Crc32;
  if (name == "sha256") return ManifestAlgorithm::Sha256;
  return std::nullopt;
}

std::string crc32_hex(uint32_t crc) {
  char b[9];
  std::snprintf(b, sizeof b, "%08x", crc);
  return b;
}

std::string manifest_path(const std::string& path) {
  if (is_directory(path)) return join_path(path, kManifestFile);
  return path + "." + kManifestFile;
}

json Manifest::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = "dcpctl-manifest";
  // SHA-256 manifests stay version 1, so that a dcpctl of before CRC-32 manifests reads them.
  j["version"] = algorithm == ManifestAlgorithm::Crc32 ? 2 : 1;
  j["algorithm"] = algorithm_name(algorithm);
  nlohmann::ordered_json f = nlohmann::ordered_json::object(), s = nlohmann::ordered_json::object();
  for (const auto& [name, d] : files) f[name] = d.hex, s[name] = d.size;
  j["files"] = f;
  j["sizes"] = s;
  if (tensors) {
    nlohmann::ordered_json t = nlohmann::ordered_json::object();
    for (const auto& [k, v] : *tensors) t[k] = v;
    j["tensors"] = t;
  } else {
    j["tensors"] = nullptr;
  }
  j["written_by"] = {{"tool", "dcpctl"}, {"version", tool_version}, {"command", command}};
  j["source"] = source.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(source);
  return json::parse(j.dump());  // keeps the order above: nlohmann::json sorts keys, which reads as well
}

void read_file_range(const ReadFile& f, uint64_t from, uint64_t to,
                     const std::function<void(const uint8_t*, uint64_t, uint64_t)>& take) {
  if (from >= to) return;
  IoBuffer buf = make_io_buffer(direct_span(0, kReadWindow) + 2 * kDirectAlign);
  for (uint64_t at = from; at < to;) {
    // Each read but the first starts on a block (kReadWindow is a multiple of one).
    size_t n = static_cast<size_t>(std::min<uint64_t>(kReadWindow - at % kDirectAlign, to - at));
    take(f.read_direct(at, n, buf.get()), n, at);
    at += n;
  }
}

void hash_file_range(const ReadFile& f, uint64_t from, uint64_t to, Sha256& h) {
  read_file_range(f, from, to, [&](const uint8_t* p, uint64_t n, uint64_t) { h.update(p, n); });
}

uint32_t crc_file_range(const ReadFile& f, uint64_t from, uint64_t to) {
  uint32_t crc = 0;
  read_file_range(f, from, to, [&](const uint8_t* p, uint64_t n, uint64_t) { crc = crc32_update(crc, p, n); });
  return crc;
}

std::map<std::string, FileDigest> digest_files(
    const std::string& path, unsigned threads,
    const std::function<std::optional<FileDigest>(const std::string&)>& known, uint64_t* read, ManifestAlgorithm alg) {
  const std::vector<std::string> names = covered(path);
  const std::string dir = base_dir(path);
  std::vector<FileDigest> digests(names.size());
  std::vector<bool> was_read(names.size());
  parallel_for(names.size(), std::max(1u, threads), [&](size_t i) {
    const std::string p = join_path(dir, names[i]);
    std::optional<FileDigest> d = known ? known(p) : std::nullopt;
    was_read[i] = !d;
    digests[i] = d ? *d : hash_file(p, alg);
  });
  if (read)
    for (size_t i = 0; i < names.size(); ++i) *read += was_read[i] ? digests[i].size : 0;
  std::map<std::string, FileDigest> out;
  for (size_t i = 0; i < names.size(); ++i) out[names[i]] = digests[i];
  return out;
}

bool listed_name_inside(const std::string& name) {
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

void check_listed_files(const std::vector<ListedFile>& files, unsigned threads, const ListedCodes& codes,
                        Findings& problems, uint64_t& bytes_read, ManifestAlgorithm alg) {
  std::mutex mu;
  parallel_for(files.size(), std::max(1u, threads), [&](size_t i) {
    const ListedFile& e = files[i];
    Finding found;
    uint64_t read = 0;
    PathInfo st = stat_path(e.path);
    if (st.kind == PathInfo::missing && (st.err == ENOENT || is_remote_path(e.path))) {
      found = {codes.missing, Where(e.path), "listed in " + codes.list + " but not there"};
    } else if (e.size && st.kind == PathInfo::file && st.size != *e.size) {
      found = {codes.mismatch, Where(e.path),
               std::to_string(st.size) + " bytes, not the " + std::to_string(*e.size) + " recorded in " + codes.list +
                   ": the file changed after " + codes.made};
    } else {
      try {
        FileDigest d = hash_file(e.path, alg);
        read = d.size;
        if (d.hex != e.digest)
          found = {codes.mismatch, Where(e.path),
                   std::string(digest_label(alg)) + " " + d.hex.substr(0, 16) + (d.hex.size() > 16 ? "..." : "") +
                       " differs from " + e.digest.substr(0, 16) + (e.digest.size() > 16 ? "..." : "") +
                       " recorded in " + codes.list + ": the file changed after " + codes.made};
      } catch (const Error& err) {
        found = {"io-error", err.where(), err.detail()};
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    bytes_read += read;
    if (!found.code.empty()) problems.push_back(std::move(found));
  });
}

std::optional<nlohmann::json> read_listing(const std::string& path, uint64_t max_bytes, const char* invalid_code,
                                           Findings& problems) {
  try {
    ReadFile f(path);
    if (f.size() > max_bytes) {
      problems.push_back({invalid_code, Where(path),
                          "is " + std::to_string(f.size()) + " bytes, more than dcpctl reads of a manifest (" +
                              std::to_string(max_bytes >> 20) + " MiB)"});
      return std::nullopt;
    }
    std::string text(f.size(), '\0');
    f.read_at(0, text.data(), text.size());
    return json::parse(text, nullptr, false);
  } catch (const Error& e) {
    problems.push_back({"io-error", e.where(), e.detail()});
    return std::nullopt;
  }
}

ManifestReport check_manifest(const std::string& path, unsigned threads) {
  ManifestReport r;
  r.path = manifest_path(path);
  if (!path_exists(r.path)) return r;
  r.present = true;
  auto invalid = [&](const std::string& key, const std::string& msg) {
    r.problems.push_back({"manifest-invalid", Where(r.path, std::nullopt, key), msg});
  };
  std::optional<json> read = read_listing(r.path, kMaxManifestBytes, "manifest-invalid", r.problems);
  if (!read) return r;
  const json& j = *read;
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "dcpctl-manifest") {
    invalid("", "is not a dcpctl manifest (a JSON object with \"format\": \"dcpctl-manifest\")");
    return r;
  }
  // Version 1: SHA-256 only; version 2: CRC-32 (the default) or SHA-256.
  const json version = j.contains("version") ? j["version"] : json();
  std::optional<ManifestAlgorithm> alg;
  if (j.contains("algorithm") && j["algorithm"].is_string()) alg = algorithm_named(j["algorithm"].get<std::string>());
  const bool known_version =
      version.is_number_unsigned() && (version.get<uint64_t>() == 1 || version.get<uint64_t>() == 2);
  if (!known_version || !alg || (version.get<uint64_t>() == 1 && *alg != ManifestAlgorithm::Sha256) ||
      !j.contains("files") || !j["files"].is_object() || !j.contains("sizes") || !j["sizes"].is_object()) {
    invalid("",
            "is not version 1 (algorithm sha256) or 2 (algorithm crc32 or sha256) of the format, with \"files\" "
            "and \"sizes\" objects");
    return r;
  }
  r.algorithm = *alg;
  const size_t digits = digest_digits(r.algorithm);
  if (j.contains("tensors") && j["tensors"].is_object()) {
    r.tensors.emplace();
    for (const auto& [k, v] : j["tensors"].items())
      if (hex_digest(v, digits))
        (*r.tensors)[k] = v.get<std::string>();
      else
        invalid(k,
                "tensor digest " + v.dump() + " is not " + std::to_string(digits) + " lower-case hexadecimal digits");
  }
  if (j.contains("source") && j["source"].is_string()) r.source = j["source"].get<std::string>();
  if (j.contains("written_by") && j["written_by"].is_object()) r.tool_version = j["written_by"].value("version", "");

  std::vector<ListedFile> entries;
  std::set<std::string> listed;
  const std::string dir = base_dir(path);
  for (const auto& [name, digest] : j["files"].items()) {
    ++r.files;
    listed.insert(name);
    if (!listed_name_inside(name)) {
      invalid(name, "names '" + name + "', outside the checkpoint");
      continue;
    }
    const json& size = j["sizes"].contains(name) ? j["sizes"][name] : json();
    if (!hex_digest(digest, digits) || !size.is_number_unsigned()) {
      invalid(name, "has no " + std::to_string(digits) + "-digit lower-case " + digest_label(r.algorithm) +
                        " and byte size for '" + name + "'");
      continue;
    }
    entries.push_back({join_path(dir, name), digest.get<std::string>(), size.get<uint64_t>()});
  }
  check_listed_files(entries, threads, {"manifest-missing-file", "manifest-mismatch", r.path, "it was written"},
                     r.problems, r.bytes_read, r.algorithm);
  for (const std::string& name : covered(path))
    if (!listed.count(name))
      r.problems.push_back(
          {"manifest-unlisted-file", Where(join_path(dir, name)),
           "not listed in " + r.path + ": added after the manifest was written, nothing vouches for it"});
  return r;
}

std::optional<ManifestAlgorithm> manifest_algorithm(const std::string& path) {
  const std::string m = manifest_path(path);
  if (!path_exists(m)) return std::nullopt;
  Findings ignored;  // check_manifest reports them
  std::optional<json> j = read_listing(m, kMaxManifestBytes, "manifest-invalid", ignored);
  if (!j || j->is_discarded() || !j->is_object() || !j->contains("algorithm") || !(*j)["algorithm"].is_string())
    return std::nullopt;
  return algorithm_named((*j)["algorithm"].get<std::string>());
}

bool manifest_verified(const std::string& path, unsigned threads) {
  ManifestReport r = check_manifest(path, threads);
  return r.present && r.problems.empty();
}

}  // namespace dcpctl
