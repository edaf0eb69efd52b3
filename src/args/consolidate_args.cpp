#include "args/consolidate_args.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "modules/modules.h"
#include "store/file.h"
#include "util/size.h"
#include "view/model.h"

namespace dcpctl {

namespace {

// What the command line's parser checks (CLI11's IsMember), for a front end without it.
void check_words(const ConsolidateArgs& a, Spelling s) {
  if (a.lora != "keep" && a.lora != "adapter" && a.lora != "merge")
    throw usage_error(s, Where(), "--lora " + a.lora + ": expected keep, adapter or merge");
  if (!a.lora_layout.empty() && a.lora_layout != "fused" && a.lora_layout != "per-expert")
    throw usage_error(s, Where(), "--lora-layout " + a.lora_layout + ": expected fused or per-expert");
  if (a.iteration > 9999999) throw usage_error(s, Where(), "--iteration must be between 0 and 9999999");
}

// The row --format names, else the one the output's name ends in (plan/format.h `suffixes`): a
// directory that exists, or --max-shard-size, names a folder.
const Format* pick_format(const ConsolidateArgs& a, Spelling s) {
  if (!a.format.empty()) {
    if (const Format* f = formats::by_flag(a.format)) return f;
    throw usage_error(s, Where(), "--format must be " + formats::flags());
  }
  const std::string& out = a.output;
  if (!a.max_shard_size.empty())
    if (const Format* named = formats::by_output(out, false); named && !named->sharded)
      throw usage_error(s, Where(out), "--max-shard-size writes a directory of shards; give DIR/ as the output");
  if (const Format* f = formats::by_output(out, is_directory(out) || !a.max_shard_size.empty())) return f;
  if (std::string why = module_left_out(out); !why.empty()) throw UnsupportedError(Where(out), why);
  throw usage_error(
      s, Where(out),
      "cannot tell the output format from the name: use a " + formats::output_names() + " output, or --format");
}

// The formats' own options: each given one must be the chosen format's (else its row's refusal,
// naming what it goes with), and the row checks their values before anything is read.
void take_format_options(const ConsolidateArgs& a, ConsolidateOptions& co, Spelling s) {
  for (const auto& [flag, value] : a.format_options) {
    const bool own = std::any_of(co.format->options.begin(), co.format->options.end(),
                                 [&, &flag = flag](const FormatOption& fo) { return fo.flag == flag; });
    if (own) continue;
    for (const Format* f : formats::all())
      for (const FormatOption& fo : f->options)
        if (fo.flag == flag) throw usage_error(s, Where(a.output), std::string(fo.elsewhere));
  }
  if (co.format->check_options) co.format->check_options(a.format_options);
  co.format_options = a.format_options;
}

// --lora and its options.
void take_lora_options(const ConsolidateArgs& a, ConsolidateOptions& co, Spelling s) {
  co.lora.mode = a.lora == "adapter" ? LoraMode::Adapter : a.lora == "merge" ? LoraMode::Merge : LoraMode::Keep;
  const bool lora_options = !a.lora_name.empty() || !a.lora_config.empty() || !a.lora_alpha.empty() ||
                            !a.lora_base.empty() || !a.lora_layout.empty();
  if (co.lora.mode == LoraMode::Keep && lora_options)
    throw usage_error(s, Where(),
                      "--lora-name, --lora-config, --lora-alpha, --lora-base and --lora-layout go with --lora adapter "
                      "or --lora merge");
  if (co.lora.mode == LoraMode::Merge && !a.lora_base.empty())
    throw usage_error(s, Where(),
                      "--lora-base sets adapter_config.json's base_model_name_or_path: it goes with --lora adapter");
  co.lora.name = a.lora_name;
  co.lora.config_file = a.lora_config;
  co.lora.base_model = a.lora_base;
  co.lora.layout = a.lora_layout == "per-expert" ? LoraLayout::PerExpert
                   : a.lora_layout == "fused"    ? LoraLayout::Fused
                                                 : LoraLayout::Default;
  if (!a.lora_alpha.empty()) {
    char* end = nullptr;
    double alpha = std::strtod(a.lora_alpha.c_str(), &end);
    if (end == a.lora_alpha.c_str() || *end != 0 || !(alpha > 0) || !std::isfinite(alpha))
      throw usage_error(s, Where(), "--lora-alpha must be a positive number");
    co.lora.alpha = alpha;
  }
}

// The output's format and what goes with it: shards, assets, flat keys, unsafe values.
void take_output_options(const ConsolidateArgs& a, ConsolidateOptions& co, Spelling s) {
  if (co.lora.mode == LoraMode::Adapter) {
    // The adapter folder PEFT loads: it has one format.
    if (!a.format.empty() || !a.max_shard_size.empty() || !a.assets.empty() || !a.map.empty())
      throw usage_error(s, Where(a.output),
                        "--lora adapter writes a PEFT adapter folder (adapter_model.safetensors, adapter_config.json): "
                        "--format, --max-shard-size, --assets and --map do not apply");
    co.format = formats::by_name("peft-adapter");
    if (!co.format) throw UnsupportedError(Where(a.output), lora_module_left_out());
  } else {
    co.format = pick_format(a, s);
  }
  if (!a.max_shard_size.empty()) co.max_shard_size = parse_size(a.max_shard_size, spell(s, "--max-shard-size"));
  co.flat = a.flat;
  take_format_options(a, co, s);
  co.keep_unsafe_values = a.keep_unsafe_values;
  if (!a.assets.empty() && !co.format->whole_model)
    throw usage_error(s, Where(a.output), "--assets copies files beside the weights of a DIR/ (Hugging Face) output");
  co.copy_assets = !a.no_assets;
  co.assets_from = a.assets;
  co.map_assets = a.assets;
  co.lightning_meta = !a.no_lightning_meta;
  if (!a.quantize.empty() && co.lora.mode == LoraMode::Adapter)
    throw usage_error(s, Where(a.output), "--quantize writes a model's weights; --lora adapter writes an adapter");
}

}  // namespace

bool set_format_option(ConsolidateArgs& a, const std::string& name, const std::string& value, Spelling s) {
  for (const Format* f : formats::all())
    for (const FormatOption& fo : f->options)
      if (spell(s, std::string(fo.flag)) == name) {
        a.format_options[std::string(fo.flag)] = value;
        return true;
      }
  return false;
}

ReshardArgs megatron_reshard_args(const ConsolidateArgs& a, Spelling s) {
  // megatron-core's checkpoint is a DCP checkpoint: the reshard that writes one rank file.
  if (a.lora != "keep" || !a.quantize.empty() || !a.max_shard_size.empty() || !a.assets.empty() || a.flat ||
      a.keep_unsafe_values || a.parallel_write || a.resume)
    throw usage_error(s, Where(a.output),
                      "--format megatron writes megatron-core's torch_dist checkpoint: --lora, --quantize, "
                      "--max-shard-size, --assets (give the map's config with --config), --flat, "
                      "--keep-unsafe-values, --parallel-write and --resume do not apply");
  ReshardArgs r;
  static_cast<WriteArgs&>(r) = a;
  while (r.output.size() > 1 && r.output.back() == '/') r.output.pop_back();
  r.format = "megatron";
  r.iteration = a.iteration;
  return r;
}

ConsolidateOptions consolidate_options(const ConsolidateArgs& a, Spelling s) {
  check_words(a, s);
  if (a.iteration >= 0) throw usage_error(s, Where(), "--iteration goes with --format megatron");
  check_megatron_target_options(a, false, s);
  ConsolidateOptions co;
  to_write_options(a, co, s, a.lora != "keep");
  take_lora_options(a, co, s);
  take_output_options(a, co, s);
  co.parallel_write = a.parallel_write;
  if (a.parallel_write && !co.format->sharded)
    throw usage_error(s, Where(a.output), "--parallel-write writes whole shards of a DIR/ (Hugging Face) output");
  return co;
}

}  // namespace dcpctl
