// The `hf-safetensors` format: a Hugging Face folder. Sharded safetensors
// model-0000i-of-0000N.safetensors + model.safetensors.index.json {"metadata": {"total_size"},
// "weight_map"}; a single shard is model.safetensors without an index. Beside them the config,
// tokenizer and processor files (write/assets.h), copied from beside the checkpoint or --assets;
// under --dtype the config says the dtype written, and a dequantized export's config loses its
// quantization_config. Rank 0 copies them at commit, after
// the shards and before the index. Exported with --dtype and --keep-dtype, each file's header
// records the globs (meta/keep_dtype_entry.h). Then, before the folder is renamed into place, it checks the
// folder as `verify` would (check/hf_checks.h: headers, index, config against the tensors, the
// assets copied, the keys against the model schema of its config: check/hf_schema.h); any problem
// is exit 3, or 5 where the input is a trainer's checkpoint (not an HF folder) and every problem is
// config.json and the tensors disagreeing (a key map that does not cover the model, names that are
// not the model's, a config.json that does not describe them), and leaves nothing (an object-storage folder, whose
// files appear as they complete, is not checked here: `dcpctl verify` it).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>

#include "check/hf_checks.h"
#include "meta/keep_dtype_entry.h"
#include "plan/plan.h"
#include "plan/precision.h"
#include "view/codecs/quantized.h"
#include "write/assets.h"
#include "write/formats/safetensors_file.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// Every key the model schema finds missing lies under one module (`model.visual.`) of a model whose
// config.json has a text_config: the checkpoint holds the language model of a composite model alone
// (torchtitan's Qwen 3.5 text model exported under the release's config.json). The way out, named;
// empty otherwise.
std::string part_missing_hint(const HfReport& r, const std::string& config_path) {
  std::string part;
  for (const Finding& f : r.problems) {
    if (f.code != "schema-key-missing") continue;
    const size_t dot = f.where.key.find('.');
    const size_t end = dot == std::string::npos ? dot : f.where.key.find('.', dot + 1);
    if (end == std::string::npos) return {};
    const std::string p = f.where.key.substr(0, end + 1);
    if (p.find('#') != std::string::npos || (!part.empty() && p != part)) return {};
    part = p;
  }
  if (part.empty()) return {};
  std::ifstream in(config_path);
  const json c = json::parse(in, nullptr, false);
  if (c.is_discarded() || !c.is_object() || !c.contains("text_config") || !c["text_config"].is_object()) return {};
  const json& t = c["text_config"];
  const std::string type = c.value("model_type", std::string("?"));
  const std::string text =
      t.contains("model_type") && t["model_type"].is_string() ? t["model_type"].get<std::string>() : "";
  return "\n  every missing key is under '" + part +
         "', which this checkpoint does not hold: config.json names the whole " + type +
         " model; to export its language model alone, give --config a config.json made of its text_config" +
         (text.empty() ? std::string() : " (model_type " + text + ")");
}

// Every problem is a key the model has only under a config setting config.json does not make
// (Megatron's linear biases under a Llama config.json without attention_bias / mlp_bias): the
// checkpoint is right and config.json does not describe it. The settings, named; empty otherwise.
std::string flag_settings(const HfReport& r) {
  std::set<std::string> settings;
  for (const Finding& f : r.problems) {
    auto it = f.code == "schema-key-unexpected" ? r.only_with.find(f.where.key) : r.only_with.end();
    if (it == r.only_with.end()) return {};
    settings.insert(it->second);
  }
  std::string out;
  for (const std::string& s : settings) out += (out.empty() ? "" : ", ") + s;
  return out;
}

class HfFolder final : public SafetensorsFiles {
 public:
  using SafetensorsFiles::SafetensorsFiles;

  // Rank 0: the assets (an --assets folder that is not there is refused here).
  void check(const WriteRequest& request) override {
    SafetensorsFiles::check(request);
    if (o_.copy_assets) assets_ = find_assets(request.ck, o_.assets_from, &request.model.config());
    wants_config_ = o_.copy_assets;
    keeps_layout_ = true;
    from_hf_folder_ = request.ck.layout == CheckpointLayout::HfSafetensors;
  }

