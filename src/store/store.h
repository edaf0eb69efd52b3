// The storage layer: where a checkpoint's bytes come from and where an output's go, chosen by the
// path's scheme. A plain path is the local filesystem; `s3://BUCKET/KEY` is S3 (or any server that
// speaks its protocol) and `gs://BUCKET/NAME` Google Cloud Storage: their clients are the
// object-store module's (src/objstore/: objstore/s3.h, objstore/gcs.h), which installs them in
// this layer's table of schemes (install_object_store); the core names neither.
//
// What the rest of dcpctl sees of it:
//   - reading: store/file.h (ReadFile, MappedFile, stat_path, list_dir), whose remote side is the
//     ObjectStore of the path's scheme: ranged reads, and listings read as folders;
//   - writing: write/output.h's OutputFile and OutputDir, whose remote side is an Upload in the
//     job's UploadSession (store/upload.h): a temporary name and a rename locally, an upload that
//     completes at commit remotely;
//   - --json: the `s3` / `gcs` object of every store a command used (report()).
// No command and no writer asks which store it is using.
//
// An ObjectStore is a store's wire protocol (stat, list, ranged read, single and multipart
// uploads, delete) plus what every object store shares, kept here once: its listings read as
// folders (cached: a checkpoint's folder is listed once, not once per file) and its counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace dcpctl::store {

// An object in a store: "s3://bucket/key", "gs://bucket/name".
struct Location {
  std::string scheme = "s3";  // "s3" or "gs"
  std::string bucket, key;    // key has no leading '/'
  std::string url() const;    // scheme://bucket/key
  Location with_key(std::string k) const { return {scheme, bucket, std::move(k)}; }
};

// Whether a path names object storage (s3://, gs://) rather than the local filesystem.
bool is_url(std::string_view path);
// Splits an object URL. UsageError (exit 2) on a malformed one (bucket names: 3-63 characters of
// letters, digits, '.', '-', '_'; no empty path segment).
Location parse_url(const std::string& url);

// A key that does not exist (HTTP 404): an IoError a caller may turn into exit 3.
class NotFound : public IoError {
 public:
  using IoError::IoError;
};

// Every object under a prefix (all pages): with `delimited`, those one level down and the
// sub-prefixes ("folders") below it.
struct Listing {
  std::vector<std::pair<std::string, uint64_t>> objects;  // key, size
  std::vector<std::string> prefixes;
};

// A prefix's one-level (delimited) listing read as a folder: the names below `prefix` of its
// objects, with their sizes, and of its sub-folders, each set sorted by name. Servers order
// prefixes differently: AWS and moto by the whole prefix, '/' included, so "ckpt-old/" comes
// before "ckpt/" ('-' < '/'); SeaweedFS by folder name, "ckpt" before "ckpt-old".
// `marker`: the listing holds `prefix` itself, an empty object some tools write as a folder (and
// SeaweedFS shows in the listing of a folder whose objects were all deleted).
struct Folder {
  std::map<std::string, uint64_t> files;
  std::vector<std::string> dirs;
  bool marker = false;
  bool has_dir(const std::string& name) const;  // binary search of `dirs`
};
Folder folder_of(const Listing& listing, const std::string& prefix);

// What a path names. Local paths: stat(2) (lstat(2) when !follow_links); `other` for anything
// but a regular file or a directory (a link, with !follow_links), err the errno of a failed stat.
// Object URLs: an object is a file, a prefix that objects lie under is a directory (the bucket
// itself is one); mtime is 0.
struct PathInfo {
  enum Kind { missing, file, directory, other } kind = missing;
  uint64_t size = 0;
  int64_t mtime = 0;
  int err = 0;
};

// The limits of a store's multipart uploads: parts of at least `min_part` bytes (the last
// excepted), at most `max_parts` of them.
struct PartRules {
  uint64_t min_part = 5ull << 20;
  int max_parts = 10000;
};

// What file.h asks of a store: what a path names, and the names in a folder. A local path's store
// is the filesystem; an object URL's is its ObjectStore.
class Store {
 public:
  virtual ~Store() = default;
  virtual PathInfo stat(const std::string& path, bool follow_links) = 0;
  // The names in a folder, sorted, without "." and ".."; empty when it is not a folder.
  virtual std::vector<std::string> list(const std::string& dir) = 0;
  // Drops what the store remembers of listings (a writer changed it).
  virtual void forget_listings() {}
};

class ObjectStore : public Store {
 public:
  ~ObjectStore() override;

