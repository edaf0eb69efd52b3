// write/assets: which names are copied beside an HF folder's weights, where they are looked for,
// and what config.json's tie_word_embeddings says against the keys written. (The copy itself, and
// transformers loading the result, are tests/interop/hf_assets_test.py's.)
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "write/assets.h"
#include "write/output.h"

using namespace dcpctl;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dcpctl-assets-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { remove_tree(path); }
  std::string put(const std::string& name, const std::string& text) const {
    std::string p = path + "/" + name;
    FILE* f = std::fopen(p.c_str(), "wb");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    return p;
  }
};

std::vector<std::string> names_of(const Assets& a) {
  std::vector<std::string> n;
  for (const auto& f : a.files) n.push_back(f.name);
  return n;
}

Assets with_config(const TempDir& d, const std::string& json) {
  d.put("config.json", json);
  Checkpoint ck;
  ck.dir = d.path;
  return find_assets(ck, "");
}

}  // namespace

TEST_CASE("assets: the allow-list by name, never weights, indexes, hidden files or temporaries") {
  for (const char* n : {"config.json",
                        "generation_config.json",
                        "tokenizer.json",
                        "tokenizer_config.json",
                        "tokenizer.model",
                        "special_tokens_map.json",
                        "added_tokens.json",
                        "vocab.json",
                        "vocab.txt",
                        "merges.txt",
                        "spiece.model",
                        "chat_template.jinja",
                        "chat_template.json",
                        "preprocessor_config.json",
                        "processor_config.json",
                        "video_preprocessor_config.json",
                        "qwen.tiktoken",
                        "tiktoken.model",
                        "tekken.json",
                        "modeling_tiny.py",
                        "configuration_tiny.py",
                        "adapter_config.json",
                        "spk_dict.pt"})
    CHECK(is_asset_name(n));
  for (const char* n : {"model.safetensors",
                        "model-00001-of-00002.safetensors",
                        "model.safetensors.index.json",
                        "pytorch_model.bin",
                        "vocab.safetensors",
                        "vocab.bin",
                        "tokenizer.index.json",
                        "__0_0.distcp",
                        ".metadata",
                        "__0.metadata",
                        ".config.json.dcpctl-tmp-123",
                        "config.json.dcpctl-tmp-1",
                        ".hidden.json",
                        "README.md",
                        "train.py",
                        "optimizer.pt",
                        "trainer_state.json",
                        "training_args.bin",
                        "sharded",
                        "",
                        "spk_dict.pt.bak",
                        "my_spk_dict.pt"})
    CHECK_FALSE(is_asset_name(n));
}

TEST_CASE("assets: found beside the checkpoint, and in a sharded/ folder's parent (the nearer wins)") {
  TempDir d;
  ::mkdir((d.path + "/sharded").c_str(), 0755);
  d.put("config.json", "{}");
  d.put("generation_config.json", "parent");
  d.put("model.safetensors", "x");
  d.put("sharded/generation_config.json", "near");
  d.put("sharded/shard-00001-model-00001-of-00001.safetensors", "x");
  ::mkdir((d.path + "/tokenizer.json").c_str(), 0755);  // a folder by an asset's name: not an asset

  Checkpoint ck;
  ck.dir = d.path + "/sharded";
  ck.layout = CheckpointLayout::HfDcpShards;
  Assets a = find_assets(ck, "");
  CHECK(names_of(a) == std::vector<std::string>{"config.json", "generation_config.json"});
  CHECK(a.files[1].source == d.path + "/sharded/generation_config.json");
  CHECK(a.searched == std::vector<std::string>{d.path + "/sharded", d.path});
  CHECK(a.skipped.empty());

  ck.layout = CheckpointLayout::Dcp;  // a DCP folder that happens to be named sharded: its own files only
  CHECK(names_of(find_assets(ck, "")) == std::vector<std::string>{"generation_config.json"});

  CHECK_THROWS_AS(find_assets(ck, d.path + "/nowhere"), UsageError);
  CHECK_THROWS_AS(find_assets(ck, d.path + "/config.json"), UsageError);
  CHECK(names_of(find_assets(ck, d.path)) == std::vector<std::string>{"config.json", "generation_config.json"});
}

TEST_CASE("assets: links leave the checkpoint's folder only from an --assets folder") {
  TempDir d, outside;
  std::string secret = outside.put("secret", "x");
  REQUIRE(::symlink(secret.c_str(), (d.path + "/tokenizer.model").c_str()) == 0);
  d.put("tokenizer_config.json", "{}");
  REQUIRE(::symlink("tokenizer_config.json", (d.path + "/special_tokens_map.json").c_str()) == 0);
  Checkpoint ck;
  ck.dir = d.path;
  Assets a = find_assets(ck, "");
  CHECK(names_of(a) == std::vector<std::string>{"special_tokens_map.json", "tokenizer_config.json"});
  REQUIRE(a.skipped.size() == 1);
  CHECK(a.skipped[0].path == d.path + "/tokenizer.model");
  CHECK(names_of(find_assets(ck, d.path)) ==
        std::vector<std::string>{"special_tokens_map.json", "tokenizer.model", "tokenizer_config.json"});
}

TEST_CASE("assets: tie_word_embeddings against lm_head.weight, a note only where it matters") {
  TempDir d;
  const std::vector<std::string> with_head{"model.embed_tokens.weight", "lm_head.weight"},
      without{"model.embed_tokens.weight"};
  auto t = tied_embeddings(with_config(d, R"({"tie_word_embeddings": true})"), with_head);
  REQUIRE(t);
  CHECK((t->config && t->lm_head && !t->note.empty()));
  t = tied_embeddings(with_config(d, R"({"tie_word_embeddings": true})"), without);
  REQUIRE(t);
  CHECK((t->config && !t->lm_head && t->note.empty()));
  t = tied_embeddings(with_config(d, R"({"tie_word_embeddings": false, "architectures": ["LlamaForCausalLM"]})"),
                      without);
  REQUIRE(t);
  CHECK((!t->config && !t->lm_head && t->note.find("at random") != std::string::npos));
  t = tied_embeddings(with_config(d, R"({"tie_word_embeddings": false, "architectures": ["BertModel"]})"), without);
  REQUIRE(t);
  CHECK(t->note.empty());
  t = tied_embeddings(with_config(d, R"({"tie_word_embeddings": false})"), with_head);
  REQUIRE(t);
  CHECK(t->note.empty());
  CHECK_FALSE(tied_embeddings(with_config(d, R"({"model_type": "llama"})"), with_head));
  CHECK_FALSE(tied_embeddings(with_config(d, R"({"tie_word_embeddings": "yes"})"), with_head));
  CHECK_FALSE(tied_embeddings(with_config(d, "not json"), with_head));
  CHECK_FALSE(tied_embeddings(Assets{}, with_head));
}
