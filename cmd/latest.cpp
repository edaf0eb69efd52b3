// dcpctl latest: the path of the newest complete checkpoint of a run folder, for scripts:
//   dcpctl consolidate "$(dcpctl latest RUN)" -o model.safetensors
#include <iostream>

#include "cmd/format.h"
#include "cmd/subcommands.h"
#include "meta/manifest.h"
#include "meta/run_folder.h"
#include "report/runs.h"
#include "util/error.h"

namespace dcpctl::cli {

using nlohmann::json;

RunFolder require_run_folder(const std::string& dir, Judge judge);  // cmd/ls.cpp

struct LatestCliOptions {
  std::string run;
  bool json = false;
  bool verified = false;
};

int run_latest(const LatestCliOptions& o) {
  // Newest first, stopping at the first complete one: only what the answer needs is read.
  RunFolder rf = require_run_folder(o.run, o.verified ? Judge::All : Judge::NewestComplete);
  const RunEntry* e = nullptr;
  if (o.verified) {
    // --verified: the newest complete one whose manifest holds (meta/manifest.h), every file hashed.
    std::string why;
    for (auto x = rf.entries.rbegin(); x != rf.entries.rend() && !e; ++x) {
      if (!x->complete) {
        why += "\n  " + x->name + ": " + x->why_incomplete;
        continue;
      }
      ManifestReport m = check_manifest(x->model_path, 4);
      if (m.present && m.problems.empty())
        e = &*x;
      else
        why +=
            "\n  " + x->name + ": " +
            (m.present ? "[" + m.problems[0].code + "] " + m.problems[0].text() : "no " + std::string(kManifestFile));
    }
    if (!e)
      throw FormatError(Where(o.run), "no verified checkpoint among " + std::to_string(rf.entries.size()) + ":" + why);
  } else {
    e = rf.newest_complete();
  }
  if (!e) {
    std::string why;
    for (const auto& x : rf.entries) why += "\n  " + x.name + ": " + x.why_incomplete;
    throw FormatError(Where(o.run), "no complete checkpoint among " + std::to_string(rf.entries.size()) + ":" + why);
  }
  json doc = {{"schema_version", 1},
              {"run_folder", rf.dir},
              {"path", e->path},
              {"model_path", e->model_path},
              {"trainer", e->trainer.empty() ? json(nullptr) : json(e->trainer)},
              {"step", e->step ? json(*e->step) : json(nullptr)},
              {"layout", e->layout ? json(layout_name(*e->layout)) : json(nullptr)},
              {"timing", run_folder_timing(rf)}};
  add_s3_transfer(doc);
  if (o.json)
    std::cout << doc.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  else
    std::cout << e->path << "\n";
  return 0;
}

void setup_latest(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<LatestCliOptions>();
  auto* sub = parent.add_subcommand(
      "latest", "Print the path of a run folder's newest complete checkpoint (exit 3 when none is)");
  sub->add_option("run", o->run, "Run folder")->required()->type_name("RUN");
  sub->add_flag("--json", o->json, "Print path, step and layout as JSON (schema_version 1)");
  sub->add_flag("--verified", o->verified,
                "The newest complete checkpoint whose dcpctl-manifest.json holds (every file there, of its size and "
                "SHA-256, none added); exit 3 when none does");
  sub->callback([&run, o] { run = [o] { return run_latest(*o); }; });
}

}  // namespace dcpctl::cli
