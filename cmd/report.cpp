// dcpctl report: how the weights and the optimizer state of a run moved from step to step
// (compare/trend.h reads the steps; report/trend_report.h derives the figures, anomalies and
// gates), as a table, JSON or a self-contained HTML page; --fail-on gates exit 3.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cmd/format.h"
#include "cmd/subcommands.h"
#include "cmd/write_options.h"
#include "compare/trend.h"
#include "meta/run_folder.h"
#include "report/trend_report.h"
#include "store/file.h"
#include "util/error.h"
#include "util/size.h"

namespace dcpctl::cli {

using nlohmann::json;

RunFolder require_run_folder(const std::string& dir, Judge judge);  // cmd/ls.cpp

struct ReportCliOptions {
  std::vector<std::string> inputs, filters, include, exclude, fail_on;
  std::string select, map, config, max_memory, html;
  int depth = 0;
  unsigned threads = 4;
  size_t steps_per_pass = 0, top = 20;
  double update_ratio = 1.0, norm_growth = 2.0;
  bool json = false, quiet = false, force = false;
};

namespace {

constexpr size_t kShown = 20;  // anomalies and gate failures printed; --json has all

// The trailing number of a checkpoint's name ("step-40" -> 40), when it has one.
std::optional<int64_t> trailing_number(const std::string& name) {
  size_t end = name.size(), b = end;
  while (b > 0 && name[b - 1] >= '0' && name[b - 1] <= '9') --b;
  if (b == end || end - b > 18) return std::nullopt;
  return std::stoll(name.substr(b));
}

// The steps: a run folder's complete checkpoints (the incomplete ones listed in `skipped`), or the
// checkpoints named, in the order given.
std::vector<TrendStep> steps_of(const ReportCliOptions& o, TrendReportOptions& ro) {
  std::vector<TrendStep> steps;
  if (o.inputs.size() == 1) {
    RunFolder rf = require_run_folder(o.inputs[0], Judge::All);
    ro.run = rf.dir;
    for (const RunEntry& e : rf.entries) {
      if (e.complete)
        steps.push_back({e.name, e.model_path, e.step, e.metadata_bytes});
      else
        ro.skipped_steps.emplace_back(e.path, e.why_incomplete);
    }
    if (steps.empty()) throw FormatError(Where(o.inputs[0]), "no complete checkpoint in the run folder");
    return steps;
  }
  for (const std::string& p : o.inputs) {
    std::string name = base_name(p);
    steps.push_back({name, p, trailing_number(name), 0});
  }
  return steps;
}

std::string fig(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v.get<double>());
  return b;
}

// The largest update ratio of a series, or null.
json max_of(const json& series) {
  json best = nullptr;
  for (const auto& v : series)
    if (v.is_string() ||
        (v.is_number() && (best.is_null() || (best.is_number() && v.get<double>() > best.get<double>()))))
      best = v;
  return best;
}

void print_text(const json& j) {
  const json& steps = j["steps"];
  std::cout << steps.size() << " step(s):";
  for (const auto& s : steps) std::cout << " " << s["name"].get<std::string>();
  std::cout << "\n\n"
            << pad("LAYER GROUP", 40) << pad("TENSORS", 9) << pad("L2 FIRST", 12) << pad("L2 LAST", 12)
            << pad("MAX UPDATE", 12) << "NAN+INF (LAST)\n";
  for (const auto& g : j["groups"]["layer"]) {
    const json& s = g["series"];
    uint64_t bad = 0;  // at the last step
    if (!s["nan"].back().is_null()) bad = s["nan"].back().get<uint64_t>() + s["inf"].back().get<uint64_t>();
    std::cout << pad(g["name"].get<std::string>(), 40) << pad(std::to_string(g["tensors"].get<size_t>()), 9)
              << pad(fig(s["l2"].front()), 12) << pad(fig(s["l2"].back()), 12)
              << pad(fig(max_of(s["update_ratio"])), 12) << bad << "\n";
  }
  std::cout << "\n" << j["anomalies"].size() << " anomal" << (j["anomalies"].size() == 1 ? "y" : "ies") << "\n";
  size_t shown = 0;
  for (const auto& a : j["anomalies"])
    if (shown++ < kShown)
      std::cout << "  " << pad(a["name"].get<std::string>(), 16) << pad(a["anomaly"].get<std::string>(), 24)
                << a["key"].get<std::string>() << " (" << fig(a["value"]) << ")\n";
  if (shown > kShown) std::cout << "  ... " << shown - kShown << " more (--json lists every one)\n";
}

// Written under a temporary name beside FILE and renamed: never a half-written page.
void write_html(const std::string& path, const std::string& page, bool force) {
  if (is_remote_path(path)) throw UsageError(Where(path), "--html writes a local file");
  if (path_exists(path) && !force) throw UsageError(Where(path), "exists (--force replaces it)");
  std::string tmp = path + ".dcpctl-tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << page;
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      throw IoError(Where(tmp), "cannot write the page");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw IoError(Where(path), "cannot rename into place: " + ec.message());
  }
}

