#include "objstore/s3.h"

#include <expat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "objstore/aws_credentials.h"
#include "objstore/http.h"
#include "util/sha256.h"
#include "util/text.h"

namespace dcpctl::s3 {

// ---------------------------------------------------------------------------------------------
// Configuration

namespace {

using store::http::trim;

}  // namespace

IniFile parse_ini(std::string_view text) {
  IniFile ini;
  std::string section;
  bool in_nested = false;  // inside `s3 =` followed by indented lines
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view raw = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    bool indented = !raw.empty() && (raw[0] == ' ' || raw[0] == '\t');
    std::string line = trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(std::string_view(line).substr(1, line.size() - 2));
      in_nested = false;
      continue;
    }
    if (indented && in_nested) continue;
    in_nested = false;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = ascii_lower(trim(std::string_view(line).substr(0, eq)));
    std::string value = trim(std::string_view(line).substr(eq + 1));
    if (value.empty()) {
      in_nested = true;  // a nested block (`s3 =`): its indented lines are not this profile's keys
      continue;
    }
    if (!section.empty()) ini[section][key] = value;
  }
  return ini;
}

Config Config::load(const std::function<std::optional<std::string>(const char*)>& env,
                    const std::function<std::optional<std::string>(const std::string&)>& read) {
  auto nonempty = [&](const char* name) -> std::optional<std::string> {
    auto v = env(name);
    if (v && !v->empty()) return v;
    return std::nullopt;
  };
  Config c;
  if (auto p = nonempty("AWS_PROFILE")) c.profile = *p;
  std::string home = nonempty("HOME").value_or("");
  std::string cred_path = nonempty("AWS_SHARED_CREDENTIALS_FILE").value_or(home + "/.aws/credentials");
  std::string conf_path = nonempty("AWS_CONFIG_FILE").value_or(home + "/.aws/config");
  IniFile creds, conf;
  if (auto t = read(cred_path)) creds = parse_ini(*t);
  if (auto t = read(conf_path)) conf = parse_ini(*t);
  // The config file names a profile "[profile NAME]", except the default one, "[default]".
  const std::map<std::string, std::string>* conf_profile = nullptr;
  if (auto it = conf.find("profile " + c.profile); it != conf.end())
    conf_profile = &it->second;
  else if (auto it2 = conf.find(c.profile); it2 != conf.end() && c.profile == "default")
    conf_profile = &it2->second;
  auto conf_value = [&](const char* key) -> std::optional<std::string> {
    if (!conf_profile) return std::nullopt;
    auto it = conf_profile->find(key);
    if (it == conf_profile->end() || it->second.empty()) return std::nullopt;
    return it->second;
  };

  // Sources botocore tries before the profile's static keys (objstore/aws_credentials.h): when one is
  // configured, the keys are left to the chain the client runs.
  auto has = [&](const char* key) {
    if (auto it = creds.find(c.profile); it != creds.end() && it->second.count(key)) return true;
    return conf_value(key).has_value();
  };
  bool role = has("role_arn") && (has("source_profile") || has("credential_source") || has("web_identity_token_file"));
  bool before_files = role || (nonempty("AWS_ROLE_ARN") && nonempty("AWS_WEB_IDENTITY_TOKEN_FILE")) ||
                      has("sso_session") || has("sso_start_url");
  bool before_config = before_files || has("credential_process");
  auto ak = nonempty("AWS_ACCESS_KEY_ID"), sk = nonempty("AWS_SECRET_ACCESS_KEY");
  if (ak && sk) {
    c.access_key = *ak;
    c.secret_key = *sk;
    c.session_token = nonempty("AWS_SESSION_TOKEN").value_or("");
    c.credentials_from = "environment";
  } else if (auto it = creds.find(c.profile); !before_files && it != creds.end() &&
                                              it->second.count("aws_access_key_id") &&
                                              it->second.count("aws_secret_access_key")) {
    c.access_key = it->second.at("aws_access_key_id");
    c.secret_key = it->second.at("aws_secret_access_key");
    if (auto t = it->second.find("aws_session_token"); t != it->second.end()) c.session_token = t->second;
    c.credentials_from = cred_path + " [" + c.profile + "]";
  } else if (!before_config && conf_value("aws_access_key_id") && conf_value("aws_secret_access_key")) {
    c.access_key = *conf_value("aws_access_key_id");
    c.secret_key = *conf_value("aws_secret_access_key");
    c.session_token = conf_value("aws_session_token").value_or("");
    c.credentials_from = conf_path + " [" + c.profile + "]";
  }

  if (auto r = nonempty("AWS_REGION"))
    c.region = *r;
  else if (auto r2 = nonempty("AWS_DEFAULT_REGION"))
    c.region = *r2;
  else if (auto r3 = conf_value("region"))
    c.region = *r3;

  if (auto e = nonempty("AWS_ENDPOINT_URL_S3"))
    c.endpoint = *e;
  else if (auto e2 = nonempty("AWS_ENDPOINT_URL"))
    c.endpoint = *e2;
  else if (auto e3 = conf_value("endpoint_url"))
    c.endpoint = *e3;
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (!c.endpoint.empty() && c.endpoint.find("://") == std::string::npos) c.endpoint = "https://" + c.endpoint;

  std::optional<std::string> attempts = nonempty("AWS_MAX_ATTEMPTS");
  if (!attempts) attempts = conf_value("max_attempts");
  if (attempts) {
    char* end = nullptr;
    long n = std::strtol(attempts->c_str(), &end, 10);
    if (!end || *end || n < 1 || n > 100)
      throw UsageError(Where("AWS_MAX_ATTEMPTS"), "expected a whole number from 1 to 100, got '" + *attempts + "'");
    c.max_attempts = static_cast<int>(n);
  }
  return c;
}

