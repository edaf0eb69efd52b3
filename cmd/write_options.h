// What the command line adds to the write commands' options (consolidate, reshard, cast; their
// fields and their checks: args/write_args.h), and how it attaches itself to the library's
// WriteOptions (write/run.h).
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "args/write_args.h"
#include "cmd/distributed.h"
#include "cmd/progress.h"

namespace dcpctl {
struct ReshardArgs;
}

namespace dcpctl::cli {

// What a write command prints, and torchrun's options: the command line's alone.
struct WriteCliFlags {
  bool quiet = false, json = false;
  DistOptions dist;
};

// The command line's part of `w` (made by args/'s functions): progress drawn on `line` (which the
// caller creates with wants_progress() and finishes), notes on stderr unless --quiet, a text dry
// run's plan as its records (--json's rendered).
void attach_cli(const WriteArgs& a, const WriteCliFlags& f, WriteOptions& w, ProgressLine& line);

// --keep-dtype GLOB and --cast-all (the precision policy of --dtype, plan/precision.h), for every
// write command.
void add_precision_options(CLI::App* sub, WriteArgs& c);

// The cast line of a summary ("; cast N floating tensors to D"), then what the precision policy
// kept in its saved dtype, or cast under --cast-all: each key with its reason (the first 20; --json
// lists all). Nothing without --dtype.
void print_cast_summary(const nlohmann::json& summary, std::ostream& out);

// --quantize, --quantize-block and --quantize-skip (view/codecs/quantize.h), for every write command.
void add_quantize_options(CLI::App* sub, WriteArgs& c);

// --megatron-args FILE, --make-vocab-size-divisible-by N, --tensor-model-parallel-size N: the
// Megatron-LM run --format megatron writes a Hugging Face model for (reshard, cast, consolidate).
void add_megatron_target_options(CLI::App* sub, WriteArgs& c);

// --io MODE, for every write command.
void add_io_option(CLI::App* sub, WriteArgs& c);

// --map NAME|FILE and --config FILE, for every write command (and diff, stats).
void add_map_options(CLI::App* sub, std::string& map, std::string& config);

// consolidate --format megatron: the reshard `r` (args/consolidate_args.h's megatron_reshard_args)
// to one rank file of a megatron-core checkpoint, printed as `f` says (cmd/reshard.cpp).
int run_megatron_output(const ReshardArgs& r, const WriteCliFlags& f);

// A progress line shown only on a terminal, not for --quiet or --dry-run, and not under a launcher.
bool wants_progress(const WriteArgs& a, const WriteCliFlags& f);

}  // namespace dcpctl::cli
