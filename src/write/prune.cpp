#include "write/prune.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "store/file.h"
#include "util/failpoint.h"

namespace dcpctl {

namespace {

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

// Where the symbolic links below `dir` (and `dir` itself, if it is one) lead.
void link_targets(const std::string& dir, int depth, std::vector<std::pair<std::string, std::string>>& out) {
  struct stat st;
  if (depth > 8 || ::lstat(dir.c_str(), &st) != 0) return;
  if (S_ISLNK(st.st_mode)) {
    out.emplace_back(real_path(dir), dir);
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
  ::closedir(d);
  for (const auto& n : names) link_targets(join_path(dir, n), depth + 1, out);
}

// A kept checkpoint may be a link to another, or hold links to files of another (a trainer that
// links unchanged shards): whatever a kept checkpoint reaches is kept too, until nothing changes.
void protect_link_targets(std::vector<PruneDecision>& plan) {
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<std::pair<std::string, std::string>> targets;  // real target, the link
    for (const auto& d : plan)
      if (!d.remove) link_targets(d.entry->path, 0, targets);
    for (auto& d : plan) {
      if (!d.remove) continue;
      std::string victim = real_path(d.entry->path);
      for (const auto& [target, link] : targets) {
        if (victim.empty() || target.empty()) continue;
        if (target == victim || target.compare(0, victim.size() + 1, victim + "/") == 0) {
          d = {d.entry, false, "a kept checkpoint links into it (" + link + ")"};
          changed = true;
          break;
        }
      }
    }
  }
}

}  // namespace

std::vector<PruneDecision> plan_prune(const RunFolder& rf, int keep, bool incomplete) {
  // Locally a checkpoint is first renamed out of sight, so an interrupted prune never leaves one
  // that looks complete; object stores have no rename (a prefix goes object by object).
  if (is_remote_path(rf.dir))
    throw UnsupportedError(
        Where(rf.dir),
        "prune does not remove from object storage: object stores have no rename, so an interrupted "
        "prune could leave a half-deleted checkpoint that still looks complete; see "
        "`dcpctl ls` and remove with the store's own tools (lifecycle rules, aws s3 rm, gcloud storage rm)");
  if (keep < 1) throw UsageError(Where(), "--keep must be at least 1: the newest complete checkpoint is never removed");
  const RunEntry* newest = rf.newest_complete();
  if (!newest) throw FormatError(Where(rf.dir), "no checkpoint in the run folder is complete; nothing removed");
  std::vector<PruneDecision> out;
  int complete_seen = 0;
  bool past_newest = false;
  // Newest first, so that "the N newest complete" is a running count.
  for (auto it = rf.entries.rbegin(); it != rf.entries.rend(); ++it) {
    const RunEntry& e = *it;
    if (&e == newest) past_newest = true;
    PruneDecision d{&e, false, ""};
    if (e.symlink) {
      d.reason = "a symbolic link: never removed";
    } else if (e.complete) {
      ++complete_seen;
      if (complete_seen <= keep)
        d.reason =
            &e == newest ? "the newest complete checkpoint" : "one of the " + std::to_string(keep) + " newest complete";
      else
        d = {&e, true, "complete, older than the " + std::to_string(keep) + " kept"};
    } else if (!past_newest) {
      d.reason = "incomplete but newer than the newest complete checkpoint (a save may be in flight)";
    } else if (incomplete) {
      d = {&e, true, "incomplete, older than the newest complete checkpoint"};
    } else {
      d.reason = "incomplete (removed only with --incomplete)";
    }
    out.push_back(std::move(d));
  }
  std::reverse(out.begin(), out.end());
  protect_link_targets(out);
  return out;
}

namespace {

// Removes everything inside the directory open at `dfd`; links are unlinked, never followed.
// Returns 0 or the errno of the first failure.
int remove_contents(int dfd, int depth) {
  if (depth > 64) return ELOOP;
  int dup = ::dup(dfd);
  if (dup < 0) return errno;
  DIR* d = ::fdopendir(dup);
  if (!d) {
    int err = errno;
    ::close(dup);
    return err;
  }
  int err = 0;
  std::vector<std::pair<std::string, bool>> names;  // name, is a directory
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st;
    if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    names.emplace_back(n, S_ISDIR(st.st_mode));
  }
  ::closedir(d);
  for (const auto& [n, is_dir] : names) {
    if (is_dir) {
      int sub = ::openat(dfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        if (!err) err = errno;
        continue;
      }
      int e = remove_contents(sub, depth + 1);
      ::close(sub);
      if (e && !err) err = e;
      if (::unlinkat(dfd, n.c_str(), AT_REMOVEDIR) != 0 && !err && errno != ENOENT) err = errno;
    } else if (::unlinkat(dfd, n.c_str(), 0) != 0 && !err && errno != ENOENT) {
      err = errno;
    }
  }
  return err;
}

}  // namespace

int remove_tree_no_follow(const std::string& path) {
  int err = 0;
  for (int pass = 0; pass < 5; ++pass) {
    int dfd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return errno;
    err = remove_contents(dfd, 0);
    ::close(dfd);
    if (err) return err;
    if (::rmdir(path.c_str()) == 0) return 0;
    err = errno;
    if (err != ENOTEMPTY && err != EEXIST) return err;
  }
  return err;
}

void execute_prune(const RunFolder& rf, const std::vector<PruneDecision>& plan,
                   const std::function<void(const std::string& path)>& removed) {
  for (const auto& left : rf.prune_leftovers) {  // an interrupted prune had decided these already
    if (int err = remove_tree_no_follow(left))
      throw IoError(Where(left), "cannot remove what an interrupted prune left: " + errno_text(err));
    removed(left);
  }
  for (const auto& d : plan) {
    if (!d.remove) continue;
    const RunEntry& e = *d.entry;
    // Still the directory that was judged (not replaced by a link since)?
    struct stat st;
    if (::lstat(e.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw IoError(Where(e.path),
                    "changed since the run folder was read (no longer a directory); nothing more removed");
    std::string hidden = join_path(rf.dir, ".dcpctl-prune-" + e.name);
    if (::rename(e.path.c_str(), hidden.c_str()) != 0)
      throw IoError(Where(e.path), "cannot remove: " + errno_text(errno));
    failpoint_stop("prune-renamed");  // tests: change the tree while the removal is under way
    if (int err = remove_tree_no_follow(hidden)) {
      std::string back = ::rename(hidden.c_str(), e.path.c_str()) == 0 ? e.path : hidden;
      throw IoError(Where(e.path), "cannot remove: " + errno_text(err) + "; what is left stays at " + back);
    }
    removed(e.path);
  }
}

}  // namespace dcpctl