Config Config::from_environment() {
  return load(
      [](const char* name) -> std::optional<std::string> {
        const char* v = std::getenv(name);
        return v ? std::optional<std::string>(v) : std::nullopt;
      },
      [](const std::string& path) -> std::optional<std::string> {
        std::ifstream f(path);
        if (!f) return std::nullopt;
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
      });
}

std::string Config::object_url(const Location& loc) const {
  std::string key = uri_encode(loc.key, true);
  if (!endpoint.empty()) return endpoint + "/" + loc.bucket + "/" + key;
  if (path_style(loc.bucket)) return "https://s3." + region + ".amazonaws.com/" + loc.bucket + "/" + key;
  return "https://" + loc.bucket + ".s3." + region + ".amazonaws.com/" + key;
}

// ---------------------------------------------------------------------------------------------
// XML: expat, walked as a path of element names

namespace {

struct XmlWalk {
  std::vector<std::string> path;
  std::string text;
  std::function<void(const std::vector<std::string>&, const std::string&)> on_end;
  std::function<void(const std::vector<std::string>&)> on_start;
};

void XMLCALL xml_start(void* ud, const XML_Char* name, const XML_Char**) {
  auto* w = static_cast<XmlWalk*>(ud);
  w->path.emplace_back(name);
  w->text.clear();
  if (w->on_start) w->on_start(w->path);
}
void XMLCALL xml_end(void* ud, const XML_Char*) {
  auto* w = static_cast<XmlWalk*>(ud);
  if (w->on_end) w->on_end(w->path, w->text);
  w->path.pop_back();
  w->text.clear();
}
void XMLCALL xml_text(void* ud, const XML_Char* s, int len) {
  static_cast<XmlWalk*>(ud)->text.append(s, static_cast<size_t>(len));
}

// Parses `xml`, calling the walker's hooks; the parser's message when it is not well-formed.
std::optional<std::string> walk_xml(std::string_view xml, XmlWalk& w) {
  std::unique_ptr<std::remove_pointer_t<XML_Parser>, decltype(&XML_ParserFree)> p(XML_ParserCreate("UTF-8"),
                                                                                  &XML_ParserFree);
  if (!p) return std::string("out of memory");
  XML_SetUserData(p.get(), &w);
  XML_SetElementHandler(p.get(), xml_start, xml_end);
  XML_SetCharacterDataHandler(p.get(), xml_text);
  if (xml.size() > static_cast<size_t>(INT32_MAX)) return std::string("answer too large");
  if (XML_Parse(p.get(), xml.data(), static_cast<int>(xml.size()), 1) == XML_STATUS_ERROR)
    return std::string(XML_ErrorString(XML_GetErrorCode(p.get()))) + " at line " +
           std::to_string(XML_GetCurrentLineNumber(p.get()));
  return std::nullopt;
}

using store::http::parse_u64;

}  // namespace

