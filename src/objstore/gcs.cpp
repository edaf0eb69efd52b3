#include "objstore/gcs.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "objstore/gcs_credentials.h"
#include "util/parallel.h"

namespace dcpctl::gcs {

using json = nlohmann::json;
using store::http::parse_u64;

// Requests a composite upload sends at once: the composites of one level, then the deletes of its
// temporary objects (each a round trip of its own: one at a time, the deletes of a 2 GB file's 256
// parts would take longer than uploading them over a fast link).
constexpr unsigned kTempThreads = 16;

// ---------------------------------------------------------------------------------------------
// Configuration

Config Config::load(const std::function<std::optional<std::string>(const char*)>& env) {
  Config c;
  auto get = [&](const char* name) -> std::string {
    auto v = env(name);
    return v ? *v : std::string();
  };
  if (std::string host = get("STORAGE_EMULATOR_HOST"); !host.empty()) {
    if (host.find("://") == std::string::npos) host = "http://" + host;
    while (host.size() > 8 && host.back() == '/') host.pop_back();
    c.endpoint = host;
    c.emulator = true;
  } else if (std::string ep = get("DCPCTL_GCS_ENDPOINT"); !ep.empty()) {
    while (ep.size() > 8 && ep.back() == '/') ep.pop_back();
    if (ep.find("://") == std::string::npos)
      throw UsageError(Where(), "DCPCTL_GCS_ENDPOINT must be a URL (https://host[:port]), not '" + ep + "'");
    c.endpoint = ep;
  }
  std::string attempts = get("GCS_MAX_ATTEMPTS");
  if (attempts.empty()) attempts = get("AWS_MAX_ATTEMPTS");
  if (!attempts.empty()) {
    uint64_t v = 0;
    if (!parse_u64(attempts, v) || v < 1 || v > 100)
      throw UsageError(
          Where(), "GCS_MAX_ATTEMPTS / AWS_MAX_ATTEMPTS must be a whole number from 1 to 100, not '" + attempts + "'");
    c.max_attempts = static_cast<int>(v);
  }
  return c;
}

Config Config::from_environment() {
  return load([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
}

// ---------------------------------------------------------------------------------------------
// Answers

namespace {

std::optional<uint64_t> size_field(const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  uint64_t v = 0;
  if (j.is_string() && parse_u64(j.get<std::string>(), v)) return v;
  return std::nullopt;
}

json parse_json(std::string_view text, const std::string& url, const char* what) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw IoError(Where(url), std::string(what) + " is not a JSON object");
  return j;
}

}  // namespace

ListPage parse_list_page(std::string_view text, const std::string& url) {
  json j = parse_json(text, url, "the listing");
  ListPage page;
  if (auto it = j.find("items"); it != j.end()) {
    if (!it->is_array()) throw IoError(Where(url), "the listing's items is not an array");
    for (const json& o : *it) {
      auto name = o.find("name");
      auto size = o.find("size");
      if (!o.is_object() || name == o.end() || !name->is_string() || size == o.end() || !size_field(*size))
        throw IoError(Where(url), "the listing holds an item without a name or a byte count for its size");
      page.objects.emplace_back(name->get<std::string>(), *size_field(*size));
    }
  }
  if (auto it = j.find("prefixes"); it != j.end()) {
    if (!it->is_array()) throw IoError(Where(url), "the listing's prefixes is not an array");
    for (const json& p : *it) {
      if (!p.is_string()) throw IoError(Where(url), "the listing holds a prefix that is not a string");
      page.prefixes.push_back(p.get<std::string>());
    }
  }
  if (auto it = j.find("nextPageToken"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) throw IoError(Where(url), "the listing's nextPageToken is not a string");
    page.next_token = it->get<std::string>();
  }
  return page;
}

uint64_t parse_object_size(std::string_view text, const std::string& url) {
  json j = parse_json(text, url, "the object's metadata");
  auto it = j.find("size");
  if (it == j.end() || !size_field(*it))
    throw IoError(Where(url), "the object's metadata has no byte count for its size");
  return *size_field(*it);
}

std::pair<std::string, std::string> parse_error_body(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {};
  auto e = j.find("error");
  if (e == j.end() || !e->is_object()) return {};
  std::string reason, message;
  if (auto m = e->find("message"); m != e->end() && m->is_string()) message = m->get<std::string>();
  if (auto es = e->find("errors"); es != e->end() && es->is_array() && !es->empty() && (*es)[0].is_object())
    if (auto r = (*es)[0].find("reason"); r != (*es)[0].end() && r->is_string()) reason = r->get<std::string>();
  return {reason, message};
}

std::string parts_prefix(const Location& loc, const std::string& id) {
  size_t slash = loc.key.find_last_of('/');
  std::string folder = slash == std::string::npos ? "" : loc.key.substr(0, slash + 1);
  return folder + "." + loc.key.substr(folder.size()) + kPartsMarker + id + "/";
}

std::optional<std::pair<std::string, std::string>> upload_of_part(const std::string& key) {
  size_t slash = key.rfind('/');
  if (slash == std::string::npos) return std::nullopt;
  const std::string prefix = key.substr(0, slash);
  size_t seg = prefix.rfind('/');
  const std::string dir = seg == std::string::npos ? "" : prefix.substr(0, seg + 1);
  const std::string last = prefix.substr(dir.size());
  size_t m = last.rfind(kPartsMarker);
  if (last.size() < 2 || last[0] != '.' || m == std::string::npos || m < 2) return std::nullopt;
  std::string id = last.substr(m + std::strlen(kPartsMarker));
  if (id.empty()) return std::nullopt;
  return std::make_pair(dir + last.substr(1, m - 1), id);
}

std::vector<std::vector<std::vector<size_t>>> compose_levels(size_t n, size_t fan_in) {
  std::vector<std::vector<std::vector<size_t>>> levels;
  if (fan_in < 2) fan_in = 2;
  size_t count = n;
  do {
    std::vector<std::vector<size_t>> groups;
    for (size_t i = 0; i < count; i += fan_in) {
      std::vector<size_t> g;
      for (size_t k = i; k < std::min(count, i + fan_in); ++k) g.push_back(k);
      groups.push_back(std::move(g));
    }
    count = groups.size();
    levels.push_back(std::move(groups));
  } while (count > 1);
  return levels;
}

// ---------------------------------------------------------------------------------------------
// Requests

struct Client::Request {
  const char* method = "GET";
  std::string path;   // after the endpoint: "/storage/v1/b/..."
  std::string query;  // without '?'
  std::string url;    // the gs:// URL errors name
  std::vector<std::string> headers;
  const void* body = nullptr;
  size_t body_size = 0;
  uint8_t* dest = nullptr;
  uint64_t dest_size = 0, range_offset = 0;
  bool expect_404 = false;  // a 404 is an answer (size_of), not an error
  bool bucket_404 = false;  // a 404 names a missing bucket (a listing), not a missing object
};

namespace {

std::string enc(std::string_view s) {
  return store::uri_encode(s, false);
}

std::string object_path(const Location& loc) {
  return "/storage/v1/b/" + enc(loc.bucket) + "/o/" + enc(loc.key);
}

}  // namespace

Client::Client(Config cfg) : cfg_(std::move(cfg)) {
  aws::Io io = aws::Io::system();
  tokens_ = std::make_unique<TokenCache>([io] { return resolve(io); }, io.now, aws::refresh_margin(io.env));
}

Client::~Client() = default;

std::string Client::credential_source() const {
  return tokens_->source();
}

json Client::report() const {
  json s = json::object();
  s["bytes_fetched"] = counters_.bytes_in.load();
  s["requests"] = counters_.requests.load();
  s["retries"] = counters_.retries.load();
  if (counters_.bytes_out.load()) s["bytes_uploaded"] = counters_.bytes_out.load();
  if (std::string src = credential_source(); !src.empty()) s["credential_source"] = src;
  return s;
}

store::http::Response Client::perform(Request& req) {
  std::shared_ptr<const Token> token;
  try {
    token = tokens_->get();
  } catch (const IoError& e) {
    throw IoError(Where(req.url), e.what());  // "no credentials: GOOGLE_APPLICATION_CREDENTIALS: ...; ..."
  }
  bool refreshed = false;  // a token answered 401 is fetched again once per request
  const std::string full = cfg_.endpoint + req.path + (req.query.empty() ? "" : "?" + req.query);
  store::RetryPolicy policy;
  policy.max_attempts = cfg_.max_attempts;
  std::string last;
  for (int attempt = 1;; ++attempt) {
    store::http::Request h;
    h.method = req.method;
    h.url = full;
    h.headers = req.headers;
    if (!token->access_token.empty()) h.headers.push_back("Authorization: Bearer " + token->access_token);
    if (req.body) h.headers.push_back("Expect:");  // no 100-continue round trip before each part
    h.body = req.body;
    h.body_size = req.body_size;
    h.dest = req.dest;
    h.dest_size = req.dest_size;
    h.range_offset = req.range_offset;
    store::http::Response resp;
    const std::string failed = store::http::perform_once(h, resp, counters_, req.url);
    std::string reason, msg;
    if (failed.empty()) {
      if (resp.status >= 200 && resp.status < 300) {
        if (req.dest && resp.got != req.dest_size) {
          last = "the answer held " + std::to_string(resp.got) + " of the " + std::to_string(req.dest_size) +
                 " bytes asked for";
        } else {
          return resp;
        }
      } else {
        std::tie(reason, msg) = parse_error_body(resp.body);
        if (msg.empty() && resp.body.size() < 200) msg = store::http::trim(resp.body);
        const std::string what = std::string(req.method) + " failed: HTTP " + std::to_string(resp.status) +
                                 (reason.empty() ? "" : " " + reason) + (msg.empty() ? "" : ": " + msg);
        if (resp.status == 404 && req.expect_404) return resp;
        if (resp.status == 401 && !refreshed && !cfg_.emulator) {
          refreshed = true;
          try {
            token = tokens_->refresh_after_refused(token);
          } catch (const IoError& e) {
            throw IoError(Where(req.url),
                          what + ", and fetching a new token (" + token->source + ") failed: " + e.what());
          }
          counters_.retries.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        if (!store::RetryPolicy::retryable(resp.status, "") || attempt >= policy.max_attempts) {
          if (resp.status == 404 && req.bucket_404) throw IoError(Where(req.url), "no such bucket (" + what + ")");
          if (resp.status == 404) throw store::NotFound(Where(req.url), "no such object (" + what + ")");
          if (resp.status == 401 || resp.status == 403)
            throw IoError(Where(req.url), "access denied (" + what + "); credentials from " +
                                              (token->source.empty() ? "nowhere" : token->source));
          throw IoError(Where(req.url),
                        what + (attempt > 1 ? " (after " + std::to_string(attempt) + " attempts)" : ""));
        }
        last = what;
      }
    } else {
      last = failed;
    }
    if (attempt >= policy.max_attempts)
      throw IoError(Where(req.url), std::string(req.method) + " failed after " + std::to_string(attempt) +
                                        " attempts: " + last + " (endpoint " + cfg_.endpoint + ")");
    counters_.retries.fetch_add(1, std::memory_order_relaxed);
    std::optional<uint64_t> after;
    if (resp.status == 429 || resp.status == 503) after = resp.retry_after_s;
    policy.pause(attempt, after);
  }
}

std::optional<uint64_t> Client::size_of(const Location& loc) {
  Request r;
  r.path = object_path(loc);
  r.query = "fields=size";
  r.url = loc.url();
  r.expect_404 = true;
  store::http::Response resp = perform(r);
  if (resp.status == 404) return std::nullopt;
  return parse_object_size(resp.body, loc.url());
}

void Client::get_range(const Location& loc, uint64_t offset, uint64_t n, void* buf) {
  if (n == 0) return;
  Request r;
  r.path = "/download" + object_path(loc);
  r.query = "alt=media";
  r.url = loc.url();
  r.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1));
  r.dest = static_cast<uint8_t*>(buf);
  r.dest_size = n;
  r.range_offset = offset;
  perform(r);
}

namespace {

std::string list_query(const std::string& prefix, bool delimited, const std::string& token, int max_results) {
  std::string q = "prefix=" + enc(prefix);
  if (delimited) q += "&delimiter=%2F";
  if (max_results > 0) q += "&maxResults=" + std::to_string(max_results);
  if (!token.empty()) q += "&pageToken=" + enc(token);
  return q + "&fields=items(name%2Csize)%2Cprefixes%2CnextPageToken";
}

}  // namespace

store::Listing Client::list_objects(const Location& prefix, bool delimited) {
  store::Listing out;
  std::string token;
  std::vector<std::string> seen;
  for (;;) {
    Request r;
    r.path = "/storage/v1/b/" + enc(prefix.bucket) + "/o";
    r.query = list_query(prefix.key, delimited, token, 0);
    r.url = prefix.url();
    r.bucket_404 = true;
    ListPage page = parse_list_page(perform(r).body, prefix.url());
    for (auto& o : page.objects) out.objects.push_back(std::move(o));
    for (auto& p : page.prefixes) out.prefixes.push_back(std::move(p));
    if (page.next_token.empty()) break;
    if (page.next_token == token) throw IoError(Where(prefix.url()), "the listing repeats its page token");
    token = page.next_token;
  }
  // Some servers (fake-gcs-server) repeat the prefixes on every page.
  std::sort(out.prefixes.begin(), out.prefixes.end());
  out.prefixes.erase(std::unique(out.prefixes.begin(), out.prefixes.end()), out.prefixes.end());
  return out;
}

bool Client::any_object(const Location& prefix) {
  Request r;
  r.path = "/storage/v1/b/" + enc(prefix.bucket) + "/o";
  r.query = list_query(prefix.key, false, "", 1);
  r.url = prefix.url();
  r.bucket_404 = true;
  return !parse_list_page(perform(r).body, prefix.url()).objects.empty();
}

void Client::put(const Location& loc, const void* data, size_t n) {
  Request r;
  r.method = "POST";
  r.path = "/upload/storage/v1/b/" + enc(loc.bucket) + "/o";
  r.query = "uploadType=media&name=" + enc(loc.key);
  r.url = loc.url();
  r.headers.push_back("Content-Type: application/octet-stream");
  r.body = data ? data : "";
  r.body_size = n;
  perform(r);
}

std::string Client::start_upload(const Location&) {
  // Nothing to ask the server: the parts are objects of their own (see the header).
  thread_local std::mt19937_64 rng(std::random_device{}() ^ std::hash<std::thread::id>()(std::this_thread::get_id()));
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 16; ++i) id += hex[rng() & 15];
  return id;
}

