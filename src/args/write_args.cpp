#include "args/write_args.h"

#include <algorithm>
#include <cstdio>

#include "meta/codecs/codecs.h"
#include "util/numeric.h"
#include "util/size.h"

namespace dcpctl {

namespace {

// What the command line's parser checks of a value (CLI11's IsMember and Range), for a front end
// that has no such parser.
void check_words(const WriteArgs& a, Spelling s) {
  if (a.io != "direct" && a.io != "buffered")
    throw usage_error(s, Where(), "--io " + a.io + ": expected direct or buffered");
  if (!algorithm_named(a.manifest))
    throw usage_error(s, Where(), "--manifest " + a.manifest + ": expected crc32 or sha256");
  const std::vector<std::string> forms = quantize_formats();
  if (!a.quantize_format.empty() && std::find(forms.begin(), forms.end(), a.quantize_format) == forms.end())
    throw usage_error(s, Where(), "--quantize-format " + a.quantize_format + ": not a form --quantize writes");
  if (a.quantize_group != 0 && (a.quantize_group < 8 || a.quantize_group > (int64_t{1} << 20)))
    throw usage_error(s, Where(), "--quantize-group must be between 8 and 1048576");
  if (a.make_vocab_size_divisible_by < 0 || a.tensor_model_parallel_size < 0)
    throw usage_error(s, Where(), "--make-vocab-size-divisible-by and --tensor-model-parallel-size must be 1 or more");
}

// --dtype and the precision policy's --keep-dtype and --cast-all.
void take_cast(const WriteArgs& a, WriteOptions& w, Spelling s) {
  if (!a.dtype.empty()) {
    w.cast = dtype_from_user(a.dtype);
    if (!w.cast || !castable(*w.cast))
      throw usage_error(s, Where(), "--dtype " + a.dtype + ": expected fp32, fp16, bf16, fp64, fp8_e4m3 or fp8_e5m2");
  }
  if ((!a.keep_dtype.empty() || a.cast_all) && !w.cast)
    throw usage_error(
        s, Where(),
        std::string(a.cast_all ? "--cast-all" : "--keep-dtype") + " says what --dtype casts; it needs --dtype");
  if (!a.keep_dtype.empty() && a.cast_all)
    throw usage_error(s, Where(),
                      "--cast-all casts every floating tensor and --keep-dtype keeps some: give one of them");
  w.keep_dtype = a.keep_dtype;
  w.cast_all = a.cast_all;
}

// --quantize and what goes with it.
void take_quantize(const WriteArgs& a, WriteOptions& w, Spelling s) {
  if (a.quantize.empty() &&
      (!a.quantize_block.empty() || !a.quantize_skip.empty() || !a.quantize_format.empty() || a.quantize_group))
    throw usage_error(s, Where(),
                      "--quantize-block, --quantize-group, --quantize-format and --quantize-skip go with --quantize");
  if (a.quantize.empty()) return;
  for (const CalibratedScheme& c : calibrated_schemes())
    if (a.quantize == c.word)
      throw UnsupportedError(
          Where(), spell(s, "--quantize " + a.quantize + " needs " + c.missing + "; dcpctl writes " + c.instead));
  if (!quantize_codec(a.quantize))
    throw usage_error(s, Where(), "--quantize " + a.quantize + ": not a scheme dcpctl writes");
  w.quantize.scheme = a.quantize;
  w.quantize.format = a.quantize_format;
  w.quantize.skip = a.quantize_skip;
  if (!a.quantize_format.empty() && !quantize_codec(a.quantize, a.quantize_format)) {
    std::string forms;
    for (const std::string& f : quantize_formats(a.quantize)) forms += (forms.empty() ? "" : ", ") + f;
    throw usage_error(s, Where(),
                      "--quantize " + a.quantize + " --quantize-format " + a.quantize_format + ": " + a.quantize +
                          " is written in the form of " + forms);
  }
  if (const Codec* codec = quantize_codec(a.quantize, a.quantize_format);
      !a.quantize_block.empty() && codec && *codec->block_refusal)
    throw usage_error(s, Where(), codec->block_refusal);
  if (const Codec* codec = quantize_codec(a.quantize, a.quantize_format); a.quantize_group && codec) {
    if (!codec->quantize_group)
      throw usage_error(s, Where(),
                        "--quantize-group goes with w4a16: --quantize " + a.quantize + " has groups of its own");
    if (a.quantize_group % 8 != 0)
      throw usage_error(s, Where(),
                        "--quantize-group " + std::to_string(a.quantize_group) +
                            ": a multiple of 8 (each int32 word of weight_packed holds 8 values)");
    w.quantize.group = a.quantize_group;
  }
  if (!a.quantize_block.empty()) {
    long long r = 0, n = 0;
    char tail = 0;
    if (std::sscanf(a.quantize_block.c_str(), "%lldx%lld%c", &r, &n, &tail) != 2 || r <= 0 || n <= 0 || r > (1 << 20) ||
        n > (1 << 20))
      throw usage_error(s, Where(),
                        "--quantize-block " + a.quantize_block + ": give RxC, two positive integers (128x128)");
    w.quantize.block[0] = r;
    w.quantize.block[1] = n;
  }
}

}  // namespace

void to_write_options(const WriteArgs& a, WriteOptions& w, Spelling s, bool lora) {
  check_words(a, s);
  w.output = a.output;
  w.selection.include = a.include;
  w.selection.exclude = a.exclude;
  w.selection.prefix = a.select;
  take_cast(a, w, s);
  if (!a.max_memory.empty()) w.max_memory = parse_size(a.max_memory, spell(s, "--max-memory"));
  w.force = a.force;
  w.dry_run = a.dry_run;
  w.resume = a.resume;
  if (a.dry_run) w.plan_report = WriteOptions::PlanReport::Rendered;
  w.threads = a.threads;
  w.direct_io = a.io == "direct";
  w.manifest = *algorithm_named(a.manifest);
  w.map = a.map;
  w.map_config = a.config;
  w.megatron.args_file = a.megatron_args;
  w.megatron.divisible_by = a.make_vocab_size_divisible_by;
  w.megatron.tp = a.tensor_model_parallel_size;
  // --config is the model's config.json (view/model_config.h): a key map's parameters, and a
  // torchtune adapter's attention heads (--lora).
  if (!a.config.empty() && a.map.empty() && !lora)
    throw usage_error(s, Where(a.config), "--config gives a key map's parameters; it needs --map");
  take_quantize(a, w, s);
}

void check_megatron_target_options(const WriteArgs& a, bool megatron_format, Spelling s) {
  if (a.megatron_args.empty() && a.make_vocab_size_divisible_by == 0 && a.tensor_model_parallel_size == 0) return;
  if (!megatron_format || a.map.empty())
    throw usage_error(s, Where(),
                      "--megatron-args, --make-vocab-size-divisible-by and --tensor-model-parallel-size say the "
                      "Megatron-LM run a Hugging Face model is written for: they go with --format megatron and "
                      "--map megatron");
}

}  // namespace dcpctl
