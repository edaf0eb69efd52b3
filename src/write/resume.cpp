#include "write/resume.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include <algorithm>

#include "store/file.h"
#include "util/build_id.h"
#include "util/error.h"
#include "util/sha256.h"
#include "write/execute.h"
#include "write/leftovers.h"
#include "write/manifest.h"
#include "write/output.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxJournal = 64ull << 20;  // a journal of a million files is a few tens of MB

// The journal at `dir`, parsed; nullopt when there is none. A journal that is there and does not
// parse is a UsageError naming it (nothing in it can be trusted to skip a file).
std::optional<json> read_journal(const std::string& dir) {
  const std::string path = join_path(dir, kResumeJournal);
  const PathInfo st = stat_path(path);
  if (st.kind != PathInfo::file) return std::nullopt;
  if (st.size > kMaxJournal)
    throw UsageError(Where(path), "the resume journal is larger than " + std::to_string(kMaxJournal) + " bytes");
  json j = json::parse(ReadFile(path).read_all(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "dcpctl-resume" || !j.contains("plan") ||
      !j.contains("files") || !j["files"].is_object())
    throw UsageError(Where(path), "not a dcpctl resume journal; remove " + dir + " to start over");
  return j;
}

// A local path made absolute (a resume from another working directory is the same input).
std::string absolute(const std::string& path) {
  if (is_remote_path(path)) return path;
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

// The identity of a file the checkpoint was opened from: its size and modification time, a local
// file's to the nanosecond (a checkpoint saved again within the second is another one).
json identity(const std::string& path) {
  struct stat st;
  if (!is_remote_path(path) && ::stat(path.c_str(), &st) == 0)
    return json{{"size", st.st_size}, {"mtime_ns", st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec}};
  const PathInfo info = stat_path(path);
  return json{{"size", info.size}, {"mtime", info.mtime}};
}

json inputs_of(const Checkpoint& ck) {
  json in = json::object();
  for (const std::string& p : ck.metadata_sources) in[absolute(p)] = identity(p);
  for (const DataFileInfo& f : ck.files) {
    const std::string p = join_path(ck.dir, f.relative_path);
    in[absolute(p)] = identity(p);
  }
  // The .metadata (or index) by its bytes too: a checkpoint saved again into the same folder in the
  // same second, of the same size, is another checkpoint.
  if (const PathInfo st = stat_path(ck.metadata_path); st.kind == PathInfo::file && st.size <= kMaxJournal)
    in[absolute(ck.metadata_path)]["sha256"] = Sha256::of(ReadFile(ck.metadata_path).read_all());
  return in;
}

// The SHA-256 of a small local file that changes what is written when it changes (a map file, a
// config.json whose parameters a map or the precision policy reads), or null where there is none.
json small_file_digest(const std::string& path) {
  const PathInfo st = path.empty() || is_remote_path(path) ? PathInfo{} : stat_path(path);
  if (st.kind != PathInfo::file || st.size > kMaxJournal) return nullptr;
  return Sha256::of(ReadFile(path).read_all());
}

// The config.json files the model may have read (view/model_config.h's places, the common ones):
// --config, --assets DIR's, beside the checkpoint; and a --map FILE.
json side_files(const WriteOptions& o, const Checkpoint& ck, const json& options) {
  json side = json::object();
  std::vector<std::string> paths = {o.map_config, join_path(ck.dir, "config.json"), o.map};
  if (options.contains("assets_from") && options["assets_from"].is_string())
    paths.push_back(join_path(options["assets_from"].get<std::string>(), "config.json"));
  for (const std::string& p : paths)
    if (json d = small_file_digest(p); !d.is_null()) side[absolute(p)] = d;
  return side;
}

std::string shown(const json& v) {
  const bool none =
      v.is_null() || (v.is_string() && v.get_ref<const std::string&>().empty()) || (v.is_array() && v.empty());
  return none ? std::string("(none)") : v.dump();
}

void changes_into(const std::string& at, const json& was, const json& now, std::vector<std::string>& out) {
  if (was == now) return;
  if (was.is_object() && now.is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : was.items()) keys.insert(k);
    for (const auto& [k, v] : now.items()) keys.insert(k);
    for (const std::string& k : keys)
      changes_into(at.empty() ? k : at + "." + k, was.contains(k) ? was[k] : json(), now.contains(k) ? now[k] : json(),
                   out);
    return;
  }
  out.push_back(at + " was " + shown(was) + ", now " + shown(now));
}

}  // namespace

