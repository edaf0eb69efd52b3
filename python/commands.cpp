#include "python/commands.h"

#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args/consolidate_args.h"
#include "args/diff_args.h"
#include "args/stats_args.h"
#include "compare/diff.h"
#include "compare/stats.h"
#include "meta/checkpoint.h"
#include "report/inspect.h"
#include "report/verify.h"
#include "util/error.h"
#include "util/size.h"
#include "write/execute.h"

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

// cmd/stats.cpp's run_stats() up to the document.
std::string stats(const StatsArgs& a, Progress& progress) {
  StatsOptions so = stats_options(a, Spelling::Python);
  auto in = open_input(a.checkpoint);
  so.progress = progress.callback();
  StatsResult r = compute_stats(*in, so);
  progress.rethrow();
  return dump(stats_json(*in, r, so));
}

// cmd/diff.cpp's run_diff() up to the document (its `same` is the verdict the exit code gives).
std::string diff(const DiffArgs& a, Progress& progress) {
  DiffOptions d = diff_options(a, Spelling::Python);
  d.progress = progress.callback();
  auto in_a = open_input(a.a);
  auto in_b = open_input(a.b);
  DiffResult r = diff_inputs(*in_a, *in_b, d);
  progress.rethrow();
  return dump(diff_json(*in_a, *in_b, r, d));
}

// A write command's summary as its --json prints it (a dry run's plan rendered as its text), and
// the notes the command line prints on stderr.
using Summary = std::pair<std::string, std::vector<std::string>>;

class Notes {
 public:
  std::function<void(const std::string&)> callback() {
    return [this](const std::string& s) {
      std::lock_guard lock(mu_);
      notes_.push_back(s);
    };
  }
  Summary summary(json& r) {
    std::ostringstream os;
    dump_summary(r, os);
    return {os.str(), std::move(notes_)};
  }

 private:
  std::mutex mu_;
  std::vector<std::string> notes_;
};

// A write command's run up to its summary, in one process: `o` (the command's options) given the
// progress and the notes, the checkpoint opened, `write(ck, o)` the library's command.
template <class Options, class Write>
Summary run_write(Options o, const std::string& checkpoint, Progress& progress, Write write) {
  Notes notes;
  o.progress = progress.callback();
  o.note = notes.callback();
  Checkpoint ck = open_checkpoint(checkpoint);
  json r = write(ck, o);
  progress.rethrow();
  return notes.summary(r);
}

// cmd/reshard.cpp's run_reshard() up to the summary.
Summary reshard(const ReshardArgs& a, Progress& progress) {
  return run_write(reshard_options(a, Spelling::Python), a.checkpoint, progress,
                   [](const Checkpoint& ck, const ReshardOptions& o) { return dcpctl::reshard(ck, o); });
}

// cmd/consolidate.cpp's run_consolidate() up to the summary (--format megatron: the reshard that
// writes it, as there).
Summary consolidate(const ConsolidateArgs& a, Progress& progress) {
  if (megatron_output(a)) return reshard(megatron_reshard_args(a, Spelling::Python), progress);
  return run_write(consolidate_options(a, Spelling::Python), a.checkpoint, progress,
                   [](const Checkpoint& ck, const ConsolidateOptions& o) { return dcpctl::consolidate(ck, o); });
}

// A class `name` of the args struct Args, a read-write attribute per option (Args::fields) and
// for the command's arguments.
template <class Args>
nb::class_<Args> bind_args(nb::module_& m, const char* name) {
  nb::class_<Args> c(m, name);
  c.def(nb::init<>());
  Args::fields([&c](const char* field, auto member) { c.def_rw(field, member); });
  return c;
}

// Runs `command(args, progress)` with the GIL released.
template <class Args, class R>
auto with_progress(R (*command)(const Args&, Progress&)) {
  return [command](const Args& a, nb::object progress) {
    Progress p(std::move(progress));
    nb::gil_scoped_release released;
    return command(a, p);
  };
}

}  // namespace

void bind_commands(nb::module_& m) {
  using nb::arg;
  const auto released = nb::call_guard<nb::gil_scoped_release>();
  m.def("_inspect", &inspect, arg("path"), arg("filters"), arg("chunks"), released);
  m.def("_verify", &verify, arg("path"), arg("deep"), arg("checksum"), arg("threads"), arg("max_memory"), arg("io"),
        arg("require_mtp"), released);
  bind_args<StatsArgs>(m, "_StatsArgs").def_rw("checkpoint", &StatsArgs::checkpoint);
  bind_args<DiffArgs>(m, "_DiffArgs").def_rw("a", &DiffArgs::a).def_rw("b", &DiffArgs::b);
  bind_args<ConsolidateArgs>(m, "_ConsolidateArgs")
      .def_rw("checkpoint", &ConsolidateArgs::checkpoint)
      .def_rw("output", &ConsolidateArgs::output);
  bind_args<ReshardArgs>(m, "_ReshardArgs")
      .def_rw("checkpoint", &ReshardArgs::checkpoint)
      .def_rw("output", &ReshardArgs::output)
      .def_rw("is_cast", &ReshardArgs::is_cast);
  m.def("_stats", with_progress(&stats), arg("args"), arg("progress").none());
  m.def("_diff", with_progress(&diff), arg("args"), arg("progress").none());
  m.def("_consolidate", with_progress(&consolidate), arg("args"), arg("progress").none());
  m.def("_reshard", with_progress(&reshard), arg("args"), arg("progress").none());
  m.def("_set_format_option", [](ConsolidateArgs& a, const std::string& name, const std::string& value) {
    return set_format_option(a, name, value, Spelling::Python);
  });
  m.def("_parse_size", [](const std::string& text, const std::string& what) { return parse_size(text, what); });
}

}  // namespace dcpctl::py