std::string Client::upload_part(const Location& loc, const std::string& id, int part, const void* data, size_t n) {
  char num[16];
  std::snprintf(num, sizeof num, "%05d", part);
  const Location tmp = loc.with_key(parts_prefix(loc, id) + num);
  put(tmp, data, n);
  return tmp.key;
}

void Client::compose(const Location& dest, const std::vector<std::string>& sources) {
  json body = {{"sourceObjects", json::array()}, {"destination", {{"contentType", "application/octet-stream"}}}};
  for (const auto& s : sources) body["sourceObjects"].push_back({{"name", s}});
  const std::string text = body.dump();
  Request r;
  r.method = "POST";
  r.path = object_path(dest) + "/compose";
  r.url = dest.url();
  r.headers.push_back("Content-Type: application/json");
  r.body = text.data();
  r.body_size = text.size();
  perform(r);
}

void Client::complete_upload(const Location& loc, const std::string& id, const std::vector<std::string>& tags) {
  if (tags.empty()) throw IoError(Where(loc.url()), "internal: a composite upload of no parts");
  for (const auto& t : tags)
    if (t.empty()) throw IoError(Where(loc.url()), "internal: a part of the upload was not sent");
  const auto levels = compose_levels(tags.size());
  std::vector<std::string> below = tags, temps;
  for (size_t l = 0; l + 1 < levels.size(); ++l) {
    // The composites of a level are independent requests: sent kTempThreads at a time.
    std::vector<std::string> made(levels[l].size());
    for (size_t g = 0; g < made.size(); ++g)
      made[g] = parts_prefix(loc, id) + "c" + std::to_string(l) + "-" + std::to_string(g);
    temps.insert(temps.end(), made.begin(), made.end());
    parallel_for(made.size(), kTempThreads, [&](size_t g) {
      std::vector<std::string> sources;
      for (size_t i : levels[l][g]) sources.push_back(below[i]);
      compose(loc.with_key(made[g]), sources);
    });
    below = std::move(made);
  }
  compose(loc, below);  // the destination appears here, whole
  // The temporary objects: the parts and the composites between them. A failure here fails the
  // upload, which is then aborted (its parts deleted again by listing): the destination goes too,
  // so that an upload is either complete and clean or not there at all.
  std::vector<std::string> doomed = tags;
  doomed.insert(doomed.end(), temps.begin(), temps.end());
  try {
    parallel_for(doomed.size(), kTempThreads, [&](size_t i) { remove(loc.with_key(doomed[i])); });
  } catch (...) {
    try {
      remove(loc);
    } catch (...) {
    }
    throw;
  }
}

