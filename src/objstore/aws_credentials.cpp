#include "objstore/aws_credentials.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "objstore/http.h"
#include "objstore/s3.h"
#include "util/text.h"

namespace dcpctl::aws {

namespace {

constexpr size_t kMaxAnswer = 1u << 20;  // a credentials answer is a few hundred bytes

using store::http::tail;
using store::http::trim;

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

nlohmann::json parse_json(std::string_view text, const std::string& what, const char* kind) {
  if (text.size() > kMaxAnswer) throw IoError(Where(what), std::string(kind) + " is larger than 1 MiB");
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw IoError(Where(what), std::string(kind) + " is not a JSON object: '" + tail(text, 120) + "'");
  return j;
}

std::string json_string(const nlohmann::json& j, const char* key, const std::string& what, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw IoError(Where(what), std::string("the answer has no ") + key);
    return {};
  }
  if (!it->is_string() || (required && it->get_ref<const std::string&>().empty()))
    throw IoError(Where(what), std::string("the answer's ") + key + " is not a non-empty string");
  return it->get<std::string>();
}

std::optional<int64_t> expiration_of(const std::string& text, const std::string& what) {
  if (text.empty()) return std::nullopt;
  auto t = parse_time(text);
  if (!t) throw IoError(Where(what), "Expiration '" + text + "' is not an ISO 8601 time");
  return t;
}

}  // namespace

std::optional<int64_t> parse_time(std::string_view s) {
  // YYYY-MM-DDTHH:MM:SS[.fff](Z|+00:00|UTC)
  auto digits = [&](size_t at, size_t n, int64_t& out) {
    if (at + n > s.size()) return false;
    int64_t v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
      v = v * 10 + (s[i] - '0');
    }
    out = v;
    return true;
  };
  int64_t y, mo, d, h, mi, sec;
  if (!digits(0, 4, y) || s.size() < 19 || s[4] != '-' || !digits(5, 2, mo) || s[7] != '-' || !digits(8, 2, d) ||
      (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !digits(11, 2, h) || s[13] != ':' || !digits(14, 2, mi) ||
      s[16] != ':' || !digits(17, 2, sec))
    return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  std::string_view rest = s.substr(19);
  if (!rest.empty() && rest[0] == '.') {
    size_t i = 1;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
    if (i == 1) return std::nullopt;
    rest = rest.substr(i);
  }
  int64_t offset = 0;
  if (rest == "Z" || rest == "z" || rest == "UTC" || rest == "+00:00" || rest == "+0000") {
    offset = 0;
  } else if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':') {
    int64_t oh, om;
    std::string_view keep = s;
    s = rest;
    bool ok = digits(1, 2, oh) && digits(4, 2, om);
    s = keep;
    if (!ok) return std::nullopt;
    offset = (rest[0] == '+' ? 1 : -1) * (oh * 3600 + om * 60);
  } else {
    return std::nullopt;
  }
  return days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86400 + h * 3600 + mi * 60 + sec -
         offset;
}

Credentials parse_sts_answer(std::string_view xml, const std::string& what) {
  if (xml.size() > kMaxAnswer) throw IoError(Where(what), "STS's answer is larger than 1 MiB");
  auto ak = s3::xml_element(xml, "AccessKeyId");
  auto sk = s3::xml_element(xml, "SecretAccessKey");
  if (!ak || !sk || ak->empty() || sk->empty()) {
    auto code = s3::xml_element(xml, "Code"), msg = s3::xml_element(xml, "Message");
    if (code && !code->empty()) throw IoError(Where(what), *code + (msg && !msg->empty() ? ": " + *msg : ""));
    throw IoError(Where(what), "STS answered without Credentials: '" + tail(xml, 160) + "'");
  }
  Credentials c;
  c.access_key = *ak;
  c.secret_key = *sk;
  c.session_token = s3::xml_element(xml, "SessionToken").value_or("");
  c.expiration = expiration_of(s3::xml_element(xml, "Expiration").value_or(""), what);
  return c;
}

