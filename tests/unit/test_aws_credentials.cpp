// The AWS credential chain (objstore/aws_credentials.h) offline: every parser, the order of the
// sources, what each sends, the refresh rule and the error that lists every source tried. The
// chain against real servers (moto's STS, IMDS, container, SSO served by the test): tests/s3/
// credentials_test.py.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "objstore/aws_credentials.h"
#include "util/error.h"

using namespace dcpctl;
using namespace dcpctl::aws;

namespace {

const char* kStsAnswer =
    "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
    "<AssumeRoleWithWebIdentityResult><Credentials><SessionToken>TOK&amp;1</SessionToken>"
    "<SecretAccessKey>SECRET</SecretAccessKey><Expiration>2030-01-02T03:04:05Z</Expiration>"
    "<AccessKeyId>ASIAWEB</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult>"
    "</AssumeRoleWithWebIdentityResponse>";

// A fake world: environment, files, HTTP answers by URL, the process runner; it records what the
// chain asked for.
struct World {
  std::map<std::string, std::string> env, files;
  std::map<std::string, HttpResponse> answers;  // "METHOD URL" -> answer; missing: connection refused
  ProcessResult process;
  int64_t now = 1700000000;
  std::vector<HttpRequest> sent;
  std::vector<std::string> ran;
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
    io.http = [this](const HttpRequest& r) {
      sent.push_back(r);
      auto it = answers.find(r.method + " " + r.url);
      if (it != answers.end()) return it->second;
      HttpResponse refused;
      refused.error = "Couldn't connect to server";
      return refused;
    };
    io.run = [this](const std::string& cmd) {
      ran.push_back(cmd);
      return process;
    };
    io.now = [this] { return now; };
    return io;
  }
  Credentials resolve(const std::string& profile = "default") {
    Io i = io();
    return aws::resolve(i, ChainSettings{profile, "eu-west-1"});
  }
  std::string error(const std::string& profile = "default") {
    try {
      resolve(profile);
    } catch (const IoError& e) {
      return e.what();
    }
    return "(no error)";
  }
};

HttpResponse ok(std::string body) {
  HttpResponse r;
  r.status = 200;
  r.body = std::move(body);
  return r;
}

bool has_header(const HttpRequest& r, const std::string& h) {
  for (const auto& x : r.headers)
    if (x == h) return true;
  return false;
}

}  // namespace

TEST_CASE("aws credentials: ISO 8601 times as AWS writes them") {
  CHECK(parse_time("1970-01-01T00:00:00Z") == 0);
  CHECK(parse_time("2030-01-02T03:04:05Z") == 1893553445);
  CHECK(parse_time("2030-01-02T03:04:05.123Z") == 1893553445);
  CHECK(parse_time("2030-01-02T03:04:05+00:00") == 1893553445);
  CHECK(parse_time("2030-01-02T03:04:05UTC") == 1893553445);  // older `aws sso login` caches
  CHECK(parse_time("2030-01-02T05:04:05+02:00") == 1893553445);
  CHECK(parse_time("2024-02-29T00:00:00Z") == 1709164800);
  CHECK_FALSE(parse_time("2030-01-02"));
  CHECK_FALSE(parse_time("2030-13-02T03:04:05Z"));
  CHECK_FALSE(parse_time("2030-01-02T03:04:05"));
  CHECK_FALSE(parse_time("tomorrow"));
}

TEST_CASE("aws credentials: STS answers, its errors and malformed ones") {
  Credentials c = parse_sts_answer(kStsAnswer, "sts");
  CHECK(c.access_key == "ASIAWEB");
  CHECK(c.secret_key == "SECRET");
  CHECK(c.session_token == "TOK&1");
  CHECK(c.expiration == 1893553445);
  const char* err =
      "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
      "<Message>Incorrect token audience</Message></Error></ErrorResponse>";
  CHECK_THROWS_WITH(parse_sts_answer(err, "STS at x"),
                    Catch::Contains("InvalidIdentityToken: Incorrect token audience"));
  CHECK_THROWS_AS(parse_sts_answer("<x", "sts"), IoError);
  CHECK_THROWS_WITH(parse_sts_answer("<AssumeRoleResponse/>", "sts"), Catch::Contains("without Credentials"));
  CHECK_THROWS_WITH(
      parse_sts_answer(
          "<R><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey><Expiration>soon</Expiration></R>",
          "sts"),
      Catch::Contains("Expiration 'soon'"));
}

