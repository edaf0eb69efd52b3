// dcpctl consolidate's options, as the command line (cmd/consolidate.cpp) and Python
// (python/commands.cpp, dcpctl.consolidate) fill them, and the one place they become the library's
// ConsolidateOptions, or, for --format megatron (a DCP checkpoint megatron-core loads), the
// reshard's arguments.
#pragma once

#include <cstdint>
#include <string>

#include "args/reshard_args.h"
#include "plan/format.h"
#include "write/consolidate.h"

namespace dcpctl {

struct ConsolidateArgs : WriteArgs {
  std::string format, max_shard_size, assets;
  int64_t iteration = -1;  // --format megatron's; < 0: not given
  // The values of the formats' own options (plan/format.h FormatOption: a GGUF's --outtype), by
  // the command line's flag (set_format_option()).
  FormatOptionValues format_options;
  std::string lora = "keep", lora_name, lora_config, lora_alpha, lora_base, lora_layout;
  bool flat = false, keep_unsafe_values = false, no_lightning_meta = false, no_assets = false;
  bool parallel_write = false;  // under torchrun only: not one of Python's

  // Each option's name (Python's spelling, args/spelling.h) and field: the write options, then
  // consolidate's own (the formats' own options by set_format_option()).
  template <class V>
  static void fields(V&& v) {
    WriteArgs::fields(v);
    v("format", &ConsolidateArgs::format);
    v("max_shard_size", &ConsolidateArgs::max_shard_size);
    v("assets", &ConsolidateArgs::assets);
    v("iteration", &ConsolidateArgs::iteration);
    v("lora", &ConsolidateArgs::lora);
    v("lora_name", &ConsolidateArgs::lora_name);
    v("lora_config", &ConsolidateArgs::lora_config);
    v("lora_alpha", &ConsolidateArgs::lora_alpha);
    v("lora_base", &ConsolidateArgs::lora_base);
    v("lora_layout", &ConsolidateArgs::lora_layout);
    v("flat", &ConsolidateArgs::flat);
    v("keep_unsafe_values", &ConsolidateArgs::keep_unsafe_values);
    v("no_lightning_meta", &ConsolidateArgs::no_lightning_meta);
    v("no_assets", &ConsolidateArgs::no_assets);
  }
};

// Sets the format option `name` (as `s` spells its flag: "outtype" for Python's) to `value`;
// false when no format of this build has such an option.
bool set_format_option(ConsolidateArgs& a, const std::string& name, const std::string& value, Spelling s);

// --format megatron: the output is a reshard's (megatron_reshard_args()).
inline bool megatron_output(const ConsolidateArgs& a) {
  return a.format == "megatron";
}

// The reshard that writes --format megatron's one rank file: the options that do not apply refused
// (UsageError as `s` spells them), the output's trailing slashes dropped.
ReshardArgs megatron_reshard_args(const ConsolidateArgs& a, Spelling s);

// The options checked (UsageError naming the option as `s` spells it; UnsupportedError for an
// output a module left out of this build writes), before anything is read. Progress, notes and
// the process group are the front end's; a dry run's plan is rendered (to_write_options).
ConsolidateOptions consolidate_options(const ConsolidateArgs& a, Spelling s);

}  // namespace dcpctl