namespace {

// AccessKeyId, SecretAccessKey, the session token under `token` (credential_process says
// SessionToken, the container endpoint and IMDS say Token) and Expiration.
Credentials keys_of(const nlohmann::json& j, const char* token, const std::string& what) {
  Credentials c;
  c.access_key = json_string(j, "AccessKeyId", what, true);
  c.secret_key = json_string(j, "SecretAccessKey", what, true);
  c.session_token = json_string(j, token, what, false);
  c.expiration = expiration_of(json_string(j, "Expiration", what, false), what);
  return c;
}

}  // namespace

Credentials parse_process_output(std::string_view text, const std::string& what) {
  nlohmann::json j = parse_json(text, what, "its output");
  auto v = j.find("Version");
  if (v == j.end() || !v->is_number_integer() || v->get<int64_t>() != 1)
    throw IoError(Where(what), "its output's Version is not 1 (the only version the AWS CLI defines)");
  return keys_of(j, "SessionToken", what);
}

Credentials parse_metadata_json(std::string_view text, const std::string& what) {
  nlohmann::json j = parse_json(text, what, "the answer");
  std::string code = json_string(j, "Code", what, false);
  if (!code.empty() && code != "Success")
    throw IoError(Where(what), "the answer's Code is '" + code + "': " + json_string(j, "Message", what, false));
  return keys_of(j, "Token", what);
}

SsoToken parse_sso_cache(std::string_view text, const std::string& path) {
  nlohmann::json j = parse_json(text, path, "the SSO token cache");
  SsoToken t;
  t.access_token = json_string(j, "accessToken", path, true);
  std::string exp = json_string(j, "expiresAt", path, true);
  auto at = parse_time(exp);
  if (!at) throw IoError(Where(path), "expiresAt '" + exp + "' is not an ISO 8601 time");
  t.expires_at = *at;
  return t;
}

Credentials parse_sso_credentials(std::string_view text, const std::string& what) {
  nlohmann::json j = parse_json(text, what, "GetRoleCredentials's answer");
  auto rc = j.find("roleCredentials");
  if (rc == j.end() || !rc->is_object()) throw IoError(Where(what), "the answer has no roleCredentials");
  Credentials c;
  c.access_key = json_string(*rc, "accessKeyId", what, true);
  c.secret_key = json_string(*rc, "secretAccessKey", what, true);
  c.session_token = json_string(*rc, "sessionToken", what, false);
  auto e = rc->find("expiration");
  if (e != rc->end() && !e->is_null()) {
    if (!e->is_number_integer() || e->get<int64_t>() < 0)
      throw IoError(Where(what), "roleCredentials.expiration is not Unix milliseconds");
    c.expiration = e->get<int64_t>() / 1000;
  }
  return c;
}