TEST_CASE("aws credentials: credential_process output (Version 1)") {
  Credentials c = parse_process_output(
      R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SK", "SessionToken": "T", "Expiration": "2030-01-02T03:04:05Z"})",
      "p");
  CHECK(c.access_key == "AK");
  CHECK(c.session_token == "T");
  CHECK(c.expiration == 1893553445);
  Credentials forever = parse_process_output(R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SK"})", "p");
  CHECK_FALSE(forever.expiration);
  CHECK(forever.session_token.empty());
  CHECK_THROWS_WITH(parse_process_output(R"({"Version": 2, "AccessKeyId": "AK", "SecretAccessKey": "SK"})", "p"),
                    Catch::Contains("Version is not 1"));
  CHECK_THROWS_WITH(parse_process_output(R"({"Version": 1, "AccessKeyId": "AK"})", "p"),
                    Catch::Contains("no SecretAccessKey"));
  CHECK_THROWS_WITH(parse_process_output("not json", "p"), Catch::Contains("not a JSON object"));
  CHECK_THROWS_WITH(parse_process_output(R"({"Version": 1, "AccessKeyId": 5, "SecretAccessKey": "SK"})", "p"),
                    Catch::Contains("AccessKeyId is not a non-empty string"));
}

TEST_CASE("aws credentials: container and IMDS JSON, SSO cache and GetRoleCredentials") {
  Credentials c = parse_metadata_json(
      R"({"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": "ASIA1", "SecretAccessKey": "S", "Token": "T", "Expiration": "2030-01-02T03:04:05Z"})",
      "imds");
  CHECK(c.access_key == "ASIA1");
  CHECK(c.session_token == "T");
  CHECK(c.expiration == 1893553445);
  CHECK_THROWS_WITH(parse_metadata_json(R"({"Code": "AssumeRoleUnauthorizedAccess", "Message": "no"})", "imds"),
                    Catch::Contains("AssumeRoleUnauthorizedAccess"));
  SsoToken t = parse_sso_cache(
      R"({"accessToken": "BEARER", "expiresAt": "2030-01-02T03:04:05UTC", "region": "us-east-1"})", "cache.json");
  CHECK(t.access_token == "BEARER");
  CHECK(t.expires_at == 1893553445);
  CHECK_THROWS_WITH(parse_sso_cache(R"({"expiresAt": "2030-01-02T03:04:05Z"})", "cache.json"),
                    Catch::Contains("no accessToken"));
  Credentials s = parse_sso_credentials(
      R"({"roleCredentials": {"accessKeyId": "ASIASSO", "secretAccessKey": "S", "sessionToken": "T", "expiration": 1893553445000}})",
      "sso");
  CHECK(s.access_key == "ASIASSO");
  CHECK(s.expiration == 1893553445);
  CHECK_THROWS_WITH(parse_sso_credentials("{}", "sso"), Catch::Contains("no roleCredentials"));
  // The cache file is named by the SHA-1 of the session name (what `aws sso login` writes).
  CHECK(sso_cache_file("abc") == "a9993e364706816aba3e25717850c26c9cd0d89d.json");
}

