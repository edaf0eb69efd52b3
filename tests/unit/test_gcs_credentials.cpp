// Google's Application Default Credentials (objstore/gcs_credentials.h) offline: every parser, the
// service account's JWT (its RS256 signature checked with the public half of a key made here),
// the order of the sources, what each sends, the refresh rule, and the errors that list every
// source tried and hold no secret.
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "objstore/gcs_credentials.h"
#include "util/base64.h"
#include "util/error.h"

using namespace dcpctl;
using namespace dcpctl::gcs;

namespace {

// An RSA key made once for the whole file: its private half as PEM (what a service account key
// file holds), its public half to verify signatures with.
struct TestKey {
  std::string private_pem;
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{nullptr, &EVP_PKEY_free};
};

const TestKey& test_key() {
  static const TestKey k = [] {
    TestKey t;
    std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nullptr),
                                                                    &EVP_PKEY_CTX_free);
    EVP_PKEY* raw = nullptr;
    if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_CTX_set_rsa_keygen_bits(ctx.get(), 2048) != 1 ||
        EVP_PKEY_keygen(ctx.get(), &raw) != 1)
      throw std::runtime_error("RSA key generation failed");
    t.key.reset(raw);
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
    PEM_write_bio_PrivateKey(bio.get(), raw, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    long n = BIO_get_mem_data(bio.get(), &data);
    t.private_pem.assign(data, static_cast<size_t>(n));
    return t;
  }();
  return k;
}

bool verify_rs256(std::string_view input, std::string_view sig) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, test_key().key.get()) != 1) return false;
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                          reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
}

const char* kRefreshToken = "1//0refresh-SECRET-token";
const char* kClientSecret = "d-FL95Q19q7MQmFpd7hHD0Ty";
const char* kAccessToken = "ya29.a0AfH6SMB-secret-access-token";

std::string service_account_json(const std::string& token_uri = "https://oauth2.googleapis.com/token") {
  nlohmann::json j = {{"type", "service_account"},
                      {"project_id", "sa-project"},
                      {"private_key_id", "kid-123"},
                      {"private_key", test_key().private_pem},
                      {"client_email", "loader@sa-project.iam.gserviceaccount.com"},
                      {"client_id", "1234567890"},
                      {"token_uri", token_uri}};
  return j.dump(2);
}

std::string authorized_user_json(const std::string& extra = "") {
  return std::string(
             R"({"type": "authorized_user", "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com", )") +
         R"("client_secret": ")" + kClientSecret + R"(", "refresh_token": ")" + kRefreshToken + "\"" + extra + "}";
}

std::string token_answer(const std::string& token = kAccessToken, int expires_in = 3599) {
  return R"({"access_token": ")" + token + R"(", "expires_in": )" + std::to_string(expires_in) +
         R"(, "token_type": "Bearer"})";
}

