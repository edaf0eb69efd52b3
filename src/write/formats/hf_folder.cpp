// The `hf-safetensors` format: a Hugging Face folder. Sharded safetensors
// model-0000i-of-0000N.safetensors + model.safetensors.index.json {"metadata": {"total_size"},
// "weight_map"}; a single shard is model.safetensors without an index. Beside them the config,
// tokenizer and processor files (write/assets.h), copied from beside the checkpoint or --assets;
// under --dtype the config says the dtype written, and a dequantized export's config loses its
// quantization_config. Rank 0 copies them at commit, after
// the shards and before the index.
#include <algorithm>
#include <cstdio>
#include <functional>

#include "meta/quantized.h"
#include "write/assets.h"
#include "write/formats/safetensors_file.h"

namespace dcpctl {

using nlohmann::json;

namespace {

class HfFolder final : public SafetensorsFiles {
 public:
  using SafetensorsFiles::SafetensorsFiles;

  // Rank 0: the assets (an --assets folder that is not there is refused here).
  void check(const WriteRequest& request) override {
    SafetensorsFiles::check(request);
    if (o_.copy_assets) assets_ = find_assets(request.ck, o_.assets_from);
    wants_config_ = o_.copy_assets;
  }

 protected:
  std::string path_of(const PlannedFile& f) const override { return join_path(o_.output, f.name); }
  void more_files(const WritePlan& plan, json& files) const override {
    if (plan.files.size() > 1) files.push_back({{"path", join_path(o_.output, "model.safetensors.index.json")}});
  }

  void finish_folder(WriteJob& job) override {
    // --dtype: the config says the dtype written (write/assets.h); a dequantized export
    // (view/dequantize.h) is a plain model, and its config loses the quantization_config too.
    // --quantize: the config gains the quantization_config the loaders read (view/quantize.h).
    std::function<std::string(const std::string&)> edit;
    const Checkpoint& ck = job.request.ck;
    const bool dequantized = ck.derived && ck.derived->output.value("dequantized", false);
    const nlohmann::json quantization =
        ck.derived && ck.derived->output.contains("quantization_config") ? ck.derived->output["quantization_config"] : nlohmann::json();
    if (o_.cast || !quantization.is_null()) {
      edit = [cast = o_.cast, dequantized, quantization](const std::string& text) {
        std::string out = text;
        if (cast) out = config_with_dtype(dequantized ? dequantized_config(out, *cast) : out, *cast);
        if (!quantization.is_null()) out = quantized_config(out, quantization);
        return out;
      };
    }
    copy_assets(assets_, [&](const std::string& name) { return dir_->path_of(name); }, edit, dir_->uploads());
    if (job.plan.files.size() > 1) write_index(job.plan);
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
  f.file_name = [](size_t index, size_t count) {
    if (count == 1) return std::string("model.safetensors");
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
    return std::string(name);
  };
  f.part_buffers = at_offsets_part_buffers;
  f.consolidate_writer = [](const ConsolidateOptions& o) -> std::unique_ptr<OutputWriter> { return std::make_unique<HfFolder>(o); };
  return f;
}();

}  // namespace dcpctl
