#include "write/leftovers.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "meta/manifest.h"
#include "store/file.h"
#include "store/store.h"
#include "util/error.h"
#include "write/prune.h"

namespace dcpctl {
namespace {

constexpr const char* kMarker = ".dcpctl-tmp-";
constexpr unsigned long long kInitPidNs = 0xEFFFFFFCull;  // PROC_PID_INIT_INO: the host's own PID namespace
constexpr size_t kMaxHost = 64;

std::string trim_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// Field 22 of /proc/<pid>/stat (starttime, clock ticks since boot), or 0 when it cannot be read.
// The command name (field 2) is in parentheses and may hold spaces and ')': fields are counted
// from the last ')'.
unsigned long long start_time_of(long long pid) {
  std::ifstream f("/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(s.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(in >> field)) return 0;
  return std::strtoull(field.c_str(), nullptr, 10);
}

// This host's name as written into temporary names, with the PID namespace where it is not the
// host's own.
std::string host_tag() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) std::snprintf(buf, sizeof buf, "localhost");
  std::string h;
  for (const char* c = buf; *c && h.size() < kMaxHost; ++c) {
    unsigned char u = static_cast<unsigned char>(*c);
    h += (std::isalnum(u) || u == '.' || u == '-' || u == '_') ? *c : '_';
  }
  char link[128] = {};
  ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  unsigned long long ino = 0;
  if (n > 0 && std::sscanf(link, "pid:[%llu]", &ino) == 1 && ino != kInitPidNs) h += "~" + std::to_string(ino);
  return h;
}

// This process's pid, start time and host tag, computed once per process (a forked child
// computes its own).
struct Self {
  long long pid = 0;
  unsigned long long start = 0;
  std::string host;
};

Self self() {
  static std::mutex mu;
  static Self cached;
  std::lock_guard<std::mutex> lock(mu);
  long long pid = ::getpid();
  if (cached.pid != pid) cached = {pid, start_time_of(0), host_tag()};
  return cached;
}

std::string name_for(const std::string& final_path, bool aside) {
  const std::string f = trim_slashes(final_path);
  const Self me = self();
  return parent_path(f) + "/." + base_name(f) + kMarker + std::to_string(me.pid) + "-" + std::to_string(me.start) +
         (aside ? "-old" : "") + "@" + me.host;
}

bool digits_only(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The part of a temporary's name after `.dcpctl-tmp-`: `<pid>-<start>[-old]@<host>` or, from an
// older dcpctl, `<pid>[-old]`. False for anything else (not a name dcpctl gave).
bool parse_tail(const std::string& tail, Leftover& l, unsigned long long& start) {
  std::string t = tail;
  size_t at = t.find('@');
  if (at != std::string::npos) {
    l.host = t.substr(at + 1);
    if (l.host.empty() || l.host.find('/') != std::string::npos) return false;
    t = t.substr(0, at);
  }
  if (t.size() > 4 && t.compare(t.size() - 4, 4, "-old") == 0) {
    l.aside = true;
    t.resize(t.size() - 4);
  }
  std::string pid = t, st;
  if (at != std::string::npos) {
    size_t dash = t.find('-');
    if (dash == std::string::npos) return false;
    pid = t.substr(0, dash);
    st = t.substr(dash + 1);
    if (!digits_only(st) || st.size() > 20) return false;
  }
  if (!digits_only(pid) || pid.size() > 10) return false;
  l.pid = std::stoll(pid);
  start = st.empty() ? 0 : std::strtoull(st.c_str(), nullptr, 10);
  return l.pid > 0;
}

uint64_t bytes_under(const std::string& path, int depth) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return 0;
  if (!S_ISDIR(st.st_mode)) return S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
  uint64_t n = 0;
  if (depth > 16) return 0;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") n += bytes_under(path + "/" + name, depth + 1);
    }
    ::closedir(d);
  }
  return n;
}

