#include "write/assets.h"

#include <dirent.h>
#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "check/hf_schema.h"
#include "store/file.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "write/output.h"

namespace dcpctl {

namespace {

// Names (fnmatch patterns) of what transformers, tokenizers, sentencepiece, tiktoken and
// mistral-common save beside the weights and read back in from_pretrained.
constexpr const char* kAssetNames[] = {
    "config.json",
    "generation_config.json",
    "adapter_config.json",
    // tokenizers
    "tokenizer*.json",
    "tokenizer*.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab*",
    "merges*.txt",
    "spiece.model",
    "sentencepiece*.model",
    "*.spm",
    "*.tiktoken",
    "tiktoken.model",
    "tekken.json",
    // chat templates (transformers >= 4.43 writes chat_template.jinja, older chat_template.json)
    "chat_template.jinja",
    "chat_template.json",
    // image, video and audio processors
    "*processor_config.json",
    "feature_extractor_config.json",
    // remote code (trust_remote_code), as save_pretrained copies it
    "configuration_*.py",
    "modeling_*.py",
    "tokenization_*.py",
    "*processing_*.py",
};

// Files a model class's from_pretrained reads beside the weights that are pickles by name, but no
// weights of the checkpoint: Qwen2.5-Omni's speakers (Qwen2_5OmniForConditionalGeneration's
// load_speakers, torch.load(weights_only=True) of spk_dict.pt; its from_pretrained raises without
// one, and save_pretrained does not write it: a released folder ships it). Copied byte for byte.
constexpr const char* kModelSidecars[] = {"spk_dict.pt"};

// Weights, indexes and checkpoint metadata: never assets, whatever the allow-list matches.
constexpr const char* kNeverNames[] = {
    "*.safetensors", "*.bin",    "*.pt",  "*.pth",     "*.ckpt",       "*.distcp", "*.metadata",
    "*.index.json",  "*.gguf",   "*.h5",  "*.msgpack", "*.onnx",       "*.npz",    "*.npy",
    "*.pkl",         "*.pickle", "*.tar", "*.zip",     "*dcpctl-tmp*",
};

bool matches(const std::string& name, const char* const* first, const char* const* last) {
  return std::any_of(first, last, [&](const char* p) { return ::fnmatch(p, name.c_str(), 0) == 0; });
}

// The names in `dir`, sorted (none when it cannot be listed).
std::vector<std::string> list_names(const std::string& dir) {
  return list_dir(dir);
}

std::string real_path(const std::string& p) {
  if (is_remote_path(p)) return p;  // object storage has no links
  std::unique_ptr<char, decltype(&std::free)> r(::realpath(p.c_str(), nullptr), &std::free);
  return r ? std::string(r.get()) : std::string();
}

bool inside(const std::string& path, const std::string& dir) {
  return !dir.empty() && path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         (dir.back() == '/' || path[dir.size()] == '/');
}

// The assets of one folder into `found` (names already there, from a nearer folder, are kept).
void look_in(const std::string& dir, bool follow_any_link, std::map<std::string, Asset>& found,
             std::vector<AssetSkip>& skipped) {
  const std::string real_dir = real_path(dir);
  for (const std::string& name : list_names(dir)) {
    if (name.empty() || name[0] == '.' || !is_asset_name(name) || found.count(name)) continue;
    const std::string path = join_path(dir, name);
    if (is_remote_path(path)) {  // an object: no links to judge
      PathInfo st = stat_path(path);
      if (st.kind != PathInfo::file) continue;
      if (st.size > kMaxAssetBytes) {
        skipped.push_back({path, std::to_string(st.size) + " bytes, over the " + std::to_string(kMaxAssetBytes >> 20) +
                                     " MiB dcpctl copies beside the weights"});
        continue;
      }
      found[name] = {name, path, st.size, nullptr};
      continue;
    }
    struct stat ls, st;
    if (::lstat(path.c_str(), &ls) != 0) continue;  // gone since the listing
    if (S_ISLNK(ls.st_mode) && !follow_any_link && !inside(real_path(path), real_dir)) {
      skipped.push_back(
          {path, "a link that leaves the checkpoint's folder (give the folder with --assets to follow it)"});
      continue;
    }
    if (::stat(path.c_str(), &st) != 0) {
      skipped.push_back({path, S_ISLNK(ls.st_mode) ? "a dangling link" : errno_text(errno)});
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      if (!S_ISDIR(st.st_mode)) skipped.push_back({path, "not a regular file"});
      continue;
    }
    if (static_cast<uint64_t>(st.st_size) > kMaxAssetBytes) {
      skipped.push_back({path, std::to_string(st.st_size) + " bytes, over the " + std::to_string(kMaxAssetBytes >> 20) +
                                   " MiB dcpctl copies beside the weights"});
      continue;
    }
    found[name] = {name, path, static_cast<uint64_t>(st.st_size), nullptr};
  }
}

}  // namespace

bool is_asset_name(const std::string& name) {
  if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos) return false;
  if (std::find(std::begin(kModelSidecars), std::end(kModelSidecars), name) != std::end(kModelSidecars)) return true;
  return matches(name, std::begin(kAssetNames), std::end(kAssetNames)) &&
         !matches(name, std::begin(kNeverNames), std::end(kNeverNames));
}