TEST_CASE("aws credentials: the refresh rule") {
  Credentials forever{"A", "S", "", std::nullopt, "environment"};
  CHECK_FALSE(needs_refresh(forever, 4000000000, 300));
  Credentials temp{"A", "S", "T", 1000, "imds"};
  CHECK_FALSE(needs_refresh(temp, 699, 300));
  CHECK(needs_refresh(temp, 700, 300));
  CHECK(needs_refresh(temp, 2000, 300));
  CHECK(is_expired_token_code("ExpiredToken"));
  CHECK(is_expired_token_code("ExpiredTokenException"));
  CHECK_FALSE(is_expired_token_code("AccessDenied"));
  auto env = [](const char* v) {
    return [v](const char*) -> std::optional<std::string> { return v ? std::optional<std::string>(v) : std::nullopt; };
  };
  CHECK(refresh_margin(env(nullptr)) == 300);
  CHECK(refresh_margin(env("5")) == 5);
  CHECK_THROWS_AS(refresh_margin(env("-1")), UsageError);
  CHECK_THROWS_AS(refresh_margin(env("x")), UsageError);
}

TEST_CASE("aws credentials: the cache fetches once, refreshes within the margin, from one thread at a time") {
  int64_t now = 1000;
  std::atomic<int> calls{0};
  CredentialCache cache(
      [&] {
        int n = ++calls;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return Credentials{"AK" + std::to_string(n), "S", "T", now + 3600, "imds"};
      },
      [&] { return now; }, 300);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) threads.emplace_back([&] { cache.get(); });
  for (auto& t : threads) t.join();
  CHECK(calls == 1);
  CHECK(cache.get()->access_key == "AK1");
  now += 3600 - 301;  // just outside the margin
  CHECK(cache.get()->access_key == "AK1");
  now += 2;  // inside it
  CHECK(cache.get()->access_key == "AK2");
  CHECK(cache.fetches() == 2);
  CHECK(cache.source() == "imds");
  // An ExpiredToken answer refreshes once, however many threads saw it with the same keys.
  auto used = cache.get();
  auto a = cache.refresh_after_refused(used);
  auto b = cache.refresh_after_refused(used);
  CHECK(a == b);
  CHECK(a->access_key == "AK3");
  CHECK(calls == 3);
}

TEST_CASE("aws credentials: a failed refresh keeps keys that are still valid, and fails once they are not") {
  int64_t now = 1000;
  bool fail = false;
  CredentialCache cache(
      [&]() -> Credentials {
        if (fail) throw IoError(Where(), "no credentials: IMDS: refused");
        return Credentials{"AK", "S", "T", now + 600, "imds"};
      },
      [&] { return now; }, 300);
  CHECK(cache.get()->access_key == "AK");
  fail = true;
  now += 400;  // inside the margin, not expired
  CHECK(cache.get()->access_key == "AK");
  now += 300;  // expired
  CHECK_THROWS_WITH(cache.get(), Catch::Contains("IMDS: refused"));
}

TEST_CASE("aws credentials: environment first, then the rest in botocore's order, the error listing every source") {
  World w;
  w.env = {{"HOME", "/h"}};
  std::string e = w.error();
  // Every source, in order, each with its reason; IMDS last, refused.
  std::vector<std::string> order = {"no credentials: environment: AWS_ACCESS_KEY_ID not set",
                                    "; assume-role: profile default has no role_arn",
                                    "; web identity: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE not set",
                                    "; sso: profile default has no sso_session",
                                    "; profile default in /h/.aws/credentials: no such file",
                                    "; credential_process: profile default has none",
                                    "; profile default in /h/.aws/config: no such file",
                                    "; container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI not set",
                                    "; IMDS: token PUT: Couldn't connect to server (http://169.254.169.254)"};
  size_t at = 0;
  for (const auto& part : order) {
    size_t found = e.find(part, at);
    INFO(e);
    INFO(part);
    REQUIRE(found != std::string::npos);
    at = found + part.size();
  }
  w.env["AWS_EC2_METADATA_DISABLED"] = "true";
  CHECK_THAT(w.error(), Catch::EndsWith("IMDS: AWS_EC2_METADATA_DISABLED=true"));
  w.env["AWS_ACCESS_KEY_ID"] = "AK";
  CHECK_THAT(w.error(), Catch::Contains("environment: AWS_SECRET_ACCESS_KEY not set"));
  w.env["AWS_SECRET_ACCESS_KEY"] = "SK";
  w.env["AWS_SESSION_TOKEN"] = "T";
  w.sent.clear();
  Credentials c = w.resolve();
  CHECK(c.source == "environment");
  CHECK(c.session_token == "T");
  CHECK(w.sent.empty());
}