std::optional<StoppedRun> find_stopped_run(const std::string& output) {
  std::optional<StoppedRun> best;
  for (const Leftover& l : find_leftovers(output)) {
    if (!l.directory || !l.removable()) continue;
    std::optional<json> j;
    try {
      j = read_journal(l.path);
    } catch (const UsageError&) {
      j = json{{"files", json::object()}};  // named when resumed
    }
    if (j && (!best || (*j)["files"].size() > best->files)) best = StoppedRun{l.path, (*j)["files"].size()};
  }
  return best;
}

json resume_plan(const WriteRequest& request, const char* command, const json& format_options, const json& files) {
  const WriteOptions& o = request.o;
  json p;
  // The version and the build: another build of the same version (a fix between the crash and the
  // resume) may write other bytes for the files still to come.
  const std::string build = build_id();
  p["dcpctl"] = manifest_tool_version() + (build.empty() ? "" : " (build " + build + ")");
  p["command"] = command;
  p["checkpoint"] = absolute(request.ck.dir);
  p["inputs"] = inputs_of(request.ck);
  p["options"] = request.command;
  // --assets named from another working directory is the same folder.
  if (json& a = p["options"]["assets_from"]; a.is_string() && !a.get_ref<const std::string&>().empty())
    a = absolute(a.get<std::string>());
  p["options"]["--dtype"] = o.cast ? torch_name(*o.cast) : "";
  p["options"]["--keep-dtype"] = o.keep_dtype;
  p["options"]["--cast-all"] = o.cast_all;
  p["options"]["--include"] = o.selection.include;
  p["options"]["--exclude"] = o.selection.exclude;
  p["options"]["--select"] = o.selection.prefix;
  p["options"]["--map"] = o.map;
  p["options"]["--config"] = o.map_config.empty() ? o.map_config : absolute(o.map_config);
  p["options"]["--manifest"] = algorithm_name(o.manifest);
  for (const auto& [k, v] : format_options.items()) p["options"][k] = v;
  p["config_files"] = side_files(o, request.ck, p["options"]);
  p["files"] = files;
  return p;
}

std::string plan_changes(const json& was, const json& now) {
  std::vector<std::string> out;
  // The flags first, by their names; the data files by what changed of them, not every digest.
  for (const char* k : {"dcpctl", "command", "options", "checkpoint", "inputs", "config_files", "files"}) {
    const json a = was.contains(k) ? was[k] : json(), b = now.contains(k) ? now[k] : json();
    if (a == b) continue;
    if (std::string(k) == "files" && a.is_object() && b.is_object()) {
      out.push_back(a.size() != b.size() || !std::equal(a.items().begin(), a.items().end(), b.items().begin(),
                                                        [](const auto& x, const auto& y) { return x.key() == y.key(); })
                        ? "the data files were " + std::to_string(a.size()) + ", now " + std::to_string(b.size())
                        : "the header of a data file (its tensors, dtypes, offsets or keys) changed");
      continue;
    }
    changes_into(std::string(k) == "options" ? "" : k, a, b, out);
  }
  std::string s;
  for (size_t i = 0; i < out.size() && i < 8; ++i) s += (i ? "; " : "") + out[i];
  if (out.size() > 8) s += "; and " + std::to_string(out.size() - 8) + " more";
  return s;
}

