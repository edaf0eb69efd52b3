// The options the write commands (consolidate, reshard, cast) share, as the command line
// (cmd/write_options.h) and Python (python/commands.cpp) fill them, and the one place they become
// the library's WriteOptions (write/run.h). Each command's own: args/consolidate_args.h,
// args/reshard_args.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args/spelling.h"
#include "write/run.h"

namespace dcpctl {

struct WriteArgs {
  std::string checkpoint, output, dtype, max_memory, select, io = "direct", map, config, manifest = "crc32";
  std::vector<std::string> include, exclude, keep_dtype;
  std::string quantize, quantize_block;  // --quantize SCHEME, --quantize-block RxC
  std::string quantize_format;           // --quantize-format QUANT_METHOD
  int64_t quantize_group = 0;            // --quantize-group N (0: not given)
  std::vector<std::string> quantize_skip;
  bool cast_all = false;
  bool force = false, dry_run = false;
  bool resume = false;  // --resume (write/resume.h)
  unsigned threads = 4;
  // --format megatron of a Hugging Face model for a Megatron-LM run (write/run.h's MegatronTarget).
  std::string megatron_args;
  int64_t make_vocab_size_divisible_by = 0, tensor_model_parallel_size = 0;

  // Each option's name (Python's spelling, args/spelling.h) and field; CHECKPOINT and -o are the
  // command's arguments.
  template <class V>
  static void fields(V&& v) {
    v("dtype", &WriteArgs::dtype);
    v("max_memory", &WriteArgs::max_memory);
    v("select", &WriteArgs::select);
    v("io", &WriteArgs::io);
    v("map", &WriteArgs::map);
    v("config", &WriteArgs::config);
    v("manifest", &WriteArgs::manifest);
    v("include", &WriteArgs::include);
    v("exclude", &WriteArgs::exclude);
    v("keep_dtype", &WriteArgs::keep_dtype);
    v("quantize", &WriteArgs::quantize);
    v("quantize_block", &WriteArgs::quantize_block);
    v("quantize_format", &WriteArgs::quantize_format);
    v("quantize_group", &WriteArgs::quantize_group);
    v("quantize_skip", &WriteArgs::quantize_skip);
    v("cast_all", &WriteArgs::cast_all);
    v("force", &WriteArgs::force);
    v("dry_run", &WriteArgs::dry_run);
    v("resume", &WriteArgs::resume);
    v("threads", &WriteArgs::threads);
    v("megatron_args", &WriteArgs::megatron_args);
    v("make_vocab_size_divisible_by", &WriteArgs::make_vocab_size_divisible_by);
    v("tensor_model_parallel_size", &WriteArgs::tensor_model_parallel_size);
  }
};

// Fills `w` from `a`: the selection, --dtype, --quantize and --max-memory checked (UsageError
// naming the option as `s` spells it; UnsupportedError for a scheme that needs calibration). A dry
// run's plan is reported rendered (WriteOptions::PlanReport::Rendered, what a JSON summary holds).
// Progress and notes are the front end's. `lora`: --lora adapter or merge is given (--config then
// gives a torchtune adapter's heads without --map).
void to_write_options(const WriteArgs& a, WriteOptions& w, Spelling s, bool lora = false);

// UsageError unless the Megatron-LM target's options (--megatron-args, ...) go with --format
// megatron and --map (nothing given: nothing to check).
void check_megatron_target_options(const WriteArgs& a, bool megatron_format, Spelling s);

}  // namespace dcpctl