std::vector<std::pair<Location, std::string>> Client::open_uploads(const Location& under) {
  // The object's own parts lie beside it; those of the objects below it, under its prefix.
  size_t slash = under.key.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "" : under.key.substr(0, slash + 1);
  std::set<std::pair<std::string, std::string>> found;
  for (const Location& where :
       {under.with_key(folder + "." + under.key.substr(folder.size()) + kPartsMarker), under.with_key(under.key + "/")})
    for (const auto& [key, size] : list_objects(where, false).objects)
      if (auto u = upload_of_part(key); u && (u->first == under.key || u->first.rfind(under.key + "/", 0) == 0))
        found.insert(*u);
  std::vector<std::pair<Location, std::string>> out;
  for (const auto& [key, id] : found) out.emplace_back(under.with_key(key), id);
  return out;
}

void Client::abort_upload(const Location& loc, const std::string& id) {
  store::Listing l = list_objects(loc.with_key(parts_prefix(loc, id)), false);
  parallel_for(l.objects.size(), kTempThreads, [&](size_t i) { remove(loc.with_key(l.objects[i].first)); });
}

void Client::remove(const Location& loc) {
  Request r;
  r.method = "DELETE";
  r.path = object_path(loc);
  r.url = loc.url();
  perform(r);
}

}  // namespace dcpctl::gcs
