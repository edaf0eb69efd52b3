#include "objstore/gcs_credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "objstore/http.h"
#include "objstore/s3.h"
#include "util/base64.h"
#include "util/text.h"

namespace dcpctl::gcs {

namespace {

constexpr size_t kMaxText = 1u << 20;   // a credentials file or a token answer is a few KiB
constexpr int64_t kJwtLifetime = 3600;  // what Google's token endpoint accepts at most
constexpr int64_t kMaxExpiresIn = 10LL * 365 * 86400;

const char* const kGrantJwt = "urn:ietf:params:oauth:grant-type:jwt-bearer";

using store::http::tail;
using store::http::trim;

// A JSON object, or an IoError saying where the text breaks: never what it holds, which may be a
// private key or a token (nlohmann's own message quotes the last token read).
nlohmann::json parse_object(std::string_view text, const std::string& what, const std::string& kind) {
  if (text.size() > kMaxText) throw IoError(Where(what), kind + " is larger than 1 MiB");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw IoError(Where(what), kind + " is not valid JSON (at byte " + std::to_string(e.byte) + ")");
  }
  if (!j.is_object()) throw IoError(Where(what), kind + " is not a JSON object");
  return j;
}

// A string field; its value never appears in the error.
std::string field(const nlohmann::json& j, const char* key, const std::string& what, const std::string& kind,
                  bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw IoError(Where(what), kind + " has no " + key);
    return {};
  }
  if (!it->is_string() || (required && it->get_ref<const std::string&>().empty()))
    throw IoError(Where(what), kind + "'s " + key + " is not a non-empty string");
  return it->get<std::string>();
}

// "invalid_grant: Bad Request" from {"error": "...", "error_description": "..."}, or Google's API
// form {"error": {"code": 401, "message": "...", "status": "UNAUTHENTICATED"}}.
std::optional<std::string> error_of(const nlohmann::json& j) {
  auto e = j.find("error");
  if (e == j.end()) return std::nullopt;
  std::string s;
  if (e->is_string()) {
    s = e->get<std::string>();
    auto d = j.find("error_description");
    if (d != j.end() && d->is_string() && !d->get_ref<const std::string&>().empty()) s += ": " + d->get<std::string>();
  } else if (e->is_object()) {
    auto st = e->find("status"), msg = e->find("message");
    if (st != e->end() && st->is_string()) s = st->get<std::string>();
    if (msg != e->end() && msg->is_string()) s += (s.empty() ? "" : ": ") + msg->get<std::string>();
  }
  if (s.empty()) return std::nullopt;
  return tail(s, 300);
}

// A token endpoint must be https: the form carries a refresh token, a client secret or a signed
// assertion. Plain http only to a loopback address (a test server).
void check_token_uri(const std::string& uri, const std::string& path) {
  if (uri.rfind("https://", 0) == 0) return;
  if (uri.rfind("http://", 0) == 0) {
    std::string rest = uri.substr(7);
    std::string host = !rest.empty() && rest[0] == '[' ? rest.substr(0, rest.find(']') + 1)
                                                       : rest.substr(0, rest.find_first_of(":/?"));
    bool loopback4 = host.rfind("127.", 0) == 0 && host.find_first_not_of("0123456789.") == std::string::npos;
    if (loopback4 || host == "localhost" || host == "[::1]") return;
  }
  throw IoError(Where(path), "token_uri '" + tail(uri, 200) + "' is neither https nor http to a loopback address");
}

std::string form(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string b;
  for (const auto& [k, v] : params) b += (b.empty() ? "" : "&") + k + "=" + s3::uri_encode(v, false);
  return b;
}

// What a server answered, for an error: the transport failure, or the status and its error.
std::string describe(const HttpResponse& r) {
  if (r.status == 0) return r.error.empty() ? std::string("no answer") : r.error;
  std::string s = "HTTP " + std::to_string(r.status);
  if (auto e = parse_error_answer(r.body)) {
    s += " " + *e;
  } else if (!trim(r.body).empty()) {
    s += ": " + tail(r.body);
  }
  return s;
}

std::string openssl_error() {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no detail from OpenSSL";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  return buf;
}

