// dcpctl prune: remove all but the N newest complete checkpoints of a run folder.
#include <iostream>

#include "cmd/format.h"
#include "cmd/subcommands.h"
#include "meta/run_folder.h"
#include "report/runs.h"
#include "util/error.h"
#include "write/leftovers.h"
#include "write/prune.h"

namespace dcpctl::cli {

using nlohmann::json;

RunFolder require_run_folder(const std::string& dir, Judge judge);  // cmd/ls.cpp

struct PruneCliOptions {
  std::string run;
  int keep = 0;
  bool incomplete = false, dry_run = false, json = false, quiet = false;
};

int run_prune(const PruneCliOptions& o) {
  RunFolder rf = require_run_folder(o.run, Judge::All);
  std::vector<PruneDecision> plan = plan_prune(rf, o.keep, o.incomplete);
  json removed = json::array(), kept = json::array();
  uint64_t freed = 0;
  size_t checkpoints = 0;  // of `removed`; the rest are leftovers (an interrupted prune's, a killed run's temporaries)
  auto row = [](const PruneDecision& d) {
    return json{{"name", d.entry->name}, {"path", d.entry->path}, {"reason", d.reason}};
  };
  for (const auto& d : plan)
    if (!d.remove) kept.push_back(row(d));
  // The temporaries killed dcpctl runs left in the folder (write/leftovers.h): those of a process
  // gone from this host go; a live run's, another host's and an old output moved aside stay.
  std::vector<Leftover> temps = find_leftovers_in(rf.dir);
  auto temp_row = [](const Leftover& l) {
    return json{{"name", l.path.substr(l.path.find_last_of('/') + 1)},
                {"path", l.path},
                {"reason", l.reason()},
                {"bytes", l.bytes}};
  };
  for (const auto& l : temps)
    if (!l.removable()) kept.push_back(temp_row(l));
  auto report = [&] {
    if (o.json) {
      std::cout << json{{"schema_version", 1}, {"run_folder", rf.dir},       {"dry_run", o.dry_run},
                        {"keep", o.keep},      {"incomplete", o.incomplete}, {"removed", removed},
                        {"kept", kept},        {"bytes_freed", freed}}
                       .dump(2)
                << "\n";
    } else if (!o.quiet) {
      for (const auto& k : kept)
        std::cout << "keep    " << k["path"].get<std::string>() << "  (" << k["reason"].get<std::string>() << ")\n";
      std::cout << (o.dry_run ? "would remove " : "removed ") << checkpoints << " checkpoint(s), ";
      if (removed.size() > checkpoints) std::cout << removed.size() - checkpoints << " leftover(s), ";
      std::cout << human_bytes(freed) << "\n";
    }
  };
  if (o.dry_run) {
    for (const auto& left : rf.prune_leftovers) {
      removed.push_back({{"name", left.substr(left.find_last_of('/') + 1)},
                         {"path", left},
                         {"reason", "left by an interrupted prune"}});
      if (!o.json && !o.quiet) std::cout << "remove  " << left << "  (left by an interrupted prune)\n";
    }
    for (const auto& l : temps)
      if (l.removable()) {
        removed.push_back(temp_row(l));
        freed += l.bytes;
        if (!o.json && !o.quiet) std::cout << "remove  " << l.path << "  (" << l.reason() << ")\n";
      }
    for (const auto& d : plan)
      if (d.remove) {
        removed.push_back(row(d));
        ++checkpoints;
        freed += d.entry->bytes;
        if (!o.json && !o.quiet) std::cout << "remove  " << d.entry->path << "  (" << d.reason << ")\n";
      }
    report();
    return 0;
  }
  try {
    for (const auto& l : temps)
      if (l.removable()) {
        remove_leftover(l);
        removed.push_back(temp_row(l));
        freed += l.bytes;
        if (!o.json && !o.quiet) std::cout << "removed " << l.path << "  (" << l.reason() << ")\n";
      }
    execute_prune(rf, plan, [&](const std::string& path) {
      json r = {{"name", path.substr(path.find_last_of('/') + 1)},
                {"path", path},
                {"reason", "left by an interrupted prune"}};
      for (const auto& d : plan)
        if (d.entry->path == path) {
          r = row(d);
          ++checkpoints;
          freed += d.entry->bytes;
        }
      removed.push_back(r);
      if (!o.json && !o.quiet) std::cout << "removed " << path << "\n";
    });
  } catch (const Error&) {
    report();  // what was removed before the failure
    throw;
  }
  report();
  return 0;
}

void setup_prune(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<PruneCliOptions>();
  auto* sub = parent.add_subcommand(
      "prune",
      "Remove all but the N newest complete checkpoints of a run folder (never the newest, never one in flight)");
  sub->add_option("run", o->run, "Run folder")->required()->type_name("RUN");
  sub->add_option("--keep", o->keep, "How many of the newest complete checkpoints to keep (at least 1)")
      ->required()
      ->type_name("N");
  sub->add_flag("--incomplete", o->incomplete, "Also remove incomplete checkpoints older than the newest complete one");
  sub->add_flag("--dry-run", o->dry_run, "List what would be removed; remove nothing");
  sub->add_flag("--json", o->json, "Print what was (or would be) removed and kept as JSON (schema_version 1)");
  sub->add_flag("-q,--quiet", o->quiet, "Print nothing but errors");
  sub->callback([&run, o] { run = [o] { return run_prune(*o); }; });
}

}  // namespace dcpctl::cli
