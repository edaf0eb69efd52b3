#include "cmd/write_options.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cmd/commands.h"
#include "meta/codecs/codecs.h"
#include "util/error.h"
#include "util/numeric.h"
#include "util/size.h"

namespace dcpctl::cli {

void to_write_options(const WriteCliOptions& c, WriteOptions& w, ProgressLine& line, bool lora) {
  w.output = c.output;
  w.selection.include = c.include;
  w.selection.exclude = c.exclude;
  w.selection.prefix = c.select;
  if (!c.dtype.empty()) {
    w.cast = dtype_from_user(c.dtype);
    if (!w.cast || !castable(*w.cast))
      throw UsageError(Where(), "--dtype " + c.dtype + ": expected fp32, fp16, bf16, fp64, fp8_e4m3 or fp8_e5m2");
  }
  if ((!c.keep_dtype.empty() || c.cast_all) && !w.cast)
    throw UsageError(Where(), std::string(c.cast_all ? "--cast-all" : "--keep-dtype") +
                                  " says what --dtype casts; it needs --dtype");
  if (!c.keep_dtype.empty() && c.cast_all)
    throw UsageError(Where(), "--cast-all casts every floating tensor and --keep-dtype keeps some: give one of them");
  w.keep_dtype = c.keep_dtype;
  w.cast_all = c.cast_all;
  if (!c.max_memory.empty()) w.max_memory = parse_size(c.max_memory, "--max-memory");
  w.force = c.force;
  w.dry_run = c.dry_run;
  w.resume = c.resume;
  // --json prints the plan's every piece, written as text (write/execute.h: dump_summary); the text
  // dry run prints the records only.
  if (c.dry_run) w.plan_report = c.json ? WriteOptions::PlanReport::Rendered : WriteOptions::PlanReport::Keys;
  w.threads = c.threads;
  w.direct_io = c.io == "direct";
  w.manifest = *algorithm_named(c.manifest);  // checked by CLI11 (add_io_option)
  w.map = c.map;
  w.map_config = c.config;
  w.megatron.args_file = c.megatron_args;
  w.megatron.divisible_by = c.make_vocab_size_divisible_by;
  w.megatron.tp = c.tensor_model_parallel_size;
  // --config is the model's config.json (view/model_config.h): a key map's parameters, and a
  // torchtune adapter's attention heads (--lora).
  if (!c.config.empty() && c.map.empty() && !lora)
    throw UsageError(Where(c.config), "--config gives a key map's parameters; it needs --map");
  if (c.quantize.empty() &&
      (!c.quantize_block.empty() || !c.quantize_skip.empty() || !c.quantize_format.empty() || c.quantize_group))
    throw UsageError(Where(),
                     "--quantize-block, --quantize-group, --quantize-format and --quantize-skip go with --quantize");
  if (!c.quantize.empty()) {
    for (const CalibratedScheme& s : calibrated_schemes())
      if (c.quantize == s.word)
        throw UnsupportedError(Where(),
                               "--quantize " + c.quantize + " needs " + s.missing + "; dcpctl writes " + s.instead);
    w.quantize.scheme = c.quantize;
    w.quantize.format = c.quantize_format;
    w.quantize.skip = c.quantize_skip;
    if (!c.quantize_format.empty() && !quantize_codec(c.quantize, c.quantize_format)) {
      std::string forms;
      for (const std::string& f : quantize_formats(c.quantize)) forms += (forms.empty() ? "" : ", ") + f;
      throw UsageError(Where(), "--quantize " + c.quantize + " --quantize-format " + c.quantize_format + ": " +
                                    c.quantize + " is written in the form of " + forms);
    }
    if (const Codec* codec = quantize_codec(c.quantize, c.quantize_format);
        !c.quantize_block.empty() && codec && *codec->block_refusal)
      throw UsageError(Where(), codec->block_refusal);
    if (const Codec* codec = quantize_codec(c.quantize, c.quantize_format); c.quantize_group && codec) {
      if (!codec->quantize_group)
        throw UsageError(Where(),
                         "--quantize-group goes with w4a16: --quantize " + c.quantize + " has groups of its own");
      if (c.quantize_group % 8 != 0)
        throw UsageError(Where(), "--quantize-group " + std::to_string(c.quantize_group) +
                                      ": a multiple of 8 (each int32 word of weight_packed holds 8 values)");
      w.quantize.group = c.quantize_group;
    }
    if (!c.quantize_block.empty()) {
      long long r = 0, n = 0;
      char tail = 0;
      if (std::sscanf(c.quantize_block.c_str(), "%lldx%lld%c", &r, &n, &tail) != 2 || r <= 0 || n <= 0 ||
          r > (1 << 20) || n > (1 << 20))
        throw UsageError(Where(),
                         "--quantize-block " + c.quantize_block + ": give RxC, two positive integers (128x128)");
      w.quantize.block[0] = r;
      w.quantize.block[1] = n;
    }
  }
  w.progress = [&line](uint64_t d, uint64_t t) { line.update(d, t); };
  bool quiet = c.quiet;
  w.note = [quiet](const std::string& s) {
    if (!quiet) std::cerr << "dcpctl: note: " << s << "\n";
  };
}

void add_quantize_options(CLI::App* sub, WriteCliOptions& c) {
  // The codecs --quantize writes (meta/codecs/codecs.h), each with its part of the help.
  std::vector<std::string> words;
  std::string help = "Write the Linear weights quantized, as serving stacks load them: ";
  for (const Codec* codec : codecs())
    if (codec->quantize_word && quantize_codec(codec->quantize_word) == codec) {
      help += std::string(words.empty() ? "" : "; ") + codec->quantize_word + " (" + codec->quantize_help + ")";
      words.push_back(codec->quantize_word);
    }
  // Schemes that need calibrated activation scales are named so that their refusal says why (exit 5).
  for (const CalibratedScheme& s : calibrated_schemes()) words.push_back(s.word);
  sub->add_option("--quantize", c.quantize, help + ". After --map and --lora merge")
      ->check(CLI::IsMember(words))
      ->type_name("SCHEME");
  // The forms a word is written in besides its first: "fp8-block: compressed-tensors (...)".
  std::string forms;
  for (const Codec* codec : codecs())
    if (codec->quantize_word && quantize_codec(codec->quantize_word) != codec)
      forms += std::string(forms.empty() ? "" : "; ") + codec->quantize_word + ": " + codec->quant_method + " (" +
               codec->quantize_help + ")";
  sub->add_option("--quantize-format", c.quantize_format,
                  "The form --quantize writes, by the quant_method config.json names (default: each scheme's first). " +
                      (forms.empty() ? std::string("Each scheme has one") : forms))
      ->check(CLI::IsMember(quantize_formats()))
      ->type_name("QUANT_METHOD");
  sub->add_option("--quantize-block", c.quantize_block, "--quantize fp8-block: the block, RxC (default 128x128)")
      ->type_name("RxC");
  sub->add_option("--quantize-group", c.quantize_group,
                  "--quantize w4a16: the values one scale covers along a row, a multiple of 8 (default 128)")
      ->check(CLI::Range(int64_t{8}, int64_t{1} << 20))
      ->type_name("N");
  sub->add_option("--quantize-skip", c.quantize_skip,
                  "--quantize: also keep the weights whose key matches GLOB as they are (repeatable)")
      ->type_name("GLOB");
}

void add_precision_options(CLI::App* sub, WriteCliOptions& c) {
  sub->add_option(
         "--keep-dtype", c.keep_dtype,
         "--dtype leaves tensors matching this shell glob in their saved dtype (repeatable), beside those the model "
         "keeps in float32 (transformers' _keep_in_fp32_modules_strict) and the key maps declare")
      ->type_name("GLOB");
  sub->add_flag("--cast-all", c.cast_all,
                "--dtype casts every floating tensor, those the model keeps in float32 too (listed in the summary)");
}

void print_cast_summary(const nlohmann::json& r, std::ostream& out) {
  if (r.contains("quantized")) {
    const auto& q = r["quantized"];
    out << "quantized " << q["weights"].get<size_t>() << " weight(s) to " << q["scheme"].get<std::string>();
    const int64_t block[2] = {q["block"][0].get<int64_t>(), q["block"][1].get<int64_t>()};
    if (const Codec* codec = quantize_codec(q["scheme"].get<std::string>(), q.value("format", "")))
      out << codec->written_summary(block);
    if (q["kept"].empty())
      out << "\n";
    else
      out << "; kept " << q["kept"].size() << " weight(s) as they were:\n";
    size_t n = 0;
    for (const auto& k : q["kept"]) {
      if (++n > 20) {
        out << "  ... and " << q["kept"].size() - 20 << " more (--json lists every one)\n";
        break;
      }
      out << "  " << k["key"].get<std::string>() << "  (" << k["reason"].get<std::string>() << ")\n";
    }
  }
  const auto& c = r["cast"];
  if (c["dtype"].is_null()) return;
  const std::string to = c["dtype"].get<std::string>();
  auto list = [&](const nlohmann::json& v, bool cast) {
    size_t n = 0;
    for (const auto& k : v) {
      if (++n > 20) {
        out << "  ... and " << v.size() - 20 << " more (--json lists every one)\n";
        break;
      }
      out << "  " << k["key"].get<std::string>() << "  " << k["dtype"].get<std::string>() << (cast ? " -> " + to : "")
          << "  (" << k["reason"].get<std::string>() << ")\n";
    }
  };
  // Which model schema decided, and how it was found; or why none did.
  if (const auto& pol = c["policy"]; pol.is_object()) {
    if (const auto& s = pol["schema"]; s.is_object()) {
      out << "precision policy: the model schema of " << s["class"].get<std::string>() << " (model_type "
          << s["model_type"].get<std::string>() << ", transformers " << s["transformers"].get<std::string>() << ")";
      if (s.value("found_by", "") == "architectures")
        out << ", found by config.json's architectures"
            << (pol["model_types"].empty()
                    ? std::string()
                    : " (its model_type " + pol["model_types"][0].get<std::string>() + " is not in the schema)");
      out << "\n";
    } else if (pol["schema_why"].is_string()) {
      out << "precision policy: " << pol["schema_why"].get<std::string>() << "\n";
    }
  }
  if (!c["kept"].empty()) {
    out << "kept " << c["kept"].size() << " tensor(s) in their saved dtype, not " << to
        << " (--cast-all casts them):\n";
    list(c["kept"], false);
  }
  if (!c["cast_anyway"].empty()) {
    out << "cast " << c["cast_anyway"].size() << " tensor(s) to " << to
        << " that the precision policy keeps in their dtype, as --cast-all asks:\n";
    list(c["cast_anyway"], true);
  }
}

void add_io_option(CLI::App* sub, WriteCliOptions& c) {
  sub->add_option("--io", c.io,
                  "How bulk bytes move: direct (read and written past the page cache where the filesystem allows it) "
                  "or buffered (through it; copy_file_range where it can)")
      ->check(CLI::IsMember({"direct", "buffered"}))
      ->capture_default_str()
      ->type_name("MODE");
  sub->add_option("--manifest", c.manifest,
                  "The digest of the manifest written with the output: crc32 (zip's CRC-32, computed as the bytes "
                  "pass; catches accidental damage) or sha256 (cryptographic, slower)")
      ->check(CLI::IsMember({"crc32", "sha256"}))
      ->capture_default_str()
      ->type_name("ALGO");
}

void add_map_options(CLI::App* sub, std::string& map, std::string& config) {
  sub->add_option(
         "--map", map,
         "Rename and reshape tensors with a key map: a built-in one (dcpctl maps) or a FILE.json; the direction "
         "follows the input's keys (torchtitan -> Hugging Face, or back)")
      ->type_name("NAME|FILE");
  sub->add_option(
         "--config", config,
         "The model's config.json, for the map's parameters (heads, experts); default: --assets DIR's, else the "
         "checkpoint's own")
      ->type_name("FILE");
}

bool wants_progress(const WriteCliOptions& c) {
  return !c.quiet && stderr_is_tty() && !c.dry_run && std::getenv("RANK") == nullptr;
}

void add_megatron_target_options(CLI::App* sub, WriteCliOptions& c) {
  sub->add_option("--megatron-args", c.megatron_args,
                  "--format megatron of a Hugging Face model for Megatron-LM: a JSON object of its arguments "
                  "(json.dump(vars(args))): the vocabulary padded as it pads it, the args saved as it saves them")
      ->type_name("FILE");
  sub->add_option("--make-vocab-size-divisible-by", c.make_vocab_size_divisible_by,
                  "--format megatron for Megatron-LM: pad the vocabulary to a multiple of N x the tensor-parallel size "
                  "(default 128, as Megatron-LM)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->type_name("N");
  sub->add_option(
         "--tensor-model-parallel-size", c.tensor_model_parallel_size,
         "--format megatron for Megatron-LM: the run's tensor-parallel size the vocabulary is padded for (default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->type_name("N");
}

void check_megatron_target_options(const WriteCliOptions& c, bool megatron_format) {
  if (c.megatron_args.empty() && c.make_vocab_size_divisible_by == 0 && c.tensor_model_parallel_size == 0) return;
  if (!megatron_format || c.map.empty())
    throw UsageError(Where(),
                     "--megatron-args, --make-vocab-size-divisible-by and --tensor-model-parallel-size say the "
                     "Megatron-LM run a Hugging Face model is written for: they go with --format megatron and "
                     "--map megatron");
}

}  // namespace dcpctl::cli