// No passphrase: an encrypted key is an error, never a prompt on the terminal.
int no_passphrase(char*, int, int, void*) {
  return 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Parsers

CredentialsFile parse_credentials_file(std::string_view text, const std::string& path) {
  const std::string kind = "the credentials file";
  nlohmann::json j = parse_object(text, path, kind);
  CredentialsFile f;
  f.type = field(j, "type", path, kind, false);
  if (f.type.empty())
    throw IoError(Where(path), "the credentials file has no \"type\" (expected service_account or authorized_user)");
  if (f.type == "service_account") {
    f.client_email = field(j, "client_email", path, kind, true);
    f.private_key = field(j, "private_key", path, kind, true);
    f.private_key_id = field(j, "private_key_id", path, kind, false);
  } else if (f.type == "authorized_user") {
    f.client_id = field(j, "client_id", path, kind, true);
    f.client_secret = field(j, "client_secret", path, kind, true);
    f.refresh_token = field(j, "refresh_token", path, kind, true);
  } else if (f.type == "external_account" || f.type == "external_account_authorized_user" ||
             f.type == "impersonated_service_account" || f.type == "gdch_service_account") {
    throw IoError(Where(path), "credentials of type " + f.type +
                                   " are not supported yet (dcpctl reads service_account and authorized_user "
                                   "files; a service account key, or `gcloud auth application-default login`, works)");
  } else {
    throw IoError(Where(path),
                  "unknown credentials type '" + tail(f.type, 60) + "' (expected service_account or authorized_user)");
  }
  f.token_uri = field(j, "token_uri", path, kind, false);
  if (f.token_uri.empty()) f.token_uri = kDefaultTokenUri;
  check_token_uri(f.token_uri, path);
  f.project_id = field(j, "project_id", path, kind, false);
  f.quota_project_id = field(j, "quota_project_id", path, kind, false);
  return f;
}

std::optional<std::string> parse_error_answer(std::string_view body) {
  if (body.size() > kMaxText) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return error_of(j);
}

Token parse_token_answer(std::string_view text, int64_t now, const std::string& what) {
  const std::string kind = "the token answer";
  nlohmann::json j = parse_object(text, what, kind);
  if (auto e = error_of(j)) throw IoError(Where(what), *e);
  Token t;
  t.access_token = field(j, "access_token", what, kind, true);
  // It goes into an Authorization header: visible ASCII only.
  for (char c : t.access_token)
    if (c < 0x21 || c > 0x7e) throw IoError(Where(what), "the access_token holds characters a header cannot carry");
  std::string type = field(j, "token_type", what, kind, false);
  if (!type.empty() && ascii_lower(type) != "bearer")
    throw IoError(Where(what), "token_type '" + tail(type, 40) + "' is not Bearer");
  auto e = j.find("expires_in");
  if (e != j.end() && !e->is_null()) {
    std::optional<int64_t> s;
    if (e->is_number_unsigned() || e->is_number_integer()) {
      if (e->is_number_unsigned() ? e->get<uint64_t>() <= static_cast<uint64_t>(kMaxExpiresIn)
                                  : e->get<int64_t>() >= 0 && e->get<int64_t>() <= kMaxExpiresIn)
        s = e->get<int64_t>();
    } else if (e->is_string()) {  // some servers quote it
      const std::string& v = e->get_ref<const std::string&>();
      if (!v.empty() && v.size() <= 10 && v.find_first_not_of("0123456789") == std::string::npos &&
          std::stoll(v) <= kMaxExpiresIn)
        s = std::stoll(v);
    }
    if (!s) throw IoError(Where(what), "expires_in is not a number of seconds up to 10 years");
    t.expiration = now + *s;
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// The JWT

std::string jwt_signing_input(const CredentialsFile& sa, int64_t now, const std::string& scope) {
  nlohmann::ordered_json header = {{"alg", "RS256"}, {"typ", "JWT"}};
  if (!sa.private_key_id.empty()) header["kid"] = sa.private_key_id;
  nlohmann::ordered_json claims = {
      {"iss", sa.client_email}, {"scope", scope}, {"aud", sa.token_uri}, {"iat", now}, {"exp", now + kJwtLifetime}};
  auto dump = [](const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  };
  return base64_encode(dump(header), Base64::Url) + "." + base64_encode(dump(claims), Base64::Url);
}

std::string sign_rs256(std::string_view input, const std::string& pem, const std::string& what) {
  if (pem.size() > kMaxText) throw IoError(Where(what), "private_key is larger than 1 MiB");
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  if (!bio) throw IoError(Where(what), "cannot read private_key: " + openssl_error());
  EVP_PKEY* raw = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr);
  if (!raw) throw IoError(Where(what), "private_key is not a PEM private key (" + openssl_error() + ")");
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(raw, &EVP_PKEY_free);
  if (EVP_PKEY_base_id(key.get()) != EVP_PKEY_RSA)
    throw IoError(Where(what), "private_key is not an RSA key (RS256 needs one)");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  size_t len = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(input.data());
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, data, input.size()) != 1)
    throw IoError(Where(what), "cannot sign with private_key: " + openssl_error());
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, data, input.size()) != 1)
    throw IoError(Where(what), "cannot sign with private_key: " + openssl_error());
  sig.resize(len);
  return sig;
}