 protected:
  std::string path_of(const PlannedFile& f) const override { return join_path(o_.output, f.name); }
  // --dtype with --keep-dtype: the user's globs, so that a later `verify` accepts what they kept
  // as this export's own check does (meta/keep_dtype_entry.h). --cast-all keeps nothing and
  // cannot be given with --keep-dtype; without --dtype nothing is cast or kept.
  std::map<std::string, std::string> metadata() const override {
    std::map<std::string, std::string> m = SafetensorsFiles::metadata();
    if (o_.cast && !o_.cast_all && !o_.keep_dtype.empty()) m[kKeepDtypeEntry] = keep_dtype_entry(o_.keep_dtype);
    return m;
  }
  void more_files(const WritePlan& plan, json& files) const override {
    if (plan.files.size() > 1) files.push_back({{"path", join_path(o_.output, "model.safetensors.index.json")}});
  }

  void finish_folder(WriteJob& job) override {
    // --dtype: the config says the dtype written (write/assets.h); a dequantized export
    // (view/codecs/dequantize.h) is a plain model, and its config loses the quantization_config too.
    // --quantize: the config gains the quantization_config the loaders read (view/codecs/quantize.h).
    std::function<std::string(const std::string&)> edit;
    const Checkpoint& ck = job.request.ck;
    const bool dequantized = ck.derived && ck.derived->output.dequantized;
    const nlohmann::json quantization = ck.derived && ck.derived->output.quantization_config
                                            ? *ck.derived->output.quantization_config
                                            : nlohmann::json();
    if (o_.cast || !quantization.is_null()) {
      edit = [cast = o_.cast, dequantized, quantization](const std::string& text) {
        std::string out = text;
        if (cast) out = config_with_dtype(dequantized ? dequantized_config(out, *cast) : out, *cast);
        if (!quantization.is_null()) out = quantized_config(out, quantization);
        return out;
      };
    }
    copy_assets(
        assets_, [&](const std::string& name) { return dir_->path_of(name); }, edit, dir_->uploads());
    // --quantize: the files a codec writes beside config.json (ModelOpt's hf_quant_config.json).
    if (ck.derived)
      for (const auto& [name, text] : ck.derived->output.quantization_files) write_text(name, text);
    if (job.plan.files.size() > 1) write_index(job.plan);
    if (!dir_->remote()) check_before_rename(job.plan);
  }

 private:
  // The index: every tensor's shard.
  void write_index(const WritePlan& plan) {
    nlohmann::ordered_json idx;
    idx["metadata"] = {{"total_size", plan.total_bytes}};
    nlohmann::ordered_json wm = nlohmann::ordered_json::object();
    for (const Record& r : plan.records) wm[plan.tensors[r.tensor].key] = plan.files[r.dest].name;
    idx["weight_map"] = wm;
    write_text("model.safetensors.index.json", idx.dump(2) + "\n");
  }

