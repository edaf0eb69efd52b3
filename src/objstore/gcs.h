// A Google Cloud Storage client (`gs://BUCKET/NAME`): the store's side of every command that takes
// gs://, over GCS's JSON API (https://cloud.google.com/storage/docs/json_api), in this header and
// gcs.cpp; HTTP and TLS are libcurl's (objstore/http.h).
//
//   stat      GET  /storage/v1/b/B/o/NAME                     (its "size"; 404: missing)
//   read      GET  /download/storage/v1/b/B/o/NAME?alt=media  with a Range header
//   list      GET  /storage/v1/b/B/o?prefix=P[&delimiter=/][&pageToken=T]  (every page; prefixes
//                  de-duplicated: some servers repeat them on every page)
//   put       POST /upload/storage/v1/b/B/o?uploadType=media&name=NAME
//   delete    DELETE /storage/v1/b/B/o/NAME
//
// Multipart uploads are composite uploads, as gcloud's parallel composite uploads are: each part
// is an object of its own under a temporary prefix beside the destination,
// `<folder>/.dcpctl-upload-<id>/<part>`; completing the upload composes them (at most 32 sources a
// request: parts are composed 32 at a time into temporary composites, level by level) into the
// destination, which appears then, whole, and never before; the temporary objects are deleted
// after. Aborting deletes the parts. So the "nothing that looks complete" rule of object outputs
// (store/upload.h) holds as on S3: a folder holds its `.metadata` (or index) only once every file
// before it is complete. (GCS's XML API multipart uploads would need no temporary objects; its
// emulators do not serve them.)
//
// Names are percent-encoded whole in paths and queries (RFC 3986 unreserved characters kept; '/'
// too is encoded in a path, as the JSON API wants one segment).
//
// Configuration, Google's conventions: STORAGE_EMULATOR_HOST (host:port or a URL: an emulator,
// fake-gcs-server, gcp-storage-emulator; no credentials then), else DCPCTL_GCS_ENDPOINT (another
// endpoint, with credentials: a private one, a test's proxy), else https://storage.googleapis.com,
// with the Application Default Credentials' token (objstore/gcs_credentials.h: a service account's
// JWT, gcloud's user credentials, the metadata server), sent as `Authorization: Bearer`; a 401
// fetches a new token once. Attempts: GCS_MAX_ATTEMPTS, else AWS_MAX_ATTEMPTS (5).
//
// Errors, as S3's: a missing credential, a 403, a missing bucket, a request that still fails after
// its retries are IoError (exit 4) naming the gs:// URL, the HTTP status and GCS's message; a
// missing object is store::NotFound; a listing that does not parse is an IoError, never empty.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "objstore/http.h"
#include "store/store.h"

namespace dcpctl::gcs {

class TokenCache;
using store::Location;

struct Config {
  std::string endpoint = "https://storage.googleapis.com";  // scheme://host[:port], no trailing '/'
  bool emulator = false;                                    // STORAGE_EMULATOR_HOST: no credentials
  int max_attempts = 5;
  static Config load(const std::function<std::optional<std::string>(const char*)>& env);
  static Config from_environment();
};

// One page of an objects.list answer.
struct ListPage {
  std::vector<std::pair<std::string, uint64_t>> objects;  // name, size
  std::vector<std::string> prefixes;
  std::string next_token;  // empty: the last page
};
// Parses an objects.list answer; IoError naming `url` on anything else (not JSON, an item without
// a name or a size that is not a byte count).
ListPage parse_list_page(std::string_view json, const std::string& url);
// An object resource's "size" (a decimal string, or a number); IoError naming `url` otherwise.
uint64_t parse_object_size(std::string_view json, const std::string& url);
// GCS's error body {"error": {"code", "message", "errors": [{"reason"}]}}: reason and message
// (empty when the body is not one).
std::pair<std::string, std::string> parse_error_body(std::string_view json);
// The temporary prefix of upload `id` of `loc`: "<folder of loc.key>/.<name>.dcpctl-upload-<id>/"
// (the name, so that a later run can tell whose parts they are: open_uploads).
constexpr const char* kPartsMarker = ".dcpctl-upload-";
std::string parts_prefix(const Location& loc, const std::string& id);
// {object key, upload id} of a part's key, "<dir>/.<name>.dcpctl-upload-<id>/<part>"; nullopt for
// any other key.
std::optional<std::pair<std::string, std::string>> upload_of_part(const std::string& key);
// The composition plan of `n` parts, at most `fan_in` sources a request: for each level, the
// groups of the level below (indices into it) each request composes; the last level has one group.
std::vector<std::vector<std::vector<size_t>>> compose_levels(size_t n, size_t fan_in = 32);

class Client final : public store::ObjectStore {
 public:
  explicit Client(Config cfg);
  ~Client() override;
  const Config& config() const { return cfg_; }

  std::optional<uint64_t> size_of(const Location&) override;
  void get_range(const Location&, uint64_t offset, uint64_t n, void* buf) override;
  store::Listing list_objects(const Location& prefix, bool delimited) override;
  bool any_object(const Location& prefix) override;
  void put(const Location&, const void* data, size_t n) override;
  std::string start_upload(const Location&) override;
  std::string upload_part(const Location&, const std::string& id, int part, const void* data, size_t n) override;
  void complete_upload(const Location&, const std::string& id, const std::vector<std::string>& tags) override;
  void abort_upload(const Location&, const std::string& id) override;
  std::vector<std::pair<Location, std::string>> open_uploads(const Location& under) override;  // by listing the parts
  void remove(const Location&) override;

  const char* report_name() const override { return "gcs"; }
  nlohmann::json report() const override;
  uint64_t requests_made() const override { return counters_.requests.load(); }
  std::string credential_source() const;

  struct Request;  // gcs.cpp

 private:
  store::http::Response perform(Request& req);  // with retries; throws IoError for what is not the caller's
  void compose(const Location& dest, const std::vector<std::string>& sources);
  Config cfg_;
  store::http::Counters counters_;
  std::unique_ptr<TokenCache> tokens_;
};

}  // namespace dcpctl::gcs
