// The converter's pre-tokenizer digest (gguf/vocab.h) against transformers': the tokenizers of
// tests/fixtures/gguf (make_tokenizers.py: trained on the check text with Llama 3's and Qwen2's split
// patterns; digests.json holds what transformers 5.23's AutoTokenizer gives, the way llama.cpp's
// converter computes it), and the refusals of what dcpctl does not run.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "util/error.h"
#include "gguf/vocab.h"

using namespace dcpctl;
using nlohmann::json;

namespace {

json load(const std::string& rel) {
  std::ifstream f(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/gguf/" + rel);
  REQUIRE(f.good());
  std::stringstream s;
  s << f.rdbuf();
  return json::parse(s.str());
}

std::string refusal(const json& tok, const json& config) {
  try {
    gguf::pre_digest(tok, config, "tokenizer.json");
  } catch (const UnsupportedError& e) {
    return e.what();
  }
  return "(no refusal)";
}

}  // namespace

TEST_CASE("gguf_vocab: the digest is transformers' for each fixture tokenizer") {
  const json digests = load("digests.json");
  REQUIRE(digests.size() == 3);
  for (const auto& [name, digest] : digests.items()) {
    INFO(name);
    CHECK(gguf::pre_digest(load(name + "/tokenizer.json"), load(name + "/tokenizer_config.json"), name) ==
          digest.get<std::string>());
  }
  CHECK(gguf::pre_name("0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5") == "llama-bpe");
  CHECK(gguf::pre_name(digests["llama3-bos"].get<std::string>()).empty());
}

TEST_CASE("gguf_vocab: what it cannot run exactly is refused, naming it") {
  const json tok = load("llama3-bos/tokenizer.json"), config = load("llama3-bos/tokenizer_config.json");
  json t = tok;
  t["normalizer"] = {{"type", "NFC"}};
  CHECK_THAT(refusal(t, config), Catch::Contains("a normalizer"));
  t = tok;
  t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
  CHECK_THAT(refusal(t, config), Catch::Contains("split pattern"));
  t = tok;
  t["added_tokens"].push_back({{"id", 999}, {"content", "apple"}, {"special", false}});
  CHECK_THAT(refusal(t, config), Catch::Contains("added token"));
  t = tok;
  t["post_processor"] = {{"type", "RobertaProcessing"}};
  CHECK_THAT(refusal(t, config), Catch::Contains("post_processor RobertaProcessing"));
  json c = config;
  c["tokenizer_class"] = "Qwen2Tokenizer";
  CHECK_THAT(refusal(tok, c), Catch::Contains("tokenizer_class Qwen2Tokenizer"));
  c = config;
  c["add_bos_token"] = true;
  CHECK_THAT(refusal(tok, c), Catch::Contains("add_bos_token"));
  // The merges are what the ids depend on: without the first (the corpus's most frequent pair, in
  // the check text) the digest changes.
  json all = tok;
  all["model"]["ignore_merges"] = false;
  json fewer = all;
  fewer["model"]["merges"].erase(0);
  CHECK(gguf::pre_digest(fewer, config, "x") != gguf::pre_digest(all, config, "x"));
}
