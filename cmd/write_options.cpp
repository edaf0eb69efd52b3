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

void attach_cli(const WriteArgs& a, const WriteCliFlags& f, WriteOptions& w, ProgressLine& line) {
  // --json prints the plan's every piece, written as text (write/execute.h: dump_summary); the text
  // dry run prints the records only.
  if (a.dry_run && !f.json) w.plan_report = WriteOptions::PlanReport::Keys;
  w.progress = [&line](uint64_t d, uint64_t t) { line.update(d, t); };
  bool quiet = f.quiet;
  w.note = [quiet](const std::string& s) {
    if (!quiet) std::cerr << "dcpctl: note: " << s << "\n";
  };
}

void add_quantize_options(CLI::App* sub, WriteArgs& c) {
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

void add_precision_options(CLI::App* sub, WriteArgs& c) {
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

void add_io_option(CLI::App* sub, WriteArgs& c) {
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

bool wants_progress(const WriteArgs& a, const WriteCliFlags& f) {
  return !f.quiet && stderr_is_tty() && !a.dry_run && std::getenv("RANK") == nullptr;
}

void add_megatron_target_options(CLI::App* sub, WriteArgs& c) {
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

}  // namespace dcpctl::cli