// Whose it is: see the header's rules.
Leftover::Owner owner_of(const Leftover& l, unsigned long long start) {
  if (l.host.empty()) return Leftover::Owner::Unknown;
  const Self me = self();
  if (l.host != me.host) return Leftover::Owner::OtherHost;
  if (l.pid == me.pid) return start == me.start ? Leftover::Owner::Live : Leftover::Owner::Gone;
  if (l.pid > INT_MAX) return Leftover::Owner::Gone;  // no such PID on Linux
  if (::kill(static_cast<pid_t>(l.pid), 0) != 0 && errno == ESRCH) return Leftover::Owner::Gone;
  // A process holds the PID (EPERM: another user's). The same one only if it started when the name says.
  unsigned long long now = start_time_of(l.pid);
  if (start != 0 && now != 0 && now != start) return Leftover::Owner::Gone;
  return Leftover::Owner::Live;
}

std::string human(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

// `entry` (a name inside `dir`) as a leftover of an output named `output` (or of any output when
// `output` is empty). False when the name is not one dcpctl gives.
bool leftover_of(const std::string& dir, const std::string& entry, const std::string& output, Leftover& l) {
  if (entry.size() < 2 || entry[0] != '.') return false;
  size_t m;
  if (!output.empty()) {
    const std::string prefix = "." + output + kMarker;
    if (entry.compare(0, prefix.size(), prefix) != 0) return false;
    m = output.size() + 1;
  } else {
    m = entry.rfind(kMarker);
    if (m == std::string::npos || m < 2) return false;
  }
  unsigned long long start = 0;
  if (!parse_tail(entry.substr(m + std::strlen(kMarker)), l, start)) return false;
  l.output = entry.substr(1, m - 1);
  l.path = dir + "/" + entry;
  struct stat st;
  if (::lstat(l.path.c_str(), &st) != 0) return false;
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) return false;  // a link or anything else: never ours
  l.directory = S_ISDIR(st.st_mode);
  l.bytes = bytes_under(l.path, 0);
  l.owner = owner_of(l, start);
  return true;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.' && std::strstr(e->d_name, kMarker)) out.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string temp_name(const std::string& final_path) {
  return name_for(final_path, false);
}
std::string upload_journal_name(const std::string& output_url) {
  return store::parse_url(trim_slashes(output_url)).key.empty() ? std::string() : name_for(output_url, false);
}
std::string aside_name(const std::string& final_path) {
  return name_for(final_path, true);
}

std::string Leftover::reason() const {
  std::string what =
      aside ? "the old " + output + " moved aside by a dcpctl run" : "the temporary " + output + " of a dcpctl run";
  const std::string size = ", " + human(bytes);
  switch (owner) {
    case Owner::Gone:
      what += " (process " + std::to_string(pid) + " on this host) that is gone" + size;
      if (aside) what += "; left: it may be the only copy of the previous output, move it back or remove it";
      return what;
    case Owner::Live:
      return what + " still running (process " + std::to_string(pid) + " on this host)" + size + "; left alone";
    case Owner::OtherHost:
      return what + " on another host or container (process " + std::to_string(pid) + " on " + host + ")" + size +
             "; left alone: this host cannot tell whether it still runs, remove it once it does not";
    case Owner::Unknown: break;
  }
  return (aside ? "the old " + output + " moved aside" : "the temporary " + output) +
         " of an older dcpctl's run (process " + std::to_string(pid) + "), which did not record its host" + size +
         "; left alone: remove it once no run writes it";
}

std::vector<Leftover> find_leftovers(const std::string& final_path) {
  const std::string f = trim_slashes(final_path);
  const std::string dir = parent_path(f), name = base_name(f);
  std::vector<Leftover> out;
  for (const std::string& n : names_in(dir)) {
    Leftover l;
    if (leftover_of(dir, n, name, l) || leftover_of(dir, n, name + "." + kManifestFile, l)) out.push_back(std::move(l));
  }
  return out;
}

std::vector<Leftover> find_leftovers_in(const std::string& dir_in) {
  const std::string dir = trim_slashes(dir_in);
  std::vector<Leftover> out;
  for (const std::string& n : names_in(dir)) {
    Leftover l;
    if (leftover_of(dir, n, "", l)) out.push_back(std::move(l));
  }
  return out;
}