  // The folder as from_pretrained will take it, in its temporary place: every problem check_hf_folder
  // finds (named under the final path) stops the commit; the temporary folder is then removed.
  void check_before_rename(const WritePlan& plan) const {
    HfCheckOptions opts;
    for (const Asset& a : assets_.files) opts.expect_files.push_back(a.name);
    // What --dtype's policy kept (in its saved dtype, or float32 as transformers loads it; not cast
    // despite it: --cast-all) is no mismatch.
    if (const PrecisionPolicy* p = plan.target.precision; p && !p->cast_all())
      for (const PlannedTensor& t : plan.tensors)
        if (!p->reason(t.key).empty()) opts.kept_dtype.insert(t.key);
    const HfReport r = check_hf_folder(dir_->temp_path(), opts);
    if (r.problems.empty()) return;
    std::string output = o_.output;  // "out/" names the folder; its files are "out/config.json"
    while (output.size() > 1 && output.back() == '/') output.pop_back();
    auto final_name = [&](std::string s) {
      for (size_t at = s.find(dir_->temp_path()); at != std::string::npos; at = s.find(dir_->temp_path(), at))
        s.replace(at, dir_->temp_path().size(), output);
      return s;
    };
    std::string codes, what;
    for (const Finding& f : r.problems) {
      if (codes.find("[" + f.code + "]") == std::string::npos) codes += (codes.empty() ? "[" : ", [") + f.code + "]";
      what += "\n  [" + f.code + "] " + final_name(f.text());
    }
    // Keys the model schema does not expect, out of a key map: the map does not cover the model
    // (exit 5); anything else is a damaged input (exit 3).
    const bool schema_only = std::all_of(r.problems.begin(), r.problems.end(), [](const Finding& f) {
      return f.code == "schema-key-unexpected" || f.code == "schema-key-missing" || f.code == "schema-shape-mismatch";
    });
    what += part_missing_hint(r, join_path(dir_->temp_path(), "config.json"));
    // Out of a trainer's checkpoint (not a Hugging Face folder), problems that are all config.json
    // and the tensors disagreeing (the keys, shapes, rows, layers, experts, head, dtype it names):
    // the checkpoint is intact, and what it holds is not the model config.json names as written.
    // Valid input this export does not cover (exit 5), with the ways out; out of an HF folder they
    // are its own damage, which `verify` of it reports (exit 3), as are problems of the files.
    const bool described = std::all_of(r.problems.begin(), r.problems.end(), [](const Finding& f) {
      static const std::set<std::string> kDescription = {
          "schema-key-unexpected", "schema-key-missing", "schema-shape-mismatch", "vocab-size-mismatch",
          "dtype-mismatch",        "embedding-missing",  "lm-head-missing",       "layer-missing",
          "layer-unexpected",      "mtp-layer-missing",  "expert-count-mismatch", "expert-missing",
          "tied-head-differs"};
      return kDescription.count(f.code) > 0;
    });
    if (o_.map.empty() && described && !from_hf_folder_)
      throw UnsupportedError(Where(o_.output),
                             "config.json does not describe the checkpoint's tensors as written (" + codes +
                                 "): from_pretrained would not load them as the model it names. Give "
                                 "a key map that takes them there (--map NAME or FILE: `dcpctl maps`), "
                                 "a config.json that describes them (--assets DIR)" +
                                 (o_.cast ? std::string() : ", --dtype DTYPE for the config's dtype") +
                                 ", --exclude GLOB for what the model does not have, or write them "
                                 "as they are (-o FILE.safetensors, or --no-assets); "
                                 "the folder was not put in place:" +
                                 what);
    if (!o_.map.empty() && schema_only) {
      if (const std::string settings = flag_settings(r); !settings.empty())
        throw UnsupportedError(Where(o_.output),
                               "config.json does not describe this checkpoint: the model it names has the tensors "
                               "key map " +
                                   o_.map + " wrote only with " + settings +
                                   ": give a config.json that sets it (--assets DIR, --config FILE) (" + codes +
                                   "), so the folder was not put in place:" + what);
      throw UnsupportedError(Where(o_.output), "key map " + o_.map +
                                                   " does not cover the model its config.json names (" + codes +
                                                   "), so the folder was not put in place:" + what);
    }
    if (!o_.map.empty() && described && !from_hf_folder_)
      throw UnsupportedError(Where(o_.output),
                             "config.json does not describe what key map " + o_.map + " made of the checkpoint (" +
                                 codes + "): give a config.json that does (--config FILE, --assets DIR)" +
                                 (o_.cast ? std::string() : " or --dtype DTYPE for the config's dtype") +
                                 "; the folder was not put in place:" + what);
    // Tensors saved in another dtype than the config's (a Megatron run's float32 norms beside bf16
    // weights), exported without --dtype: casting them is the user's call, and --dtype makes it.
    if (!o_.cast &&
        std::any_of(r.problems.begin(), r.problems.end(), [](const Finding& f) { return f.code == "dtype-mismatch"; }))
      what +=
          "\n  the tensors are written in their saved dtypes; --dtype DTYPE casts them to the config's (the "
          "precision policy keeps what transformers keeps in float32)";
    throw FormatError(Where(o_.output), "the folder written fails the checks of `dcpctl verify` (" + codes +
                                            "), so it was not put in place:" + what);
  }

  bool from_hf_folder_ = false;  // the input is a Hugging Face folder (its keys are a model's, or damaged)
};

}  // namespace

const Format formats::hf_folder = [] {
  Format f;
  f.name = "hf-safetensors";
  f.flag = "hf";
  f.writing = Writing::AtOffsets;
  f.tensors_only = true;
  f.folder = true;
  f.sharded = true;
  f.suffixes = {"/"};
  f.whole_model = true;
  f.file_name = [](size_t index, size_t count) {
    if (count == 1) return std::string("model.safetensors");
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
    return std::string(name);
  };
  f.part_buffers = at_offsets_part_buffers;
  f.consolidate_writer = [](const ConsolidateOptions& o) -> std::unique_ptr<OutputWriter> {
    return std::make_unique<HfFolder>(o);
  };
  return f;
}();

}  // namespace dcpctl