std::string sso_cache_file(const std::string& session_or_url) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(session_or_url.data(), session_or_url.size(), md, &n, EVP_sha1(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out + ".json";
}

bool is_expired_token_code(std::string_view code) {
  return code == "ExpiredToken" || code == "ExpiredTokenException" || code == "TokenRefreshRequired" ||
         code == "RequestExpired";
}

int64_t refresh_margin(const std::function<std::optional<std::string>(const char*)>& env) {
  auto v = env("DCPCTL_CREDENTIAL_REFRESH_MARGIN_S");
  if (!v || v->empty()) return 300;
  char* end = nullptr;
  long n = std::strtol(v->c_str(), &end, 10);
  if (!end || *end || n < 0 || n > 3600)
    throw UsageError(Where("DCPCTL_CREDENTIAL_REFRESH_MARGIN_S"),
                     "expected whole seconds from 0 to 3600, got '" + *v + "'");
  return n;
}

// ---------------------------------------------------------------------------------------------
// The chain

namespace {

using Section = std::map<std::string, std::string>;

// Why each source gave nothing, in the order tried: the error when none gives keys.
struct Trail {
  std::vector<std::string> lines;
  void add(const std::string& source, const std::string& why) { lines.push_back(source + ": " + why); }
  [[noreturn]] void fail(const std::string& source, const std::string& why) {
    add(source, why);
    std::string all;
    for (const auto& l : lines) all += (all.empty() ? "" : "; ") + l;
    throw IoError(Where(), "no credentials: " + all);
  }
};

std::string form(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string b;
  for (const auto& [k, v] : params) b += (b.empty() ? "" : "&") + k + "=" + s3::uri_encode(v, false);
  return b;
}

std::string describe(const HttpResponse& r) {
  if (r.status == 0) return r.error.empty() ? std::string("no answer") : r.error;
  std::string s = "HTTP " + std::to_string(r.status);
  auto code = s3::xml_element(r.body, "Code");
  if (code && !code->empty()) {
    s += " " + *code;
    auto msg = s3::xml_element(r.body, "Message");
    if (msg && !msg->empty()) s += ": " + *msg;
  } else if (!r.body.empty()) {
    s += ": " + tail(r.body, 200);
  }
  return s;
}

class Chain {
 public:
  Chain(const Io& io, const ChainSettings& s) : io_(io), s_(s) {
    std::string home = env("HOME").value_or("");
    cred_path_ = env("AWS_SHARED_CREDENTIALS_FILE").value_or(home + "/.aws/credentials");
    conf_path_ = env("AWS_CONFIG_FILE").value_or(home + "/.aws/config");
    home_ = home;
    if (auto t = io_.read(cred_path_)) creds_ = s3::parse_ini(*t);
    if (auto t = io_.read(conf_path_)) conf_ = s3::parse_ini(*t);
  }

  Credentials resolve() {
    Trail trail;
    const std::string& p = s_.profile;
    // 1. environment
    auto ak = env("AWS_ACCESS_KEY_ID"), sk = env("AWS_SECRET_ACCESS_KEY");
    if (ak && sk) return tag({*ak, *sk, env("AWS_SESSION_TOKEN").value_or(""), std::nullopt, ""}, "environment");
    trail.add("environment", ak ? "AWS_SECRET_ACCESS_KEY not set" : "AWS_ACCESS_KEY_ID not set");
    // 2. assume-role (role_arn + source_profile / credential_source)
    Section prof = merged(p);
    if (prof.count("role_arn") && (prof.count("source_profile") || prof.count("credential_source"))) {
      try {
        return tag(assume_role(p, 0, {}), "assume-role");
      } catch (const IoError& e) {
        trail.fail("assume-role (profile " + p + ")", e.what());
      }
    }
    trail.add("assume-role", "profile " + p + " has no role_arn with source_profile or credential_source");
    // 3. web identity
    std::optional<std::string> role = env("AWS_ROLE_ARN"), token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE");
    std::optional<std::string> session = env("AWS_ROLE_SESSION_NAME");
    if (!(role && token_file) && prof.count("role_arn") && prof.count("web_identity_token_file")) {
      role = prof["role_arn"];
      token_file = prof["web_identity_token_file"];
      if (prof.count("role_session_name")) session = prof["role_session_name"];
    }
    if (role && token_file) {
      try {
        return tag(web_identity(*role, *token_file, session), "web-identity");
      } catch (const IoError& e) {
        trail.fail("web identity", e.what());
      }
    }
    trail.add("web identity", "AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE not set, profile " + p +
                                  " has no role_arn with web_identity_token_file");
    // 4. sso
    if (prof.count("sso_session") || prof.count("sso_start_url")) {
      try {
        return tag(sso(prof), "sso");
      } catch (const IoError& e) {
        trail.fail("sso (profile " + p + ")", e.what());
      }
    }
    trail.add("sso", "profile " + p + " has no sso_session or sso_start_url");
    // 5. static keys in the credentials file
    if (auto c = static_keys(creds_, p, cred_path_)) return *c;
    trail.add("profile " + p + " in " + cred_path_, static_why(creds_, p, cred_path_));
    // 6. credential_process
    if (auto cmd = prof.find("credential_process"); cmd != prof.end()) {
      try {
        return tag(process(cmd->second), "credential-process");
      } catch (const IoError& e) {
        trail.fail("credential_process (profile " + p + ")", e.what());
      }
    }
    trail.add("credential_process", "profile " + p + " has none");
    // 7. static keys in the config file
    if (auto c = static_keys(conf_, p, conf_path_)) return *c;
    trail.add("profile " + p + " in " + conf_path_, static_why(conf_, p, conf_path_));
    // 8. container
    if (env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") || env("AWS_CONTAINER_CREDENTIALS_FULL_URI")) {
      try {
        return tag(container(), "container");
      } catch (const IoError& e) {
        trail.fail("container", e.what());
      }
    }
    trail.add("container", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI not set");
    // 9. IMDS
    const std::string disabled = ascii_lower(env("AWS_EC2_METADATA_DISABLED").value_or(""));
    if (disabled == "true") trail.fail("IMDS", "AWS_EC2_METADATA_DISABLED=true");
    try {
      return tag(imds(), "imds");
    } catch (const IoError& e) {
      trail.fail("IMDS", e.what());
    }
  }

 private:
  std::optional<std::string> env(const char* name) const {
    auto v = io_.env(name);
    if (v && !v->empty()) return v;
    return std::nullopt;
  }
  static Credentials tag(Credentials c, const std::string& source) {
    c.source = source;
    return c;
  }

  const Section* conf_section(const std::string& name) const {
    if (auto it = conf_.find("profile " + name); it != conf_.end()) return &it->second;
    if (name == "default")
      if (auto it = conf_.find("default"); it != conf_.end()) return &it->second;
    return nullptr;
  }
  // The profile as botocore sees it: the config file's section, the credentials file's over it.
  Section merged(const std::string& name) const {
    Section s;
    if (const Section* c = conf_section(name)) s = *c;
    if (auto it = creds_.find(name); it != creds_.end())
      for (const auto& [k, v] : it->second) s[k] = v;
    for (auto it = s.begin(); it != s.end();) it = it->second.empty() ? s.erase(it) : std::next(it);
    return s;
  }
  std::optional<Credentials> static_keys(const s3::IniFile& ini, const std::string& name,
                                         const std::string& path) const {
    const Section* sec = nullptr;
    if (&ini == &conf_) {
      sec = conf_section(name);
    } else if (auto it = ini.find(name); it != ini.end()) {
      sec = &it->second;
    }
    if (!sec || !sec->count("aws_access_key_id") || !sec->count("aws_secret_access_key")) return std::nullopt;
    Credentials c{sec->at("aws_access_key_id"), sec->at("aws_secret_access_key"), "", std::nullopt,
                  "profile " + path + " [" + name + "]"};
    if (auto t = sec->find("aws_session_token"); t != sec->end()) c.session_token = t->second;
    return c;
  }
  std::string static_why(const s3::IniFile& ini, const std::string& name, const std::string& path) const {
    if (!io_.read(path)) return "no such file";
    bool has = &ini == &conf_ ? conf_section(name) != nullptr : ini.count(name) > 0;
    return has ? "no aws_access_key_id and aws_secret_access_key" : "no such profile";
  }

  std::string sts_endpoint() const {
    std::string e = env("AWS_ENDPOINT_URL_STS").value_or(env("AWS_ENDPOINT_URL").value_or(""));
    if (e.empty()) {
      Section prof = merged(s_.profile);
      if (prof.count("endpoint_url")) e = prof["endpoint_url"];
    }
    if (e.empty()) return "https://sts." + s_.region + ".amazonaws.com";
    while (!e.empty() && e.back() == '/') e.pop_back();
    if (e.find("://") == std::string::npos) e = "https://" + e;
    return e;
  }
  std::string session_name(const std::optional<std::string>& given) const {
    return given && !given->empty() ? *given : "dcpctl-" + std::to_string(io_.now());
  }
  Credentials sts_call(const std::string& action, std::vector<std::pair<std::string, std::string>> params,
                       const Credentials* signer) {
    HttpRequest r;
    r.method = "POST";
    r.url = sts_endpoint() + "/";
    params.insert(params.begin(), {"Action", action});
    params.emplace_back("Version", "2011-06-15");
    r.body = form(params);
    r.headers.push_back("Content-Type: application/x-www-form-urlencoded");
    if (signer) {
      r.sigv4 = "aws:amz:" + s_.region + ":sts";
      r.sign = *signer;
    }
    std::string what = "STS " + action + " at " + r.url;
    HttpResponse a = io_.http(r);
    if (a.status != 200) throw IoError(Where(), what + ": " + describe(a));
    return parse_sts_answer(a.body, what);
  }

  Credentials web_identity(const std::string& role, const std::string& token_file,
                           const std::optional<std::string>& session) {
    auto token = io_.read(token_file);
    if (!token) throw IoError(Where(), "cannot read the token file " + token_file);
    std::string t = trim(*token);
    if (t.empty()) throw IoError(Where(), "the token file " + token_file + " is empty");
    return sts_call("AssumeRoleWithWebIdentity",
                    {{"RoleArn", role}, {"RoleSessionName", session_name(session)}, {"WebIdentityToken", t}}, nullptr);
  }

  // The keys of profile `name` as a role's source: its own role (chained), else its static keys.
  Credentials source_keys(const std::string& name, int depth, std::set<std::string> seen) {
    Section prof = merged(name);
    if (prof.count("role_arn") && (prof.count("source_profile") || prof.count("credential_source")))
      return assume_role(name, depth, std::move(seen));
    if (prof.count("aws_access_key_id") && prof.count("aws_secret_access_key"))
      return {prof["aws_access_key_id"], prof["aws_secret_access_key"],
              prof.count("aws_session_token") ? prof["aws_session_token"] : "", std::nullopt, ""};
    throw IoError(Where(),
                  "source profile " + name + " has no keys (aws_access_key_id, aws_secret_access_key) nor role_arn");
  }

  Credentials assume_role(const std::string& name, int depth, std::set<std::string> seen) {
    if (depth > 4) throw IoError(Where(), "role chain longer than 4 profiles at profile " + name);
    if (!seen.insert(name).second) throw IoError(Where(), "source_profile loop at profile " + name);
    Section prof = merged(name);
    if (prof.count("mfa_serial"))
      throw UnsupportedError(Where(),
                             "profile " + name +
                                 " needs an MFA code (mfa_serial): run `aws sts assume-role` "
                                 "yourself and pass its keys in AWS_ACCESS_KEY_ID/_SECRET_ACCESS_KEY/_SESSION_TOKEN");
    Credentials source;
    if (prof.count("source_profile") && prof.count("credential_source"))
      throw IoError(Where(), "profile " + name + " has both source_profile and credential_source");
    if (prof.count("source_profile")) {
      const std::string& src = prof["source_profile"];
      if (!merged(src).size() && !creds_.count(src) && !conf_section(src))
        throw IoError(Where(), "source_profile " + src + " of profile " + name + " does not exist");
      // A profile may be its own source for its static keys (botocore allows it).
      if (src == name) {
        if (!prof.count("aws_access_key_id") || !prof.count("aws_secret_access_key"))
          throw IoError(Where(), "profile " + name + " is its own source_profile but has no keys");
        source = {prof["aws_access_key_id"], prof["aws_secret_access_key"],
                  prof.count("aws_session_token") ? prof["aws_session_token"] : "", std::nullopt, ""};
      } else {
        source = source_keys(src, depth + 1, seen);
      }
    } else {
      const std::string& cs = prof["credential_source"];
      if (cs == "Environment") {
        auto ak = env("AWS_ACCESS_KEY_ID"), sk = env("AWS_SECRET_ACCESS_KEY");
        if (!ak || !sk)
          throw IoError(Where(), "credential_source Environment: AWS_ACCESS_KEY_ID/_SECRET_ACCESS_KEY not set");
        source = {*ak, *sk, env("AWS_SESSION_TOKEN").value_or(""), std::nullopt, ""};
      } else if (cs == "Ec2InstanceMetadata") {
        source = imds();
      } else if (cs == "EcsContainer") {
        source = container();
      } else {
        throw IoError(Where(),
                      "credential_source '" + cs + "' is not one of Environment, Ec2InstanceMetadata, EcsContainer");
      }
    }
    std::vector<std::pair<std::string, std::string>> params;
    if (prof.count("duration_seconds")) params.emplace_back("DurationSeconds", prof["duration_seconds"]);
    if (prof.count("external_id")) params.emplace_back("ExternalId", prof["external_id"]);
    params.emplace_back("RoleArn", prof["role_arn"]);
    params.emplace_back("RoleSessionName", session_name(prof.count("role_session_name")
                                                            ? std::optional<std::string>(prof["role_session_name"])
                                                            : std::nullopt));
    return sts_call("AssumeRole", params, &source);
  }

  Credentials sso(Section prof) {
    std::string cache_key, start_url, region = prof.count("sso_region") ? prof["sso_region"] : "";
    if (prof.count("sso_session")) {
      cache_key = prof["sso_session"];
      auto it = conf_.find("sso-session " + cache_key);
      if (it == conf_.end()) throw IoError(Where(conf_path_), "no [sso-session " + cache_key + "] section");
      if (auto r = it->second.find("sso_region"); r != it->second.end()) region = r->second;
    } else {
      cache_key = prof["sso_start_url"];
    }
    for (const char* k : {"sso_account_id", "sso_role_name"})
      if (!prof.count(k)) throw IoError(Where(), std::string("profile has no ") + k);
    if (region.empty()) throw IoError(Where(), "no sso_region");
    std::string path = home_ + "/.aws/sso/cache/" + sso_cache_file(cache_key);
    auto text = io_.read(path);
    if (!text) throw IoError(Where(path), "no SSO token cached for '" + cache_key + "': run `aws sso login`");
    SsoToken tok = parse_sso_cache(*text, path);
    if (tok.expires_at <= io_.now())
      throw IoError(Where(path), "the SSO token for '" + cache_key + "' has expired: run `aws sso login`");
    std::string ep = env("AWS_ENDPOINT_URL_SSO").value_or(env("AWS_ENDPOINT_URL").value_or(""));
    if (ep.empty()) ep = "https://portal.sso." + region + ".amazonaws.com";
    while (!ep.empty() && ep.back() == '/') ep.pop_back();
    HttpRequest r;
    r.url = ep + "/federation/credentials?account_id=" + s3::uri_encode(prof["sso_account_id"], false) +
            "&role_name=" + s3::uri_encode(prof["sso_role_name"], false);
    r.headers.push_back("x-amz-sso_bearer_token: " + tok.access_token);
    std::string what = "SSO GetRoleCredentials at " + ep;
    HttpResponse a = io_.http(r);
    if (a.status == 401 || a.status == 403)
      throw IoError(Where(), what + ": " + describe(a) + " (run `aws sso login` if the session ended)");
    if (a.status != 200) throw IoError(Where(), what + ": " + describe(a));
    return parse_sso_credentials(a.body, what);
  }

  Credentials process(const std::string& command) {
    std::string what = "credential_process '" + command + "'";
    ProcessResult r = io_.run(command);
    if (r.exit_status != 0)
      throw IoError(Where(),
                    what + (r.exit_status < 0 ? ": " + r.error : " exited with " + std::to_string(r.exit_status)) +
                        (r.err.empty() ? "" : "; its stderr ends: " + tail(r.err)));
    return parse_process_output(r.out, what);
  }

  Credentials container() {
    std::string url;
    if (auto rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")) {
      url = "http://169.254.170.2" + *rel;
    } else {
      url = *env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
      // As botocore: plain http only to loopback or the container agents' link-local addresses.
      if (url.rfind("https://", 0) != 0) {
        std::string host;
        if (url.rfind("http://", 0) == 0) {
          std::string rest = url.substr(7);
          host = rest[0] == '[' ? rest.substr(0, rest.find(']') + 1) : rest.substr(0, rest.find_first_of(":/?"));
        }
        bool loopback4 = host.rfind("127.", 0) == 0 && host.find_first_not_of("0123456789.") == std::string::npos;
        bool ok = loopback4 || host == "localhost" || host == "[::1]" || host == "169.254.170.2" ||
                  host == "169.254.170.23" || host == "[fd00:ec2::23]";
        if (!ok)
          throw IoError(Where(), "AWS_CONTAINER_CREDENTIALS_FULL_URI " + url +
                                     " is neither https nor a loopback or container-agent address");
      }
    }
    HttpRequest r;
    r.url = url;
    r.connect_timeout_ms = 2000;
    r.timeout_ms = 5000;
    std::optional<std::string> auth;
    if (auto f = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")) {
      auth = io_.read(*f);
      if (!auth) throw IoError(Where(), "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " + *f);
      *auth = trim(*auth);
    } else {
      auth = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    }
    if (auth) {
      if (auth->find_first_of("\r\n") != std::string::npos)
        throw IoError(Where(), "the container authorization token holds a line break");
      r.headers.push_back("Authorization: " + *auth);
    }
    HttpResponse a = io_.http(r);
    if (a.status != 200) throw IoError(Where(), describe(a) + " (" + url + ")");
    return parse_metadata_json(a.body, url);
  }

  Credentials imds() {
    std::string ep = env("AWS_EC2_METADATA_SERVICE_ENDPOINT").value_or("");
    if (ep.empty()) {
      Section prof = merged(s_.profile);
      ep = prof.count("ec2_metadata_service_endpoint") ? prof["ec2_metadata_service_endpoint"]
                                                       : "http://169.254.169.254";
    }
    while (!ep.empty() && ep.back() == '/') ep.pop_back();
    HttpRequest put;
    put.method = "PUT";
    put.url = ep + "/latest/api/token";
    put.headers.push_back("X-aws-ec2-metadata-token-ttl-seconds: 21600");
    put.connect_timeout_ms = 1000;
    put.timeout_ms = 2000;
    HttpResponse a = io_.http(put);
    if (a.status != 200 || trim(a.body).empty()) throw IoError(Where(), "token PUT: " + describe(a) + " (" + ep + ")");
    HttpRequest get = put;
    get.method = "GET";
    get.headers = {"X-aws-ec2-metadata-token: " + trim(a.body)};
    get.url = ep + "/latest/meta-data/iam/security-credentials/";
    HttpResponse roles = io_.http(get);
    if (roles.status == 404) throw IoError(Where(), "the instance has no IAM role (" + get.url + ": HTTP 404)");
    if (roles.status != 200) throw IoError(Where(), "role name: " + describe(roles) + " (" + get.url + ")");
    std::string role = trim(roles.body.substr(0, roles.body.find('\n')));
    if (role.empty() || role.find('/') != std::string::npos)
      throw IoError(Where(), "role name: no role in the answer (" + get.url + ")");
    get.url += role;
    HttpResponse keys = io_.http(get);
    if (keys.status != 200) throw IoError(Where(), "role " + role + ": " + describe(keys) + " (" + get.url + ")");
    return parse_metadata_json(keys.body, get.url);
  }

  const Io& io_;
  ChainSettings s_;
  std::string home_, cred_path_, conf_path_;
  s3::IniFile creds_, conf_;
};

}  // namespace

Credentials resolve(const Io& io, const ChainSettings& settings) {
  return Chain(io, settings).resolve();
}

}  // namespace dcpctl::aws