void remove_leftover(const Leftover& l) {
  if (!l.removable()) throw IoError(Where(l.path), "internal: not a removable leftover");
  struct stat st;
  if (::lstat(l.path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;  // another run removed it first
    throw IoError(Where(l.path), "cannot remove a dead run's temporary: " + errno_text(errno));
  }
  int err = 0;
  if (S_ISDIR(st.st_mode))
    err = remove_tree_no_follow(l.path);
  else if (S_ISREG(st.st_mode) && ::unlink(l.path.c_str()) != 0)
    err = errno;
  if (err && err != ENOENT) throw IoError(Where(l.path), "cannot remove a dead run's temporary: " + errno_text(err));
}

void clear_dead_temporaries(const std::string& final_path, bool dry_run,
                            const std::function<void(const std::string&)>& note, const std::string& keep) {
  auto say = [&](const std::string& s) {
    if (note) note(s);
  };
  for (const Leftover& l : find_leftovers(final_path)) {
    if (l.path == keep) continue;
    if (!l.removable()) {
      say(l.describe());
      continue;
    }
    if (dry_run) {
      say("would remove " + l.describe());
      continue;
    }
    try {
      remove_leftover(l);
      say("removed " + l.describe());
    } catch (const Error& e) {
      say(std::string(e.what()) + "; the run goes on");
    }
  }
}

void clear_dead_uploads(const std::string& output_url, bool dry_run,
                        const std::function<void(const std::string&)>& note) {
  auto say = [&](const std::string& s) {
    if (note) note(s);
  };
  const store::Location out = store::parse_url(trim_slashes(output_url));
  if (out.key.empty()) return;  // the bucket itself: no name to write a record under
  const std::string name = base_name(out.key);
  const std::string dir = out.key.substr(0, out.key.size() - name.size());
  const store::Location prefix = out.with_key(dir + "." + name + kMarker);
  store::ObjectStore& st = store::of(out);
  std::vector<store::Location> dead;
  std::vector<std::string> others;
  for (const auto& [key, size] : st.list_objects(prefix, false).objects) {
    Leftover l;
    unsigned long long start = 0;
    const std::string tail = key.substr(prefix.key.size());
    if (tail.find('/') != std::string::npos || !parse_tail(tail, l, start) || l.aside) continue;
    const std::string what = out.with_key(key).url() + ": the record of a dcpctl run writing " + out.url();
    switch (owner_of(l, start)) {
      case Leftover::Owner::Gone: dead.push_back(out.with_key(key)); continue;
      case Leftover::Owner::Live:
        others.push_back(what + ", still running (process " + std::to_string(l.pid) + " on this host)");
        continue;
      case Leftover::Owner::OtherHost:
        others.push_back(what + " on another host or container (process " + std::to_string(l.pid) + " on " + l.host +
                         "), which this host cannot tell is gone");
        continue;
      case Leftover::Owner::Unknown: continue;
    }
  }
  for (const std::string& o : others) say(o + "; left alone");
  if (dead.empty()) return;
  const std::string whose = std::to_string(dead.size()) + " dcpctl run(s) on this host that are gone (" +
                            dead.front().url() + (dead.size() > 1 ? ", ..." : "") + ")";
  // The open uploads under the output are told apart by nothing but the records: with a run that
  // may still be writing it, none is aborted.
  if (!others.empty()) {
    say("the uploads left open by " + whose + " are not aborted while another run may be writing " + out.url());
    return;
  }
  try {
    const auto open = st.open_uploads(out);
    if (dry_run) {
      say("would abort " + std::to_string(open.size()) + " upload(s) left open under " + out.url() + " by " + whose);
      return;
    }
    for (const auto& [loc, id] : open) st.abort_upload(loc, id);
    for (const store::Location& j : dead) st.remove(j);
    say("aborted " + std::to_string(open.size()) + " upload(s) left open under " + out.url() + " by " + whose +
        ", and removed their record(s)");
  } catch (const Error& e) {
    say(std::string(e.what()) + "; the run goes on");
  }
}

}  // namespace dcpctl
