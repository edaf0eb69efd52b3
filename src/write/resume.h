// Resumable multi-file outputs (consolidate, reshard and cast --resume): the journal a run keeps
// of the files it has finished, and finding the one a stopped run left.
//
// A multi-file output written to the local filesystem by one process (a Hugging Face folder of
// shards, a split GGUF, a DCP checkpoint's rank files) is staged in one folder, this process's temporary for the output
// (write/leftovers.h: `.<name>.dcpctl-tmp-<pid>-<start>@<host>`). Each data file is written there
// under a temporary name of its own and, as soon as its last byte is written, synced and renamed
// to its own name inside the folder and recorded in the folder's journal, `.dcpctl-resume.json`:
//
//   {"format": "dcpctl-resume", "version": 1,
//    "plan_digest": "<SHA-256 of the plan's JSON>",
//    "plan": {...},                                    what the output's bytes depend on (below)
//    "algorithm": "crc32" | "sha256",                  the manifest's (--manifest)
//    "files": {"<name>": {"size": N, "digest": "<hex>", "extra": {...}}}}   extra: the format's
//
// The journal is rewritten whole (a temporary, fsync, rename) after each finished file, so it is
// always one of its complete versions. A file's digest is the one the manifest records, computed
// as the file is written (write/write_hash.h: no second read); with its size it finds a file cut
// short or changed (CRC-32: any burst of up to 32 bits, other random damage with probability
// 2^-32; `--manifest sha256` for a cryptographic digest).
//
// The plan: dcpctl's version; the checkpoint's path and the identity of every file it was opened
// from (size and modification time; the `.metadata`, or the index, also by its SHA-256), and the
// SHA-256 of the config.json files a map or the precision policy may read (--config, --assets
// DIR's, the checkpoint's) and of a --map FILE; every
// option that changes the output's bytes (the command's agreed options, the format's own options
// such as --outtype, the manifest's algorithm); and each data file's name with the SHA-256 of its
// header (safetensors header, GGUF header: tensor names, dtypes, shapes and offsets, and a GGUF's
// config and tokenizer keys). What is written beside the data files (config, tokenizer, the index,
// the manifest) is written again by every run, at commit.
//
// The folder is kept when a run stops after finishing a file: SIGKILL and power loss keep it
// anyway; an error (a full disk) or SIGINT/SIGTERM keeps it from the first finished file on (the
// unfinished files' temporaries are removed) and names it. `--resume` finds it beside the output
// (a gone process's on this host, find_stopped_run), compares its plan with this run's (refused,
// exit 2, naming what changed), adopts the folder (renamed to this process's temporary),
// re-reads every recorded file (its size, then its digest, past the page cache): those that agree
// are kept, every other entry of the folder is removed, and only the rest is written. Before the
// manifest is written and the output renamed into place the journal is removed: the output is
// byte for byte what an uninterrupted run writes. A run without --resume removes a stopped run's
// folder as any dead temporary (write/leftovers.h), naming the finished files it held.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meta/manifest.h"

namespace dcpctl {

struct WriteRequest;

inline constexpr const char* kResumeJournal = ".dcpctl-resume.json";

// A stopped run's staging folder for `output`: a dead process's temporary folder beside it
// holding a journal (the one with the most finished files), and how many files it records.
struct StoppedRun {
  std::string dir;
  size_t files = 0;
};
std::optional<StoppedRun> find_stopped_run(const std::string& output);

// The plan of a write (above): `files` maps each data file's name to the SHA-256 of its header.
nlohmann::json resume_plan(const WriteRequest& request, const char* command, const nlohmann::json& format_options,
                           const nlohmann::json& files);

// "--outtype was \"q8_0\", now \"f16\"; ...": what differs between two plans (empty: nothing).
std::string plan_changes(const nlohmann::json& was, const nlohmann::json& now);

class ResumeJournal {
 public:
  // `from`: a stopped run's folder whose journal this run resumes ("" for a fresh run); its plan is
  // compared now (UsageError naming the change; InvalidError for a journal that does not parse).
  ResumeJournal(nlohmann::json plan, ManifestAlgorithm alg, std::string from);
  const std::string& from() const { return from_; }
  const std::string& dir() const { return dir_; }             // the staging folder, once started
  size_t recorded_files() const { return recorded_.size(); }  // by the stopped run
  // In staging folder `dir` (a resumed one already renamed there): keeps the recorded files that
  // are as recorded, removes every other entry, and writes the journal.
  void start(const std::string& dir);
  bool kept(const std::string& name) const { return kept_.count(name) != 0; }
  std::optional<FileDigest> kept_digest(const std::string& name) const;
  // File `name` of the folder is complete under its own name (any thread); `extra`: what the
  // format needs of a kept file beside its bytes (a DCP rank file: where each chunk landed).
  void finished(const std::string& name, const FileDigest& d, const nlohmann::json& extra = nullptr);
  nlohmann::json kept_extra(const std::string& name) const;  // null where none
  // File `name` was written again and is not journaled (a DCP checkpoint's rank 0 file): said in
  // the summary only.
  void rewrote(const std::string& name);
  size_t finished_files() const;
  // Before the manifest: the journal is not part of the output.
  void remove();
  // The summary's `resume`: the journal, and the files kept and written.
  nlohmann::json summary() const;

 private:
  void write_locked();
  nlohmann::json plan_;
  ManifestAlgorithm alg_;
  std::string from_, dir_;
  nlohmann::json recorded_ = nlohmann::json::object();  // the stopped run's files
  std::set<std::string> kept_;
  std::vector<std::string> redone_;  // recorded but not as recorded
  mutable std::mutex mu_;
  nlohmann::json files_ = nlohmann::json::object();
  std::vector<std::string> written_;  // by this run
};

}  // namespace dcpctl
