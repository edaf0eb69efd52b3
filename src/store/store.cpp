#include "store/store.h"

#include <sys/stat.h>

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <functional>
#include <random>
#include <thread>

namespace dcpctl::store {

// ---------------------------------------------------------------------------------------------
// URLs

std::string Location::url() const {
  return scheme + "://" + bucket + "/" + key;
}

bool is_url(std::string_view path) {
  return path.rfind("s3://", 0) == 0 || path.rfind("gs://", 0) == 0;
}

Location parse_url(const std::string& url) {
  Location loc;
  if (url.rfind("s3://", 0) == 0) {
    loc.scheme = "s3";
  } else if (url.rfind("gs://", 0) == 0) {
    loc.scheme = "gs";
  } else {
    throw UsageError(Where(url), "not an s3:// or gs:// URL");
  }
  const std::string s = loc.scheme + "://";
  std::string rest = url.substr(5);
  size_t slash = rest.find('/');
  loc.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) loc.key = rest.substr(slash + 1);
  // Bucket names: 3-63 characters of lower-case letters, digits, '.', '-' (S3's and GCS's rules;
  // the legacy upper-case and '_' names of us-east-1, and GCS's '_', are let through: a server says
  // no if it must). GCS allows dotted names up to 222 characters; 63 per dot-separated part.
  bool ok = loc.bucket.size() >= 3 && loc.bucket.size() <= (loc.scheme == "gs" ? 222u : 63u);
  for (char c : loc.bucket)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_');
  if (!ok)
    throw UsageError(Where(url),
                     "malformed " + s + " URL: expected " + s + "BUCKET/KEY with a 3-63 character bucket name");
  if (!loc.key.empty() && loc.key[0] == '/')
    throw UsageError(Where(url), "malformed " + s + " URL: '//' after the bucket name");
  if (loc.key.find("//") != std::string::npos)
    throw UsageError(Where(url), "malformed " + s + " URL: empty path segment ('//')");
  return loc;
}

std::string uri_encode(std::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Retries

bool RetryPolicy::retryable(long status, std::string_view code) {
  if (status == 0) return true;  // no HTTP answer: refused, reset, timed out
  if (status >= 500 || status == 429 || status == 408) return true;
  return code == "SlowDown" || code == "RequestTimeout" || code == "RequestTimeTooSkewed" || code == "InternalError" ||
         code == "ServiceUnavailable";
}

uint64_t RetryPolicy::delay_ms(int attempt, double u) const {
  uint64_t ceiling = base_ms;
  for (int i = 1; i < attempt && ceiling < cap_ms; ++i) ceiling *= 2;
  ceiling = std::min(ceiling, cap_ms);
  // Full jitter (AWS's recommendation): uniform in [0, ceiling], so that many workers retrying
  // together spread out instead of hitting the server again in step.
  return static_cast<uint64_t>(u * static_cast<double>(ceiling + 1));
}

uint64_t RetryPolicy::delay_ms(int attempt, double u, std::optional<uint64_t> retry_after_s) const {
  uint64_t d = delay_ms(attempt, u);
  if (!retry_after_s) return d;
  uint64_t asked = *retry_after_s > retry_after_cap_ms / 1000 ? retry_after_cap_ms : *retry_after_s * 1000;
  return std::max(d, asked);
}

void RetryPolicy::pause(int attempt, std::optional<uint64_t> retry_after_s) const {
  thread_local std::mt19937_64 rng(std::random_device{}() ^ std::hash<std::thread::id>()(std::this_thread::get_id()));
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(attempt, uniform(rng), retry_after_s)));
}

// ---------------------------------------------------------------------------------------------
// Listings as folders

bool Folder::has_dir(const std::string& name) const {
  return std::binary_search(dirs.begin(), dirs.end(), name);
}

Folder folder_of(const Listing& listing, const std::string& prefix) {
  Folder f;
  for (const auto& [key, size] : listing.objects) {
    if (key.size() < prefix.size() || key.compare(0, prefix.size(), prefix) != 0) continue;
    std::string name = key.substr(prefix.size());
    if (name.empty())
      f.marker = true;
    else
      f.files[name] = size;
  }
  for (const auto& p : listing.prefixes) {
    if (p.size() < prefix.size() || p.compare(0, prefix.size(), prefix) != 0) continue;
    std::string name = p.substr(prefix.size());
    while (!name.empty() && name.back() == '/') name.pop_back();
    if (!name.empty()) f.dirs.push_back(std::move(name));
  }
  // Sorted by name whatever the server's order (see the header): "ckpt" is found beside "ckpt-old".
  std::sort(f.dirs.begin(), f.dirs.end());
  f.dirs.erase(std::unique(f.dirs.begin(), f.dirs.end()), f.dirs.end());
  return f;
}

namespace {

// "s3://b/a/b/" -> {b, "a/b"}: no trailing '/' (the bucket itself has an empty key).
Location folder_location(const std::string& path) {
  Location loc = parse_url(path);
  while (!loc.key.empty() && loc.key.back() == '/') loc.key.pop_back();
  return loc;
}

}  // namespace

ObjectStore::~ObjectStore() = default;

// A prefix's one-level listing (objects with their sizes, and sub-prefixes), made once per prefix
// and kept, so that opening a checkpoint costs one listing of its folder however many files
// `.metadata` names. Keyed by "bucket/prefix/" ("bucket/" at the top).
std::shared_ptr<const Folder> ObjectStore::folder(const Location& dir) {
  std::string prefix = dir.key.empty() ? "" : dir.key + "/";
  std::string cache_key = dir.bucket + "/" + prefix;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = folders_.find(cache_key); it != folders_.end()) return it->second;
  }
  auto d = std::make_shared<Folder>(folder_of(list_objects(dir.with_key(prefix), true), prefix));
  std::lock_guard<std::mutex> lock(mu_);
  return folders_.emplace(cache_key, std::move(d)).first->second;
}

