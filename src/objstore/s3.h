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
// objstore/aws_credentials.h, whose chain the client runs on its first request when Config has no
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

#include "objstore/http.h"
#include "store/store.h"
#include "util/error.h"

namespace dcpctl::aws {
class CredentialCache;
}

namespace dcpctl::s3 {

using store::Location;
using store::NotFound;
using store::RetryPolicy;
using store::uri_encode;

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

class Client final : public store::ObjectStore {
 public:
  explicit Client(Config cfg);
  ~Client() override;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  const Config& config() const { return cfg_; }

  std::optional<uint64_t> size_of(const Location&) override;                         // HEAD; nullopt on 404
  void get_range(const Location&, uint64_t offset, uint64_t n, void* buf) override;  // exactly n bytes or throws
  std::vector<uint8_t> get(const Location&);                                         // whole object
  store::Listing list_objects(const Location& prefix, bool delimited) override;      // ListObjectsV2, every page
  // ListObjectsV2 pages of one key, no delimiter (see store.h on SeaweedFS).
  bool any_object(const Location& prefix) override;
  void put(const Location&, const void* data, size_t n) override;
  std::string start_upload(const Location&) override;  // CreateMultipartUpload -> upload id
  std::string upload_part(const Location&, const std::string& id, int part, const void* data,
                          size_t n) override;  // -> ETag
  void complete_upload(const Location&, const std::string& id, const std::vector<std::string>& etags) override;
  void abort_upload(const Location&, const std::string& id) override;
  std::vector<std::pair<Location, std::string>> open_uploads(const Location& under) override;  // ListMultipartUploads
  void remove(const Location&) override;

  const char* report_name() const override { return "s3"; }
  nlohmann::json report() const override;
  uint64_t requests_made() const override { return counters_.requests.load(); }

  using Counters = store::http::Counters;
  const Counters& counters() const { return counters_; }
  // Where the keys in use came from ("environment", "web-identity", "imds", "profile FILE [NAME]",
  // ...; never a secret); empty before the first request.
  std::string credential_source() const;
  // How many times keys were fetched (1, then one per refresh).
  uint64_t credential_fetches() const;

  struct Request;  // s3.cpp
  using Response = store::http::Response;

 private:
  Response perform(Request& req);  // with retries; throws IoError for what is not the caller's to handle
  Config cfg_;
  Counters counters_;
  std::unique_ptr<aws::CredentialCache> creds_;
};

}  // namespace dcpctl::s3
