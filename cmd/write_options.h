// What the write commands (consolidate, reshard, cast) share on the command line, and how it
// becomes the library's WriteOptions (write/run.h).
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cmd/distributed.h"
#include "cmd/progress.h"
#include "write/run.h"

namespace dcpctl::cli {

struct WriteCliOptions {
  std::string checkpoint, output, dtype, max_memory, select, io = "direct", map, config, manifest = "crc32";
  std::vector<std::string> include, exclude, keep_dtype;
  std::string quantize, quantize_block;  // --quantize SCHEME, --quantize-block RxC
  std::string quantize_format;           // --quantize-format QUANT_METHOD
  int64_t quantize_group = 0;            // --quantize-group N (0: not given)
  std::vector<std::string> quantize_skip;
  bool cast_all = false;
  bool force = false, dry_run = false, quiet = false, json = false;
  bool resume = false;  // consolidate's --resume (write/resume.h)
  unsigned threads = 4;
  DistOptions dist;
  // --format megatron of a Hugging Face model for a Megatron-LM run (write/run.h's MegatronTarget).
  std::string megatron_args;
  int64_t make_vocab_size_divisible_by = 0, tensor_model_parallel_size = 0;
};

// Fills `w` from `c`: the selection, --dtype and --max-memory checked (exit 2 naming the option),
// progress drawn on `line` (which the caller creates with progress_line(c) and finishes), notes on
// stderr unless --quiet.
// `lora`: --lora adapter or merge is given (--config then gives a torchtune adapter's heads without --map).
void to_write_options(const WriteCliOptions& c, WriteOptions& w, ProgressLine& line, bool lora = false);

// --keep-dtype GLOB and --cast-all (the precision policy of --dtype, plan/precision.h), for every
// write command.
void add_precision_options(CLI::App* sub, WriteCliOptions& c);

// The cast line of a summary ("; cast N floating tensors to D"), then what the precision policy
// kept in its saved dtype, or cast under --cast-all: each key with its reason (the first 20; --json
// lists all). Nothing without --dtype.
void print_cast_summary(const nlohmann::json& summary, std::ostream& out);

// --quantize, --quantize-block and --quantize-skip (view/codecs/quantize.h), for every write command.
void add_quantize_options(CLI::App* sub, WriteCliOptions& c);

// --megatron-args FILE, --make-vocab-size-divisible-by N, --tensor-model-parallel-size N: the
// Megatron-LM run --format megatron writes a Hugging Face model for (reshard, cast, consolidate).
void add_megatron_target_options(CLI::App* sub, WriteCliOptions& c);
// UsageError unless they go with --format megatron and --map (nothing given: nothing to check).
void check_megatron_target_options(const WriteCliOptions& c, bool megatron_format);

// --io MODE, for every write command.
void add_io_option(CLI::App* sub, WriteCliOptions& c);

// --map NAME|FILE and --config FILE, for every write command (and diff, stats).
void add_map_options(CLI::App* sub, std::string& map, std::string& config);

// consolidate --format megatron: the reshard of `c` to one rank file of a megatron-core checkpoint
// (cmd/reshard.cpp), `iteration` < 0 for none.
int run_megatron_output(const WriteCliOptions& c, int64_t iteration);

// A progress line shown only on a terminal, not for --quiet or --dry-run, and not under a launcher.
bool wants_progress(const WriteCliOptions& c);

}  // namespace dcpctl::cli