TEST_CASE("aws credentials: web identity sends an unsigned AssumeRoleWithWebIdentity to the STS endpoint") {
  World w;
  w.env = {{"HOME", "/h"},
           {"AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader"},
           {"AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"},
           {"AWS_ROLE_SESSION_NAME", "job 7"}};
  w.files = {{"/var/run/token", "eyJ.token.sig\n"},
             {"/h/.aws/credentials", "[default]\naws_access_key_id=STATIC\naws_secret_access_key=S\n"}};
  w.answers["POST https://sts.eu-west-1.amazonaws.com/"] = ok(kStsAnswer);
  Credentials c = w.resolve();
  CHECK(c.source == "web-identity");  // before the credentials file's static keys
  CHECK(c.access_key == "ASIAWEB");
  REQUIRE(w.sent.size() == 1);
  CHECK(w.sent[0].sigv4.empty());
  CHECK(w.sent[0].body ==
        "Action=AssumeRoleWithWebIdentity&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Freader&"
        "RoleSessionName=job%207&WebIdentityToken=eyJ.token.sig&Version=2011-06-15");
  // STS's endpoint: AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL.
  w.env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:5000/";
  w.answers["POST http://127.0.0.1:5000/"] = ok(kStsAnswer);
  w.resolve();
  CHECK(w.sent.back().url == "http://127.0.0.1:5000/");
  w.env["AWS_ENDPOINT_URL_STS"] = "http://127.0.0.1:6000";
  w.answers["POST http://127.0.0.1:6000/"] = ok(kStsAnswer);
  w.resolve();
  CHECK(w.sent.back().url == "http://127.0.0.1:6000/");
  // A refused token stops the chain: no fall-back to IMDS or anything after.
  HttpResponse denied;
  denied.status = 400;
  denied.body =
      "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>bad token</Message></Error></ErrorResponse>";
  w.answers["POST http://127.0.0.1:6000/"] = denied;
  size_t before = w.sent.size();
  std::string e = w.error();
  CHECK_THAT(e, Catch::Contains("web identity: STS AssumeRoleWithWebIdentity at http://127.0.0.1:6000/: HTTP 400 "
                                "InvalidIdentityToken: bad token"));
  CHECK_THAT(e, Catch::StartsWith("no credentials: environment: AWS_ACCESS_KEY_ID not set; assume-role:"));
  CHECK(w.sent.size() == before + 1);
  // A missing token file.
  w.files.erase("/var/run/token");
  CHECK_THAT(w.error(), Catch::Contains("web identity: cannot read the token file /var/run/token"));
  // A profile's role_arn + web_identity_token_file.
  World p;
  p.env = {{"HOME", "/h"}, {"AWS_PROFILE", "irsa"}};
  p.files = {{"/h/.aws/config", "[profile irsa]\nrole_arn = arn:aws:iam::1:role/r\nweb_identity_token_file = /t\n"},
             {"/t", "TOKEN"}};
  p.answers["POST https://sts.eu-west-1.amazonaws.com/"] = ok(kStsAnswer);
  CHECK(p.resolve("irsa").source == "web-identity");
  CHECK_THAT(p.sent[0].body, Catch::Contains("RoleSessionName=dcpctl-1700000000&WebIdentityToken=TOKEN"));
}

