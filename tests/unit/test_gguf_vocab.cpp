// The converter's pre-tokenizer digest (gguf/vocab.h) against transformers': the tokenizers of
// tests/fixtures/gguf (make_tokenizers.py: trained on the check text with Llama 3's and Qwen2's split
// patterns; digests.json holds what transformers 5.23's AutoTokenizer gives, the way llama.cpp's
// converter computes it), and the refusals of what dcpctl does not run.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include <cstdlib>

#include <utf8proc.h>

#include "gguf/normalizer.h"
#include "gguf/pretokenizer.h"
#include "gguf/vocab.h"
#include "util/error.h"

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

// The fixtures' tokenizers beside a llama model (transformers loads tokenizer.json as it is).
const json kLlama = {{"model_type", "llama"}};

std::string refusal(const json& tok, const json& config, const json& model = kLlama) {
  try {
    gguf::pre_digest(tok, config, model, "tokenizer.json");
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
    CHECK(gguf::pre_digest(load(name + "/tokenizer.json"), load(name + "/tokenizer_config.json"), kLlama, name) ==
          digest.get<std::string>());
  }
  CHECK(gguf::pre_name("0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5") == "llama-bpe");
  CHECK(gguf::pre_name(digests["llama3-bos"].get<std::string>()).empty());
}

