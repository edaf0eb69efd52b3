// dcpctl ls: the checkpoints of a run folder, one row each, ordered by step.
#include <algorithm>
#include <ctime>
#include <iostream>

#include "cmd/format.h"
#include "cmd/subcommands.h"
#include "meta/manifest.h"
#include "meta/run_folder.h"
#include "report/runs.h"
#include "store/file.h"
#include "util/error.h"

namespace dcpctl::cli {

using nlohmann::json;

struct LsCliOptions {
  std::string run;
  bool json = false;
  bool verified = false;
};

// The run folder at `dir`, or a usage error saying what `dir` is instead.
RunFolder require_run_folder(const std::string& dir, Judge judge) {
  if (!path_exists(dir)) throw IoError(Where(dir), "no such file or directory");
  if (!is_directory(dir)) throw IoError(Where(dir), "not a directory");
  if (holds_checkpoint_files(dir))
    throw UsageError(Where(dir), "is a checkpoint, not a run folder of checkpoints (dcpctl inspect shows it)");
  auto rf = scan_run_folder(dir, judge);
  if (!rf || rf->entries.empty())
    throw UsageError(
        Where(dir),
        "holds no checkpoint (a subfolder whose name ends in a step number and that holds checkpoint files)");
  return std::move(*rf);
}

static std::string date_text(int64_t t) {
  if (t == 0) return "-";
  char buf[32];
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm;
  gmtime_r(&tt, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

int run_ls(const LsCliOptions& o) {
  RunFolder rf = require_run_folder(o.run, Judge::All);
  // --verified: whether each complete checkpoint's manifest (meta/manifest.h) holds, every file hashed.
  std::vector<bool> verified(rf.entries.size(), false);
  const RunEntry* newest_verified = nullptr;
  if (o.verified)
    for (size_t i = 0; i < rf.entries.size(); ++i)
      if (rf.entries[i].complete && manifest_verified(rf.entries[i].model_path, 4)) {
        verified[i] = true;
        newest_verified = &rf.entries[i];
      }
  if (o.json) {
    json doc = run_folder_report(rf);
    if (o.verified) {
      for (size_t i = 0; i < rf.entries.size(); ++i) doc["checkpoints"][i]["verified"] = verified[i];
      doc["newest_verified"] = newest_verified ? json(newest_verified->path) : json(nullptr);
    }
    add_s3_transfer(doc);
    std::cout << doc.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return 0;
  }
  size_t name_width = 6;
  for (const auto& e : rf.entries) name_width = std::max(name_width, e.name.size() + 3);
  std::cout << pad("STEP", 8) << pad("NAME", name_width) << pad("LAYOUT", 23) << pad("STATE", 11) << pad("SIZE", 11)
            << pad("TENSORS", 9) << pad("CONTENT", 17) << pad("MODIFIED (UTC)", 18) << "DTYPES\n";
  for (size_t i = 0; i < rf.entries.size(); ++i) {
    const RunEntry& e = rf.entries[i];
    std::string dtypes;
    for (const auto& [d, n] : e.dtypes) dtypes += (dtypes.empty() ? "" : ",") + d;
    std::cout << pad(e.step ? std::to_string(*e.step) : "-", 8) << pad(e.name + (e.symlink ? "@" : ""), name_width)
              << pad(e.layout ? layout_name(*e.layout) : "-", 23)
              << pad(!e.complete   ? "INCOMPLETE"
                     : verified[i] ? "verified"
                                   : "complete",
                     11)
              << pad(human_bytes(e.bytes), 11) << pad(std::to_string(e.tensors), 9)
              << pad(e.tensors == 0 ? "-"
                     : e.optimizer  ? "model+optimizer"
                                    : "model only",
                     17)
              << pad(date_text(e.mtime), 18) << (dtypes.empty() ? "-" : dtypes) << "\n";
    if (!e.complete) std::cout << "        why: " << e.why_incomplete << "\n";
  }
  for (const auto& left : rf.prune_leftovers)
    std::cout << "note: " << left << " was left by an interrupted prune (the next prune removes it)\n";
  const RunEntry* newest = rf.newest_complete();
  std::cout << rf.entries.size()
            << " checkpoint(s); newest complete: " << (newest ? newest->path : std::string("none"));
  if (o.verified) std::cout << "; newest verified: " << (newest_verified ? newest_verified->path : std::string("none"));
  std::cout << "\n";
  return 0;
}

void setup_ls(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<LsCliOptions>();
  auto* sub = parent.add_subcommand(
      "ls", "List the checkpoints of a run folder: step, layout, complete or not and why, size, content");
  sub->add_option("run", o->run, "Run folder (its subfolders step-N, checkpoint_N, ... are checkpoints)")
      ->required()
      ->type_name("RUN");
  sub->add_flag("--json", o->json, "Print the list as JSON (schema_version 1) on stdout");
  sub->add_flag("--verified", o->verified,
                "Also check each complete checkpoint's dcpctl-manifest.json (every file hashed): STATE verified, and "
                "--json's verified and newest_verified");
  sub->callback([&run, o] { run = [o] { return run_ls(*o); }; });
}

}  // namespace dcpctl::cli
