// An S3 client: the whole of dcpctl's object-storage protocol, in this header and s3.cpp.
//
// HTTP and TLS are libcurl's; requests are signed with libcurl's own SigV4 (CURLOPT_AWS_SIGV4,
// "aws:amz:<region>:s3"), which for the s3 service sends `x-amz-content-sha256` (the SHA-256 of
// an in-memory body, UNSIGNED-PAYLOAD for a streamed one) and signs every `x-amz-*` header given
// to it (the session token goes in `x-amz-security-token`). libcurl 7.88 signs the query string
// as it is written, so every query here is written in canonical form: parameters sorted by name,
// values percent-encoded (RFC 3986 unreserved characters kept), `name=` for an empty value.
//
// Addressing: with an endpoint (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / the profile's
// endpoint_url: MinIO, Ceph, R2, SeaweedFS, moto, Google's interoperable endpoint) requests are
// path-style, `<endpoint>/<bucket>/<key>`; on AWS they are virtual-hosted,
// `https://<bucket>.s3.<region>.amazonaws.com/<key>` (path-style for a bucket name with a dot,
// which a wildcard certificate does not cover).
//
// Configuration is read the way the AWS CLI and SDKs read it (Config::load): static credentials
// from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else from the profile
// (AWS_PROFILE, default "default") in the shared credentials file (AWS_SHARED_CREDENTIALS_FILE,
// default ~/.aws/credentials), else from the config file (AWS_CONFIG_FILE, default
// ~/.aws/config, section `[profile NAME]` or `[default]`), each unless a source the SDKs try
// before it is configured (web identity, a role, SSO, credential_process: see
// store/aws_credentials.h, whose chain the client runs on its first request when Config has no
// keys, and again before temporary keys expire); the region from AWS_REGION,
// AWS_DEFAULT_REGION, the profile's `region`, else us-east-1; attempts from AWS_MAX_ATTEMPTS
// (default 5). Nothing is read until the first request, so local commands never look.
//
// Errors: a missing credential, a 403, a missing bucket, a request that still fails after its
// retries are IoError (exit 4) naming the s3:// URL, the HTTP status and S3's error Code; a
// missing key is NotFound (an IoError too) for callers that turn it into a missing checkpoint
// file (exit 3), and nullopt from size_of. A listing that does not parse is an IoError: never an
// empty listing.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/error.h"

namespace dcpctl::aws {
class CredentialCache;
}

namespace dcpctl::s3 {

struct Location {
  std::string bucket, key;  // key has no leading '/'
  std::string url() const;  // "s3://bucket/key"
};

bool is_url(std::string_view path);  // "s3://..." or "gs://..."
// Splits "s3://bucket/key". UsageError (exit 2) on a malformed URL; UnsupportedError (exit 5) on
// gs://, whose sentence says how to reach Google Cloud Storage through its S3-interoperable endpoint.
Location parse_url(const std::string& url);

// A key that does not exist (HTTP 404 NoSuchKey): an IoError a caller may turn into exit 3.
class NotFound : public IoError {
 public:
  using IoError::IoError;
};

// Parsed INI text as the AWS CLI writes it: section -> key -> value (keys lower-cased, values
// trimmed; nested `key =` blocks such as `s3 =` are skipped with their indented lines).
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
IniFile parse_ini(std::string_view text);

struct Config {
  std::string access_key, secret_key, session_token;
  std::string region = "us-east-1";
  std::string endpoint;  // scheme://host[:port], no trailing '/'; empty: AWS
  std::string profile = "default";
  std::string credentials_from;  // where the keys came from ("environment", a file), for errors
  int max_attempts = 5;
  // Reads the environment through `env` and files through `read` (nullopt: no such file), so
  // that tests need neither.
  static Config load(const std::function<std::optional<std::string>(const char*)>& env,
                     const std::function<std::optional<std::string>(const std::string&)>& read);
  static Config from_environment();  // load() over getenv and the filesystem
  bool path_style(const std::string& bucket) const {
    return !endpoint.empty() || bucket.find('.') != std::string::npos;
  }
  // The request URL of an object (key may be empty: the bucket) without its query.
  std::string object_url(const Location& loc) const;
};

// Percent-encoding as SigV4 wants it: RFC 3986 unreserved characters kept, '/' kept when
// `keep_slash` (object keys in paths), everything else %XX upper-case.
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
};