TEST_CASE("gguf_vocab: what it cannot run exactly is refused, naming it") {
  const json tok = load("llama3-bos/tokenizer.json"), config = load("llama3-bos/tokenizer_config.json");
  json t = tok;
  t["normalizer"] = {{"type", "BertNormalizer"}};
  CHECK_THAT(refusal(t, config), Catch::Contains("normalizer BertNormalizer"));
  t = tok;
  t["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " "}}}, {"content", "x"}};
  CHECK_THAT(refusal(t, config), Catch::Contains("Replace with a pattern other than a String"));
  t = tok;
  t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[z-a]";
  CHECK_THAT(refusal(t, config), Catch::Contains("Oniguruma does not compile"));
  t = tok;
  t["pre_tokenizer"] = {{"type", "Metaspace"}};
  CHECK_THAT(refusal(t, config), Catch::Contains("without one ByteLevel step"));
  // An added token transformers numbers otherwise (the next past the vocabulary's 420) is refused.
  t = tok;
  t["added_tokens"].push_back({{"id", 999}, {"content", "apple"}, {"special", false}});
  CHECK_THAT(refusal(t, config), Catch::Contains("added token 'apple' has id 999") && Catch::Contains("gives it 420"));
  t = tok;
  t["post_processor"] = {{"type", "RobertaProcessing"}};
  CHECK_THAT(refusal(t, config), Catch::Contains("post_processor RobertaProcessing"));
  json c = config;
  c["tokenizer_class"] = "CodeGenTokenizer";
  CHECK_THAT(refusal(tok, c), Catch::Contains("tokenizer_class CodeGenTokenizer"));
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  c["auto_map"] = {{"AutoTokenizer", {"tokenization_x.XTokenizer", nullptr}}};
  CHECK_THAT(refusal(tok, c), Catch::Contains("auto_map"));
  CHECK_THAT(refusal(tok, config, {{"model_type", "gpt_neox"}}), Catch::Contains("model_type 'gpt_neox'"));
  c = config;
  c["add_bos_token"] = true;
  c["bos_token"] = "<|nowhere|>";
  CHECK_THAT(refusal(tok, c), Catch::Contains("bos_token '<|nowhere|>'"));
  // The merges are what the ids depend on: without the first (the corpus's most frequent pair, in
  // the check text) the digest changes.
  json all = tok;
  all["model"]["ignore_merges"] = false;
  json fewer = all;
  fewer["model"]["merges"].erase(0);
  CHECK(gguf::pre_digest(fewer, config, kLlama, "x") != gguf::pre_digest(all, config, kLlama, "x"));
}

// added_tokens.json (make_tokenizers.py added): llama3-bos with added tokens met in the check text,
// each set of flags and normalizer with the digest transformers 5.24 gives it.
TEST_CASE("gguf_vocab: added tokens are split out as tokenizers splits them") {
  const json tok = load("llama3-bos/tokenizer.json"), config = load("llama3-bos/tokenizer_config.json");
  const std::string plain = gguf::pre_digest(tok, config, kLlama, "x");
  const json cases = load("added_tokens.json");
  REQUIRE(cases.size() == 6);
  for (const auto& [name, c] : cases.items()) {
    INFO(name);
    json t = tok;
    t["normalizer"] = c.at("normalizer");
    for (const json& a : c.at("added_tokens")) t["added_tokens"].push_back(a);
    const std::string got = gguf::pre_digest(t, config, kLlama, name);
    CHECK(got == c.at("digest").get<std::string>());
    CHECK(got != plain);
  }
  // The same token named in tokenizer_config.json's added_tokens_decoder only: transformers adds it
  // alike (the same digest, checked with transformers 5.24 when the fixture was written).
  const json one = cases.at("between-letters");
  json c = config, entry = one.at("added_tokens").at(0);
  entry.erase("id");
  c["added_tokens_decoder"] = {{std::to_string(one["added_tokens"][0]["id"].get<int64_t>()), entry}};
  CHECK(gguf::pre_digest(tok, c, kLlama, "x") == one.at("digest").get<std::string>());
  c["added_tokens_decoder"] = {{"x1", entry}};
  CHECK_THAT(refusal(tok, c), Catch::Contains("added_tokens_decoder key 'x1'"));
}

TEST_CASE("gguf_vocab: the class transformers loads decides what runs") {
  const json tok = load("llama3-bos/tokenizer.json"), config = load("llama3-bos/tokenizer_config.json");
  const std::string as_is = gguf::pre_digest(tok, config, kLlama, "x");
  // Qwen2Tokenizer rebuilds the pre-tokenizer (Qwen2's pattern, one digit a piece) and drops
  // ignore_merges: another digest than the file's Llama 3 pattern gives, under any model type.
  json c = config;
  c["tokenizer_class"] = "Qwen2TokenizerFast";
  const std::string qwen = gguf::pre_digest(tok, c, kLlama, "x");
  CHECK(qwen != as_is);
  CHECK(gguf::pre_digest(tok, c, {{"model_type", "qwen3"}}, "x") == qwen);
  // model_type qwen2 is Qwen2Tokenizer whatever the class says; qwen3 honours the file's class.
  CHECK(gguf::pre_digest(tok, config, {{"model_type", "qwen2"}}, "x") == qwen);
  CHECK(gguf::pre_digest(tok, config, {{"model_type", "qwen3"}}, "x") == as_is);
  json none = config;
  none.erase("tokenizer_class");
  CHECK(gguf::pre_digest(tok, none, {{"model_type", "qwen3"}}, "x") == qwen);
  // LlamaTokenizerFast over a byte-level file is TokenizersBackend; glm4_moe always is.
  c["tokenizer_class"] = "LlamaTokenizerFast";
  CHECK(gguf::pre_digest(tok, c, kLlama, "x") == as_is);
  c["tokenizer_class"] = "Qwen2Tokenizer";
  CHECK(gguf::pre_digest(tok, c, {{"model_type", "glm4_moe"}}, "x") == as_is);
  // add_bos_token named: the template is bos_token and the sequence, whatever the file's was.
  json nobos = config;
  nobos["add_bos_token"] = false;
  json bos = tok;
  bos["post_processor"] = nullptr;
  CHECK(gguf::pre_digest(bos, config, kLlama, "x") != as_is);  // no post-processor: no BOS
  nobos["add_bos_token"] = true;
  CHECK(gguf::pre_digest(bos, nobos, kLlama, "x") == as_is);
}

TEST_CASE("gguf_vocab: normalizers change a text as utf8proc does") {
  const std::string decomposed = "Cafe\xcc\x81 \xef\xac\x81 A\xcc\x8a";  // e + U+0301, U+FB01 (fi), A + U+030A
  auto utf8proc = [](const std::string& s, utf8proc_uint8_t* (*f)(const utf8proc_uint8_t*)) {
    utf8proc_uint8_t* out = f(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
    std::string r(reinterpret_cast<char*>(out));
    std::free(out);
    return r;
  };
  const std::string nfc = gguf::normalize({{"type", "NFC"}}, decomposed, "x");
  CHECK(nfc != decomposed);
  CHECK(nfc == utf8proc(decomposed, utf8proc_NFC));
  CHECK(nfc == "Caf\xc3\xa9 \xef\xac\x81 \xc3\x85");
  CHECK(gguf::normalize({{"type", "NFKC"}}, decomposed, "x") == utf8proc(decomposed, utf8proc_NFKC));
  CHECK(gguf::normalize({{"type", "NFKC"}}, decomposed, "x") == "Caf\xc3\xa9 fi \xc3\x85");
  CHECK(gguf::normalize({{"type", "NFD"}}, nfc, "x") == utf8proc(nfc, utf8proc_NFD));
  CHECK(gguf::normalize({{"type", "NFKD"}}, nfc, "x") == utf8proc(nfc, utf8proc_NFKD));
  // DeepSeek's empty Sequence changes nothing; a Sequence applies its normalizers in order.
  CHECK(gguf::normalize({{"type", "Sequence"}, {"normalizers", json::array()}}, decomposed, "x") == decomposed);
  const json seq = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
  CHECK(gguf::normalize(seq, decomposed, "x") == "caf\xc3\xa9 \xef\xac\x81 \xc3\xa5");
  CHECK(gguf::normalize({{"type", "Lowercase"}}, "\xc4\xb0", "x") == "i\xcc\x87");  // U+0130, Rust's to_lowercase
  CHECK(gguf::normalize({{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}}, "a", "x") ==
        "\xe2\x96\x81"
        "a");
  CHECK(gguf::normalize({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "_"}}, "a b c", "x") ==
        "a_b_c");
  CHECK_THROWS_AS(gguf::normalize({{"type", "NFC"}}, "\xff", "x"), FormatError);
}

// The expected pieces are tokenizers 0.23's pre_tokenize_str (in the byte-level alphabet: "\xc4\xa0" is
// U+0120, a space's character).
TEST_CASE("gguf_vocab: pre-tokenizers split as tokenizers splits") {
  const json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  using V = std::vector<std::string>;
  CHECK(gguf::pre_tokenize(bl, "Hello world  33!", "x") == V{"Hello", "\xc4\xa0world", "\xc4\xa0",
                                                             "\xc4\xa0"
                                                             "33",
                                                             "!"});
  json seq = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, bl}}};
  CHECK(gguf::pre_tokenize(seq, "a 123", "x") == V{"a", "\xc4\xa0", "1", "2", "3"});
  seq["pretokenizers"][0]["individual_digits"] = false;
  CHECK(gguf::pre_tokenize(seq, "a 123", "x") == V{"a", "\xc4\xa0", "123"});
  // Oniguruma's $ is the end of a line: DeepSeek LLM's "\s+$" takes the spaces before a newline, not it.
  const json split = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\s+$"}}}, {"behavior", "Isolated"}, {"invert", false}};
  json ds = {{"type", "Sequence"},
             {"pretokenizers", {split, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  CHECK(gguf::pre_tokenize(ds, "a  \nb", "x") == V{"a", "\xc4\xa0\xc4\xa0",
                                                   "\xc4\x8a"
                                                   "b"});
  json prefix = bl;
  prefix["add_prefix_space"] = true;
  CHECK(gguf::pre_tokenize(prefix, "Hi", "x") == V{"\xc4\xa0Hi"});
  // Falcon's: punctuation runs, ByteLevel, then digit runs and threes of digits in the byte-level
  // text (where the UTF-8 bytes of a superscript two and three are numeric characters again).
  const json falcon = {{"type", "Sequence"},
                       {"pretokenizers",
                        {{{"type", "Punctuation"}, {"behavior", "Contiguous"}},
                         bl,
                         {{"type", "Digits"}, {"individual_digits", false}},
                         {{"type", "Split"},
                          {"pattern", {{"Regex", "[0-9][0-9][0-9]"}}},
                          {"behavior", "Isolated"},
                          {"invert", false}}}}};
  CHECK(gguf::pre_tokenize(falcon, "Hi, 12345 \xc2\xbfqu\xc3\xa9?!\xe2\x80\xa6 $x+=2", "x") ==
        V{"Hi", ",", "\xc4\xa0", "123", "45", "\xc4\xa0", "\xc3\x82\xc2\xbf", "qu\xc3\x83\xc2\xa9",
          "?!\xc3\xa2\xc4\xa2\xc2\xa6", "\xc4\xa0", "$", "x", "+=", "2"});
  CHECK(gguf::pre_tokenize(falcon, "x \xc2\xb2\xc2\xb3 1", "x") ==
        V{"x", "\xc4\xa0\xc3\x82", "\xc2\xb2", "\xc3\x82", "\xc2\xb3", "\xc4\xa0", "1"});
}