TrendOptions trend_options(const ReportCliOptions& o) {
  TrendOptions to;
  to.selection.prefix = o.select;
  to.selection.include = o.include;
  to.selection.include.insert(to.selection.include.end(), o.filters.begin(), o.filters.end());
  to.selection.exclude = o.exclude;
  to.map = o.map;
  to.map_config = o.config;
  to.threads = o.threads ? o.threads : 1;
  if (!o.max_memory.empty()) to.max_memory = parse_size(o.max_memory, "--max-memory");
  to.steps_per_pass = o.steps_per_pass;
  if (o.steps_per_pass == 1 || o.steps_per_pass == 2)
    throw UsageError(Where(), "--steps-per-pass must be 3 or more (two steps overlap the pass before)");
  return to;
}

}  // namespace

int run_report(const ReportCliOptions& o) {
  if (o.depth < 0) throw UsageError(Where(), "--depth must be 0 or more");
  if (!o.config.empty() && o.map.empty())
    throw UsageError(Where(o.config), "--config gives a key map's parameters; it needs --map");
  TrendReportOptions ro;
  ro.depth = o.depth;
  ro.top = o.top;
  ro.tensors = o.json;
  ro.update_ratio = o.update_ratio;
  ro.norm_growth = o.norm_growth;
  for (const auto& c : o.fail_on) parse_fail_on(c, ro.gates);
  if (!o.html.empty() && !o.force && path_exists(o.html))
    throw UsageError(Where(o.html), "exists (--force replaces it)");
  std::vector<TrendStep> steps = steps_of(o, ro);
  TrendOptions to = trend_options(o);
  const bool show = !o.quiet && stderr_is_tty();
  to.progress = [show](size_t pass, size_t passes, uint64_t done, uint64_t total) {
    if (show)
      std::fprintf(stderr, "\rpass %zu/%zu: %s / %s   ", pass + 1, passes, human_bytes(done).c_str(),
                   human_bytes(total).c_str());
  };
  RunTrend r = compute_trend(steps, to);
  if (show) std::fprintf(stderr, "\n");
  json j = trend_json(r, ro);
  if (!o.html.empty()) write_html(o.html, trend_html(j), o.force);
  if (o.json) {
    add_s3_transfer(j);
    std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else if (!o.quiet)
    print_text(j);
  size_t shown = 0;
  for (const auto& f : j["gates"]["failures"])
    if (shown++ < kShown)
      std::cerr << "dcpctl: report gate " << f["condition"].get<std::string>() << ": " << f["key"].get<std::string>()
                << " at step " << f["name"].get<std::string>() << " (" << fig(f["value"]) << ")\n";
  if (shown > kShown) std::cerr << "dcpctl: ... " << shown - kShown << " more gate failures (--json lists every one)\n";
  return j["gates"]["ok"].get<bool>() ? 0 : static_cast<int>(ExitCode::invalid);
}

void setup_report(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<ReportCliOptions>();
  auto* sub = parent.add_subcommand(
      "report", "Per-step norms, update ratios, NaNs and Adam's state of a run's checkpoints; --fail-on gates");
  sub->add_option("run", o->inputs, "A run folder (as ls lists it), or two or more checkpoints in step order")
      ->required()
      ->type_name("RUN|CKPT...");
  sub->add_flag("--json", o->json, "Print the report as JSON (schema_version 1) on stdout");
  sub->add_option("--html", o->html, "Write the report as one self-contained HTML page (no script, no network)")
      ->type_name("FILE");
  sub->add_flag("--force", o->force, "Replace the --html file when it exists");
  sub->add_option("--depth", o->depth, "Group by the first N components of the key (default: by layer number)")
      ->type_name("N");
  sub->add_option("--filter", o->filters, "Only keys matching this shell glob (fnmatch, case-sensitive; repeatable)")
      ->type_name("GLOB");
  sub->add_option("--select", o->select, "Keep one subtree and strip its prefix (e.g. app.model)")->type_name("PREFIX");
  add_map_options(sub, o->map, o->config);
  sub->add_option("--include", o->include, "Keep only keys matching this shell glob (repeatable)")->type_name("GLOB");
  sub->add_option("--exclude", o->exclude, "Drop keys matching this shell glob (repeatable)")->type_name("GLOB");
  sub->add_option("--fail-on", o->fail_on,
                  "Exit 3 naming the tensor and step: nan (a NaN or Inf), update-ratio>X, norm-growth>Y (repeatable)")
      ->type_name("COND");
  sub->add_option("--update-ratio", o->update_ratio, "An update ratio above this is an anomaly")
      ->capture_default_str()
      ->type_name("X");
  sub->add_option("--norm-growth", o->norm_growth, "A norm growth between steps above this is an anomaly")
      ->capture_default_str()
      ->type_name("Y");
  sub->add_option("--top", o->top, "Top movers listed")->capture_default_str()->type_name("N");
  sub->add_option("--steps-per-pass", o->steps_per_pass, "Steps read in lockstep (default: what --max-memory holds)")
      ->type_name("N");
  sub->add_option("--threads", o->threads, "Parallel readers")->capture_default_str()->type_name("N");
  sub->add_option("--max-memory", o->max_memory, "Cap on buffer memory (default 1GiB)")->type_name("SIZE");
  sub->add_flag("-q,--quiet", o->quiet, "No table and no progress; only the exit code and gate failures on stderr");
  sub->footer(
      "Exit codes: 0 ok, 1 failure, 2 usage error, 3 checkpoint invalid or incomplete, or a --fail-on gate "
      "failed, 4 I/O error, 5 unsupported.");
  sub->callback([&run, o] { run = [o] { return run_report(*o); }; });
}

}  // namespace dcpctl::cli