ListPage parse_list_page(std::string_view xml, const std::string& url) {
  ListPage page;
  std::string root, problem;
  std::optional<std::string> key;
  std::optional<uint64_t> size;
  XmlWalk w;
  w.on_start = [&](const std::vector<std::string>& path) {
    if (path.size() == 1) root = path[0];
    if (path.size() == 2 && path[1] == "Contents") key.reset(), size.reset();
  };
  w.on_end = [&](const std::vector<std::string>& path, const std::string& text) {
    if (path.size() == 3 && path[1] == "Contents") {
      if (path[2] == "Key") key = text;
      if (path[2] == "Size") {
        uint64_t v;
        if (!parse_u64(text, v)) problem = "Size '" + text + "' is not a byte count";
        size = v;
      }
    } else if (path.size() == 2 && path[1] == "Contents") {
      if (!key || !size)
        problem = "an entry without Key or Size";
      else
        page.objects.emplace_back(*key, *size);
    } else if (path.size() == 3 && path[1] == "CommonPrefixes" && path[2] == "Prefix") {
      page.prefixes.push_back(text);
    } else if (path.size() == 2 && path[1] == "IsTruncated") {
      if (text != "true" && text != "false") problem = "IsTruncated '" + text + "'";
      page.truncated = text == "true";
    } else if (path.size() == 2 && path[1] == "NextContinuationToken") {
      page.next_token = text;
    }
  };
  if (auto err = walk_xml(xml, w)) throw IoError(Where(url), "malformed listing from the server: " + *err);
  if (root == "Error") {
    auto [code, msg] = parse_error_body(xml);
    throw IoError(Where(url), "listing failed: " + code + (msg.empty() ? "" : ": " + msg));
  }
  if (root != "ListBucketResult")
    throw IoError(Where(url),
                  "malformed listing from the server: root element '" + root + "', expected ListBucketResult");
  if (!problem.empty()) throw IoError(Where(url), "malformed listing from the server: " + problem);
  if (page.truncated && page.next_token.empty())
    throw IoError(Where(url), "malformed listing from the server: truncated without a NextContinuationToken");
  return page;
}

std::pair<std::string, std::string> parse_error_body(std::string_view xml) {
  std::string code, msg;
  bool is_error = false;
  XmlWalk w;
  w.on_start = [&](const std::vector<std::string>& path) {
    if (path.size() == 1) is_error = path[0] == "Error";
  };
  w.on_end = [&](const std::vector<std::string>& path, const std::string& text) {
    if (is_error && path.size() == 2 && path[1] == "Code") code = text;
    if (is_error && path.size() == 2 && path[1] == "Message") msg = text;
  };
  if (xml.empty() || walk_xml(xml, w)) return {};
  return {code, msg};
}

std::optional<std::string> xml_element(std::string_view xml, const std::string& name) {
  std::optional<std::string> found;
  XmlWalk w;
  w.on_end = [&](const std::vector<std::string>& path, const std::string& text) {
    if (!found && path.back() == name) found = text;
  };
  if (walk_xml(xml, w)) return std::nullopt;
  return found;
}

// ---------------------------------------------------------------------------------------------
// Requests

struct Client::Request {
  const char* method = "GET";
  Location loc;
  std::string query;  // canonical: sorted, encoded, without '?'
  std::vector<std::string> headers;
  const void* body = nullptr;
  size_t body_size = 0;
  // Where the answer's body goes: into `dest` (exactly dest_size bytes of the range starting at
  // range_offset; a server that ignores Range answers 200 with the whole object, whose first
  // range_offset bytes are skipped), else into Response::body.
  uint8_t* dest = nullptr;
  uint64_t dest_size = 0, range_offset = 0;
  bool expect_404 = false;  // a 404 is an answer (size_of), not an error
  bool unbounded = false;   // a body of any size (get); else at most Transfer::kMaxBody
  std::string display;      // the URL errors name, when not loc's (a listing names its prefix)
};

namespace {

std::string describe_status(long status, const std::string& code, const std::string& msg) {
  std::string s = "HTTP " + std::to_string(status);
  if (!code.empty()) s += " " + code;
  if (!msg.empty()) s += ": " + msg;
  return s;
}

}  // namespace

