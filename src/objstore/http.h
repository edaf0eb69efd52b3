// One HTTP request over libcurl, for the object stores' clients (objstore/s3.h, objstore/gcs.h): the
// transfer itself (a body from memory, an answer into the caller's buffer or kept in memory,
// bounded), one attempt at a time. Retries, authorization and what an answer means are each
// client's: S3 signs with SigV4 and answers in XML, GCS takes a bearer token and answers in JSON.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dcpctl::store::http {

struct Counters {
  std::atomic<uint64_t> bytes_in{0}, bytes_out{0}, requests{0}, retries{0};
};

struct Request {
  const char* method = "GET";
  std::string url;  // scheme://host/path?query, encoded
  std::vector<std::string> headers;
  const void* body = nullptr;  // sent as is (with the method named), also for an empty POST/PUT
  size_t body_size = 0;
  // Where the answer's body goes: into `dest` (exactly dest_size bytes of the range starting at
  // range_offset; a server that ignores Range answers 200 with the whole object, whose first
  // range_offset bytes are skipped), else into Response::body.
  uint8_t* dest = nullptr;
  uint64_t dest_size = 0, range_offset = 0;
  bool unbounded = false;      // a body of any size; else at most kMaxBody
  std::string sigv4, userpwd;  // libcurl's SigV4 signing ("aws:amz:REGION:s3"; "KEY:SECRET"), or none
  long connect_timeout_s = 10;
  static constexpr size_t kMaxBody = 64u << 20;  // an answer kept in memory (listing pages, errors)
};

struct Response {
  long status = 0;   // 0: no answer
  std::string body;  // error bodies and small answers
  std::optional<uint64_t> content_length;
  std::string etag, location;
  std::optional<uint64_t> retry_after_s;  // Retry-After in seconds (an HTTP date is ignored)
  uint64_t got = 0;                       // bytes stored into Request::dest
};

// One attempt. Returns the transport's failure ("Couldn't connect to server", a timeout; the
// caller may retry), or "" when the server answered (resp.status). A 2xx answer into `dest` that
// held fewer bytes than asked shows in resp.got. Throws IoError naming `display` when the answer
// is larger than asked for (a range, or an in-memory body past kMaxBody).
std::string perform_once(const Request& req, Response& resp, Counters& counters, const std::string& display);

// Header parsing helpers the clients share.
std::string trim(std::string_view s);
// The last `n` characters of a process's stderr or a server's body, trimmed, on one line, for an
// error message (only ever of text that holds no secret: never a credentials file or a token).
std::string tail(std::string_view s, size_t n = 300);
bool parse_u64(const std::string& s, uint64_t& out);

}  // namespace dcpctl::store::http
