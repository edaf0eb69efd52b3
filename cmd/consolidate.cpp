// dcpctl consolidate: one full-model file (safetensors, HF sharded safetensors, or .pt) from a
// sharded checkpoint, streaming in bounded memory.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>

#include "args/consolidate_args.h"
#include "cmd/distributed.h"
#include "cmd/format.h"
#include "cmd/progress.h"
#include "cmd/subcommands.h"
#include "cmd/write_options.h"
#include "meta/checkpoint.h"
#include "modules/modules.h"
#include "plan/format.h"
#include "store/file.h"
#include "util/error.h"
#include "util/numeric.h"
#include "util/size.h"
#include "view/model.h"
#include "write/consolidate.h"
#include "write/execute.h"
#include "write/output.h"

namespace dcpctl::cli {

using nlohmann::json;

// The command's options (args/consolidate_args.h) and what the command line adds.
struct ConsolidateCliOptions : ConsolidateArgs, WriteCliFlags {};

namespace {

// `-n`: the plan, file by file and key by key.
void print_plan(const json& r) {
  std::cout << "Plan (nothing written): " << r["tensors"].get<uint64_t>() << " tensors, "
            << human_bytes(r["tensor_bytes"].get<uint64_t>()) << "\n";
  for (const auto& f : r["files"])
    std::cout << "  " << f["path"].get<std::string>()
              << (f.contains("bytes") ? "  " + human_bytes(f["bytes"].get<uint64_t>()) + ", " +
                                            std::to_string(f["tensors"].get<uint64_t>()) + " tensors"
                                      : "")
              << "\n";
  for (const auto& a : r["assets"]) std::cout << "  " << a.get<std::string>() << "  (copied beside the weights)\n";
  for (const auto& k : r["plan"])
    std::cout << "    " << k["key"].get<std::string>() << "  " << k["dtype"].get<std::string>() << " "
              << dims_str(k["shape"].get<std::vector<int64_t>>()) << "  -> " << k["file"].get<std::string>()
              << (k["streams"].get<bool>() ? "  (streamed)"
                                           : "  (buffer " + human_bytes(k["need"].get<uint64_t>()) + ")")
              << "\n";
  print_cast_summary(r, std::cout);
}

// What was written, on stderr.
void print_written(const json& r, const std::string& output) {
  std::cerr << "wrote " << r["tensors"].get<uint64_t>() << " tensors ("
            << human_bytes(r["tensor_bytes"].get<uint64_t>()) << ") to " << output;
  if (r["files"].size() > 1) std::cerr << " (" << r["files"].size() << " files)";
  char rate[64];
  std::snprintf(rate, sizeof rate, " in %.2f s (%.2f GB/s)", r["seconds"].get<double>(), r["gb_per_s"].get<double>());
  std::cerr << rate;
  if (!r["cast"]["dtype"].is_null())
    std::cerr << "; cast " << r["cast"]["tensors"].get<uint64_t>() << " floating tensors to "
              << r["cast"]["dtype"].get<std::string>();
  std::cerr << "\n";
  print_cast_summary(r, std::cerr);
  print_map_summary(r);
  if (!r["assets"].empty()) {
    std::cerr << "copied " << r["assets"].size() << " file(s) beside the weights:";
    for (const auto& a : r["assets"]) {
      const std::string p = a.get<std::string>();
      std::cerr << " " << p.substr(p.find_last_of('/') + 1);
    }
    std::cerr << "\n";
  }
}

}  // namespace

int run_consolidate(const ConsolidateCliOptions& o) {
  if (megatron_output(o)) return run_megatron_output(megatron_reshard_args(o, Spelling::Cli), o);
  ConsolidateOptions co = consolidate_options(o, Spelling::Cli);
  install_cleanup_handlers();
  ProgressLine progress(wants_progress(o, o));
  attach_cli(o, o, co, progress);
  std::unique_ptr<Group> group = join_group(o.dist);
  co.group = group.get();
  co.local_files = o.dist.local_files;
  if (o.parallel_write && !group)
    throw UsageError(Where(), "--parallel-write needs several processes (launch with torchrun)");
  bool quiet = o.quiet || (group && group->rank() != 0);
  Checkpoint ck = open_checkpoint_on(group.get(), o.dist, o.checkpoint);
  json r = consolidate(ck, co);
  progress.finish();
  if (group && group->rank() != 0) return 0;  // rank 0 reports for the job
  if (o.json) {
    add_s3_transfer(r);
    dump_summary(r, std::cout);
  } else if (o.dry_run) {
    print_plan(r);
  } else if (!quiet) {
    print_written(r, o.output);
  }
  return 0;
}

namespace {

// What a run does with its output and what it prints: --force, --resume, --dry-run, --quiet, --json.
void add_run_flags(CLI::App* sub, ConsolidateCliOptions& o) {
  sub->add_flag("-f,--force", o.force, "Replace an existing output");
  sub->add_flag("--resume", o.resume,
                "DIR/ of several shards or split .gguf output: finish a stopped run (killed, failed, full disk), "
                "keeping the files it finished that are intact; refused if anything that changes the output changed");
  sub->add_flag("-n,--dry-run", o.dry_run, "Print the plan (keys, files, bytes) and write nothing");
  sub->add_flag("-q,--quiet", o.quiet, "No progress or notes on stderr");
  sub->add_flag("--json", o.json, "Print a JSON summary on stdout");
}

// Each format's own options (a module's format's among them: the GGUF's --outtype): an option
// with a value, or a flag where its row names no value (the GGUF's --mmproj).
void add_format_options(CLI::App* sub, const std::shared_ptr<ConsolidateCliOptions>& o) {
  for (const Format* f : formats::all())
    for (const FormatOption& fo : f->options)
      if (fo.type_name.empty())
        sub->add_flag_function(
            std::string(fo.flag), [o, flag = std::string(fo.flag)](int64_t) { o->format_options[flag] = "true"; },
            std::string(fo.help));
      else
        sub->add_option_function<std::string>(
               std::string(fo.flag),
               [o, flag = std::string(fo.flag)](const std::string& v) { o->format_options[flag] = v; },
               std::string(fo.help))
            ->type_name(std::string(fo.type_name));
}

}  // namespace

void setup_consolidate(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<ConsolidateCliOptions>();
  auto* sub = parent.add_subcommand(
      "consolidate",
      "Write one full-model file (.safetensors, HF sharded safetensors or .pt) from a sharded checkpoint");
  sub->add_option("checkpoint", o->checkpoint, "Checkpoint directory (holds .metadata)")->required()->type_name("DIR");
  sub->add_option("-o,--output", o->output,
                  "Output: FILE.safetensors, DIR/ (Hugging Face shards), or FILE.pt/.pth/.bin")
      ->required()
      ->type_name("PATH");
  std::vector<std::string> words;
  for (const Format* f : formats::all())
    if (f->consolidate_writer && !f->flag.empty()) words.emplace_back(f->flag);
  words.emplace_back(formats::megatron.flag);  // through reshard (cmd/reshard.cpp)
  sub->add_option("--format", o->format,
                  "Output format when the name does not tell: " + formats::flags() +
                      "; megatron: a DIR megatron-core's dist_checkpointing.load reads (as reshard --format megatron)")
      ->check(CLI::IsMember(words))
      ->type_name("FORMAT");
  sub->add_option("--iteration", o->iteration,
                  "--format megatron: write Megatron-LM's iter_NNNNNNN/ and latest_checkpointed_iteration.txt")
      ->check(CLI::Range(int64_t{0}, int64_t{9999999}))
      ->type_name("N");
  add_megatron_target_options(sub, *o);
  sub->add_option("--max-shard-size", o->max_shard_size,
                  "Largest shard of a DIR/ output (5GB decimal as Hugging Face, 4GiB, bytes; default 5GB)")
      ->type_name("SIZE");
  sub->add_option("--include", o->include, "Keep only keys matching this shell glob (repeatable)")->type_name("GLOB");
  sub->add_option("--exclude", o->exclude,
                  "Drop keys matching this shell glob (repeatable); with --map, how a model weight no rule covers is "
                  "left out on purpose (listed in the summary)")
      ->type_name("GLOB");
  sub->add_option("--select", o->select, "Keep one subtree and strip its prefix (e.g. app.model)")->type_name("PREFIX");
  sub->add_option("--dtype", o->dtype,
                  "Cast floating tensors to fp32, fp16, bf16, fp64, fp8_e4m3 or fp8_e5m2 (round to nearest even)")
      ->type_name("DTYPE");
  add_format_options(sub, o);
  sub->add_flag("--flat", o->flat, ".pt output: flat keys instead of the nesting dcp_to_torch_save rebuilds");
  sub->add_flag("--keep-unsafe-values", o->keep_unsafe_values,
                ".pt output: keep non-tensor values torch.load(weights_only=True) would refuse (e.g. BytesIO)");
  auto* assets = sub->add_option("--assets", o->assets,
                                 "DIR/ output: copy config.json, tokenizer and processor files from this folder "
                                 "(default: those beside the checkpoint)")
                     ->type_name("DIR");
  sub->add_flag("--no-assets", o->no_assets, "DIR/ output: copy no config, tokenizer or processor files")
      ->excludes(assets);
  sub->add_flag(
      "--no-lightning-meta", o->no_lightning_meta,
      ".pt output of a Lightning checkpoint: leave out meta.pt (the non-tensor state), which is merged by default");
  sub->add_option("--threads", o->threads, "Parallel readers")->capture_default_str()->type_name("N");
  sub->add_option("--max-memory", o->max_memory,
                  "Cap on buffer memory (default: the largest tensor's need, at least 1GiB)")
      ->type_name("SIZE");
  add_precision_options(sub, *o);
  add_io_option(sub, *o);
  add_map_options(sub, o->map, o->config);
  sub->add_option("--lora", o->lora,
                  "LoRA adapters in the checkpoint: keep (write the keys as they are), adapter (DIR/: a PEFT adapter "
                  "folder) or merge "
                  "(the base model with the adapter folded in)")
      ->check(CLI::IsMember({"keep", "adapter", "merge"}))
      ->capture_default_str()
      ->type_name("MODE");
  sub->add_option("--lora-name", o->lora_name, "The adapter to export or merge, when the checkpoint holds several")
      ->type_name("NAME");
  sub->add_option("--lora-config", o->lora_config,
                  "The adapter's adapter_config.json (default: one beside the checkpoint)")
      ->type_name("FILE");
  sub->add_option("--lora-alpha", o->lora_alpha,
                  "The adapter's lora_alpha, when no adapter_config.json says it (scaling alpha/r; an rsLoRA adapter "
                  "needs --lora-config)")
      ->type_name("N");
  sub->add_option("--lora-base", o->lora_base, "--lora adapter: base_model_name_or_path for adapter_config.json")
      ->type_name("NAME");
  sub->add_option(
         "--lora-layout", o->lora_layout,
         "MoE experts adapted by target_parameters: fused (PEFT's [r*E] adapter; the merged [E, out, in] stacks) or "
         "per-expert (experts.E.{gate,up,down}_proj, as vLLM loads MoE LoRA and save_pretrained writes a merged "
         "model) (default: fused for adapter, per-expert for merge)")
      ->check(CLI::IsMember({"fused", "per-expert"}))
      ->type_name("LAYOUT");
  add_quantize_options(sub, *o);
  add_run_flags(sub, *o);
  add_dist_options(sub, o->dist, true);
  sub->add_flag(
      "--parallel-write", o->parallel_write,
      "Under torchrun, DIR/ output: each rank writes whole shards itself (shared filesystem); rank 0 writes the index");
  sub->callback([&run, o] { run = [o] { return run_consolidate(*o); }; });
}

}  // namespace dcpctl::cli