Client::Client(Config cfg) : cfg_(std::move(cfg)) {
  aws::Io io = aws::Io::system();
  std::function<aws::Credentials()> fetch;
  if (!cfg_.access_key.empty() && !cfg_.secret_key.empty()) {
    aws::Credentials fixed{cfg_.access_key, cfg_.secret_key, cfg_.session_token, std::nullopt,
                           cfg_.credentials_from == "environment" ? "environment" : "profile " + cfg_.credentials_from};
    fetch = [fixed] { return fixed; };
  } else {
    aws::ChainSettings s{cfg_.profile, cfg_.region};
    fetch = [io, s] { return aws::resolve(io, s); };
  }
  creds_ = std::make_unique<aws::CredentialCache>(std::move(fetch), io.now, aws::refresh_margin(io.env));
}

std::string Client::credential_source() const {
  return creds_->source();
}

uint64_t Client::credential_fetches() const {
  return creds_->fetches();
}

Client::~Client() = default;

nlohmann::json Client::report() const {
  nlohmann::json s = nlohmann::json::object();
  s["bytes_fetched"] = counters_.bytes_in.load();
  s["requests"] = counters_.requests.load();
  s["retries"] = counters_.retries.load();
  if (counters_.bytes_out.load()) s["bytes_uploaded"] = counters_.bytes_out.load();
  if (std::string src = credential_source(); !src.empty()) s["credential_source"] = src;
  return s;
}

Client::Response Client::perform(Request& req) {
  const std::string url = req.display.empty() ? req.loc.url() : req.display;
  std::shared_ptr<const aws::Credentials> creds;
  try {
    creds = creds_->get();
  } catch (const IoError& e) {
    throw IoError(Where(url), e.what());  // "no credentials: environment: ...; ...; IMDS: ..."
  }
  bool refreshed = false;  // keys refused as expired are fetched again once per request
  std::string full = cfg_.object_url(req.loc);
  if (!req.query.empty()) full += "?" + req.query;
  std::string body_hash =
      req.body ? Sha256::of(std::string(static_cast<const char*>(req.body), req.body_size)) : Sha256::of(std::string());
  std::string sigv4 = "aws:amz:" + cfg_.region + ":s3";
  RetryPolicy policy;
  policy.max_attempts = cfg_.max_attempts;

  std::string last;
  for (int attempt = 1;; ++attempt) {
    store::http::Request h;
    h.method = req.method;
    h.url = full;
    h.headers = req.headers;
    h.headers.push_back("x-amz-content-sha256: " + body_hash);
    if (!creds->session_token.empty()) h.headers.push_back("x-amz-security-token: " + creds->session_token);
    // No "Expect:" to turn off 100-continue: libcurl 7.88 would sign the empty header it then
    // leaves out, and the server computes another signature.
    if (req.body) h.headers.push_back("Content-Type: application/octet-stream");
    h.body = req.body;
    h.body_size = req.body_size;
    h.dest = req.dest;
    h.dest_size = req.dest_size;
    h.range_offset = req.range_offset;
    h.unbounded = req.unbounded;
    h.sigv4 = sigv4;
    h.userpwd = creds->access_key + ":" + creds->secret_key;
    Response resp;
    const std::string failed = store::http::perform_once(h, resp, counters_, url);
    std::string code, msg;
    if (failed.empty()) {
      if (resp.status >= 200 && resp.status < 300) {
        if (req.dest && resp.got != req.dest_size) {
          last = "the answer held " + std::to_string(resp.got) + " of the " + std::to_string(req.dest_size) +
                 " bytes asked for";
        } else {
          return resp;
        }
      } else {
        std::tie(code, msg) = parse_error_body(resp.body);
        if (resp.status == 404 && req.expect_404) return resp;
        if ((resp.status == 400 || resp.status == 403) && aws::is_expired_token_code(code) && !refreshed) {
          refreshed = true;
          try {
            creds = creds_->refresh_after_refused(creds);
          } catch (const IoError& e) {
            throw IoError(Where(url), describe_status(resp.status, code, msg) + ", and refreshing the credentials (" +
                                          creds->source + ") failed: " + e.what());
          }
          counters_.retries.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        if (!RetryPolicy::retryable(resp.status, code) || attempt >= policy.max_attempts) {
          std::string what = req.method + std::string(" failed: ") + describe_status(resp.status, code, msg);
          if (resp.status == 404 && code == "NoSuchKey") throw NotFound(Where(url), "no such object (" + what + ")");
          if (resp.status == 404 && code == "NoSuchBucket")
            throw IoError(Where(url), "no such bucket '" + req.loc.bucket + "' (" + what + ")");
          if (resp.status == 404 && code.empty()) throw NotFound(Where(url), "no such object (" + what + ")");
          if (resp.status == 403)
            throw IoError(Where(url), "access denied (" + what + "); credentials from " +
                                          (cfg_.credentials_from.empty() ? creds->source : cfg_.credentials_from));
          throw IoError(Where(url), what + (attempt > 1 ? " (after " + std::to_string(attempt) + " attempts)" : ""));
        }
        last = describe_status(resp.status, code, msg);
      }
    } else {
      last = failed;
    }
    if (attempt >= policy.max_attempts)
      throw IoError(Where(url), std::string(req.method) + " failed after " + std::to_string(attempt) + " attempts: " +
                                    last + " (endpoint " + (cfg_.endpoint.empty() ? "AWS" : cfg_.endpoint) + ")");
    counters_.retries.fetch_add(1, std::memory_order_relaxed);
    // Retry-After is a server's request to wait (429, 503 SlowDown): honoured, within the cap.
    std::optional<uint64_t> after;
    if (resp.status == 429 || resp.status == 503) after = resp.retry_after_s;
    policy.pause(attempt, after);
  }
}

std::optional<uint64_t> Client::size_of(const Location& loc) {
  Request r;
  r.method = "HEAD";
  r.loc = loc;
  r.expect_404 = true;
  Response resp = perform(r);
  if (resp.status == 404) return std::nullopt;
  if (!resp.content_length) throw IoError(Where(loc.url()), "HEAD answered without a Content-Length");
  return resp.content_length;
}

void Client::get_range(const Location& loc, uint64_t offset, uint64_t n, void* buf) {
  if (n == 0) return;
  Request r;
  r.loc = loc;
  r.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1));
  r.dest = static_cast<uint8_t*>(buf);
  r.dest_size = n;
  r.range_offset = offset;
  perform(r);
}