// One page of a ListObjectsV2 answer.
struct ListPage {
  std::vector<std::pair<std::string, uint64_t>> objects;  // key, size
  std::vector<std::string> prefixes;
  bool truncated = false;
  std::string next_token;
};
// Parses a ListBucketResult; IoError naming `url` on anything else (malformed XML, an Error body,
// a Contents without Key or Size, a truncated page without a continuation token).
ListPage parse_list_page(std::string_view xml, const std::string& url);
// The canonical query of a ListObjectsV2 request for the keys under `prefix`: `delimited` groups
// them at the next '/', `token` continues a truncated listing, `max_keys` > 0 asks for at most
// that many entries per page (0: the server's default, 1000).
std::string list_query(const std::string& prefix, bool delimited, const std::string& token, int max_keys = 0);
// S3's error Code and Message from an <Error> body (empty when the body is not one).
std::pair<std::string, std::string> parse_error_body(std::string_view xml);
// The value of one element (first match) of a small answer such as InitiateMultipartUploadResult.
std::optional<std::string> xml_element(std::string_view xml, const std::string& name);

class Client {
 public:
  static Client& shared();                // configured once, from the environment, on first use
  static const Client* shared_if_made();  // nullptr until shared() was first called
  explicit Client(Config cfg);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  const Config& config() const { return cfg_; }

  std::optional<uint64_t> size_of(const Location&);                         // HEAD; nullopt on 404
  void get_range(const Location&, uint64_t offset, uint64_t n, void* buf);  // exactly n bytes or throws
  std::vector<uint8_t> get(const Location&);                                // whole object
  struct Listing {
    std::vector<std::pair<std::string, uint64_t>> objects;
    std::vector<std::string> prefixes;
  };
  Listing list(const Location& prefix, bool delimited);  // ListObjectsV2, every page
  // Whether any object's key starts with `prefix` (ListObjectsV2 pages of one key, no delimiter):
  // a CommonPrefix is not enough, as SeaweedFS keeps listing a folder whose objects were all
  // deleted, for minutes, as a CommonPrefix with nothing under it (AWS never lists an empty one).
  bool any_object(const Location& prefix);
  void put(const Location&, const void* data, size_t n);
  std::string start_upload(const Location&);  // CreateMultipartUpload -> upload id
  std::string upload_part(const Location&, const std::string& id, int part, const void* data, size_t n);  // -> ETag
  void complete_upload(const Location&, const std::string& id, const std::vector<std::string>& etags);
  void abort_upload(const Location&, const std::string& id);
  void remove(const Location&);

  struct Counters {
    std::atomic<uint64_t> bytes_in{0}, bytes_out{0}, requests{0}, retries{0};
  };
  const Counters& counters() const { return counters_; }
  // Whether any request was made (a command reports `s3` in --json only then).
  bool used() const { return counters_.requests.load() > 0; }
  // Where the keys in use came from ("environment", "web-identity", "imds", "profile FILE [NAME]",
  // ...; never a secret); empty before the first request.
  std::string credential_source() const;
  // How many times keys were fetched (1, then one per refresh).
  uint64_t credential_fetches() const;

  struct Request;   // s3.cpp
  struct Response;  // s3.cpp

 private:
  Response perform(Request& req);  // with retries; throws IoError for what is not the caller's to handle
  Config cfg_;
  Counters counters_;
  std::unique_ptr<aws::CredentialCache> creds_;
};

// A prefix's one-level (delimited) listing read as a folder: the names below `prefix` of its
// objects, with their sizes, and of its sub-folders, each set sorted by name. Servers order
// CommonPrefixes differently: AWS and moto by the whole prefix, '/' included, so "ckpt-old/"
// comes before "ckpt/" ('-' < '/'); SeaweedFS by folder name, "ckpt" before "ckpt-old".
// `marker`: the listing holds `prefix` itself, an empty object some tools write as a folder (and
// SeaweedFS shows in the listing of a folder whose objects were all deleted).
struct Folder {
  std::map<std::string, uint64_t> files;
  std::vector<std::string> dirs;
  bool marker = false;
  bool has_dir(const std::string& name) const;  // binary search of `dirs`
};
Folder folder_of(const Client::Listing& listing, const std::string& prefix);

}  // namespace dcpctl::s3
