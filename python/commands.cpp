#include "python/commands.h"

#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "compare/diff.h"
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

// A Python progress callback (done, total), called from the library's worker threads: each call
// takes the GIL; the first exception it raises is kept, later calls are skipped, and rethrow()
// raises it once the command is over (the command itself is not interrupted).
class Progress {
 public:
  explicit Progress(nb::object fn) : fn_(std::move(fn)) {}
  ~Progress() {
    nb::gil_scoped_acquire gil;
    fn_.reset();
    error_.reset();
  }
  std::function<void(uint64_t, uint64_t)> callback() {
    if (fn_.is_none()) return {};
    return [this](uint64_t done, uint64_t total) {
      nb::gil_scoped_acquire gil;
      if (error_) return;
      try {
        fn_(done, total);
      } catch (nb::python_error& e) {
        error_ = std::make_unique<nb::python_error>(std::move(e));
      }
    };
  }
  void rethrow() {
    if (!error_) return;
    nb::gil_scoped_acquire gil;
    throw nb::python_error(std::move(*error_));
  }

 private:
  nb::object fn_;
  std::unique_ptr<nb::python_error> error_;
};

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
  Progress* progress = nullptr;
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
  so.progress = a.progress->callback();
  StatsResult r = compute_stats(*in, so);
  a.progress->rethrow();
  return dump(stats_json(*in, r, so));
}

struct DiffArgs {
  std::string select, max_memory, map, config, assets;
  std::vector<std::string> include, exclude;
  double atol = -1, rtol = -1;
  bool equal_nan = false, ignore_dtype = false;
  unsigned threads = 4;
  Progress* progress = nullptr;
};

// cmd/diff.cpp's run_diff() up to the document (its `same` is the verdict the exit code gives).
std::string diff(const std::string& path_a, const std::string& path_b, const DiffArgs& a) {
  DiffOptions d;
  d.selection.prefix = a.select;
  d.map = a.map;
  d.map_config = a.config;
  d.assets = a.assets;
  if (!a.config.empty() && a.map.empty())
    throw UsageError(Where(a.config), "--config gives a key map's parameters; it needs --map");
  d.selection.include = a.include;
  d.selection.exclude = a.exclude;
  if (a.atol >= 0) d.atol = a.atol;
  if (a.rtol >= 0) d.rtol = a.rtol;
  d.equal_nan = a.equal_nan;
  d.ignore_dtype = a.ignore_dtype;
  d.threads = a.threads ? a.threads : 1;
  if (!a.max_memory.empty()) d.max_memory = parse_size(a.max_memory, "max_memory");
  d.progress = a.progress->callback();
  auto in_a = open_input(path_a);
  auto in_b = open_input(path_b);
  DiffResult r = diff_inputs(*in_a, *in_b, d);
  a.progress->rethrow();
  return dump(diff_json(*in_a, *in_b, r, d));
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
         bool check_zero, unsigned threads, const std::string& max_memory, nb::object progress) {
        Progress p(std::move(progress));
        StatsArgs a{select, max_memory, &p, filters, include, exclude, depth, check_finite, check_zero, threads};
        nb::gil_scoped_release released;
        return stats(path, a);
      },
      arg("path"), arg("select"), arg("filters"), arg("include"), arg("exclude"), arg("depth"), arg("check_finite"),
      arg("check_zero"), arg("threads"), arg("max_memory"), arg("progress").none());
  nb::class_<DiffArgs>(m, "_DiffArgs")
      .def(nb::init<>())
      .def_rw("select", &DiffArgs::select)
      .def_rw("max_memory", &DiffArgs::max_memory)
      .def_rw("map", &DiffArgs::map)
      .def_rw("config", &DiffArgs::config)
      .def_rw("assets", &DiffArgs::assets)
      .def_rw("include", &DiffArgs::include)
      .def_rw("exclude", &DiffArgs::exclude)
      .def_rw("atol", &DiffArgs::atol)
      .def_rw("rtol", &DiffArgs::rtol)
      .def_rw("equal_nan", &DiffArgs::equal_nan)
      .def_rw("ignore_dtype", &DiffArgs::ignore_dtype)
      .def_rw("threads", &DiffArgs::threads);
  m.def(
      "_diff",
      [](const std::string& path_a, const std::string& path_b, DiffArgs a, nb::object progress) {
        Progress p(std::move(progress));
        a.progress = &p;
        nb::gil_scoped_release released;
        return diff(path_a, path_b, a);
      },
      arg("a"), arg("b"), arg("options"), arg("progress").none());
  m.def("_parse_size", [](const std::string& text, const std::string& what) { return parse_size(text, what); });
}

}  // namespace dcpctl::py