TEST_CASE("aws credentials: role_arn + source_profile signs AssumeRole with the source's keys") {
  World w;
  w.env = {{"HOME", "/h"}, {"AWS_PROFILE", "train"}};
  w.files = {{"/h/.aws/credentials", "[base]\naws_access_key_id=BASEAK\naws_secret_access_key=BASESK\n"},
             {"/h/.aws/config",
              "[profile train]\nrole_arn = arn:aws:iam::1:role/train\nsource_profile = base\nexternal_id = x1\n"
              "[profile chained]\nrole_arn = arn:aws:iam::1:role/two\nsource_profile = train\n"
              "[profile loop]\nrole_arn = arn:aws:iam::1:role/l\nsource_profile = loop2\n"
              "[profile loop2]\nrole_arn = arn:aws:iam::1:role/l2\nsource_profile = loop\n"
              "[profile envsrc]\nrole_arn = arn:aws:iam::1:role/e\ncredential_source = Environment\n"
              "[profile bad]\nrole_arn = arn:aws:iam::1:role/e\ncredential_source = Somewhere\n"}};
  w.answers["POST https://sts.eu-west-1.amazonaws.com/"] = ok(kStsAnswer);
  Credentials c = w.resolve("train");
  CHECK(c.source == "assume-role");
  REQUIRE(w.sent.size() == 1);
  CHECK(w.sent[0].sigv4 == "aws:amz:eu-west-1:sts");
  CHECK(w.sent[0].sign.access_key == "BASEAK");
  CHECK_THAT(w.sent[0].body,
             Catch::StartsWith("Action=AssumeRole&ExternalId=x1&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Ftrain"));
  // Chained: train's temporary keys sign the second AssumeRole.
  w.sent.clear();
  w.resolve("chained");
  REQUIRE(w.sent.size() == 2);
  CHECK(w.sent[1].sign.access_key == "ASIAWEB");
  CHECK(w.sent[1].sign.session_token == "TOK&1");
  CHECK_THAT(w.error("loop"), Catch::Contains("source_profile loop at profile loop"));
  CHECK_THAT(w.error("envsrc"), Catch::Contains("credential_source Environment: AWS_ACCESS_KEY_ID"));
  CHECK_THAT(w.error("bad"), Catch::Contains("credential_source 'Somewhere'"));
}

TEST_CASE("aws credentials: SSO reads the cached token and asks the portal") {
  World w;
  w.env = {{"HOME", "/h"}, {"AWS_PROFILE", "dev"}};
  w.files = {{"/h/.aws/config",
              "[profile dev]\nsso_session = corp\nsso_account_id = 111122223333\nsso_role_name = Reader\n"
              "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = eu-central-1\n"},
             {"/h/.aws/sso/cache/" + sso_cache_file("corp"),
              R"({"accessToken": "BEARER", "expiresAt": "2030-01-01T00:00:00Z"})"}};
  std::string url =
      "https://portal.sso.eu-central-1.amazonaws.com/federation/credentials?account_id=111122223333&role_name=Reader";
  w.answers["GET " + url] = ok(
      R"({"roleCredentials": {"accessKeyId": "ASIASSO", "secretAccessKey": "S", "sessionToken": "T", "expiration": 1893553445000}})");
  Credentials c = w.resolve("dev");
  CHECK(c.source == "sso");
  CHECK(c.access_key == "ASIASSO");
  REQUIRE(w.sent.size() == 1);
  CHECK(has_header(w.sent[0], "x-amz-sso_bearer_token: BEARER"));
  HttpResponse denied;
  denied.status = 403;
  denied.body = R"({"message": "No access"})";
  w.answers["GET " + url] = denied;
  CHECK_THAT(w.error("dev"),
             Catch::Contains("sso (profile dev): SSO GetRoleCredentials at https://portal.sso.eu-central-1."
                             "amazonaws.com: HTTP 403"));
  w.now = 1893456001;  // after expiresAt
  CHECK_THAT(w.error("dev"), Catch::Contains("has expired: run `aws sso login`"));
  w.files.erase("/h/.aws/sso/cache/" + sso_cache_file("corp"));
  CHECK_THAT(w.error("dev"), Catch::Contains("no SSO token cached for 'corp': run `aws sso login`"));
}

