// dcpctl bench staging: how fast this machine stages checkpoint data from the GPU into host
// memory (the step of dcp.async_save that stalls training) and writes it out. `bench` groups the
// measurements so that later benches can join it.
#include <iostream>

#include "bench/report.h"
#include "bench/sizes.h"
#include "bench/staging.h"
#include "build_info.h"
#include "cmd/format.h"
#include "cmd/subcommands.h"
#include "util/error.h"

namespace dcpctl::cli {

struct BenchStagingCliOptions {
  std::vector<std::string> sizes;
  std::vector<std::string> modes;
  unsigned iters = 10;
  unsigned warmup = 2;
  unsigned streams = 1;
  std::string chunk;
  std::string checkpoint;
  int rank = 0;
  std::string write_to;
  bool fsync = false;
  bool host_only = false;
  bool json = false;
  int device = 0;
  const CLI::Option* rank_option = nullptr;
};

int run_bench_staging(const BenchStagingCliOptions& o) {
  bench::StagingOptions so;
  so.sizes = bench::parse_size_list(o.sizes, "--sizes");
  if (so.sizes.empty() && o.checkpoint.empty()) so.sizes = bench::kDefaultStagingSizes;
  if (!o.modes.empty() && so.sizes.empty())
    throw UsageError(Where(), "--modes applies to the --sizes sweep; with --from-checkpoint, give --sizes too");
  if (o.rank_option && o.rank_option->count() && o.checkpoint.empty())
    throw UsageError(Where(), "--rank needs --from-checkpoint CKPT");
  so.modes = o.modes;
  so.iters = o.iters;
  so.warmup = o.warmup;
  so.streams = o.streams;
  so.chunk = o.chunk.empty() ? 0 : bench::parse_buffer_size(o.chunk, "--chunk");
  so.checkpoint = o.checkpoint;
  so.rank = o.rank;
  so.write_to = o.write_to;
  so.fsync = o.fsync;
  so.host_only = o.host_only;
  so.device = o.device;
  if (stderr_is_tty()) so.progress = [](const std::string& line) { std::cerr << line << "\n"; };

  const bench::StagingReport r = bench::run_staging(so);
  if (o.json) {
    nlohmann::json j = bench::staging_json(r);
    j["dcpctl_version"] = DCPCTL_VERSION;
    cli::add_s3_transfer(j);
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << bench::staging_table(r);
  }
  std::cout.flush();
  if (!std::cout) throw IoError(Where("<stdout>"), "write failed");
  if (size_t n = r.count("failed")) {
    std::cerr << "dcpctl: error: " << n << " measurement" << (n == 1 ? "" : "s")
              << " did not copy the right bytes (see the CHECK column or \"verified\")\n";
    return static_cast<int>(ExitCode::failure);
  }
  if (r.count("ok") == 0) {
    std::cerr << "dcpctl: error: nothing was measured: every measurement was skipped (see the reasons)\n";
    return static_cast<int>(ExitCode::unsupported);
  }
  return 0;
}

namespace {

void setup_staging(CLI::App& bench, RunFn& run) {
  auto o = std::make_shared<BenchStagingCliOptions>();
  auto* sub = bench.add_subcommand("staging",
                                   "Time GPU -> host staging as dcp.async_save does it: pinned, registered, pageable "
                                   "or cold buffers, a size sweep, a "
                                   "checkpoint's own tensors, and writing the staged bytes out");
  sub->footer(
      "Copies into page-locked memory wait behind a gate until all are queued and are timed with CUDA events; the "
      "others "
      "are timed with the host clock. Every measurement checks the copied bytes. Without a usable GPU it exits 5 "
      "unless "
      "--host-only is given; exit 1 means some copy delivered wrong bytes.");
  sub->add_option("--sizes", o->sizes,
                  "Buffer sizes to sweep, comma-separated: 4MiB, 1GiB (binary), 5GB (decimal) or bytes "
                  "(default 4MiB,64MiB,256MiB,1GiB; none with --from-checkpoint)")
      ->delimiter(',')
      ->type_name("SIZE");
  sub->add_option("--iters", o->iters, "Timed iterations per measurement (median, min and max are reported)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000000u))
      ->type_name("N");
  sub->add_option("--warmup", o->warmup, "Untimed iterations before the timed ones")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1000000u))
      ->type_name("N");
  sub->add_option("--modes", o->modes, "Destinations to measure, comma-separated (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(bench::kStagingModes))
      ->type_name("MODE");
  sub->add_option("--streams", o->streams, "CUDA streams to spread the copies over (--host-only: copy threads)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u))
      ->type_name("N");
  sub->add_option("--chunk", o->chunk,
                  "Split each copy into pieces of this size (default: whole, or one piece per stream)")
      ->type_name("SIZE");
  sub->add_option("--from-checkpoint", o->checkpoint,
                  "Also copy the tensor chunks one rank of this checkpoint wrote, one copy each, next to one flat copy")
      ->type_name("DIR");
  o->rank_option = sub->add_option("--rank", o->rank, "Rank whose tensors --from-checkpoint copies")
                       ->capture_default_str()
                       ->check(CLI::Range(0, 100000000))
                       ->type_name("INT");
  sub->add_option("--write-to", o->write_to,
                  "Also time writing the staged bytes to a scratch copy in this directory (removed after)")
      ->type_name("DIR");
  sub->add_flag("--fsync", o->fsync, "With --write-to, also time writes made durable with fsync()");
  sub->add_flag("--host-only", o->host_only,
                "Measure only the host side (memcpy into pinned or pageable memory, --write-to); runs without a GPU");
  sub->add_flag("--json", o->json, "Print the results as JSON (schema_version 1) on stdout");
  sub->add_option("--device", o->device, "CUDA device index")
      ->capture_default_str()
      ->check(CLI::Range(0, 1023))
      ->type_name("INT");
  sub->callback([&run, o] { run = [o] { return run_bench_staging(*o); }; });
}

}  // namespace

void setup_bench(CLI::App& parent, RunFn& run) {
  auto* sub = parent.add_subcommand("bench", "Measure how fast this machine moves checkpoint data");
  sub->require_subcommand(1);
  setup_staging(*sub, run);
}

}  // namespace dcpctl::cli
