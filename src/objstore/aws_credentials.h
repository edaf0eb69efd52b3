// The AWS credential chain: where a process gets the keys that sign its S3 requests, looked for in
// botocore's order (botocore/credentials.py, create_credential_resolver), the first source that
// is configured wins:
//
//   1. environment       AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)
//   2. assume-role       the profile's role_arn + source_profile (whose keys sign an STS AssumeRole,
//                        chained up to 4 deep) or + credential_source (Environment,
//                        Ec2InstanceMetadata, EcsContainer)
//   3. web-identity      AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE (+ AWS_ROLE_SESSION_NAME), else
//                        the profile's role_arn + web_identity_token_file: an unsigned STS
//                        AssumeRoleWithWebIdentity with the file's token (re-read at each refresh)
//   4. sso               the profile's sso_session (a [sso-session NAME] section) or sso_start_url,
//                        with sso_account_id, sso_role_name, sso_region: the token `aws sso login`
//                        cached in ~/.aws/sso/cache/<sha1 hex of the session name or start URL>.json
//                        -> GET <portal>/federation/credentials with x-amz-sso_bearer_token
//   5. profile           static keys of the profile in the shared credentials file, then
//   6. credential-process  the profile's credential_process: run through /bin/sh -c (the AWS CLI
//                        splits it into words; a shell accepts that and quoting too), stdout is
//                        Version 1 JSON; bounded to 1 MiB and 60 s
//   7. profile           static keys of the profile in the config file
//   8. container         AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on http://169.254.170.2) or
//                        _FULL_URI, Authorization from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or
//                        _TOKEN
//   9. imds              IMDSv2 only: PUT /latest/api/token, then the role name and its keys under
//                        /latest/meta-data/iam/security-credentials/; AWS_EC2_METADATA_SERVICE_ENDPOINT
//                        (default http://169.254.169.254), AWS_EC2_METADATA_DISABLED=true skips it;
//                        1 s to connect, 2 attempts, so a laptop without IMDS fails in about 2 s
//
// A source that is configured but fails stops the chain: a wrong web-identity token is an error,
// never a silent fall-back to the node's role (deeplake #3161). Every failure is an IoError (exit
// 4) naming each source tried, in order, and why it gave nothing.
//
// STS: AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else the profile's endpoint_url, else
// https://sts.<region>.amazonaws.com. SSO's portal: AWS_ENDPOINT_URL_SSO, else AWS_ENDPOINT_URL,
// else https://portal.sso.<sso_region>.amazonaws.com.
//
// Refresh: temporary keys (those with an Expiration) are fetched again by the first request that
// finds them within the refresh margin of expiring (5 minutes; DCPCTL_CREDENTIAL_REFRESH_MARGIN_S
// changes it, for tests), under a lock, so one thread refreshes while the others wait; a request
// answered 400/403 ExpiredToken refreshes once (only the keys it was signed with) and is sent again.
//
// Everything here is pure but the Io implementation (aws_io.cpp): the environment, files, HTTP,
// the process runner and the clock come in through Io, so tests drive the whole chain offline.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "objstore/refreshing_cache.h"
#include "util/error.h"

namespace dcpctl::aws {

struct Credentials {
  std::string access_key, secret_key, session_token;
  std::optional<int64_t> expiration;  // Unix seconds; nullopt: keys that do not expire
  std::string source;                 // "environment", "web-identity", "profile FILE [NAME]", ...
};

// --- parsers (each throws IoError naming `what`, never printing a secret) ---

// ISO 8601 UTC as AWS writes it: 2024-05-01T12:34:56Z, with fractional seconds, "+00:00" or
// "UTC" (older `aws sso login` caches). nullopt when it is not one.
std::optional<int64_t> parse_time(std::string_view s);
// An STS AssumeRoleResponse / AssumeRoleWithWebIdentityResponse (its Credentials element), or
// its ErrorResponse as an IoError with STS's Code and Message.
Credentials parse_sts_answer(std::string_view xml, const std::string& what);
// credential_process's stdout: {"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken"?,
// "Expiration"?}.
Credentials parse_process_output(std::string_view json, const std::string& what);
// The container endpoint's and IMDS's answer: AccessKeyId, SecretAccessKey, Token, Expiration
// (IMDS adds "Code": "Success").
Credentials parse_metadata_json(std::string_view json, const std::string& what);
struct SsoToken {
  std::string access_token;
  int64_t expires_at = 0;
};
// ~/.aws/sso/cache/<...>.json: accessToken, expiresAt.
SsoToken parse_sso_cache(std::string_view json, const std::string& path);
// GetRoleCredentials: {"roleCredentials": {accessKeyId, secretAccessKey, sessionToken,
// expiration (Unix milliseconds)}}.
Credentials parse_sso_credentials(std::string_view json, const std::string& what);
// The cache file's name: the SHA-1 hex of the session name (or legacy start URL) + ".json".
std::string sso_cache_file(const std::string& session_or_url);

// Whether keys must be fetched again at `now`: they expire within `margin_s` seconds.
using store::needs_refresh;
// The S3 error codes that mean the signing keys expired (refresh once and retry).
bool is_expired_token_code(std::string_view code);

// --- the world the chain reads ---

struct HttpRequest {
  std::string method = "GET", url, body;
  std::vector<std::string> headers;
  std::string sigv4;  // "aws:amz:REGION:sts": signed with `sign` (empty: unsigned)
  Credentials sign;
  long connect_timeout_ms = 10000, timeout_ms = 30000;
};
struct HttpResponse {
  long status = 0;  // 0: no answer
  std::string body;
  std::string error;  // the transport failure when status is 0 ("Couldn't connect to server")
};
struct ProcessResult {
  int exit_status = 0;  // -1: it did not run or was killed (see `error`)
  std::string out, err, error;
};

struct Io {
  std::function<std::optional<std::string>(const char*)> env;
  std::function<std::optional<std::string>(const std::string&)> read;  // nullopt: no such file
  std::function<HttpResponse(const HttpRequest&)> http;
  std::function<ProcessResult(const std::string& command)> run;
  std::function<int64_t()> now;  // Unix seconds
  static Io system();            // getenv, the filesystem, libcurl, /bin/sh, the clock (aws_io.cpp)
};

// What the chain needs from the S3 client's configuration.
struct ChainSettings {
  std::string profile = "default";
  std::string region = "us-east-1";
};

// Runs the chain once; IoError (exit 4) listing every source tried when none gives keys.
Credentials resolve(const Io& io, const ChainSettings& settings);

// The keys in use, refreshed before they expire (DCPCTL_CREDENTIAL_REFRESH_MARGIN_S, else 300 s,
// before), and once when a request is refused as expired; shared by every thread of the client.
class CredentialCache : public store::RefreshingCache<Credentials> {
 public:
  using RefreshingCache::RefreshingCache;
};

// DCPCTL_CREDENTIAL_REFRESH_MARGIN_S (whole seconds, 0 to 3600) or 300; UsageError otherwise.
int64_t refresh_margin(const std::function<std::optional<std::string>(const char*)>& env);

}  // namespace dcpctl::aws
