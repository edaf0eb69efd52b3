// Google's Application Default Credentials (ADC): where a process gets the OAuth 2.0 access token
// that authorizes its Cloud Storage requests, looked for in google-auth's order
// (google/auth/_default.py, default()), the first source that is configured wins:
//
//   0. emulator          STORAGE_EMULATOR_HOST set: no credentials at all (an empty token; the
//                        client sends no Authorization header), as google-cloud-storage does
//   1. explicit file     GOOGLE_APPLICATION_CREDENTIALS names a JSON credentials file
//   2. gcloud's file     $CLOUDSDK_CONFIG/application_default_credentials.json, else
//                        $HOME/.config/gcloud/application_default_credentials.json (what
//                        `gcloud auth application-default login` writes); skipped when absent
//   3. metadata server   GCE, Cloud Run, GKE: GET http://HOST/computeMetadata/v1/instance/
//                        service-accounts/default/token with `Metadata-Flavor: Google`. HOST is
//                        GCE_METADATA_HOST (host[:port]), else its old name GCE_METADATA_ROOT,
//                        else GCE_METADATA_IP (google-auth pings that address; here it is the host
//                        when the others are unset), else metadata.google.internal. 1 s to connect
//                        (name lookup included), 2 attempts, so a laptop fails in about 2 s.
//                        NO_GCE_CHECK=true skips it (google-auth's switch; case-insensitive here)
//
// A credentials file's "type":
//   service_account   client_email, private_key (PEM), private_key_id, token_uri: an RS256 JWT
//                     ({"alg":"RS256","typ":"JWT","kid":private_key_id}; iss=client_email,
//                     scope=devstorage.read_write, aud=token_uri, iat=now, exp=now+3600) is
//                     exchanged at token_uri (grant_type jwt-bearer)
//   authorized_user   client_id, client_secret, refresh_token: grant_type=refresh_token at
//                     token_uri
// token_uri defaults to https://oauth2.googleapis.com/token; it must be https (or http to a
// loopback address, for test servers), since the form carries a secret. external_account,
// external_account_authorized_user, impersonated_service_account and gdch_service_account are
// not supported yet: an IoError naming the file and the type. Unknown types are refused too.
//
// A source that is configured but fails stops the chain: a file that cannot be read, is not
// JSON, lacks a field or whose token endpoint refuses it (400 invalid_grant: a revoked refresh
// token, a deleted key) is an error, never a silent fall-back to the metadata server. Every
// failure is an IoError (exit 4) naming each source tried, in order, and why it gave nothing.
// No error ever holds a secret: private keys, refresh tokens, client secrets and access tokens
// are never printed, nor the text of a credentials file or of a token answer.
//
// Project (project()): GOOGLE_CLOUD_PROJECT, else GCLOUD_PROJECT, else the credentials file's
// project_id, else its quota_project_id (dcpctl's addition: gcloud writes the user's project
// there), else, for gcloud's own file only, gcloud's configured project (CLOUDSDK_CORE_PROJECT,
// else [core] project in $CLOUDSDK_CONFIG/configurations/config_<active>, the active one named by
// CLOUDSDK_ACTIVE_CONFIG_NAME or the file active_config, else "default"; google-auth runs
// `gcloud config config-helper` for that), else the metadata server's project/project-id, asked
// only by project() and only when the chain would use the metadata server.
//
// Refresh: tokens (those with an expiration: all but the emulator's) are fetched again by the
// first request that finds them within the refresh margin of expiring (aws::refresh_margin:
// 5 minutes, DCPCTL_CREDENTIAL_REFRESH_MARGIN_S), under a lock, so one thread refreshes while the
// others wait; a request answered 401 refreshes once (only the token it was sent with) and is
// sent again.
//
// Environment variables set to the empty string count as unset (as in the AWS chain).
//
// Everything here is pure but aws::Io (objstore/aws_io.cpp, shared with the AWS chain): the
// environment, files, HTTP and the clock come in through it, so tests drive the chain offline.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "objstore/aws_credentials.h"
#include "objstore/refreshing_cache.h"
#include "util/error.h"

namespace dcpctl::gcs {

using aws::HttpRequest;
using aws::HttpResponse;
using aws::Io;

inline constexpr const char* kStorageScope = "https://www.googleapis.com/auth/devstorage.read_write";
inline constexpr const char* kDefaultTokenUri = "https://oauth2.googleapis.com/token";

struct Token {
  std::string access_token;           // empty: send no Authorization header (the emulator)
  std::optional<int64_t> expiration;  // Unix seconds; nullopt: never refreshed but after a 401
  std::string source;                 // "service-account FILE", "authorized-user FILE", "gce-metadata",
                                      // "emulator (no credentials)"
  std::string project;                // what is known without asking the metadata server ("" if nothing)
};

// A credentials file, parsed. Only the fields of its type are filled.
struct CredentialsFile {
  std::string type;  // "service_account" or "authorized_user"
  // service_account
  std::string client_email, private_key, private_key_id;
  // authorized_user
  std::string client_id, client_secret, refresh_token;
  std::string token_uri;  // kDefaultTokenUri when the file has none
  std::string project_id, quota_project_id;
};

// --- parsers (each throws IoError naming `what` or `path`, never printing a secret) ---

// A credentials file (service_account or authorized_user, with their required fields); an
// IoError for any other type, for text that is not a JSON object, or for a missing field. The
// file's text never appears in the error (it holds a private key or a refresh token).
CredentialsFile parse_credentials_file(std::string_view json, const std::string& path);
// A token endpoint's or the metadata server's answer {"access_token", "expires_in",
// "token_type"?: "Bearer"}: the token expires at `now` + expires_in. An answer with "error" is
// the endpoint's refusal (parse_error_answer). Never prints the answer's text.
Token parse_token_answer(std::string_view json, int64_t now, const std::string& what);
// An OAuth 2.0 error answer {"error": "invalid_grant", "error_description": "..."} as
// "invalid_grant: ..."; nullopt when the body is not one.
std::optional<std::string> parse_error_answer(std::string_view body);

// --- the JWT of a service account ---

// base64url(header) "." base64url(claims): what RS256 signs.
std::string jwt_signing_input(const CredentialsFile& sa, int64_t now, const std::string& scope = kStorageScope);
// The RS256 signature (RSASSA-PKCS1-v1_5 over SHA-256, raw bytes) of `input` with the PEM private
// key; IoError naming `what` when the key cannot be read or is not RSA (never the key's text).
std::string sign_rs256(std::string_view input, const std::string& pem, const std::string& what);
// The signed assertion POSTed to token_uri: signing input "." base64url(signature).
std::string service_account_assertion(const CredentialsFile& sa, int64_t now, const std::string& what);

// --- the chain ---

// Runs the chain once; IoError (exit 4) listing every source tried when none gives a token.
Token resolve(const Io& io);
// The project, as above; IoError listing where it looked when none has one.
std::string project(const Io& io);

// Whether a token must be fetched again at `now`: it expires within `margin_s` seconds.
using store::needs_refresh;

// The token in use, refreshed before it expires (aws::refresh_margin before) and once when a
// request is answered 401; shared by every thread of the client.
class TokenCache : public store::RefreshingCache<Token> {
 public:
  using RefreshingCache::RefreshingCache;
};

}  // namespace dcpctl::gcs
