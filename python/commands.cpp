#include "python/commands.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <nlohmann/json.hpp>

#include "compare/stats.h"
#include "meta/checkpoint.h"
#include "report/inspect.h"
#include "report/verify.h"
#include "util/error.h"
#include "util/size.h"

namespace nb = nanobind;
using nlohmann::json;

namespace dcpctl::py {

namespace {

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// cmd/inspect.cpp's inspect() without the rendering (and without --value: Checkpoint.value()).
std::string inspect(const std::string& path, const std::vector<std::string>& filters, bool chunks) {
  Checkpoint ck = open_checkpoint(path);
  InspectOptions io;
  io.filters = filters;
  io.chunks = chunks;
  json r = inspect_report(ck, io);
  if (!filters.empty() && r["items"].empty()) throw UsageError(Where(path), "no key matches the --filter glob(s)");
  return dump(r);
}

// cmd/verify.cpp's run_verify() up to the report (--expect-assets and --write-manifest are not here).
std::string verify(const std::string& path, bool deep, bool checksum, unsigned threads, const std::string& max_memory,
                   const std::string& io, bool require_mtp) {
  VerifyOptions vo;
  vo.deep = deep;
  vo.checksum = checksum;
  vo.threads = threads;
  if (io != "auto" && io != "direct" && io != "buffered")
    throw UsageError(Where(), "io: '" + io + "' is none of auto, direct, buffered");
  vo.io = io == "buffered" ? VerifyOptions::Io::Buffered : VerifyOptions::Io::Direct;
  if (!max_memory.empty()) vo.max_memory = parse_size(max_memory, "max_memory");
  vo.hf.require_mtp = require_mtp;
  return dump(verify_checkpoint(path, vo));
}

struct StatsArgs {
  std::string select, max_memory;
  std::vector<std::string> filters, include, exclude;
  int depth = 0;
  bool check_finite = false, check_zero = false;
  unsigned threads = 4;
};

// cmd/stats.cpp's run_stats() up to the document (no --map here yet).
std::string stats(const std::string& path, const StatsArgs& a) {
  if (a.depth < 0) throw UsageError(Where(), "depth must be 0 or more");
  auto in = open_input(path);
  StatsOptions so;
  so.selection.prefix = a.select;
  so.selection.include = a.include;
  so.selection.include.insert(so.selection.include.end(), a.filters.begin(), a.filters.end());
  so.selection.exclude = a.exclude;
  so.threads = a.threads ? a.threads : 1;
  if (!a.max_memory.empty()) so.max_memory = parse_size(a.max_memory, "max_memory");
  so.depth = a.depth;
  so.check_finite = a.check_finite;
  so.check_zero = a.check_zero;
  StatsResult r = compute_stats(*in, so);
  return dump(stats_json(*in, r, so));
}

}  // namespace

void bind_commands(nb::module_& m) {
  using nb::arg;
  const auto released = nb::call_guard<nb::gil_scoped_release>();
  m.def("_inspect", &inspect, arg("path"), arg("filters"), arg("chunks"), released);
  m.def("_verify", &verify, arg("path"), arg("deep"), arg("checksum"), arg("threads"), arg("max_memory"), arg("io"),
        arg("require_mtp"), released);
  m.def(
      "_stats",
      [](const std::string& path, const std::string& select, const std::vector<std::string>& filters,
         const std::vector<std::string>& include, const std::vector<std::string>& exclude, int depth, bool check_finite,
         bool check_zero, unsigned threads, const std::string& max_memory) {
        StatsArgs a{select, max_memory, filters, include, exclude, depth, check_finite, check_zero, threads};
        return stats(path, a);
      },
      arg("path"), arg("select"), arg("filters"), arg("include"), arg("exclude"), arg("depth"), arg("check_finite"),
      arg("check_zero"), arg("threads"), arg("max_memory"), released);
  m.def("_parse_size", [](const std::string& text, const std::string& what) { return parse_size(text, what); });
}

}  // namespace dcpctl::py