std::vector<uint8_t> Client::get(const Location& loc) {
  Request r;
  r.loc = loc;
  r.unbounded = true;
  Response resp = perform(r);
  return std::vector<uint8_t>(resp.body.begin(), resp.body.end());
}

std::string list_query(const std::string& prefix, bool delimited, const std::string& token, int max_keys) {
  // Sorted by name, as SigV4's canonical query wants them.
  std::string q;
  if (!token.empty()) q += "continuation-token=" + uri_encode(token, false) + "&";
  if (delimited) q += "delimiter=%2F&";
  q += "list-type=2&";
  if (max_keys > 0) q += "max-keys=" + std::to_string(max_keys) + "&";
  q += "prefix=" + uri_encode(prefix, false);
  return q;
}

store::Listing Client::list_objects(const Location& prefix, bool delimited) {
  store::Listing out;
  std::string token;
  for (;;) {
    Request r;
    r.loc = prefix.with_key("");
    r.display = prefix.url();
    r.query = list_query(prefix.key, delimited, token);
    Response resp = perform(r);
    ListPage page = parse_list_page(resp.body, prefix.url());
    for (auto& o : page.objects) out.objects.push_back(std::move(o));
    for (auto& p : page.prefixes) out.prefixes.push_back(std::move(p));
    if (!page.truncated) break;
    token = page.next_token;
  }
  return out;
}

bool Client::any_object(const Location& prefix) {
  std::string token;
  for (;;) {  // a page may come back empty but truncated (a server that skips folders it walks)
    Request r;
    r.loc = prefix.with_key("");
    r.display = prefix.url();
    r.query = list_query(prefix.key, false, token, 1);
    Response resp = perform(r);
    ListPage page = parse_list_page(resp.body, prefix.url());
    if (!page.objects.empty()) return true;
    if (!page.truncated) return false;
    token = page.next_token;
  }
}

void Client::put(const Location& loc, const void* data, size_t n) {
  Request r;
  r.method = "PUT";
  r.loc = loc;
  r.body = data ? data : "";
  r.body_size = n;
  perform(r);
}

std::string Client::start_upload(const Location& loc) {
  Request r;
  r.method = "POST";
  r.loc = loc;
  r.query = "uploads=";
  Response resp = perform(r);
  auto id = xml_element(resp.body, "UploadId");
  if (!id || id->empty()) throw IoError(Where(loc.url()), "CreateMultipartUpload answered without an UploadId");
  return *id;
}