  // ---- the wire protocol: one store's requests ----
  virtual std::optional<uint64_t> size_of(const Location&) = 0;                         // nullopt when missing
  virtual void get_range(const Location&, uint64_t offset, uint64_t n, void* buf) = 0;  // exactly n bytes or throws
  virtual Listing list_objects(const Location& prefix, bool delimited) = 0;             // every page
  // Whether any object's key starts with `prefix`: a listed folder is not enough, as SeaweedFS keeps
  // listing a folder whose objects were all deleted, for minutes (AWS never lists an empty one).
  virtual bool any_object(const Location& prefix) = 0;
  virtual void put(const Location&, const void* data, size_t n) = 0;  // one request; the object appears
  // A multipart upload: nothing appears under the location until complete_upload succeeds.
  virtual std::string start_upload(const Location&) = 0;  // -> an upload id
  virtual std::string upload_part(const Location&, const std::string& id, int part, const void* data,
                                  size_t n) = 0;  // -> the part's tag
  virtual void complete_upload(const Location&, const std::string& id, const std::vector<std::string>& tags) = 0;
  virtual void abort_upload(const Location&, const std::string& id) = 0;
  // The uploads begun and neither completed nor aborted of the object `under` and of every object
  // below `under`/: {object, upload id}, for abort_upload (write/leftovers.h).
  virtual std::vector<std::pair<Location, std::string>> open_uploads(const Location& under) = 0;
  virtual void remove(const Location&) = 0;
  virtual PartRules part_rules() const { return {}; }

  // ---- what every command reports of the stores it used ----
  virtual const char* report_name() const = 0;  // its object in --json: "s3", "gcs"
  // bytes_fetched, requests, retries, bytes_uploaded, credential_source (never a secret)
  virtual nlohmann::json report() const = 0;
  bool used() const { return requests_made() > 0; }
  virtual uint64_t requests_made() const = 0;

  // ---- Store: paths read as files and folders, from cached listings ----
  PathInfo stat(const std::string& url, bool follow_links) override;
  std::vector<std::string> list(const std::string& dir) override;
  void forget_listings() override;
  // The folder `dir` (its one-level listing), listed once and kept.
  std::shared_ptr<const Folder> folder(const Location& dir);
  // Whether objects lie under `dir`/ (any_object), asked once and kept.
  bool holds_objects(const Location& dir);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Folder>> folders_;  // by "bucket/key"
  std::map<std::string, bool> holds_;                             // by the same keys
};

// The object stores' table: a scheme's ("s3", "gs") client, made by the function its module
// installed (objstore/register.h) on the first use of the scheme, once per process, configured
// from the environment. A scheme nothing installed is refused (UnsupportedError, exit 5) naming
// the module that reads it and how to build it.
using ObjectStoreMaker = ObjectStore& (*)();
void install_object_store(const std::string& scheme, ObjectStoreMaker make);

// The store of a path: the local filesystem, or the object store of its scheme (made on first
// use, one per scheme per process, configured from the environment; nothing is read or requested
// before that, so local commands never look).
Store& for_path(const std::string& path);
ObjectStore& of(const Location& loc);
inline ObjectStore& of_url(const std::string& url) {
  return of(parse_url(url));
}
// The object stores this process made requests to, for --json.
std::vector<const ObjectStore*> in_use();
// Drops the listings every object store made remembers.
void forget_listings();

// Percent-encoding: RFC 3986 unreserved characters kept, '/' kept when `keep_slash` (object keys
// in paths), everything else %XX upper-case.
std::string uri_encode(std::string_view s, bool keep_slash);

// Retries: bounded attempts with exponential backoff and full jitter, on 5xx, 429, S3's
// SlowDown / RequestTimeout codes and transport failures (connection refused or reset, timeouts).
struct RetryPolicy {
  int max_attempts = 5;
  uint64_t base_ms = 50, cap_ms = 5000;
  // status 0: the transport failed (no HTTP answer).
  static bool retryable(long status, std::string_view code);
  uint64_t retry_after_cap_ms = 20000;
  // The delay before attempt `attempt` + 1 (attempt counts from 1), given a uniform draw u in [0, 1).
  uint64_t delay_ms(int attempt, double u) const;
  // The same, for an answer (429, 503) with a Retry-After of `retry_after_s` seconds: at least
  // that long, at most retry_after_cap_ms (a server asking for an hour does not stall a run).
  uint64_t delay_ms(int attempt, double u, std::optional<uint64_t> retry_after_s) const;
  // Sleeps that long before attempt `attempt` + 1, the draw from this thread's generator.
  void pause(int attempt, std::optional<uint64_t> retry_after_s = std::nullopt) const;
};

}  // namespace dcpctl::store