Assets find_assets(const Checkpoint& ck, const std::string& from, const ModelConfig* model) {
  Assets a;
  std::map<std::string, Asset> found;
  if (!from.empty()) {
    if (!path_exists(from)) throw UsageError(Where(from), "--assets: no such folder");
    if (!is_directory(from))
      throw UsageError(Where(from), "--assets: not a folder (give the folder that holds config.json)");
    a.searched.push_back(from);
    look_in(from, true, found, a.skipped);
  } else {
    a.searched.push_back(ck.dir);
    if (ck.layout == CheckpointLayout::HfDcpShards && base_name(ck.dir) == "sharded")
      a.searched.push_back(parent_path(ck.dir));
    for (const auto& d : ck.asset_dirs)  // a trainer's step folder, then its run folder
      if (is_directory(d) && std::find(a.searched.begin(), a.searched.end(), d) == a.searched.end())
        a.searched.push_back(d);
    for (const auto& dir : a.searched) look_in(dir, false, found, a.skipped);
  }
  for (auto& [name, asset] : found) {
    // --config's config.json in place of the one found (view/model_config.h): the weights follow it.
    if (model && name == "config.json" && !model->given().empty()) asset.source = model->given();
    if (model && name == "config.json") try {
        if (std::shared_ptr<const ConfigFile> f = model->file(asset.source))
          asset.text = std::shared_ptr<const std::string>(f, &f->text);
      } catch (const Error&) {
        // unreadable: the copy reads it again and says so
      }
    a.files.push_back(std::move(asset));
  }
  // No config.json where the assets were looked for, but --config gave one: that one (the weights
  // were shaped by it; from_pretrained needs one).
  if (model && !model->given().empty() && !found.count("config.json")) {
    Asset asset{"config.json", model->given(), 0, nullptr};
    if (std::shared_ptr<const ConfigFile> f = model->file(asset.source)) {
      asset.text = std::shared_ptr<const std::string>(f, &f->text);
      asset.bytes = f->text.size();
      // in name order, as the listing gives the others
      auto at = std::find_if(a.files.begin(), a.files.end(), [](const Asset& f) { return f.name > "config.json"; });
      a.files.insert(at, std::move(asset));
    }
  }
  return a;
}

void copy_assets(const Assets& assets, const std::function<std::string(const std::string&)>& path_of,
                 const std::function<std::string(const std::string&)>& edit_config, UploadSession* uploads) {
  constexpr size_t kWindow = 1 << 20;
  std::unique_ptr<uint8_t[]> buf(new uint8_t[kWindow]);
  failpoint_stop("assets-copy");  // tests: a source removed between the listing and the copy
  for (const Asset& a : assets.files) {
    OutputFile out(path_of(a.name), uploads);
    if (a.text) {  // config.json as the model read it
      const std::string text = edit_config ? edit_config(*a.text) : *a.text;
      out.append(reinterpret_cast<const uint8_t*>(text.data()), text.size());
      out.commit();
      continue;
    }
    ReadFile in(a.source);
    if (edit_config && a.name == "config.json") {
      const std::string text = edit_config(in.read_all());
      out.append(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    } else {
      for (uint64_t off = 0; off < in.size(); off += kWindow) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(kWindow, in.size() - off));
        in.read_at(off, buf.get(), n);
        out.append(buf.get(), n);
      }
    }
    out.commit();
  }
}

