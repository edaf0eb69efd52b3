// The real world behind aws::Io: getenv, files, libcurl for the credential endpoints, /bin/sh for
// credential_process, the clock. Kept apart from aws_credentials.cpp, whose chain the unit tests
// drive through a fake Io.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "objstore/aws_credentials.h"
#include "objstore/curl_api.h"

extern char** environ;

namespace dcpctl::aws {

namespace {

constexpr size_t kMaxBody = 1u << 20;

size_t on_body(char* data, size_t, size_t n, void* ud) {
  auto* s = static_cast<std::string*>(ud);
  if (s->size() + n > kMaxBody) return 0;  // an answer this large is not credentials
  s->append(data, n);
  return n;
}

bool retryable(const HttpResponse& r) {
  return r.status == 0 || r.status >= 500 || r.status == 429;
}

HttpResponse http_once(const HttpRequest& req) {
  const store::CurlApi& api = store::curl(req.url);  // loads libcurl, or throws saying why it cannot
  HttpResponse resp;
  std::unique_ptr<CURL, decltype(store::CurlApi::easy_cleanup)> c(api.easy_init(), api.easy_cleanup);
  if (!c) {
    resp.error = "curl_easy_init failed";
    return resp;
  }
  curl_slist* hdrs = nullptr;
  for (const auto& h : req.headers) hdrs = api.slist_append(hdrs, h.c_str());
  if (!req.sign.session_token.empty())
    hdrs = api.slist_append(hdrs, ("x-amz-security-token: " + req.sign.session_token).c_str());
  std::unique_ptr<curl_slist, decltype(store::CurlApi::slist_free_all)> hold(hdrs, api.slist_free_all);
  std::string userpwd = req.sign.access_key + ":" + req.sign.secret_key;
  CURL* h = c.get();
  api.easy_setopt(h, CURLOPT_URL, req.url.c_str());
  api.easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  api.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  api.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, req.connect_timeout_ms);
  api.easy_setopt(h, CURLOPT_TIMEOUT_MS, req.timeout_ms);
  api.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  api.easy_setopt(h, CURLOPT_WRITEDATA, &resp.body);
  api.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");  // 7.85's (objstore/curl_api.h checks the version)
  if (!req.sigv4.empty()) {
    api.easy_setopt(h, CURLOPT_AWS_SIGV4, req.sigv4.c_str());
    api.easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
  }
  if (req.method == "POST" || req.method == "PUT") {
    api.easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    api.easy_setopt(h, CURLOPT_POSTFIELDS, req.body.c_str());
    api.easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  } else if (req.method != "GET") {
    api.easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  CURLcode rc = api.easy_perform(h);
  if (rc != CURLE_OK) {
    resp.error = api.easy_strerror(rc);
    resp.body.clear();
    return resp;
  }
  api.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
  return resp;
}

HttpResponse http_with_retries(const HttpRequest& req) {
  // IMDS (1 s to connect) gets 2 attempts, as botocore; STS, SSO and the container endpoint 3.
  const int attempts = req.connect_timeout_ms <= 1000 ? 2 : 3;
  HttpResponse r;
  for (int a = 1; a <= attempts; ++a) {
    r = http_once(req);
    if (!retryable(r) || a == attempts) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << (2 * (a - 1))));
  }
  return r;
}

// Runs `command` through /bin/sh -c with stdin closed; stdout (at most 1 MiB) and stderr (its
// last 4 KiB) captured; killed after 60 s.
ProcessResult run_command(const std::string& command) {
  ProcessResult res;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    res.exit_status = -1;
    res.error = std::string("pipe: ") + std::strerror(errno);
    return res;
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]), close(out[1]);
    res.exit_status = -1;
    res.error = std::string("pipe: ") + std::strerror(errno);
    return res;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]), close(err[1]);
  if (rc != 0) {
    close(out[0]), close(err[0]);
    res.exit_status = -1;
    res.error = std::string("cannot run /bin/sh: ") + std::strerror(rc);
    return res;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  bool killed = false, too_big = false;
  char buf[8192];
  while (open_fds > 0) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      std::string& dst = i == 0 ? res.out : res.err;
      dst.append(buf, static_cast<size_t>(got));
      if (i == 1 && dst.size() > 8192) dst.erase(0, dst.size() - 4096);
      if (i == 0 && dst.size() > kMaxBody) {
        kill(pid, SIGKILL);
        too_big = true;
        open_fds = 0;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed || too_big) {
    res.exit_status = -1;
    res.error = killed ? "did not finish within 60 s (killed)" : "wrote more than 1 MiB to stdout (killed)";
  } else if (WIFEXITED(status)) {
    res.exit_status = WEXITSTATUS(status);
  } else {
    res.exit_status = -1;
    res.error = "killed by signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
  return res;
}

}  // namespace

Io Io::system() {
  Io io;
  io.env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  io.read = [](const std::string& path) -> std::optional<std::string> {
    std::ifstream f(path);
    if (!f) return std::nullopt;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  io.http = http_with_retries;
  io.run = run_command;
  io.now = [] { return static_cast<int64_t>(std::time(nullptr)); };
  return io;
}

}  // namespace dcpctl::aws