// Whether a folder its parent's listing names (a prefix) holds an object. On S3 and GCS it always
// does; SeaweedFS, a filer with real folders, keeps listing a folder whose objects were all
// deleted, for minutes, and its own delimited listing then shows the folder as an empty object
// "dir/", a folder marker's look-alike: such a folder is not there (a missing prefix, as on S3,
// not a checkpoint folder without .metadata). Its own listing answers when it holds a file; with
// only sub-folders or a marker, one listing of one key below it (any_object, whose undelimited
// listing SeaweedFS answers truly), asked once per folder.
bool ObjectStore::holds_objects(const Location& dir) {
  auto d = folder(dir);
  if (!d->files.empty()) return true;
  if (d->dirs.empty() && !d->marker) return false;
  std::string cache_key = dir.bucket + "/" + dir.key + "/";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = holds_.find(cache_key); it != holds_.end()) return it->second;
  }
  bool holds = any_object(dir.with_key(dir.key + "/"));
  std::lock_guard<std::mutex> lock(mu_);
  return holds_.emplace(cache_key, holds).first->second;
}

PathInfo ObjectStore::stat(const std::string& url, bool) {
  Location loc = folder_location(url);
  PathInfo info;
  if (loc.key.empty()) {  // the bucket: listing it says whether it is there (a missing bucket: IoError)
    folder(loc);
    info.kind = PathInfo::directory;
    return info;
  }
  size_t slash = loc.key.find_last_of('/');
  Location parent = loc.with_key(slash == std::string::npos ? "" : loc.key.substr(0, slash));
  std::string name = slash == std::string::npos ? loc.key : loc.key.substr(slash + 1);
  auto d = folder(parent);
  if (auto it = d->files.find(name); it != d->files.end()) {
    info.kind = PathInfo::file;
    info.size = it->second;
  } else if (d->has_dir(name) && holds_objects(loc)) {
    info.kind = PathInfo::directory;
  }
  return info;
}

std::vector<std::string> ObjectStore::list(const std::string& dir) {
  std::vector<std::string> names;
  if (stat(dir, true).kind != PathInfo::directory) return names;
  auto d = folder(folder_location(dir));
  for (const auto& [name, size] : d->files) names.push_back(name);
  for (const auto& name : d->dirs)
    if (!d->files.count(name)) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

void ObjectStore::forget_listings() {
  std::lock_guard<std::mutex> lock(mu_);
  folders_.clear();
  holds_.clear();
}

// ---------------------------------------------------------------------------------------------
// The local filesystem

namespace {

class LocalStore final : public Store {
 public:
  PathInfo stat(const std::string& path, bool follow_links) override {
    PathInfo info;
    struct stat st;
    if ((follow_links ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) {
      info.err = errno;
      return info;
    }
    info.kind = S_ISREG(st.st_mode) ? PathInfo::file : S_ISDIR(st.st_mode) ? PathInfo::directory : PathInfo::other;
    info.size = static_cast<uint64_t>(st.st_size);
    info.mtime = static_cast<int64_t>(st.st_mtime);
    return info;
  }
  std::vector<std::string> list(const std::string& dir) override {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return names;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
};

// The table of schemes (install_object_store): what parse_url accepts, each with its maker once a
// module installs one and its client once made. Fixed entries, so that of() reads it without a lock.
struct SchemeRow {
  const char* scheme;
  std::atomic<ObjectStoreMaker> make{nullptr};
  std::atomic<ObjectStore*> made{nullptr};
};
SchemeRow g_schemes[] = {{"s3"}, {"gs"}};

SchemeRow& scheme_row(const std::string& scheme) {
  for (SchemeRow& row : g_schemes)
    if (scheme == row.scheme) return row;
  throw UsageError(Where(scheme + "://"), "not an s3:// or gs:// URL");
}

}  // namespace

void install_object_store(const std::string& scheme, ObjectStoreMaker make) {
  scheme_row(scheme).make.store(make, std::memory_order_release);
}

Store& for_path(const std::string& path) {
  static LocalStore local;
  if (is_url(path)) return of(parse_url(path));
  return local;
}

ObjectStore& of(const Location& loc) {
  SchemeRow& row = scheme_row(loc.scheme);
  if (ObjectStore* s = row.made.load(std::memory_order_acquire)) return *s;
  ObjectStoreMaker make = row.make.load(std::memory_order_acquire);
  if (!make)
    throw UnsupportedError(Where(loc.url()),
                           loc.scheme +
                               ":// is read and written by the object-store module (src/objstore/), which this "
                               "build of dcpctl left out: configure it with -DDCPCTL_WITH_OBJSTORE=ON");
  ObjectStore& store = make();  // a function-local static: made once, whichever thread comes first
  row.made.store(&store, std::memory_order_release);
  return store;
}

void forget_listings() {
  for (SchemeRow& row : g_schemes)
    if (ObjectStore* s = row.made.load(std::memory_order_acquire)) s->forget_listings();
}

std::vector<const ObjectStore*> in_use() {
  std::vector<const ObjectStore*> out;
  for (SchemeRow& row : g_schemes)
    if (const ObjectStore* s = row.made.load(std::memory_order_acquire); s && s->used()) out.push_back(s);
  return out;
}

}  // namespace dcpctl::store