std::string config_with_dtype(const std::string& config_text, DType dtype) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(config_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return config_text;
  const char* name = torch_name(dtype);
  for (auto& [k, sub] : j.items())
    if (sub.is_object() && (sub.contains("dtype") || sub.contains("torch_dtype")))
      for (const char* field : {"dtype", "torch_dtype"})
        if (sub.contains(field)) sub[field] = name;
  if (j.contains("torch_dtype")) j["torch_dtype"] = name;
  j["dtype"] = name;  // a new key goes last
  return j.dump(2) + "\n";
}

namespace {

// The config.json copied beside the weights, or discarded.
nlohmann::json copied_config(const Assets& assets) {
  auto cfg =
      std::find_if(assets.files.begin(), assets.files.end(), [](const Asset& a) { return a.name == "config.json"; });
  if (cfg == assets.files.end()) return nlohmann::json::value_t::discarded;
  try {
    return nlohmann::json::parse(cfg->text ? *cfg->text : ReadFile(cfg->source).read_all(), nullptr, false);
  } catch (const Error&) {
    return nlohmann::json::value_t::discarded;  // the copy reports it
  }
}

}  // namespace

nlohmann::json output_layout(const Assets& assets, const std::vector<std::string>& output_keys) {
  const nlohmann::json j = copied_config(assets);
  const ModelSchema* s = j.is_discarded() ? nullptr : schema_for_config(j);
  if (!s) return nullptr;
  const KeyLayout layout = key_layout(*s, output_keys);
  return {{"layout", layout.layout}, {"model_type", s->type}, {"renamed_on_load", layout.save_names.size()}};
}

std::optional<TiedEmbeddings> tied_embeddings(const Assets& assets, const std::vector<std::string>& output_keys) {
  const nlohmann::json j = copied_config(assets);
  if (j.is_discarded() || !j.is_object() || !j.contains("tie_word_embeddings") ||
      !j["tie_word_embeddings"].is_boolean())
    return std::nullopt;
  TiedEmbeddings t;
  t.config = j["tie_word_embeddings"].get<bool>();
  // The head: lm_head.weight, or what the model schema has tie_word_embeddings take away (DeepSeek-V4's
  // head.weight), in either layout of the folder's keys.
  std::vector<std::string> heads = {"lm_head.weight"};
  const ModelSchema* s = schema_for_config(j);
  if (s)
    for (const auto& [pattern, when] : s->absent)
      if (when == "tie_word_embeddings=true" && pattern.find('#') == std::string::npos) heads.push_back(pattern);
  for (const auto& k : output_keys) {
    const std::string save = s ? s->save_name(k) : std::string();
    if (std::find(heads.begin(), heads.end(), save.empty() ? k : save) != heads.end()) t.lm_head = true;
  }
  bool causal_lm = false;
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      if (a.is_string() && a.get<std::string>().size() > 11 &&
          a.get<std::string>().rfind("ForCausalLM") == a.get<std::string>().size() - 11)
        causal_lm = true;
  if (t.config && t.lm_head)
    t.note =
        "config.json ties the word embeddings (tie_word_embeddings: true) and the output holds lm_head.weight, which "
        "is not the embedding's bytes (or has no embedding to be compared with): kept, and from_pretrained will tie "
        "it to the input embeddings, not reading its values";
  else if (!t.config && !t.lm_head && causal_lm)
    t.note =
        "config.json does not tie the word embeddings (tie_word_embeddings: false) and the output has no "
        "lm_head.weight: from_pretrained will initialise the LM head at random (left out by --include, --exclude "
        "or --select?)";
  return t;
}

std::string quantized_config(const std::string& config_text, const nlohmann::json& quantization) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(config_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return config_text;
  j["quantization_config"] = nlohmann::ordered_json::parse(quantization.dump());
  return j.dump(2) + "\n";
}

}  // namespace dcpctl