TEST_CASE("aws credentials: credential_process, after the credentials file's keys, before the config file's") {
  World w;
  w.env = {{"HOME", "/h"}};
  w.files = {
      {"/h/.aws/config",
       "[default]\ncredential_process = /opt/get-keys --role r\naws_access_key_id=CFG\naws_secret_access_key=S\n"}};
  w.process.out =
      R"({"Version": 1, "AccessKeyId": "PROC", "SecretAccessKey": "S", "Expiration": "2030-01-02T03:04:05Z"})";
  Credentials c = w.resolve();
  CHECK(c.source == "credential-process");
  CHECK(c.access_key == "PROC");
  CHECK(w.ran == std::vector<std::string>{"/opt/get-keys --role r"});
  w.process.exit_status = 3;
  w.process.err = "line one\nerror: token expired, log in again\n";
  CHECK_THAT(w.error(),
             Catch::Contains("credential_process (profile default): credential_process '/opt/get-keys --role r' "
                             "exited with 3; its stderr ends: line one error: token expired, log in again"));
  w.process = {};
  w.process.out = "oops";
  CHECK_THAT(w.error(),
             Catch::Contains("credential_process '/opt/get-keys --role r': its output is not a JSON object"));
  w.files["/h/.aws/credentials"] = "[default]\naws_access_key_id=FILE\naws_secret_access_key=S\n";
  CHECK(w.resolve().source == "profile /h/.aws/credentials [default]");
}

TEST_CASE("aws credentials: the container endpoint with its authorization token") {
  World w;
  w.env = {{"HOME", "/h"}, {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc"}};
  const char* body =
      R"({"AccessKeyId": "ASIAECS", "SecretAccessKey": "S", "Token": "T", "Expiration": "2030-01-02T03:04:05Z"})";
  w.answers["GET http://169.254.170.2/v2/credentials/abc"] = ok(body);
  CHECK(w.resolve().source == "container");
  CHECK(w.sent[0].headers.empty());
  w.env = {{"HOME", "/h"},
           {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds"},
           {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "from-env"},
           {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/tok"}};
  w.files = {{"/tok", "from-file\n"}};
  w.answers["GET http://127.0.0.1:9/creds"] = ok(body);
  CHECK(w.resolve().access_key == "ASIAECS");
  CHECK(has_header(w.sent.back(), "Authorization: from-file"));  // the file wins
  w.env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://example.com/creds";
  CHECK_THAT(w.error(),
             Catch::Contains("container: AWS_CONTAINER_CREDENTIALS_FULL_URI http://example.com/creds is neither"));
  w.env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://127.0.0.1.example.com/creds";
  CHECK_THAT(w.error(), Catch::Contains("is neither https nor a loopback"));
  w.env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://127.0.0.1:9/gone";
  CHECK_THAT(w.error(), Catch::EndsWith("container: Couldn't connect to server (http://127.0.0.1:9/gone)"));
}

TEST_CASE("aws credentials: IMDSv2: token, role name, keys, the endpoint from the environment") {
  World w;
  w.env = {{"HOME", "/h"}, {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:8/"}};
  w.answers["PUT http://127.0.0.1:8/latest/api/token"] = ok("TOKEN-V2");
  w.answers["GET http://127.0.0.1:8/latest/meta-data/iam/security-credentials/"] = ok("node-role\n");
  w.answers["GET http://127.0.0.1:8/latest/meta-data/iam/security-credentials/node-role"] = ok(
      R"({"Code": "Success", "AccessKeyId": "ASIAEC2", "SecretAccessKey": "S", "Token": "T", "Expiration": "2030-01-02T03:04:05Z"})");
  Credentials c = w.resolve();
  CHECK(c.source == "imds");
  CHECK(c.access_key == "ASIAEC2");
  REQUIRE(w.sent.size() == 3);
  CHECK(has_header(w.sent[0], "X-aws-ec2-metadata-token-ttl-seconds: 21600"));
  CHECK(w.sent[0].connect_timeout_ms == 1000);
  CHECK(has_header(w.sent[1], "X-aws-ec2-metadata-token: TOKEN-V2"));
  CHECK(has_header(w.sent[2], "X-aws-ec2-metadata-token: TOKEN-V2"));
  HttpResponse none;
  none.status = 404;
  w.answers["GET http://127.0.0.1:8/latest/meta-data/iam/security-credentials/"] = none;
  CHECK_THAT(w.error(), Catch::Contains("IMDS: the instance has no IAM role"));
}
