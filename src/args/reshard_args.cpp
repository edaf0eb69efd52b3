#include "args/reshard_args.h"

#include "plan/format.h"

namespace dcpctl {

namespace {

// What the command line's parser checks (CLI11's IsMember and Range), for a front end without it.
void check_words(const ReshardArgs& a, Spelling s) {
  if (a.layout != "fsdp" && a.layout != "keep")
    throw usage_error(s, Where(), "--layout " + a.layout + ": expected fsdp or keep");
  if (a.format != "dcp" && a.format != "megatron")
    throw usage_error(s, Where(), "--format " + a.format + ": expected dcp or megatron");
  if (a.iteration > 9999999) throw usage_error(s, Where(), "--iteration must be between 0 and 9999999");
}

}  // namespace

ReshardOptions reshard_options(const ReshardArgs& a, Spelling s) {
  check_words(a, s);
  ReshardOptions ro;
  to_write_options(a, ro, s);
  ro.layout = a.is_cast || a.layout == "keep" ? Layout::Keep : Layout::Fsdp;
  ro.world_size = a.world_size;
  check_megatron_target_options(a, a.format == "megatron", s);
  if (a.format == "megatron") {
    ro.format = &formats::megatron;
    // torch_dist loads into any parallelism: one rank file unless -w says otherwise.
    if (ro.layout == Layout::Fsdp && ro.world_size < 1) ro.world_size = 1;
    if (a.iteration >= 0) ro.iteration = a.iteration;
  } else if (a.iteration >= 0) {
    throw usage_error(s, Where(),
                      "--iteration names Megatron-LM's iter_NNNNNNN/ folder: it goes with --format megatron");
  }
  if (ro.layout == Layout::Fsdp && ro.world_size < 1)
    throw usage_error(s, Where(), "--world-size is required (or --layout keep)");
  if (ro.layout == Layout::Keep && ro.world_size > 0)
    throw usage_error(s, Where(), "--world-size and --layout keep exclude each other");
  if (a.dtype.empty() && a.is_cast) throw usage_error(s, Where(), "cast needs --dtype");
  return ro;
}

}  // namespace dcpctl
