#include "objstore/http.h"

#include <cctype>
#include <cstring>
#include <memory>
#include <string_view>

#include "objstore/curl_api.h"
#include "util/error.h"
#include "util/text.h"

namespace dcpctl::store::http {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string tail(std::string_view s, size_t n) {
  std::string t = trim(s.size() > n ? s.substr(s.size() - n) : s);
  for (char& c : t)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return t;
}

bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

namespace {

// One easy handle per thread: curl_easy_reset keeps its connections, so a worker's requests reuse
// one TCP (and TLS) connection to the server.
// (Made on a thread's first request, with libcurl loaded by then: see perform_once.)
struct Handle {
  CURL* easy = curl().easy_init();
  ~Handle() {
    if (easy) curl().easy_cleanup(easy);
  }
};
thread_local Handle t_handle;

struct Transfer {
  const Request* req;
  Response* resp;
  std::atomic<uint64_t>* bytes_in;
  uint64_t skipped = 0;
  bool overflow = false;
};

size_t on_body(char* data, size_t, size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  t->bytes_in->fetch_add(n, std::memory_order_relaxed);
  long status = 0;
  curl().easy_getinfo(t_handle.easy, CURLINFO_RESPONSE_CODE, &status);
  bool ok = status >= 200 && status < 300;
  if (t->req->dest && ok) {
    const uint64_t skip_total = status == 200 ? t->req->range_offset : 0;
    size_t off = 0;
    if (t->skipped < skip_total) {
      size_t skip = static_cast<size_t>(std::min<uint64_t>(n, skip_total - t->skipped));
      t->skipped += skip;
      off = skip;
    }
    size_t take = n - off;
    uint64_t room = t->req->dest_size - t->resp->got;
    if (take > room) {
      if (status == 206) {
        t->overflow = true;  // more than the range asked for: refuse the answer
        return 0;
      }
      take = static_cast<size_t>(room);  // a whole-object answer: the rest is not wanted
    }
    std::memcpy(t->req->dest + t->resp->got, data + off, take);
    t->resp->got += take;
    if (status == 200 && t->resp->got == t->req->dest_size && off + take < n) return 0;  // have it all: stop
    return n;
  }
  if (!t->req->unbounded && t->resp->body.size() + n > Request::kMaxBody) {
    t->overflow = true;
    return 0;
  }
  t->resp->body.append(data, n);
  return n;
}

size_t on_header(char* data, size_t, size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  std::string_view h(data, n);
  size_t colon = h.find(':');
  if (colon == std::string_view::npos) return n;
  std::string name = ascii_lower(std::string(h.substr(0, colon)));
  std::string value = trim(h.substr(colon + 1));
  if (name == "etag") t->resp->etag = value;
  if (name == "location") t->resp->location = value;
  if (name == "content-length") {
    uint64_t v;
    if (parse_u64(value, v)) t->resp->content_length = v;
  }
  if (name == "retry-after") {
    uint64_t v;
    if (parse_u64(value, v)) t->resp->retry_after_s = v;
  }
  return n;
}

}  // namespace

std::string perform_once(const Request& req, Response& resp, Counters& counters, const std::string& display) {
  const CurlApi& api = curl(display);  // loads libcurl, or throws saying why it cannot
  CURL* c = t_handle.easy;
  if (!c) throw IoError(Where(display), "cannot start an HTTP request (curl_easy_init failed)");
  api.easy_reset(c);
  resp = Response();
  Transfer t{&req, &resp, &counters.bytes_in};
  curl_slist* hdrs = nullptr;
  for (const auto& h : req.headers) hdrs = api.slist_append(hdrs, h.c_str());
  std::unique_ptr<curl_slist, decltype(CurlApi::slist_free_all)> hold(hdrs, api.slist_free_all);
  api.easy_setopt(c, CURLOPT_URL, req.url.c_str());
  api.easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  if (!req.sigv4.empty()) {
    api.easy_setopt(c, CURLOPT_AWS_SIGV4, req.sigv4.c_str());
    api.easy_setopt(c, CURLOPT_USERPWD, req.userpwd.c_str());
  }
  api.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  api.easy_setopt(c, CURLOPT_CONNECTTIMEOUT, req.connect_timeout_s);
  // A stalled transfer (under 1 byte/s for 30 s) fails, and is retried, instead of hanging.
  api.easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  api.easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
  api.easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  api.easy_setopt(c, CURLOPT_WRITEDATA, &t);
  api.easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  api.easy_setopt(c, CURLOPT_HEADERDATA, &t);
  if (std::strcmp(req.method, "HEAD") == 0) {
    api.easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (req.body || std::strcmp(req.method, "POST") == 0 || std::strcmp(req.method, "PUT") == 0) {
    // Bodies go as POSTFIELDS (with the method named), so that libcurl's SigV4 hashes exactly
    // these bytes.
    api.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body_size));
    api.easy_setopt(c, CURLOPT_POSTFIELDS, req.body ? req.body : "");
    api.easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method);
  } else if (std::strcmp(req.method, "GET") != 0) {
    api.easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method);
  }
  counters.requests.fetch_add(1, std::memory_order_relaxed);
  CURLcode rc = api.easy_perform(c);
  if (req.body) counters.bytes_out.fetch_add(req.body_size, std::memory_order_relaxed);
  // The whole object answered to a range: stopped once the range was in.
  bool done_early = rc == CURLE_WRITE_ERROR && req.dest && !t.overflow && resp.got == req.dest_size;
  if (rc == CURLE_OK || done_early) {
    api.easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
    return {};
  }
  if (t.overflow) throw IoError(Where(display), "the server's answer is larger than what was asked for");
  resp.status = 0;
  return api.easy_strerror(rc);
}

}  // namespace dcpctl::store::http
