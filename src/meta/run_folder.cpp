#include "meta/run_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <regex>

#include "meta/layouts.h"
#include "meta/structure.h"
#include "util/file.h"

namespace dcpctl {

using meta_detail::ends_with;

const RunEntry* RunFolder::newest_complete() const {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (it->complete) return &*it;
  return nullptr;
}

bool holds_checkpoint_files(const std::string& dir) {
  for (const auto& n : list_dir(dir)) {
    if (n == ".metadata" || n == "model.safetensors.index.json" || ends_with(n, ".distcp") || ends_with(n, ".safetensors") ||
        (n.size() > 11 && n.compare(0, 2, "__") == 0 && ends_with(n, ".metadata")))
      return true;
    if (n == "sharded" && is_directory(join_path(dir, n)))
      for (const auto& m : list_dir(join_path(dir, n)))
        if (ends_with(m, ".safetensors")) return true;
  }
  return false;
}

namespace {

// Sizes and newest mtime of the regular files below `dir`, never following links.
void walk(const std::string& dir, int depth, uint64_t& bytes, int64_t& mtime) {
  if (depth > 4) return;
  for (const auto& n : list_dir(dir)) {
    std::string p = join_path(dir, n);
    PathInfo st = stat_path(p, false);
    if (st.kind == PathInfo::file) {
      bytes += st.size;
      mtime = std::max<int64_t>(mtime, st.mtime);
    } else if (st.kind == PathInfo::directory) {
      walk(p, depth + 1, bytes, mtime);
    }
  }
}

bool optimizer_key(const std::string& key) {
  size_t start = 0;
  while (start <= key.size()) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.rfind("optim", 0) == 0 || part == "exp_avg" || part == "exp_avg_sq" || part == "momentum_buffer") return true;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return false;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void judge_entry(RunEntry& e) {
  e.judged = true;
  auto t0 = std::chrono::steady_clock::now();
  try {
    Checkpoint ck = open_checkpoint(e.path);
    e.open_seconds = seconds_since(t0);
    e.metadata_bytes = ck.metadata_bytes;
    e.layout = ck.layout;
    auto t1 = std::chrono::steady_clock::now();
    StructureReport r = check_structure(ck);
    e.check_seconds = seconds_since(t1);
    e.problems = r.problems.size();
    e.complete = r.problems.empty();
    if (!e.complete) e.why_incomplete = r.problems.front().text();
    e.tensors = ck.md.tensors.size();
    for (const auto& t : ck.md.tensors) {
      ++e.dtypes[t.dtype_name];
      e.optimizer = e.optimizer || optimizer_key(t.fqn);
    }
    for (const auto& b : ck.md.bytes) e.optimizer = e.optimizer || optimizer_key(b.fqn);
  } catch (const Error& err) {
    if (e.open_seconds == 0) e.open_seconds = seconds_since(t0);
    e.complete = false;
    e.problems = 1;
    e.why_incomplete = err.what();
  }
}

}  // namespace

std::optional<RunFolder> scan_run_folder(const std::string& dir, Judge judge) {
  auto t0 = std::chrono::steady_clock::now();
  if (!is_directory(dir) || holds_checkpoint_files(dir)) return std::nullopt;
  static const std::regex kName(R"(^(.*?)(\d+)((?:[._-](?:tmp|temp|partial|incomplete|inprogress))*)$)", std::regex::icase);
  RunFolder rf;
  rf.dir = dir;
  for (const auto& n : list_dir(dir)) {
    std::smatch m;
    // .dcpctl-prune-*: the remains of a prune that was interrupted; never a checkpoint to use.
    if (n.rfind(".dcpctl-prune-", 0) == 0) {
      rf.prune_leftovers.push_back(join_path(dir, n));
      continue;
    }
    if (!std::regex_match(n, m, kName) || m[2].length() > 18) continue;
    std::string p = join_path(dir, n);
    PathInfo lst = stat_path(p, false);
    if (lst.kind == PathInfo::missing) continue;
    if (!is_directory(p) || !holds_checkpoint_files(p)) continue;
    RunEntry e;
    e.name = n;
    e.path = p;
    for (size_t i = 0; i < n.size();) {
      if (!isdigit(static_cast<unsigned char>(n[i]))) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < n.size() && isdigit(static_cast<unsigned char>(n[j]))) ++j;
      e.order.push_back(std::stoull(n.substr(i, std::min<size_t>(j - i, 18))));
      i = j;
    }
    if (e.order.size() == 1) e.step = static_cast<int64_t>(e.order[0]);
    e.in_flight_name = m[3].length() > 0;
    e.symlink = lst.kind == PathInfo::other;  // a directory that is not one without following links
    if (!e.symlink) walk(p, 0, e.bytes, e.mtime);
    rf.entries.push_back(std::move(e));
  }
  if (rf.entries.empty() && rf.prune_leftovers.empty()) return std::nullopt;
  std::sort(rf.entries.begin(), rf.entries.end(), [](const RunEntry& a, const RunEntry& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  auto judge_one = [](RunEntry& e) {
    judge_entry(e);
    if (e.in_flight_name && e.complete) {  // named as a save in flight: never the one to use
      e.complete = false;
      e.problems = 1;
      e.why_incomplete = "its name marks a save in flight";
    }
  };
  if (judge == Judge::All)
    for (auto& e : rf.entries) judge_one(e);
  if (judge == Judge::NewestComplete)
    for (auto it = rf.entries.rbegin(); it != rf.entries.rend(); ++it) {
      judge_one(*it);
      if (it->complete) break;
    }
  for (auto& e : rf.entries)
    if (!e.judged && judge != Judge::None) e.why_incomplete = "not checked: a newer checkpoint is complete";
  rf.seconds = seconds_since(t0);
  return rf;
}

std::optional<std::string> run_folder_refusal(const std::string& dir) {
  auto rf = scan_run_folder(dir, Judge::NewestComplete);
  if (!rf) return std::nullopt;
  std::string names;
  size_t shown = 0;
  for (const auto& e : rf->entries) {
    if (shown++ == 12) {
      names += ", ... (" + std::to_string(rf->entries.size()) + " in all)";
      break;
    }
    names += (names.empty() ? "" : ", ") + e.name;
  }
  const RunEntry* newest = rf->newest_complete();
  return "is a run folder (" + names + "); " +
         (newest ? "the newest complete checkpoint is " + newest->path : std::string("none of its checkpoints is complete")) +
         " (dcpctl ls lists them; dcpctl latest prints the newest complete one)";
}

}  // namespace dcpctl