// A fake world: environment, files, HTTP answers by "METHOD URL" (missing: connection refused);
// it records what the chain sent.
struct World {
  std::map<std::string, std::string> env, files;
  std::map<std::string, aws::HttpResponse> answers;
  int64_t now = 1700000000;
  std::vector<aws::HttpRequest> sent;
  Io io() {
    Io io;
    io.env = [this](const char* n) -> std::optional<std::string> {
      auto it = env.find(n);
      return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    io.read = [this](const std::string& p) -> std::optional<std::string> {
      auto it = files.find(p);
      return it == files.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    io.http = [this](const aws::HttpRequest& r) {
      sent.push_back(r);
      auto it = answers.find(r.method + " " + r.url);
      if (it != answers.end()) return it->second;
      aws::HttpResponse refused;
      refused.error = "Couldn't connect to server";
      return refused;
    };
    io.run = [](const std::string&) { return aws::ProcessResult{-1, "", "", "no processes here"}; };
    io.now = [this] { return now; };
    return io;
  }
  Token resolve() { return gcs::resolve(io()); }
  std::string error() {
    try {
      resolve();
    } catch (const IoError& e) {
      return e.what();
    }
    return "(no error)";
  }
  std::string project() { return gcs::project(io()); }
  std::string project_error() {
    try {
      project();
    } catch (const IoError& e) {
      return e.what();
    }
    return "(no error)";
  }
};

aws::HttpResponse answer(long status, std::string body) {
  aws::HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

bool has_header(const aws::HttpRequest& r, const std::string& h) {
  for (const auto& x : r.headers)
    if (x == h) return true;
  return false;
}

// The form's fields, decoded.
std::map<std::string, std::string> form_fields(const std::string& body) {
  auto unescape = [](const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '%' && i + 2 < s.size()) {
        out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        out += s[i];
      }
    }
    return out;
  };
  std::map<std::string, std::string> f;
  size_t at = 0;
  while (at <= body.size()) {
    size_t amp = body.find('&', at);
    std::string kv = body.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
    size_t eq = kv.find('=');
    f[kv.substr(0, eq)] = eq == std::string::npos ? "" : unescape(kv.substr(eq + 1));
    if (amp == std::string::npos) break;
    at = amp + 1;
  }
  return f;
}

// Checks a JWT as Google's token endpoint would: three parts, the signature by the test key over
// the first two; returns the header and the claims.
std::pair<nlohmann::json, nlohmann::json> check_jwt(const std::string& jwt) {
  size_t a = jwt.find('.'), b = jwt.rfind('.');
  REQUIRE(a != std::string::npos);
  REQUIRE(b > a);
  CHECK(jwt.find('=') == std::string::npos);  // no padding
  auto sig = base64_decode(jwt.substr(b + 1), Base64::Url);
  REQUIRE(sig);
  CHECK(sig->size() == 256);  // RSA 2048
  CHECK(verify_rs256(jwt.substr(0, b), *sig));
  std::string tampered = jwt.substr(0, b) + "x";
  CHECK_FALSE(verify_rs256(tampered, *sig));
  auto header = base64_decode(jwt.substr(0, a), Base64::Url),
       claims = base64_decode(jwt.substr(a + 1, b - a - 1), Base64::Url);
  REQUIRE(header);
  REQUIRE(claims);
  return {nlohmann::json::parse(*header), nlohmann::json::parse(*claims)};
}

// No secret the chain read or received may appear in an error.
void check_no_secret(const std::string& message) {
  INFO(message);
  const std::string pem = test_key().private_pem;
  CHECK(message.find("PRIVATE KEY") == std::string::npos);
  CHECK(message.find(pem.substr(40, 60)) == std::string::npos);
  CHECK(message.find(kRefreshToken) == std::string::npos);
  CHECK(message.find(kClientSecret) == std::string::npos);
  CHECK(message.find(kAccessToken) == std::string::npos);
  CHECK(message.find("secret-access") == std::string::npos);
}

}  // namespace

TEST_CASE("gcs credentials: service account and authorized user files", "[gcs-credentials]") {
  CredentialsFile sa = parse_credentials_file(service_account_json(), "/k.json");
  CHECK(sa.type == "service_account");
  CHECK(sa.client_email == "loader@sa-project.iam.gserviceaccount.com");
  CHECK(sa.private_key == test_key().private_pem);
  CHECK(sa.private_key_id == "kid-123");
  CHECK(sa.token_uri == "https://oauth2.googleapis.com/token");
  CHECK(sa.project_id == "sa-project");

  CredentialsFile u = parse_credentials_file(authorized_user_json(R"(, "quota_project_id": "qp")"), "/adc.json");
  CHECK(u.type == "authorized_user");
  CHECK(u.client_secret == kClientSecret);
  CHECK(u.refresh_token == kRefreshToken);
  CHECK(u.token_uri == kDefaultTokenUri);  // the file has none
  CHECK(u.quota_project_id == "qp");

  // A token_uri in the file is honoured, https only (or http to a loopback test server).
  CHECK(parse_credentials_file(service_account_json("https://oauth2.example.test/t"), "/k.json").token_uri ==
        "https://oauth2.example.test/t");
  CHECK(parse_credentials_file(service_account_json("http://127.0.0.1:8080/token"), "/k.json").token_uri ==
        "http://127.0.0.1:8080/token");
  CHECK_THROWS_WITH(parse_credentials_file(service_account_json("http://evil.example/token"), "/k.json"),
                    Catch::Contains("/k.json: token_uri 'http://evil.example/token' is neither https"));
}

