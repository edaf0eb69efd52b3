// dcpctl diff A B: are two checkpoints (any layouts, any sharding) the same model? Exit 0 same,
// 1 different, like diff(1)/cmp(1); 2-5 as everywhere else.
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <utility>

#include "args/diff_args.h"
#include "cmd/format.h"
#include "cmd/progress.h"
#include "cmd/subcommands.h"
#include "cmd/write_options.h"
#include "compare/stats.h"
#include "util/error.h"

namespace dcpctl::cli {

using nlohmann::json;

// The command's options (args/diff_args.h) and what the command line prints.
struct DiffCliOptions : DiffArgs {
  bool json = false, quiet = false, all = false;
};

namespace {

std::string g(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string side_text(const json& s) {
  if (s.is_null()) return "-";
  if (s.contains("value")) return s["value"].get<std::string>();
  return s["dtype"].get<std::string>() + " " + dims_str(s["shape"].get<std::vector<int64_t>>());
}

std::string detail(const json& k) {
  std::string st = k["status"].get<std::string>();
  if (st == "only_in_a") return side_text(k["a"]);
  if (st == "only_in_b") return side_text(k["b"]);
  if (k.contains("differing")) {
    if (k["differing"].get<uint64_t>() == 0) return side_text(k["a"]) + " vs " + side_text(k["b"]);
    std::string s = std::to_string(k["differing"].get<uint64_t>()) + " of " +
                    std::to_string(k["numel"].get<uint64_t>()) + " differ";
    auto f = [](const json& v) { return v.is_string() ? v.get<std::string>() : g(v.get<double>()); };
    if (k["nan_mismatch"].get<uint64_t>()) s += " (" + std::to_string(k["nan_mismatch"].get<uint64_t>()) + " NaN)";
    if (k["differing"].get<uint64_t>() > k["nan_mismatch"].get<uint64_t>()) {
      s += "; max abs " + f(k["max_abs_diff"]) + ", max rel " + f(k["max_rel_diff"]);
      if (!k["max_ulp_diff"].is_null()) s += ", " + std::to_string(k["max_ulp_diff"].get<uint64_t>()) + " ULP";
    }
    s += "; first at " + dims_str(k["first_index"].get<std::vector<int64_t>>());
    if (k.contains("codec")) s += "; beyond the " + k["codec"].get<std::string>() + " bound";
    if (k["a"]["dtype"] != k["b"]["dtype"]) s += "; " + side_text(k["a"]) + " vs " + side_text(k["b"]);
    return s;
  }
  std::string a = side_text(k["a"]), b = side_text(k["b"]);
  if (a.size() > 60) a = a.substr(0, 57) + "...";
  if (b.size() > 60) b = b.substr(0, 57) + "...";
  return a + " -> " + b;
}

// The keys compared within a codec's bound, by codec and what their scale is: "    NAME  N keys,
// M of T values inexact: RULE".
void print_codec_bounds(const json& keys) {
  struct Count {
    uint64_t keys = 0, inexact = 0, numel = 0;
  };
  std::map<std::pair<std::string, std::string>, Count> by;
  for (const auto& k : keys)
    if (k.contains("codec") && k["status"] == "identical") {
      Count& c = by[{k["codec"].get<std::string>(), k["bound_rule"].get<std::string>()}];
      ++c.keys;
      c.inexact += k["inexact"].get<uint64_t>();
      c.numel += k["numel"].get<uint64_t>();
    }
  for (const auto& [what, c] : by)
    std::cout << "    " << what.first << ": " << c.keys << (c.keys == 1 ? " key, " : " keys, ") << c.inexact << " of "
              << c.numel << " values inexact; " << what.second << "\n";
}

// The audit's counts (diff --map), as Megatron-Bridge prints its exports' audits.
void print_audit(const json& a, const json& keys) {
  const json& c = a["counts"];
  auto n = [&](const char* k) { return std::to_string(c[k].get<uint64_t>()); };
  std::cout << "audit (" << a["map"].get<std::string>() << ", " << a["direction"].get<std::string>() << "):\n"
            << "  keys mapped          " << n("mapped") << " source keys -> " << n("export_keys") << " export keys\n"
            << "  values bit-equal     " << n("bit_equal") << "\n"
            << "  within codec error   " << n("within_codec")
            << " (|x - dq| <= s * half_step(dq / s), s the element's scale)\n";
  print_codec_bounds(keys);
  std::cout << "  equal after cast     " << n("after_cast") << "\n"
            << "  tied to embedding    " << n("tied") << "\n"
            << "  dropped by the map   " << n("dropped") << "\n";
  for (const auto& d : a["dropped"])
    std::cout << "    " << d["key"].get<std::string>() << ": " << d["reason"].get<std::string>() << "\n";
  std::cout << "  named export-only    " << n("export_only") << "\n";
  for (const auto& d : a["export_only"])
    std::cout << "    " << d["key"].get<std::string>() << ": " << d["reason"].get<std::string>() << "\n";
  std::cout << "  left out, not model  " << n("left_out") << "\n"
            << "  excluded (--exclude) " << n("excluded") << "\n"
            << "  config checks        " << n("config_checks");
  if (!a["config"].is_null() && !a["config"]["checked"].empty()) {
    const char* sep = " (";
    for (const auto& k : a["config"]["checked"]) std::cout << sep << k.get<std::string>(), sep = ", ";
    std::cout << ")";
  }
  std::cout << "\n  unexplained          " << n("unexplained") << "\n";
  for (const auto& u : a["unexplained"])
    std::cout << "    " << u["key"].get<std::string>() << ": " << u["why"].get<std::string>() << "\n";
  std::cout << (a["clean"].get<bool>() ? "clean: every key of the export is accounted for\n"
                                       : "not clean: see the unexplained keys above\n");
}

}  // namespace

int run_diff(const DiffCliOptions& o) {
  DiffOptions d = diff_options(o, Spelling::Cli);
  d.stop_early = o.quiet;
  auto a = open_input(o.a);
  auto b = open_input(o.b);
  ProgressLine progress(!o.quiet && !o.json && stderr_is_tty());
  d.progress = [&progress](uint64_t done, uint64_t total) { progress.update(done, total); };
  DiffResult r = diff_inputs(*a, *b, d);
  progress.finish();
  int code = r.same ? 0 : 1;
  if (o.quiet) return code;
  json j = diff_json(*a, *b, r, d);
  if (o.json) {
    add_s3_transfer(j);
    std::cout << j.dump(2) << "\n";
    return code;
  }
  // The table: every differing key (--all: every key); under the audit, whose list names the keys
  // on one side only with the reason, those that were compared.
  auto listed = [&](const json& k) {
    if (o.all) return true;
    const std::string st = k["status"].get<std::string>();
    if (st == "identical" || st == "tied") return false;
    return !j.contains("audit") || (st != "only_in_a" && st != "only_in_b");
  };
  size_t kw = 3;
  for (const auto& k : j["keys"])
    if (listed(k)) kw = std::max(kw, k["key"].get<std::string>().size());
  kw = std::min<size_t>(kw, 60);
  bool header = false;
  for (const auto& k : j["keys"]) {
    if (!listed(k)) continue;
    if (!header) std::cout << pad("STATUS", 15) << pad("KEY", kw + 1) << "DETAIL\n";
    header = true;
    std::cout << pad(k["status"].get<std::string>(), 15) << pad(k["key"].get<std::string>(), kw + 1) << detail(k)
              << "\n";
  }
  if (j.contains("audit")) {
    print_audit(j["audit"], j["keys"]);
    return code;
  }
  const json& c = j["counts"];
  if (r.same) {
    std::cout << "same: " << c["identical"].get<uint64_t>() << " keys identical (" << o.a << " vs " << o.b << ")\n";
    size_t bounded = 0;
    for (const auto& k : j["keys"]) bounded += k.contains("codec") ? 1 : 0;
    size_t gguf = 0;
    for (const auto& k : j["keys"]) gguf += k.value("bound", "") == "gguf" ? 1 : 0;
    if (gguf) {
      std::cout << "  each GGUF tensor within its type's bound of the source's values (docs/gguf.md):\n";
      print_codec_bounds(j["keys"]);
    } else if (bounded) {
      std::cout << "  " << bounded << " of them quantized in " << o.b
                << ", within their codec's bound (|x - dq| <= s * half_step(dq / s), s the element's scale):\n";
      print_codec_bounds(j["keys"]);
    }
  } else {
    std::cout << "different:";
    const char* sep = " ";
    for (const char* s :
         {"only_in_a", "only_in_b", "kind_changed", "dtype_changed", "shape_changed", "values_changed", "identical"}) {
      std::string name = s;
      for (auto& ch : name)
        if (ch == '_') ch = ' ';
      std::cout << sep << c[s].get<uint64_t>() << " " << name;
      sep = ", ";
    }
    std::cout << "\n";
  }
  return code;
}

void setup_diff(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<DiffCliOptions>();
  auto* sub = parent.add_subcommand(
      "diff", "Compare two checkpoints key by key, any layouts and sharding; exit 0 same, 1 different");
  sub->add_option("a", o->a,
                  "First input: a DCP directory (any layout), an HF directory, a .safetensors or a .pt/.bin file")
      ->required()
      ->type_name("A");
  sub->add_option("b", o->b, "Second input (the reference of --rtol)")->required()->type_name("B");
  sub->add_option("--select", o->select,
                  "Compare one subtree of each side that has it, prefix stripped (e.g. app.model)")
      ->type_name("PREFIX");
  add_map_options(sub, o->map, o->config);
  sub->add_option("--assets", o->assets,
                  "One side a .gguf: the folder with its source's config.json (default: beside the source)")
      ->type_name("DIR");
  sub->add_option("--include", o->include, "Compare only keys matching this shell glob (repeatable)")
      ->type_name("GLOB");
  sub->add_option("--exclude", o->exclude,
                  "Leave out keys matching this shell glob (repeatable); with --map, how a model weight no rule covers "
                  "is left out on purpose")
      ->type_name("GLOB");
  sub->add_option("--atol", o->atol,
                  "Absolute tolerance: equal when |a - b| <= atol + rtol * |b| (torch.allclose; default exact)")
      ->check(CLI::NonNegativeNumber)
      ->type_name("X");
  sub->add_option("--rtol", o->rtol, "Relative tolerance (see --atol; the one not given is 0)")
      ->check(CLI::NonNegativeNumber)
      ->type_name("X");
  sub->add_flag("--equal-nan", o->equal_nan, "Count NaN equal to NaN");
  sub->add_flag("--ignore-dtype", o->ignore_dtype, "Compare tensors of different dtypes by value in float64");
  sub->add_flag("--all", o->all, "List identical keys too");
  sub->add_flag("--json", o->json, "Print every key as JSON (schema_version 1) on stdout");
  sub->add_option("--threads", o->threads, "Parallel readers")->capture_default_str()->type_name("N");
  sub->add_option("--max-memory", o->max_memory, "Cap on buffer memory (default 1GiB)")->type_name("SIZE");
  sub->add_flag("-q,--quiet", o->quiet,
                "Print nothing and stop at the first difference; only the exit code (0 same, 1 different)");
  sub->footer(
      "Exit codes: 0 same, 1 different, 2 usage error, 3 checkpoint invalid or incomplete, 4 I/O error, 5 "
      "unsupported.");
  sub->callback([&run, o] { run = [o] { return run_diff(*o); }; });
}

}  // namespace dcpctl::cli