ResumeJournal::ResumeJournal(json plan, ManifestAlgorithm alg, std::string from)
    : plan_(std::move(plan)), alg_(alg), from_(std::move(from)) {
  if (from_.empty()) return;
  std::optional<json> j = read_journal(from_);
  if (!j) throw UsageError(Where(from_), std::string("--resume: the stopped run's folder has no ") + kResumeJournal);
  const std::string was = j->value("plan_digest", ""), now = Sha256::of(plan_.dump());
  if (was != now || j->value("algorithm", "") != algorithm_name(alg_)) {
    std::string what = plan_changes((*j)["plan"], plan_);
    throw UsageError(Where(join_path(from_, kResumeJournal)),
                     "--resume: the plan changed since the stopped run: " + (what.empty() ? "its digest" : what) +
                         "; run without --resume to start over (its " + std::to_string((*j)["files"].size()) +
                         " finished files are then removed)");
  }
  recorded_ = (*j)["files"];
}

void ResumeJournal::start(const std::string& dir) {
  dir_ = dir;
  // A recorded file is kept when its size and then its digest are as recorded (the digest read
  // past the page cache: what the disk holds, not what a cache remembers).
  for (const auto& [name, rec] : recorded_.items()) {
    const std::string path = join_path(dir, name);
    const PathInfo st = stat_path(path);
    const FileDigest want{rec.value("size", uint64_t{0}), rec.value("digest", "")};
    bool same = st.kind == PathInfo::file && st.size == want.size && listed_name_inside(name);
    if (same) {
      const std::map<std::string, FileDigest> d = digest_files(path, 1, nullptr, nullptr, alg_);
      same = d.size() == 1 && d.begin()->second.hex == want.hex;
    }
    if (same) {
      kept_.insert(name);
      files_[name] = rec;
    } else {
      redone_.push_back(name);
    }
  }
  for (const std::string& n : list_dir(dir))
    if (!kept_.count(n) && n != kResumeJournal) remove_tree(join_path(dir, n));
  std::lock_guard<std::mutex> lock(mu_);
  write_locked();
}

std::optional<FileDigest> ResumeJournal::kept_digest(const std::string& name) const {
  if (!kept(name)) return std::nullopt;
  const json& r = files_.at(name);
  return FileDigest{r.value("size", uint64_t{0}), r.value("digest", "")};
}

json ResumeJournal::kept_extra(const std::string& name) const {
  return kept(name) ? files_.at(name).value("extra", json()) : json();
}

void ResumeJournal::finished(const std::string& name, const FileDigest& d, const json& extra) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[name] = {{"size", d.size}, {"digest", d.hex}};
  if (!extra.is_null()) files_[name]["extra"] = extra;
  written_.push_back(name);
  write_locked();
}

void ResumeJournal::rewrote(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  written_.push_back(name);
}

size_t ResumeJournal::finished_files() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.size();
}

// The whole journal under a temporary name, synced, renamed over the last one, the folder synced.
void ResumeJournal::write_locked() {
  const json j = {
      {"format", "dcpctl-resume"},         {"version", 1},   {"plan_digest", Sha256::of(plan_.dump())}, {"plan", plan_},
      {"algorithm", algorithm_name(alg_)}, {"files", files_}};
  const std::string text = j.dump(1) + "\n", path = join_path(dir_, kResumeJournal), tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(Where(tmp), "cannot create the resume journal: " + errno_text(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0)
    throw IoError(Where(path), "cannot write the resume journal: " + errno_text(ok ? errno : e));
  if (int d = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

void ResumeJournal::remove() {
  if (!dir_.empty()) ::unlink(join_path(dir_, kResumeJournal).c_str());
}

json ResumeJournal::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {{"resumed_from", from_.empty() ? json() : json(from_)},
          {"kept", std::vector<std::string>(kept_.begin(), kept_.end())},
          {"torn", redone_},
          {"written", written_}};
}

}  // namespace dcpctl