TEST_CASE("gcs credentials: malformed and unsupported credentials files, the text never quoted", "[gcs-credentials]") {
  auto error = [](const std::string& text) {
    try {
      parse_credentials_file(text, "/k.json");
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // Cut inside the private key: the error says where, and quotes nothing.
  std::string cut = service_account_json().substr(0, 200);
  std::string e = error(cut);
  CHECK_THAT(e, Catch::StartsWith("/k.json: the credentials file is not valid JSON (at byte"));
  check_no_secret(e);
  std::string broken = authorized_user_json();
  broken.insert(broken.find(kRefreshToken) + 4, "\"");  // a stray quote inside the refresh token
  e = error(broken);
  CHECK_THAT(e, Catch::Contains("not valid JSON"));
  check_no_secret(e);
  CHECK_THAT(error("[1, 2]"), Catch::Contains("is not a JSON object"));
  CHECK_THAT(error(R"({"client_email": "a@b"})"), Catch::Contains("has no \"type\""));
  CHECK_THAT(error(R"({"type": "service_account", "client_email": "a@b"})"),
             Catch::Contains("/k.json: the credentials file has no private_key"));
  CHECK_THAT(error(R"({"type": "service_account", "client_email": "a@b", "private_key": 5})"),
             Catch::Contains("private_key is not a non-empty string"));
  CHECK_THAT(error(R"({"type": "authorized_user", "client_id": "c", "client_secret": "s"})"),
             Catch::Contains("has no refresh_token"));
  for (const char* type : {"external_account", "external_account_authorized_user", "impersonated_service_account",
                           "gdch_service_account"}) {
    std::string t = std::string(R"({"type": ")") + type + R"(", "source_credentials": {"refresh_token": "x"}})";
    CHECK_THAT(error(t),
               Catch::StartsWith(std::string("/k.json: credentials of type ") + type + " are not supported yet"));
  }
  CHECK_THAT(error(R"({"type": "api_key"})"), Catch::Contains("unknown credentials type 'api_key'"));
}

TEST_CASE("gcs credentials: token answers, OAuth error answers", "[gcs-credentials]") {
  Token t = parse_token_answer(token_answer(kAccessToken, 3599), 1000, "token endpoint");
  CHECK(t.access_token == kAccessToken);
  CHECK(t.expiration == 1000 + 3599);
  CHECK(
      parse_token_answer(R"({"access_token": "x", "expires_in": "60", "token_type": "bearer"})", 10, "t").expiration ==
      70);
  CHECK_FALSE(parse_token_answer(R"({"access_token": "x"})", 10, "t").expiration);

  CHECK(parse_error_answer(R"({"error": "invalid_grant", "error_description": "Bad Request"})") ==
        std::string("invalid_grant: Bad Request"));
  CHECK(parse_error_answer(R"({"error": "invalid_client"})") == std::string("invalid_client"));
  CHECK(parse_error_answer(
            R"({"error": {"code": 401, "message": "Invalid Credentials", "status": "UNAUTHENTICATED"}})") ==
        std::string("UNAUTHENTICATED: Invalid Credentials"));
  CHECK_FALSE(parse_error_answer("Not Found"));
  CHECK_FALSE(parse_error_answer(R"({"access_token": "x"})"));

  auto error = [](const std::string& text) {
    try {
      parse_token_answer(text, 0, "token endpoint https://t");
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(error(R"({"error": "invalid_grant", "error_description": "Invalid JWT Signature."})") ==
        "token endpoint https://t: invalid_grant: Invalid JWT Signature.");
  CHECK_THAT(error(R"({"expires_in": 3599})"), Catch::Contains("has no access_token"));
  // Answers that hold a token but are wrong otherwise: the token is never quoted.
  for (const std::string& bad : {std::string(R"({"access_token": ")") + kAccessToken + R"(", "expires_in": "soon"})",
                                 std::string(R"({"access_token": ")") + kAccessToken + R"(", "expires_in": -5})",
                                 std::string(R"({"access_token": ")") + kAccessToken + R"(", "token_type": "MAC"})",
                                 std::string(R"({"access_token": ")") + kAccessToken + R"(\r\nX-Injected: 1"})",
                                 std::string(R"({"access_token": ")") + kAccessToken + R"(", "expires_in": 3599)"}) {
    std::string e = error(bad);
    CHECK_THAT(e, Catch::StartsWith("token endpoint https://t: "));
    check_no_secret(e);
  }
  CHECK_THAT(error(std::string(R"({"access_token": ")") + kAccessToken + R"(", "token_type": "MAC"})"),
             Catch::Contains("token_type 'MAC' is not Bearer"));
  CHECK_THAT(error(std::string(R"({"access_token": "a b"})")), Catch::Contains("characters a header cannot carry"));
}

TEST_CASE("gcs credentials: the service account's JWT, signed RS256 and verified with the public key",
          "[gcs-credentials]") {
  CredentialsFile sa = parse_credentials_file(service_account_json(), "/k.json");
  std::string jwt = service_account_assertion(sa, 1700000000, "/k.json");
  auto [header, claims] = check_jwt(jwt);
  CHECK(header == nlohmann::json{{"alg", "RS256"}, {"typ", "JWT"}, {"kid", "kid-123"}});
  CHECK(claims["iss"] == "loader@sa-project.iam.gserviceaccount.com");
  CHECK(claims["aud"] == "https://oauth2.googleapis.com/token");
  CHECK(claims["scope"] == "https://www.googleapis.com/auth/devstorage.read_write");
  CHECK(claims["iat"] == 1700000000);
  CHECK(claims["exp"].get<int64_t>() - claims["iat"].get<int64_t>() == 3600);
  // The signing input is what the signature covers.
  CHECK(jwt.rfind(jwt_signing_input(sa, 1700000000), 0) == 0);
  // No private_key_id: no kid (as google-auth).
  sa.private_key_id.clear();
  CHECK(check_jwt(service_account_assertion(sa, 5, "/k.json")).first ==
        nlohmann::json{{"alg", "RS256"}, {"typ", "JWT"}});

  // A key that is not one: the error says so without quoting it.
  CredentialsFile bad = sa;
  bad.private_key =
      "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC-not-a-key\n-----END PRIVATE KEY-----\n";
  try {
    service_account_assertion(bad, 5, "/k.json");
    FAIL("no error");
  } catch (const IoError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("/k.json: private_key is not a PEM private key"));
    CHECK(std::string(e.what()).find("MIIEvQ") == std::string::npos);
  }
}

TEST_CASE("gcs credentials: GOOGLE_APPLICATION_CREDENTIALS with a service account key", "[gcs-credentials]") {
  World w;
  w.env = {{"GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json"}, {"HOME", "/h"}};
  w.files["/keys/sa.json"] = service_account_json();
  w.files["/h/.config/gcloud/application_default_credentials.json"] = authorized_user_json();  // not reached
  w.answers["POST https://oauth2.googleapis.com/token"] = answer(200, token_answer(kAccessToken, 3599));
  Token t = w.resolve();
  CHECK(t.access_token == kAccessToken);
  CHECK(t.expiration == w.now + 3599);
  CHECK(t.source == "service-account /keys/sa.json");
  CHECK(t.project == "sa-project");
  REQUIRE(w.sent.size() == 1);
  const aws::HttpRequest& r = w.sent[0];
  CHECK(r.method == "POST");
  CHECK(has_header(r, "Content-Type: application/x-www-form-urlencoded"));
  CHECK(r.sigv4.empty());
  CHECK(r.body.rfind("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=", 0) == 0);
  auto f = form_fields(r.body);
  CHECK(f.size() == 2);
  auto [header, claims] = check_jwt(f["assertion"]);
  CHECK(header["kid"] == "kid-123");
  CHECK(claims["iat"] == w.now);
  CHECK(claims["exp"] == w.now + 3600);
  // GOOGLE_CLOUD_PROJECT comes before the file's project_id (as google-auth).
  w.env["GOOGLE_CLOUD_PROJECT"] = "env-project";
  CHECK(w.resolve().project == "env-project");
  CHECK(w.project() == "env-project");
  w.env.erase("GOOGLE_CLOUD_PROJECT");
  w.env["GCLOUD_PROJECT"] = "legacy-project";
  CHECK(w.resolve().project == "legacy-project");
}

TEST_CASE("gcs credentials: gcloud's authorized_user file refreshes its token", "[gcs-credentials]") {
  World w;
  w.env = {{"HOME", "/h"}};
  w.files["/h/.config/gcloud/application_default_credentials.json"] =
      authorized_user_json(R"(, "token_uri": "https://oauth2.example.test/token")");
  w.answers["POST https://oauth2.example.test/token"] = answer(200, token_answer("ya29.user", 3599));
  Token t = w.resolve();
  CHECK(t.access_token == "ya29.user");
  CHECK(t.source == "authorized-user /h/.config/gcloud/application_default_credentials.json");
  REQUIRE(w.sent.size() == 1);
  CHECK(w.sent[0].method == "POST");
  CHECK(w.sent[0].url == "https://oauth2.example.test/token");
  CHECK(w.sent[0].body ==
        "grant_type=refresh_token&client_id=764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com"
        "&client_secret=" +
            std::string(kClientSecret) + "&refresh_token=1%2F%2F0refresh-SECRET-token");
  auto f = form_fields(w.sent[0].body);
  CHECK(f["refresh_token"] == kRefreshToken);
  CHECK(f["client_secret"] == kClientSecret);

  // CLOUDSDK_CONFIG moves gcloud's folder; the project: quota_project_id, else gcloud's own
  // configuration (CLOUDSDK_CORE_PROJECT, then the active configuration's [core] project).
  World g;
  g.env = {{"HOME", "/h"}, {"CLOUDSDK_CONFIG", "/gc"}};
  g.files["/gc/application_default_credentials.json"] = authorized_user_json();
  g.files["/gc/active_config"] = "work\n";
  g.files["/gc/configurations/config_work"] = "[core]\naccount = me@example.com\nproject = work-project\n";
  g.answers["POST https://oauth2.googleapis.com/token"] = answer(200, token_answer("ya29.user", 3599));
  CHECK(g.resolve().project == "work-project");
  CHECK(g.project() == "work-project");
  g.env["CLOUDSDK_CORE_PROJECT"] = "core-project";
  CHECK(g.resolve().project == "core-project");
  g.files["/gc/application_default_credentials.json"] = authorized_user_json(R"(, "quota_project_id": "qp")");
  CHECK(g.resolve().project == "qp");
  // project() reads the file without asking for a token.
  g.sent.clear();
  CHECK(g.project() == "qp");
  CHECK(g.sent.empty());
}

TEST_CASE("gcs credentials: the metadata server, last, with Metadata-Flavor: Google", "[gcs-credentials]") {
  World w;
  w.env = {{"HOME", "/h"}};
  w.answers["GET http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"] =
      answer(200, R"({"access_token":"ya29.gce","expires_in":3599,"token_type":"Bearer"})");
  Token t = w.resolve();
  CHECK(t.access_token == "ya29.gce");
  CHECK(t.expiration == w.now + 3599);
  CHECK(t.source == "gce-metadata");
  CHECK(t.project.empty());  // the project is asked only by project()
  REQUIRE(w.sent.size() == 1);
  const aws::HttpRequest& r = w.sent[0];
  CHECK(r.method == "GET");
  CHECK(has_header(r, "Metadata-Flavor: Google"));
  CHECK(r.connect_timeout_ms == 1000);  // 2 attempts in aws_io.cpp's transport: a laptop fails fast

  w.answers["GET http://metadata.google.internal/computeMetadata/v1/project/project-id"] = answer(200, "gce-project");
  CHECK(w.project() == "gce-project");
  CHECK(has_header(w.sent.back(), "Metadata-Flavor: Google"));

  // GCE_METADATA_HOST (host:port), its old name GCE_METADATA_ROOT, GCE_METADATA_IP.
  for (const char* var : {"GCE_METADATA_HOST", "GCE_METADATA_ROOT", "GCE_METADATA_IP"}) {
    World h;
    h.env = {{var, "127.0.0.1:8181"}};
    h.answers["GET http://127.0.0.1:8181/computeMetadata/v1/instance/service-accounts/default/token"] =
        answer(200, R"({"access_token":"ya29.local","expires_in":60})");
    CHECK(h.resolve().access_token == "ya29.local");
  }
  World both;
  both.env = {{"GCE_METADATA_HOST", "a:1"}, {"GCE_METADATA_IP", "b:2"}};
  CHECK_THAT(both.error(), Catch::Contains("metadata server a:1: Couldn't connect"));

  // A machine with no service account answers 404.
  World none;
  none.env = {{"HOME", "/h"}};
  none.answers["GET http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"] =
      answer(404, "Not Found");
  CHECK_THAT(none.error(), Catch::Contains("no service account is attached to this machine"));
}

TEST_CASE("gcs credentials: the order, and the error listing every source tried", "[gcs-credentials]") {
  World w;
  w.env = {{"HOME", "/h"}};
  std::string e = w.error();
  CHECK(e ==
        "no Google credentials: GOOGLE_APPLICATION_CREDENTIALS: not set; gcloud's "
        "/h/.config/gcloud/application_default_credentials.json: no such file; metadata server "
        "metadata.google.internal: Couldn't connect to server "
        "(http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token) "
        "(set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, or run `gcloud auth "
        "application-default login`)");
  CHECK(w.sent.size() == 1);

  // NO_GCE_CHECK=true: the metadata server is not asked.
  w.sent.clear();
  w.env["NO_GCE_CHECK"] = "true";
  CHECK_THAT(w.error(), Catch::Contains("; metadata server: NO_GCE_CHECK=true"));
  CHECK(w.sent.empty());

  // The explicit file before gcloud's, gcloud's before the metadata server.
  World o;
  o.env = {{"HOME", "/h"}, {"GOOGLE_APPLICATION_CREDENTIALS", "/k.json"}};
  o.files["/k.json"] = service_account_json();
  o.files["/h/.config/gcloud/application_default_credentials.json"] = authorized_user_json();
  o.answers["POST https://oauth2.googleapis.com/token"] = answer(200, token_answer("ya29.x", 3599));
  CHECK(o.resolve().source == "service-account /k.json");
  o.env.erase("GOOGLE_APPLICATION_CREDENTIALS");
  CHECK(o.resolve().source == "authorized-user /h/.config/gcloud/application_default_credentials.json");
  for (const auto& r : o.sent) CHECK(r.url.find("computeMetadata") == std::string::npos);
}

TEST_CASE("gcs credentials: a configured file that fails stops the chain", "[gcs-credentials]") {
  SECTION("GOOGLE_APPLICATION_CREDENTIALS names a missing file") {
    World w;
    w.env = {{"HOME", "/h"}, {"GOOGLE_APPLICATION_CREDENTIALS", "/nowhere/key.json"}};
    w.files["/h/.config/gcloud/application_default_credentials.json"] = authorized_user_json();
    CHECK(w.error() ==
          "no Google credentials: GOOGLE_APPLICATION_CREDENTIALS /nowhere/key.json: cannot read it (no such file, "
          "or not readable)");
    CHECK(w.sent.empty());  // neither gcloud's file nor the metadata server
    CHECK_THAT(w.project_error(), Catch::Contains("GOOGLE_APPLICATION_CREDENTIALS /nowhere/key.json: cannot read it"));
  }
  SECTION("the token endpoint refuses a revoked refresh token") {
    World w;
    w.env = {{"HOME", "/h"}};
    w.files["/h/.config/gcloud/application_default_credentials.json"] = authorized_user_json();
    w.answers["POST https://oauth2.googleapis.com/token"] =
        answer(400, R"({"error": "invalid_grant", "error_description": "Token has been expired or revoked."})");
    std::string e = w.error();
    CHECK(e ==
          "no Google credentials: GOOGLE_APPLICATION_CREDENTIALS: not set; gcloud's "
          "/h/.config/gcloud/application_default_credentials.json: token endpoint https://oauth2.googleapis.com/token: "
          "HTTP 400 invalid_grant: Token has been expired or revoked. (run `gcloud auth application-default login` "
          "again)");
    check_no_secret(e);
    CHECK(w.sent.size() == 1);  // no fall-back to the metadata server
  }
  SECTION("the token endpoint refuses a service account's JWT") {
    World w;
    w.env = {{"GOOGLE_APPLICATION_CREDENTIALS", "/k.json"}};
    w.files["/k.json"] = service_account_json();
    w.answers["POST https://oauth2.googleapis.com/token"] =
        answer(400, R"({"error": "invalid_grant", "error_description": "Invalid JWT Signature."})");
    std::string e = w.error();
    CHECK_THAT(e,
               Catch::Contains("GOOGLE_APPLICATION_CREDENTIALS /k.json: token endpoint "
                               "https://oauth2.googleapis.com/token: HTTP 400 invalid_grant: Invalid JWT Signature."));
    check_no_secret(e);
  }
  SECTION("an unsupported type names the file") {
    World w;
    w.env = {{"GOOGLE_APPLICATION_CREDENTIALS", "/wif.json"}};
    w.files["/wif.json"] = R"({"type": "external_account", "audience": "//iam.googleapis.com/x"})";
    CHECK_THAT(w.error(), Catch::Contains("GOOGLE_APPLICATION_CREDENTIALS /wif.json: credentials of type "
                                          "external_account are not supported yet"));
    CHECK(w.sent.empty());
  }
  SECTION("a broken gcloud file") {
    World w;
    w.env = {{"HOME", "/h"}};
    w.files["/h/.config/gcloud/application_default_credentials.json"] = authorized_user_json().substr(0, 150);
    std::string e = w.error();
    CHECK_THAT(e, Catch::Contains("gcloud's /h/.config/gcloud/application_default_credentials.json: the credentials "
                                  "file is not valid JSON"));
    check_no_secret(e);
    CHECK(w.sent.empty());
  }
}

TEST_CASE("gcs credentials: no secret in any error, even one a server echoes back", "[gcs-credentials]") {
  // A token endpoint that answers with the request it got (a misbehaving proxy, a test server).
  for (const std::string& file : {authorized_user_json(), service_account_json()}) {
    World w;
    w.env = {{"GOOGLE_APPLICATION_CREDENTIALS", "/c.json"}};
    w.files["/c.json"] = file;
    Io inner = w.io();
    Io echo = inner;
    echo.http = [&](const aws::HttpRequest& r) {
      w.sent.push_back(r);
      return answer(400, "bad request: " + r.body);
    };
    std::string e;
    try {
      resolve(echo);
    } catch (const IoError& x) {
      e = x.what();
    }
    CHECK_THAT(e, Catch::Contains("token endpoint https://oauth2.googleapis.com/token: HTTP 400: "));
    CHECK_THAT(e, Catch::Contains("***"));
    check_no_secret(e);
    REQUIRE(w.sent.size() == 1);
    // The assertion is a credential too: it is cut out.
    auto f = form_fields(w.sent[0].body);
    if (f.count("assertion")) CHECK(e.find(f["assertion"].substr(f["assertion"].size() - 40)) == std::string::npos);
  }
  // A 200 answer whose token is there but whose expires_in is not.
  World w;
  w.env = {{"HOME", "/h"}};
  w.answers["GET http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"] =
      answer(200, std::string(R"({"access_token": ")") + kAccessToken + R"(", "expires_in": "tomorrow"})");
  std::string e = w.error();
  CHECK_THAT(e, Catch::Contains("expires_in is not a number of seconds"));
  check_no_secret(e);
}

TEST_CASE("gcs credentials: STORAGE_EMULATOR_HOST means no credentials at all", "[gcs-credentials]") {
  World w;
  w.env = {{"STORAGE_EMULATOR_HOST", "http://localhost:4443"},
           {"GOOGLE_APPLICATION_CREDENTIALS", "/k.json"},
           {"GOOGLE_CLOUD_PROJECT", "test"}};
  Token t = w.resolve();
  CHECK(t.access_token.empty());
  CHECK_FALSE(t.expiration);
  CHECK(t.source == "emulator (no credentials)");
  CHECK(t.project == "test");
  CHECK(w.sent.empty());
  CHECK_FALSE(needs_refresh(t, 4000000000, 300));
}

TEST_CASE("gcs credentials: the project from the metadata server, and the error when there is none",
          "[gcs-credentials]") {
  World w;
  w.env = {{"HOME", "/h"}};
  CHECK(w.project_error() ==
        "no Google Cloud project: GOOGLE_CLOUD_PROJECT, GCLOUD_PROJECT: not set; metadata server "
        "metadata.google.internal: Couldn't connect to server "
        "(http://metadata.google.internal/computeMetadata/v1/project/project-id)");
  w.env["NO_GCE_CHECK"] = "True";
  CHECK_THAT(w.project_error(), Catch::EndsWith("metadata server: NO_GCE_CHECK=true"));
  World f;
  f.env = {{"GOOGLE_APPLICATION_CREDENTIALS", "/c.json"}};
  f.files["/c.json"] = authorized_user_json();
  CHECK_THAT(f.project_error(),
             Catch::EndsWith("GOOGLE_APPLICATION_CREDENTIALS /c.json: no project_id or quota_project_id"));
  World m;
  m.answers["GET http://metadata.google.internal/computeMetadata/v1/project/project-id"] = answer(200, "<html>");
  CHECK_THAT(m.project_error(), Catch::Contains("the answer is not a project ID"));
}

TEST_CASE("gcs credentials: the cache refreshes within the margin and once after a 401", "[gcs-credentials]") {
  World w;
  w.env = {{"HOME", "/h"}};
  const std::string url =
      "GET http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token";
  int minted = 0;
  Io io = w.io();
  io.http = [&](const aws::HttpRequest& r) {
    w.sent.push_back(r);
    ++minted;
    return answer(200, R"({"access_token":"ya29.t)" + std::to_string(minted) + R"(","expires_in":3599})");
  };
  TokenCache cache([&] { return resolve(io); }, [&] { return w.now; },
                   aws::refresh_margin([](const char*) { return std::optional<std::string>(); }));
  CHECK(cache.get()->access_token == "ya29.t1");
  CHECK(cache.get()->access_token == "ya29.t1");
  CHECK(cache.fetches() == 1);
  CHECK(cache.source() == "gce-metadata");
  w.now += 3599 - 301;  // just outside the 300 s margin
  CHECK(cache.get()->access_token == "ya29.t1");
  w.now += 2;  // inside it
  CHECK(cache.get()->access_token == "ya29.t2");
  // A 401: one refresh, however many requests saw it with the same token.
  auto used = cache.get();
  auto a = cache.refresh_after_refused(used);
  auto b = cache.refresh_after_refused(used);
  CHECK(a == b);
  CHECK(a->access_token == "ya29.t3");
  CHECK(cache.fetches() == 3);
  CHECK(w.sent.size() == 3);

  // A failed refresh keeps a token that is still valid, and fails once it is not.
  bool fail = false;
  int64_t now = 1000;
  TokenCache c2(
      [&]() -> Token {
        if (fail) throw IoError(Where(), "no Google credentials: metadata server: refused");
        return Token{"ya29.ok", now + 600, "gce-metadata", ""};
      },
      [&] { return now; }, 300);
  CHECK(c2.get()->access_token == "ya29.ok");
  fail = true;
  now += 400;
  CHECK(c2.get()->access_token == "ya29.ok");
  now += 300;
  CHECK_THROWS_WITH(c2.get(), Catch::Contains("metadata server: refused"));

  CHECK_FALSE(needs_refresh(Token{"t", 1000, "", ""}, 699, 300));
  CHECK(needs_refresh(Token{"t", 1000, "", ""}, 700, 300));
}
