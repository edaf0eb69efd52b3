// dcpctl stats: per-tensor statistics (min, max, mean, std, abs max, L2 norm, NaN/Inf/zero
// counts) of any checkpoint, streamed in bounded memory; --check-finite / --check-zero gates.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "args/stats_args.h"
#include "cmd/format.h"
#include "cmd/progress.h"
#include "cmd/subcommands.h"
#include "cmd/write_options.h"
#include "util/error.h"

namespace dcpctl::cli {

using nlohmann::json;

// The command's options (args/stats_args.h) and what the command line prints.
struct StatsCliOptions : StatsArgs {
  bool json = false, quiet = false;
};

namespace {

std::string num(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_unsigned() || v.is_number_integer()) return std::to_string(v.get<int64_t>());
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v.get<double>());
  return b;
}

void print_table(const json& rows, const char* key_field, bool with_type) {
  size_t kw = 3, dw = 5;
  for (const auto& r : rows) {
    kw = std::max(kw, r[key_field].get<std::string>().size());
    if (with_type) dw = std::max(dw, r["dtype"].get<std::string>().size() + 1);
  }
  kw = std::min<size_t>(kw, 60);
  std::cout << pad(std::string(key_field) == "prefix" ? "GROUP" : "KEY", kw + 1);
  if (with_type)
    std::cout << pad("DTYPE", dw + 1) << pad("SHAPE", 14);
  else
    std::cout << pad("TENSORS", 8);
  for (const char* h : {"NUMEL", "MIN", "MAX", "MEAN", "STD", "ABSMAX", "L2"}) std::cout << pad(h, 13);
  std::cout << "NAN INF ZEROS\n";
  for (const auto& r : rows) {
    std::cout << pad(r[key_field].get<std::string>(), kw + 1);
    if (with_type) {
      // complex: the values summarised are view_as_real's, shape [..., 2]
      bool cx = r.contains("view_as_real");
      std::cout << pad(r["dtype"].get<std::string>() + (cx ? "*" : ""), dw + 1)
                << pad(dims_str(r[cx ? "view_as_real" : "shape"].get<std::vector<int64_t>>()), 14);
    } else
      std::cout << pad(std::to_string(r["tensors"].get<uint64_t>()), 8);
    for (const char* f : {"numel", "min", "max", "mean", "std", "abs_max", "l2_norm"}) std::cout << pad(num(r[f]), 13);
    std::cout << r["nan"].get<uint64_t>() << " " << r["pos_inf"].get<uint64_t>() + r["neg_inf"].get<uint64_t>() << " "
              << r["zeros"].get<uint64_t>() << "\n";
  }
}

}  // namespace

int run_stats(const StatsCliOptions& o) {
  StatsOptions so = stats_options(o, Spelling::Cli);
  auto in = open_input(o.checkpoint);
  ProgressLine progress(!o.quiet && !o.json && stderr_is_tty());
  so.progress = [&progress](uint64_t d, uint64_t t) { progress.update(d, t); };
  StatsResult r = compute_stats(*in, so);
  progress.finish();
  json j = stats_json(*in, r, so);
  if (o.json) {
    add_s3_transfer(j);
    std::cout << j.dump(2) << "\n";
  } else if (!o.quiet) {
    if (o.depth > 0)
      print_table(j["groups"], "prefix", false);
    else
      print_table(j["tensors"], "key", true);
    if (o.depth == 0)
      for (const auto& t : j["tensors"])
        if (t.contains("view_as_real")) {
          std::cout << "* complex: statistics of torch.view_as_real (real and imaginary parts), shape [..., 2]\n";
          break;
        }
    for (const auto& s : j["skipped"])
      std::cout << "skipped " << s["key"].get<std::string>() << " (" << s["dtype"].get<std::string>()
                << "): " << s["reason"].get<std::string>() << "\n";
    std::cout << j["tensors"].size() << " tensors, " << human_bytes(r.bytes_read) << " read";
    if (r.values) std::cout << "; " << r.values << " non-tensor values not summarised";
    char t[32];
    std::snprintf(t, sizeof t, " in %.2f s", r.seconds);
    std::cout << t << "\n";
  }
  if (j["checks"].contains("finite"))
    for (const auto& f : j["checks"]["finite"]["failures"])
      std::cerr << "dcpctl: not finite: " << f["key"].get<std::string>() << ": " << f["nan"].get<uint64_t>() << " NaN, "
                << f["pos_inf"].get<uint64_t>() << " +Inf, " << f["neg_inf"].get<uint64_t>() << " -Inf; first at "
                << dims_str(f["first_index"].get<std::vector<int64_t>>()) << "\n";
  if (j["checks"].contains("zero"))
    for (const auto& f : j["checks"]["zero"]["failures"])
      std::cerr << "dcpctl: all zeros: " << f["key"].get<std::string>() << "\n";
  return r.finite_ok && r.zero_ok ? 0 : static_cast<int>(ExitCode::invalid);
}

void setup_stats(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<StatsCliOptions>();
  auto* sub = parent.add_subcommand(
      "stats", "Per-tensor min, max, mean, std, abs max, L2 norm and NaN/Inf/zero counts; --check-finite gate");
  sub->add_option("checkpoint", o->checkpoint,
                  "Input: a DCP directory (any layout), an HF safetensors directory, a .safetensors or a .pt/.bin file")
      ->required()
      ->type_name("PATH");
  sub->add_flag("--json", o->json, "Print the statistics as JSON (schema_version 1) on stdout");
  sub->add_option("--depth", o->depth,
                  "Group by the first N components of the key (e.g. 3: app.model.layers) and print the groups")
      ->type_name("N");
  sub->add_option("--filter", o->filter, "Only keys matching this shell glob (fnmatch, case-sensitive; repeatable)")
      ->type_name("GLOB");
  sub->add_option("--select", o->select, "Keep one subtree and strip its prefix (e.g. app.model)")->type_name("PREFIX");
  add_map_options(sub, o->map, o->config);
  sub->add_option("--include", o->include, "Keep only keys matching this shell glob (repeatable)")->type_name("GLOB");
  sub->add_option("--exclude", o->exclude, "Drop keys matching this shell glob (repeatable)")->type_name("GLOB");
  sub->add_flag(
      "--check-finite", o->check_finite,
      "Exit 3 when a floating or complex tensor holds a NaN or an Inf, naming each with its counts and first index");
  sub->add_flag("--check-zero", o->check_zero, "Exit 3 when a floating or complex tensor is all zeros, naming each");
  sub->add_option("--threads", o->threads, "Parallel readers")->capture_default_str()->type_name("N");
  sub->add_option("--max-memory", o->max_memory, "Cap on buffer memory (default 1GiB)")->type_name("SIZE");
  sub->add_flag("-q,--quiet", o->quiet, "No table and no progress; only the exit code and gate failures on stderr");
  sub->footer(
      "Exit codes: 0 ok, 1 failure, 2 usage error, 3 checkpoint invalid or incomplete, or a "
      "--check-finite/--check-zero gate failed, 4 I/O error, 5 unsupported.");
  sub->callback([&run, o] { run = [o] { return run_stats(*o); }; });
}

}  // namespace dcpctl::cli