std::string service_account_assertion(const CredentialsFile& sa, int64_t now, const std::string& what) {
  std::string input = jwt_signing_input(sa, now);
  return input + "." + base64_encode(sign_rs256(input, sa.private_key, what), Base64::Url);
}

// ---------------------------------------------------------------------------------------------
// The chain

namespace {

const char* const kAdcName = "application_default_credentials.json";
const char* const kTokenPath = "/computeMetadata/v1/instance/service-accounts/default/token";
const char* const kProjectPath = "/computeMetadata/v1/project/project-id";

// `text` with every secret in `secrets` replaced by "***".
std::string cut_secrets(std::string text, const std::vector<std::string>& secrets) {
  for (const auto& s : secrets) {
    if (s.size() < 4) continue;
    for (size_t at = text.find(s); at != std::string::npos; at = text.find(s, at)) text.replace(at, s.size(), "***");
  }
  return text;
}

// Why each source gave nothing, in the order tried: the error when none gives a token. Every
// secret the chain read or received is cut out of the message, whatever a server echoed back
// (and out of a server's answer before it is shortened, so that no piece of one survives).
struct Trail {
  std::string head;
  const std::vector<std::string>& secrets;
  std::vector<std::string> lines;
  void add(const std::string& source, const std::string& why) { lines.push_back(source + ": " + why); }
  [[noreturn]] void fail(const std::string& source, const std::string& why, const std::string& hint = "") {
    add(source, why);
    std::string all;
    for (const auto& l : lines) all += (all.empty() ? "" : "; ") + l;
    throw IoError(Where(), cut_secrets(head + all + hint, secrets));
  }
};

// An error's text without the path the trail line already names.
std::string reason(const Error& e, const std::string& path) {
  return e.where().file == path && !e.where().offset && e.where().key.empty() ? e.detail() : e.what();
}

class Chain {
 public:
  explicit Chain(const Io& io) : io_(io) {}

  Token resolve() {
    if (env("STORAGE_EMULATOR_HOST")) {
      Token t;
      t.source = "emulator (no credentials)";
      t.project = env_project();
      return t;
    }
    Trail trail{"no Google credentials: ", secrets_, {}};
    std::optional<std::string> adc = adc_path();
    // 1. GOOGLE_APPLICATION_CREDENTIALS
    if (auto path = env("GOOGLE_APPLICATION_CREDENTIALS")) {
      std::string src = "GOOGLE_APPLICATION_CREDENTIALS " + *path;
      try {
        return from_file(*path, adc && *adc == *path);
      } catch (const IoError& e) {
        trail.fail(src, reason(e, *path));
      }
    }
    trail.add("GOOGLE_APPLICATION_CREDENTIALS", "not set");
    // 2. gcloud's application default credentials
    if (!adc) {
      trail.add("gcloud's " + std::string(kAdcName), "neither CLOUDSDK_CONFIG nor HOME is set");
    } else if (io_.read(*adc)) {
      try {
        return from_file(*adc, true);
      } catch (const IoError& e) {
        trail.fail("gcloud's " + *adc, reason(e, *adc));
      }
    } else {
      trail.add("gcloud's " + *adc, "no such file");
    }
    // 3. the metadata server
    const char* hint =
        " (set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, or run `gcloud auth "
        "application-default login`)";
    if (no_gce_check()) trail.fail("metadata server", "NO_GCE_CHECK=true", hint);
    std::string host = metadata_host();
    try {
      return metadata_token(host);
    } catch (const IoError& e) {
      trail.fail("metadata server " + host, e.what(), hint);
    }
  }

