// The files a Hugging Face folder needs beside its weights (config.json, the tokenizer, ...),
// copied into a consolidated DIR/ output so that from_pretrained(DIR) loads it.
//
// What counts as an asset: a regular file at the top of the source folder whose name is on an
// allow-list (kAssetNames in assets.cpp): the model's config and generation config; tokenizer
// files (tokenizer*.json, tokenizer*.model, *.tiktoken, vocab*, merges*.txt, *.spm, spiece.model,
// special_tokens_map.json, added_tokens.json, tekken.json); chat templates (chat_template.jinja,
// chat_template.json); processor configs (*processor_config.json, feature_extractor_config.json);
// a PEFT adapter_config.json; the remote code save_pretrained copies (configuration_*.py,
// modeling_*.py, tokenization_*.py, *processing_*.py); and the one pickle a model class reads beside
// its weights, Qwen2.5-Omni's speakers (spk_dict.pt: its from_pretrained raises without it). Never
// other weights or indexes (*.safetensors,
// *.bin, *.pt, *.pth, *.distcp, *.metadata, *.index.json, *.gguf, ...), never a hidden file (a
// dcpctl temporary is `.<name>.dcpctl-tmp-<pid>`), never a folder, nothing over kMaxAssetBytes.
//
// Where they are looked for (the nearer folder wins a name both hold):
//   - `from` (--assets DIR): that folder alone; a link is followed wherever it points (a Hugging
//     Face cache snapshot is all links into ../../blobs/), since the user named the folder;
//   - otherwise the checkpoint's own folder (transformers' save_pretrained(distributed_checkpoint=
//     True) leaves config.json and generation_config.json beside its rank shards) and, for a
//     HuggingFaceStorageWriter `sharded/` subfolder given as the checkpoint, its parent (where
//     the consolidated files and the configs sit). There a link is followed only when it stays
//     inside the folder: a checkpoint someone handed over must not carry, say, ~/.ssh/id_rsa out
//     under the name tokenizer.model.
// A file found by name and not copied is listed in `skipped` with the reason.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meta/checkpoint.h"
#include "util/dtype.h"
#include "view/model_config.h"

namespace dcpctl {

class UploadSession;

constexpr uint64_t kMaxAssetBytes = 256ull << 20;

struct Asset {
  std::string name;    // in the output folder (the source's base name)
  std::string source;  // the path it is copied from
  uint64_t bytes = 0;
  // config.json: its text as the model read it (view/model_config.h), checked and copied from
  // there; null: read from `source` (another asset, or no model's config given to find_assets).
  std::shared_ptr<const std::string> text;
};

struct AssetSkip {
  std::string path, reason;
};

struct Assets {
  std::vector<std::string> searched;  // the folders looked in, nearest first
  std::vector<Asset> files;           // sorted by name
  std::vector<AssetSkip> skipped;
};

// Whether `name` (a base name) is on the allow-list and none of the excluded kinds.
bool is_asset_name(const std::string& name);

// The assets beside checkpoint `ck`, or in `from` when not empty (UsageError naming it when it is
// not a directory). The config.json found takes its text from `model` (one read per command).
Assets find_assets(const Checkpoint& ck, const std::string& from, const ModelConfig* model = nullptr);

// Copies every asset to `path_of(name)`, each written under a temporary name and renamed (the
// caller's folder is itself temporary: OutputDir). Throws IoError when a source vanished or
// cannot be read. `edit_config`, when given, makes config.json's content from the source's (a
// dequantized export's config: view/codecs/quantized.h). Into object storage through `uploads`, the
// job's session (store/upload.h).
void copy_assets(const Assets& assets, const std::function<std::string(const std::string&)>& path_of,
                 const std::function<std::string(const std::string&)>& edit_config = nullptr,
                 UploadSession* uploads = nullptr);

// config.json of a folder written with --dtype: its `dtype` set to `dtype`'s torch name
// ("bfloat16"), and `torch_dtype` too where the file has it (transformers before 4.56 reads only
// that), in the top object and in every sub-config object (text_config, ...) that already names
// one; everything else and the order of the keys kept. from_pretrained(dtype="auto") builds the
// model in the dtype the config names, then keeps its _keep_in_fp32_modules_strict in float32,
// which is what --dtype wrote. The text as given when it is not a JSON object.
std::string config_with_dtype(const std::string& config_text, DType dtype);

// config.json with `quantization_config` set to `quantization` (a quantized export,
// view/codecs/quantize.h), the order of the other keys kept. The text as given when it is not a JSON
// object.
std::string quantized_config(const std::string& config_text, const nlohmann::json& quantization);

// What config.json says of tied word embeddings against what the output holds: transformers
// ties lm_head.weight to the input embeddings when `tie_word_embeddings` is true (its
// save_pretrained leaves the key out, FSDP's state dict keeps it), and initialises a missing one
// at random when it is false. nullopt when no config.json is among the assets, it is not a JSON
// object, or it has no boolean `tie_word_embeddings`.
struct TiedEmbeddings {
  bool config = false;  // config.json's tie_word_embeddings
  bool lm_head =
      false;  // the output holds the LM head (lm_head.weight, or the model schema's head: DeepSeek-V4's head.weight)
  std::string note;  // what follows, for people; empty when nothing is worth saying
};
std::optional<TiedEmbeddings> tied_embeddings(const Assets& assets, const std::vector<std::string>& output_keys);

// The layout of an HF folder's keys (check/hf_schema.h, key_layout) against the model schema of the
// config.json copied beside them: {"layout": "save_pretrained" or "release (transformers load-time
// renames)", "model_type", "renamed_on_load": how many keys transformers renames as it loads them};
// null without a config.json the schema holds. An export writes the keys under the names it read
// them by, so a release layout stays one (the summary's "hf_layout").
nlohmann::json output_layout(const Assets& assets, const std::vector<std::string>& output_keys);

}  // namespace dcpctl
