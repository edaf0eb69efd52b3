// The `peft-adapter` format (consolidate --lora adapter): the folder PeftModel.from_pretrained
// loads. adapter_model.safetensors holds the adapter's tensors under the keys PEFT saves
// (meta/lora_keys.h: the view gives them), `__metadata__ {"format": "pt"}` as PEFT writes it, and
// adapter_config.json beside it (the view's: the given or found config, completed from the
// shapes), written after the weights, before the folder is committed.
#include "lora/peft_adapter.h"

#include "write/formats/safetensors_file.h"

namespace dcpctl {

using nlohmann::json;

namespace {

constexpr const char* kConfigFile = "adapter_config.json";

class PeftAdapter final : public SafetensorsFiles {
 public:
  using SafetensorsFiles::SafetensorsFiles;

 protected:
  void plan_files(WriteJob& job, json& summary) override {
    if (!adapter_config(job))
      throw UsageError(Where(o_.output),
                       "a PEFT adapter folder is written from a checkpoint's LoRA adapter: give --lora adapter");
    SafetensorsFiles::plan_files(job, summary);
  }
  std::string path_of(const PlannedFile& f) const override { return join_path(o_.output, f.name); }
  void more_files(const WritePlan& plan, json& files) const override {
    (void)plan;
    files.push_back({{"path", join_path(o_.output, kConfigFile)}});
  }
  void finish_folder(WriteJob& job) override { write_text(kConfigFile, adapter_config(job)->dump(2) + "\n"); }

 private:
  // What the LoRA view (lora/lora.h) left for this writer; null without --lora adapter.
  static const json* adapter_config(const WriteJob& job) {
    const Checkpoint& ck = job.request.ck;
    if (!ck.derived || !ck.derived->output.adapter_config) return nullptr;
    return &*ck.derived->output.adapter_config;
  }
};

}  // namespace

const Format peft_adapter_format = [] {
  Format f;
  f.name = "peft-adapter";
  // Not a --format word: --lora adapter chooses it (it needs the view the adapter is read through).
  f.writing = Writing::AtOffsets;
  f.tensors_only = true;
  f.folder = true;
  f.file_name = [](size_t, size_t) { return std::string("adapter_model.safetensors"); };
  f.part_buffers = at_offsets_part_buffers;
  f.consolidate_writer = [](const ConsolidateOptions& o) -> std::unique_ptr<OutputWriter> {
    return std::make_unique<PeftAdapter>(o);
  };
  return f;
}();

}  // namespace dcpctl