  std::string project() {
    if (auto p = env_project(); !p.empty()) return p;
    Trail trail{"no Google Cloud project: ", secrets_, {}};
    trail.add("GOOGLE_CLOUD_PROJECT, GCLOUD_PROJECT", "not set");
    if (env("STORAGE_EMULATOR_HOST")) trail.fail("STORAGE_EMULATOR_HOST", "set, so no credentials to take one from");
    std::optional<std::string> adc = adc_path();
    std::optional<std::string> path = env("GOOGLE_APPLICATION_CREDENTIALS");
    std::string src = path ? "GOOGLE_APPLICATION_CREDENTIALS " + *path : "";
    if (!path && adc && io_.read(*adc)) {
      path = adc;
      src = "gcloud's " + *adc;
    }
    if (path) {
      bool gcloud = adc && *adc == *path;
      try {
        auto text = io_.read(*path);
        if (!text) throw IoError(Where(*path), "cannot read it (no such file, or not readable)");
        CredentialsFile f = parse_credentials_file(*text, *path);
        secrets_from(f);
        std::string p = file_project(f, gcloud);
        if (!p.empty()) return p;
      } catch (const IoError& e) {
        trail.fail(src, reason(e, *path));
      }
      trail.fail(src, gcloud ? "no project_id or quota_project_id, and no project in gcloud's configuration"
                             : "no project_id or quota_project_id");
    }
    if (no_gce_check()) trail.fail("metadata server", "NO_GCE_CHECK=true");
    std::string host = metadata_host();
    try {
      HttpRequest r = metadata_request(host, kProjectPath);
      HttpResponse a = io_.http(r);
      if (a.status != 200) throw IoError(Where(), describe(a) + " (" + r.url + ")");
      std::string p = trim(a.body);
      // Project IDs: lower-case letters, digits, '-'; domain-scoped ones add "example.com:".
      if (p.empty() || p.size() > 128 ||
          p.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.:") != std::string::npos)
        throw IoError(Where(), "the answer is not a project ID (" + r.url + ")");
      return p;
    } catch (const IoError& e) {
      trail.fail("metadata server " + host, e.what());
    }
  }

 private:
  std::optional<std::string> env(const char* name) const {
    auto v = io_.env(name);
    if (v && !v->empty()) return v;
    return std::nullopt;
  }
  std::string env_project() const { return env("GOOGLE_CLOUD_PROJECT").value_or(env("GCLOUD_PROJECT").value_or("")); }
  bool no_gce_check() const { return ascii_lower(env("NO_GCE_CHECK").value_or("")) == "true"; }

  // gcloud's configuration folder: CLOUDSDK_CONFIG, else ~/.config/gcloud (Linux and macOS).
  std::optional<std::string> config_dir() const {
    if (auto d = env("CLOUDSDK_CONFIG")) return d;
    if (auto h = env("HOME")) return *h + "/.config/gcloud";
    return std::nullopt;
  }
  std::optional<std::string> adc_path() const {
    auto d = config_dir();
    if (!d) return std::nullopt;
    return *d + "/" + kAdcName;
  }
  // The project gcloud is configured with: CLOUDSDK_CORE_PROJECT, else [core] project of the
  // active configuration.
  std::string gcloud_project() const {
    if (auto p = env("CLOUDSDK_CORE_PROJECT")) return *p;
    auto dir = config_dir();
    if (!dir) return "";
    std::string active = env("CLOUDSDK_ACTIVE_CONFIG_NAME").value_or("");
    if (active.empty()) active = trim(io_.read(*dir + "/active_config").value_or(""));
    if (active.empty()) active = "default";
    if (active.find('/') != std::string::npos) return "";
    auto text = io_.read(*dir + "/configurations/config_" + active);
    if (!text) return "";
    s3::IniFile ini = s3::parse_ini(*text);
    auto core = ini.find("core");
    if (core == ini.end()) return "";
    auto p = core->second.find("project");
    return p == core->second.end() ? "" : p->second;
  }
  std::string file_project(const CredentialsFile& f, bool gcloud) const {
    std::string p = env_project();
    if (p.empty()) p = f.project_id;
    if (p.empty()) p = f.quota_project_id;
    if (p.empty() && gcloud) p = gcloud_project();
    return p;
  }

  void secrets_from(const CredentialsFile& f) {
    for (const std::string* s : {&f.private_key, &f.client_secret, &f.refresh_token}) {
      if (s->empty()) continue;
      secrets_.push_back(*s);
      secrets_.push_back(s3::uri_encode(*s, false));  // as the form carried it
    }
  }

  Token from_file(const std::string& path, bool gcloud) {
    auto text = io_.read(path);
    if (!text) throw IoError(Where(path), "cannot read it (no such file, or not readable)");
    CredentialsFile f = parse_credentials_file(*text, path);
    secrets_from(f);
    const int64_t now = io_.now();
    HttpRequest r;
    r.method = "POST";
    r.url = f.token_uri;
    r.headers.push_back("Content-Type: application/x-www-form-urlencoded");
    Token t;
    if (f.type == "service_account") {
      std::string assertion = service_account_assertion(f, now, path);
      secrets_.push_back(assertion);
      r.body = form({{"grant_type", kGrantJwt}, {"assertion", assertion}});
    } else {
      r.body = form({{"grant_type", "refresh_token"},
                     {"client_id", f.client_id},
                     {"client_secret", f.client_secret},
                     {"refresh_token", f.refresh_token}});
    }
    std::string what = "token endpoint " + f.token_uri;
    HttpResponse a = io_.http(r);
    if (a.status != 200) {
      a.body = cut_secrets(std::move(a.body), secrets_);
      std::string hint;
      if (f.type == "authorized_user" && a.status >= 400 && a.status < 500)
        hint = " (run `gcloud auth application-default login` again)";
      else if (f.type == "service_account" && a.status >= 400 && a.status < 500)
        hint = " (the key may have been deleted or disabled, or this machine's clock is off)";
      throw IoError(Where(), what + ": " + describe(a) + hint);
    }
    t = parse_token_answer(a.body, now, what);
    secrets_.push_back(t.access_token);
    t.source = (f.type == "service_account" ? "service-account " : "authorized-user ") + path;
    t.project = file_project(f, gcloud);
    return t;
  }

  // GCE_METADATA_HOST, GCE_METADATA_ROOT, GCE_METADATA_IP, metadata.google.internal: host[:port]
  // (a scheme or a trailing '/' given with it is dropped).
  std::string metadata_host() const {
    std::string h =
        env("GCE_METADATA_HOST").value_or(env("GCE_METADATA_ROOT").value_or(env("GCE_METADATA_IP").value_or("")));
    if (h.rfind("http://", 0) == 0) h = h.substr(7);
    while (!h.empty() && h.back() == '/') h.pop_back();
    return h.empty() ? "metadata.google.internal" : h;
  }
  HttpRequest metadata_request(const std::string& host, const char* path) const {
    if (host.find_first_of(" \t\r\n/@?#") != std::string::npos)
      throw IoError(Where(), "GCE_METADATA_HOST '" + tail(host, 100) + "' is not host[:port]");
    HttpRequest r;
    r.url = "http://" + host + path;
    r.headers.push_back("Metadata-Flavor: Google");
    // 1 s to connect (name lookup included): 2 attempts (aws_io.cpp), so a laptop with no
    // metadata server fails in about 2 s. GKE's metadata server may take seconds to mint a
    // workload's first token, hence the longer whole.
    r.connect_timeout_ms = 1000;
    r.timeout_ms = 10000;
    return r;
  }
  Token metadata_token(const std::string& host) {
    HttpRequest r = metadata_request(host, kTokenPath);
    const int64_t now = io_.now();
    HttpResponse a = io_.http(r);
    if (a.status == 404)
      throw IoError(Where(), "no service account is attached to this machine (HTTP 404 at " + r.url + ")");
    if (a.status != 200) throw IoError(Where(), describe(a) + " (" + r.url + ")");
    Token t = parse_token_answer(a.body, now, r.url);
    secrets_.push_back(t.access_token);
    t.source = "gce-metadata";
    t.project = env_project();
    return t;
  }

  const Io& io_;
  std::vector<std::string> secrets_;
};

}  // namespace

Token resolve(const Io& io) {
  return Chain(io).resolve();
}

std::string project(const Io& io) {
  return Chain(io).project();
}

}  // namespace dcpctl::gcs