std::string Client::upload_part(const Location& loc, const std::string& id, int part, const void* data, size_t n) {
  Request r;
  r.method = "PUT";
  r.loc = loc;
  r.query = "partNumber=" + std::to_string(part) + "&uploadId=" + uri_encode(id, false);
  r.body = data ? data : "";
  r.body_size = n;
  Response resp = perform(r);
  if (resp.etag.empty())
    throw IoError(Where(loc.url()), "UploadPart " + std::to_string(part) + " answered without an ETag");
  return resp.etag;
}

void Client::complete_upload(const Location& loc, const std::string& id, const std::vector<std::string>& etags) {
  auto escape = [](const std::string& s) {
    std::string o;
    for (char ch : s) {
      if (ch == '&')
        o += "&amp;";
      else if (ch == '<')
        o += "&lt;";
      else if (ch == '>')
        o += "&gt;";
      else if (ch == '"')
        o += "&quot;";
      else
        o += ch;
    }
    return o;
  };
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i)
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + escape(etags[i]) + "</ETag></Part>";
  xml += "</CompleteMultipartUpload>";
  Request r;
  r.method = "POST";
  r.loc = loc;
  r.query = "uploadId=" + uri_encode(id, false);
  r.body = xml.data();
  r.body_size = xml.size();
  Response resp = perform(r);
  // CompleteMultipartUpload can answer 200 with an <Error> body: the upload did not complete.
  auto [code, msg] = parse_error_body(resp.body);
  if (!code.empty())
    throw IoError(Where(loc.url()), "CompleteMultipartUpload failed: " + code + (msg.empty() ? "" : ": " + msg));
}

std::vector<std::pair<Location, std::string>> Client::open_uploads(const Location& under) {
  std::vector<std::pair<Location, std::string>> out;
  std::string key_marker, id_marker;
  for (int page = 0;; ++page) {
    Request r;
    r.loc = under.with_key("");
    r.display = under.url();
    // Sorted by name, as SigV4's canonical query wants them.
    r.query = (key_marker.empty() ? "" : "key-marker=" + uri_encode(key_marker, false) + "&") +
              "prefix=" + uri_encode(under.key, false) +
              (id_marker.empty() ? "" : "&upload-id-marker=" + uri_encode(id_marker, false)) + "&uploads=";
    Response resp = perform(r);
    std::string root, key, id, next_key, next_id, problem;
    bool truncated = false;
    XmlWalk w;
    w.on_start = [&](const std::vector<std::string>& path) {
      if (path.size() == 1) root = path[0];
      if (path.size() == 2 && path[1] == "Upload") key.clear(), id.clear();
    };
    w.on_end = [&](const std::vector<std::string>& path, const std::string& text) {
      if (path.size() == 3 && path[1] == "Upload" && path[2] == "Key") key = text;
      if (path.size() == 3 && path[1] == "Upload" && path[2] == "UploadId") id = text;
      if (path.size() == 2 && path[1] == "Upload") {
        if (key.empty() || id.empty()) problem = "an Upload without Key or UploadId";
        // The prefix matches "out.bin" for "out"; only the object itself and those below it count.
        else if (key == under.key || key.rfind(under.key + "/", 0) == 0)
          out.emplace_back(under.with_key(key), id);
      }
      if (path.size() == 2 && path[1] == "IsTruncated") truncated = text == "true";
      if (path.size() == 2 && path[1] == "NextKeyMarker") next_key = text;
      if (path.size() == 2 && path[1] == "NextUploadIdMarker") next_id = text;
    };
    if (auto err = walk_xml(resp.body, w))
      throw IoError(Where(under.url()), "malformed upload listing from the server: " + *err);
    if (root != "ListMultipartUploadsResult")
      throw IoError(Where(under.url()), "malformed upload listing from the server: root element '" + root + "'");
    if (!problem.empty()) throw IoError(Where(under.url()), "malformed upload listing from the server: " + problem);
    if (!truncated) break;
    if (next_key.empty() || page > 100000 || (next_key == key_marker && next_id == id_marker))
      throw IoError(Where(under.url()), "the server's upload listing does not advance");
    key_marker = next_key;
    id_marker = next_id;
  }
  return out;
}

void Client::abort_upload(const Location& loc, const std::string& id) {
  Request r;
  r.method = "DELETE";
  r.loc = loc;
  r.query = "uploadId=" + uri_encode(id, false);
  r.expect_404 = true;  // already gone
  perform(r);
}

void Client::remove(const Location& loc) {
  Request r;
  r.method = "DELETE";
  r.loc = loc;
  perform(r);
}

}  // namespace dcpctl::s3
