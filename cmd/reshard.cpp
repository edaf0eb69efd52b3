// dcpctl reshard / dcpctl cast: write a new DCP checkpoint for another world size or dtype.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "args/reshard_args.h"
#include "cmd/distributed.h"
#include "cmd/format.h"
#include "cmd/progress.h"
#include "cmd/subcommands.h"
#include "cmd/write_options.h"
#include "meta/checkpoint.h"
#include "plan/format.h"
#include "util/error.h"
#include "util/numeric.h"
#include "util/size.h"
#include "write/execute.h"
#include "write/output.h"
#include "write/reshard.h"

namespace dcpctl::cli {

using nlohmann::json;

// The command's options (args/reshard_args.h) and what the command line adds.
struct ReshardCliOptions : ReshardArgs, WriteCliFlags {};

int run_reshard(const ReshardCliOptions& o) {
  install_cleanup_handlers();
  ReshardOptions ro = reshard_options(o, Spelling::Cli);
  ProgressLine progress(wants_progress(o, o));
  attach_cli(o, o, ro, progress);
  std::unique_ptr<Group> group = join_group(o.dist);
  ro.group = group.get();
  Checkpoint ck = open_checkpoint(o.checkpoint);
  json r = reshard(ck, ro);
  progress.finish();
  if (group && group->rank() != 0) return 0;  // rank 0 reports for the job
  if (o.json) {
    add_s3_transfer(r);
    dump_summary(r, std::cout);
    return 0;
  }
  if (o.dry_run) {
    std::cout << "Plan (nothing written): " << r["tensors"].get<uint64_t>() << " tensors ("
              << human_bytes(r["tensor_bytes"].get<uint64_t>()) << ") over " << r["world_size"].get<int>() << " ranks, "
              << r["non_tensor_items"].get<uint64_t>() << " non-tensor items\n";
    for (const auto& rk : r["ranks"])
      std::cout << "  rank " << rk["rank"].get<int>() << "  " << rk["file"].get<std::string>() << "  "
                << rk["chunks"].get<uint64_t>() << " chunks, " << human_bytes(rk["tensor_bytes"].get<uint64_t>())
                << "\n";
    print_cast_summary(r, std::cout);
    return 0;
  }
  if (!o.quiet) {
    char rate[64];
    std::snprintf(rate, sizeof rate, " in %.2f s (%.2f GB/s)", r["seconds"].get<double>(), r["gb_per_s"].get<double>());
    std::cerr << "wrote " << r["tensors"].get<uint64_t>() << " tensors ("
              << human_bytes(r["tensor_bytes"].get<uint64_t>()) << ") over " << r["world_size"].get<int>()
              << " ranks to " << o.output << rate;
    if (!r["cast"]["dtype"].is_null())
      std::cerr << "; cast " << r["cast"]["tensors"].get<uint64_t>() << " floating tensors to "
                << r["cast"]["dtype"].get<std::string>();
    std::cerr << "\n";
    print_cast_summary(r, std::cerr);
    print_map_summary(r);
  }
  return 0;
}

int run_megatron_output(const ReshardArgs& r, const WriteCliFlags& f) {
  ReshardCliOptions o;
  static_cast<ReshardArgs&>(o) = r;
  static_cast<WriteCliFlags&>(o) = f;
  return run_reshard(o);
}

static void common_options(CLI::App* sub, const std::shared_ptr<ReshardCliOptions>& o) {
  sub->add_option("checkpoint", o->checkpoint, "Checkpoint directory (holds .metadata)")->required()->type_name("DIR");
  sub->add_option("-o,--output", o->output, "Output checkpoint directory (must not exist unless --force)")
      ->required()
      ->type_name("DIR");
  sub->add_option("--include", o->include, "Keep only keys matching this shell glob (repeatable)")->type_name("GLOB");
  sub->add_option("--exclude", o->exclude,
                  "Drop keys matching this shell glob (repeatable); with --map, how a model weight no rule covers is "
                  "left out on purpose (listed in the summary)")
      ->type_name("GLOB");
  sub->add_option("--select", o->select, "Keep one subtree and strip its prefix (e.g. app.model)")->type_name("PREFIX");
  sub->add_option("--threads", o->threads, "Parallel writers (one per target rank at a time)")
      ->capture_default_str()
      ->type_name("N");
  sub->add_option("--max-memory", o->max_memory,
                  "Cap on buffer memory (default: the largest chunk's need, at least 1GiB)")
      ->type_name("SIZE");
  add_precision_options(sub, *o);
  add_quantize_options(sub, *o);
  add_io_option(sub, *o);
  add_map_options(sub, o->map, o->config);
  sub->add_option("--format", o->format,
                  "dcp: a DCP checkpoint; megatron: one megatron-core's dist_checkpointing.load reads (torch_dist: "
                  "metadata.json, the common state, the layers' extra states; one rank file unless -w)")
      ->check(CLI::IsMember({"dcp", "megatron"}))
      ->capture_default_str()
      ->type_name("FORMAT");
  sub->add_option("--iteration", o->iteration,
                  "--format megatron: write Megatron-LM's iter_NNNNNNN/ and latest_checkpointed_iteration.txt")
      ->check(CLI::Range(int64_t{0}, int64_t{9999999}))
      ->type_name("N");
  add_megatron_target_options(sub, *o);
  sub->add_flag("-f,--force", o->force, "Replace an existing output directory");
  sub->add_flag("--resume", o->resume,
                "Finish a stopped run (killed, failed, full disk) of several rank files, keeping those it finished "
                "that are intact (rank 0's is written again); refused if anything that changes the output changed");
  sub->add_flag("-n,--dry-run", o->dry_run, "Print the plan per target rank and write nothing");
  sub->add_flag("-q,--quiet", o->quiet, "No summary on stderr");
  sub->add_flag("--json", o->json, "Print a JSON summary on stdout");
  add_dist_options(sub, o->dist, false);
}

void setup_reshard(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<ReshardCliOptions>();
  auto* sub = parent.add_subcommand("reshard",
                                    "Write a new DCP checkpoint sharded for another world size (FSDP2 dim-0 layout)");
  common_options(sub, o);
  sub->add_option("-w,--world-size", o->world_size, "Target number of ranks")->type_name("N");
  sub->add_option("--layout", o->layout, "fsdp: dim-0 shards over --world-size ranks; keep: the source's chunks")
      ->check(CLI::IsMember({"fsdp", "keep"}))
      ->capture_default_str()
      ->type_name("LAYOUT");
  sub->add_option("--dtype", o->dtype, "Also cast floating tensors (fp32, fp16, bf16, fp64, fp8_e4m3, fp8_e5m2)")
      ->type_name("DTYPE");
  sub->callback([&run, o] { run = [o] { return run_reshard(*o); }; });
}

void setup_cast(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<ReshardCliOptions>();
  o->is_cast = true;
  auto* sub =
      parent.add_subcommand("cast", "Write a copy of a DCP checkpoint with floating tensors cast to another dtype");
  common_options(sub, o);
  sub->add_option("--dtype", o->dtype,
                  "Target dtype: fp32, fp16, bf16, fp64, fp8_e4m3 or fp8_e5m2 (round to nearest even)")
      ->required()
      ->type_name("DTYPE");
  sub->callback([&run, o] { run = [o] { return run_reshard(*o); }; });
}

}  // namespace dcpctl::cli
