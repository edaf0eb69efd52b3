// The tokenizer transformers loads (gguf/hf_tokenizer.h).
#include "gguf/hf_tokenizer.h"

#include <algorithm>
#include <map>
#include <optional>

#include "util/error.h"

namespace dcpctl::gguf {

using nlohmann::json;

namespace {

const char* const kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::string kBackendClass = "TokenizersBackend";

[[noreturn]] void refuse_loaded(const std::string& where, const std::string& what) {
  throw UnsupportedError(
      Where(where),
      "llama.cpp's converter names a tokenizer by transformers' output, and dcpctl cannot reproduce it here: " + what +
          " (tokenizer.ggml.pre)");
}

// TOKENIZER_MAPPING_NAMES of transformers 5.23 (granite, olmo2, starcoder2, cohere, falcon, ministral3, mpt:
// 5.24's; ministral3 and mistral are MistralCommonBackend where mistral_common is installed, which
// the project's virtualenv does not) for the model types
// dcpctl writes with a tokenizer.json ("": none).
const std::map<std::string, std::string>& registered_classes() {
  static const std::map<std::string, std::string> m{{"llama", ""},
                                                    {"mistral", kBackendClass},
                                                    {"mixtral", kBackendClass},
                                                    {"qwen2", "Qwen2Tokenizer"},
                                                    {"qwen3", "Qwen2Tokenizer"},
                                                    {"qwen3_moe", "Qwen2Tokenizer"},
                                                    {"deepseek_v2", ""},
                                                    {"deepseek_v3", ""},
                                                    {"kimi_k2", ""},
                                                    {"glm4_moe", kBackendClass},
                                                    {"gpt_oss", ""},
                                                    {"granite", kBackendClass},
                                                    {"olmo2", kBackendClass},
                                                    {"starcoder2", "GPT2Tokenizer"},
                                                    {"cohere", "CohereTokenizer"},
                                                    {"falcon", ""},
                                                    {"ministral3", kBackendClass},
                                                    {"mpt", "GPTNeoXTokenizer"}};
  return m;
}

std::string strip_fast(std::string s) {
  if (s.size() > 4 && s.compare(s.size() - 4, 4, "Fast") == 0) s.resize(s.size() - 4);
  return s;
}

bool is_backend_class(const std::string& c) {
  return c == kBackendClass || c == "PreTrainedTokenizerFast" || c == "PreTrainedTokenizer" || c == "PythonBackend" ||
         c == "BloomTokenizer" || c == "BloomTokenizerFast";
}

// tokenizer_class_from_name for the classes dcpctl knows: TokenizersBackend for its aliases, the
// class's own name, or nullopt for a class it does not know (which transformers may or may not have).
std::optional<std::string> resolve_class(const std::string& name) {
  if (is_backend_class(name)) return kBackendClass;
  static const char* known[] = {"Qwen2Tokenizer", "GPT2Tokenizer", "CohereTokenizer", "GPTNeoXTokenizer",
                                "LlamaTokenizer"};
  for (const char* k : known)
    if (name == k || name == std::string(k) + "Fast") return std::string(k);
  return std::nullopt;
}

std::string resolved_class(const std::string& name, const std::string& where) {
  auto c = resolve_class(name);
  if (!c)
    refuse_loaded(where, "tokenizer_class " + name + " (a class dcpctl does not know what transformers builds from)");
  return *c;
}

// Whether `s` is one of j's strings, a key or a value, at any depth (as `"s"` in j.dump(), without
// writing out a vocabulary of megabytes).
bool has_string(const json& j, const std::string& s) {
  if (j.is_string()) return j.get_ref<const std::string&>() == s;
  if (j.is_array()) return std::any_of(j.begin(), j.end(), [&](const json& x) { return has_string(x, s); });
  if (!j.is_object()) return false;
  for (const auto& [k, v] : j.items())
    if (k == s || has_string(v, s)) return true;
  return false;
}

std::string loaded_class(const json& tok, const json& tconf, const json& config, const std::string& where) {
  if (tconf.is_object() && tconf.contains("auto_map"))
    refuse_loaded(where, "tokenizer_config.json's auto_map (remote code)");
  const std::string mt = config.is_object() && config.value("model_type", json()).is_string()
                             ? config["model_type"].get<std::string>()
                             : "";
  auto reg_it = registered_classes().find(mt);
  if (reg_it == registered_classes().end())
    refuse_loaded(
        where, "config.json's model_type '" + mt + "' (the class AutoTokenizer picks for it is not in dcpctl's table)");
  const std::string reg = reg_it->second;
  const bool incorrect_hub = mt == "qwen2";  // MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
  auto str = [](const json& j, const char* k) {
    return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  const std::string tc_class = str(tconf, "tokenizer_class"), cfg_class = str(config, "tokenizer_class");
  const std::string hub = !tc_class.empty() ? tc_class : cfg_class;
  if (!hub.empty() && strip_fast(hub) == "LlamaTokenizer" && !incorrect_hub && has_string(tok, "ByteLevel"))
    return kBackendClass;
  if (!hub.empty() && !reg.empty() && strip_fast(reg) != strip_fast(hub)) {
    if (!is_backend_class(reg)) {
      const std::string c = resolved_class(incorrect_hub ? reg : hub, where);
      if (c != kBackendClass) return c;
    }
    return kBackendClass;
  }
  if (!tc_class.empty()) {
    const std::string c = strip_fast(tc_class);
    if (auto r = resolve_class(c)) return *r;
    refuse_loaded(where,
                  "tokenizer_class " + tc_class + " (a class dcpctl does not know what transformers builds from)");
  }
  if (!cfg_class.empty()) return resolved_class(cfg_class, where);
  return reg.empty() ? kBackendClass : reg;
}

// A tokenizer_config.json token: a string or an AddedToken's content; nullopt: null or absent.
std::optional<std::string> config_token(const json& tconf, const char* key, std::optional<std::string> dflt) {
  if (!tconf.is_object() || !tconf.contains(key)) return dflt;
  const json& v = tconf[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// The ids the post-processor puts before and after the sequence.
void post_processor_ids(const json& pp, std::vector<int64_t>& before, std::vector<int64_t>& after,
                        const std::string& where) {
  const std::string type = pp.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& p : pp.value("processors", json::array())) post_processor_ids(p, before, after, where);
    return;
  }
  if (type != "TemplateProcessing") refuse_loaded(where, "post_processor " + type);
  bool seen = false;
  for (const json& piece : pp.at("single")) {
    if (piece.contains("Sequence")) {
      if (seen || piece["Sequence"].value("id", "") != "A")
        refuse_loaded(where, "a TemplateProcessing other than special tokens around A");
      seen = true;
    } else if (piece.contains("SpecialToken")) {
      const std::string id = piece["SpecialToken"].at("id").get<std::string>();
      for (const json& x : pp.at("special_tokens").at(id).at("ids"))
        (seen ? after : before).push_back(x.get<int64_t>());
    } else {
      refuse_loaded(where, "a TemplateProcessing piece it does not know");
    }
  }
  if (!seen) refuse_loaded(where, "a TemplateProcessing without its sequence");
}

// One AddedToken of tokenizer.json's added_tokens or tokenizer_config.json's added_tokens_decoder.
AddedToken added_token(const json& a, int64_t id) {
  AddedToken t;
  t.content = a["content"].get<std::string>(), t.id = id;
  auto flag = [&](const char* k, bool dflt) { return a.value(k, json()).is_boolean() ? a[k].get<bool>() : dflt; };
  t.special = flag("special", false), t.normalized = flag("normalized", !t.special);
  t.lstrip = flag("lstrip", false), t.rstrip = flag("rstrip", false), t.single_word = flag("single_word", false);
  return t;
}

// Tokenizers' ids: a content in the vocabulary keeps its id there; the others are numbered on
// from the vocabulary's size in their order. A file that says otherwise is refused.
void check_added_ids(const std::vector<AddedToken>& added, const json& vocab, const std::string& where) {
  int64_t next = vocab.is_object() ? static_cast<int64_t>(vocab.size()) : 0;
  for (const AddedToken& a : added) {
    if (a.id < 0) continue;
    auto it = vocab.is_object() ? vocab.find(a.content) : vocab.end();
    const int64_t want = it != vocab.end() && it->is_number_integer() ? it->get<int64_t>() : next++;
    if (want != a.id)
      refuse_loaded(where, "added token '" + a.content + "' has id " + std::to_string(a.id) +
                               " in the tokenizer files, where transformers gives it " + std::to_string(want) +
                               " (the vocabulary's, else the next past its " + std::to_string(vocab.size()) +
                               " tokens)");
  }
}

// The added tokens transformers' tokenizer holds (gguf/hf_tokenizer.h), their ids checked.
std::vector<AddedToken> added_tokens(const json& tok, const json& tconf, const json& model, const std::string& where) {
  std::vector<AddedToken> out;
  std::map<std::string, size_t> at;  // content -> its place in `out`
  auto add = [&](AddedToken t) {
    if (t.content.empty()) return;
    if (auto it = at.find(t.content); it != at.end()) {
      if (t.id < 0) t.id = out[it->second].id;
      out[it->second] = std::move(t);
      return;
    }
    at[t.content] = out.size();
    out.push_back(std::move(t));
  };
  for (const json& a : tok.value("added_tokens", json::array()))
    if (a.is_object() && a.value("content", json()).is_string())
      add(added_token(a, a.value("id", json()).is_number_integer() ? a["id"].get<int64_t>() : -1));
  std::map<int64_t, const json*> decoder;  // in the ids' order (a JSON object's keys sort as text)
  if (tconf.is_object() && tconf.value("added_tokens_decoder", json()).is_object())
    for (const auto& [k, v] : tconf["added_tokens_decoder"].items()) {
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(k, &used);
      } catch (const std::exception&) {
      }
      if (used != k.size() || id < 0)
        refuse_loaded(where, "tokenizer_config.json's added_tokens_decoder key '" + k + "' (not an id)");
      if (v.is_object() && v.value("content", json()).is_string()) decoder[id] = &v;
    }
  for (const auto& [id, v] : decoder) add(added_token(*v, id));
  const json vocab = model.value("vocab", json());
  check_added_ids(out, vocab, where);
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (auto s = config_token(tconf, key, std::nullopt); s && !s->empty() && !at.count(*s)) {
      AddedToken t;
      t.content = *s, t.special = true, t.normalized = false;
      if (auto it = vocab.is_object() ? vocab.find(*s) : vocab.end(); it != vocab.end() && it->is_number_integer())
        t.id = it->get<int64_t>();
      at[*s] = out.size();
      out.push_back(std::move(t));
    }
  return out;
}

}  // namespace

LoadedTokenizer as_transformers_loads(const json& tok, const json& tconf, const json& config,
                                      const std::string& where) {
  if (!tok.is_object()) refuse_loaded(where, "no tokenizer.json object");
  LoadedTokenizer t;
  t.cls = loaded_class(tok, tconf, config, where);
  static const json kNone;
  const json& model = tok.contains("model") ? tok.at("model") : kNone;
  if (model.value("type", "") != "BPE") refuse_loaded(where, "a model other than BPE");
  const bool prefix = tconf.is_object() && tconf.value("add_prefix_space", json()).is_boolean() &&
                      tconf["add_prefix_space"].get<bool>();
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", true}, {"use_regex", true}};
  const json nfc = {{"type", "NFC"}};
  std::optional<std::string> bos, eos;  // the class's defaults
  if (t.cls == kBackendClass) {
    auto absent_or = [&](const char* key, const json& want) {
      return !model.contains(key) || model[key].is_null() || model[key] == want;
    };
    if (!absent_or("dropout", json()) || model.value("byte_fallback", false) ||
        !absent_or("continuing_subword_prefix", "") || !absent_or("end_of_word_suffix", ""))
      refuse_loaded(where, "BPE with dropout, byte fallback or subword affixes");
    t.normalizer = tok.value("normalizer", json());
    t.pre_tokenizer = tok.value("pre_tokenizer", json());
    t.ignore_merges = model.value("ignore_merges", false);
  } else if (t.cls == "Qwen2Tokenizer") {
    t.normalizer = nfc;
    json split = {
        {"type", "Split"}, {"pattern", {{"Regex", kQwen2SplitPattern}}}, {"behavior", "Isolated"}, {"invert", false}};
    json bl = byte_level;
    bl["use_regex"] = false;
    t.pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", {split, bl}}};
  } else if (t.cls == "GPT2Tokenizer") {
    t.pre_tokenizer = byte_level;
    bos = eos = "<|endoftext|>";
  } else if (t.cls == "CohereTokenizer") {
    t.normalizer = nfc;
    t.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level}}};
    bos = "<BOS_TOKEN>", eos = "<|END_OF_TURN_TOKEN|>";
  } else if (t.cls == "GPTNeoXTokenizer") {
    t.normalizer = nfc;
    t.pre_tokenizer = byte_level;
    bos = eos = "<|endoftext|>";
  } else {
    refuse_loaded(where, "tokenizer_class " + t.cls + " (transformers builds it another way: not byte-level BPE)");
  }

  t.added = added_tokens(tok, tconf, model, where);
  std::map<std::string, int64_t> added_ids;  // the added tokens' ids (over the vocabulary's)
  for (const AddedToken& a : t.added)
    if (a.id >= 0) added_ids[a.content] = a.id;

  const json pp = tok.value("post_processor", json());
  const bool names_flags = tconf.is_object() && (tconf.contains("add_bos_token") || tconf.contains("add_eos_token"));
  if (!names_flags && !pp.is_null()) {
    post_processor_ids(pp, t.before, t.after, where);
    return t;
  }
  // update_post_processor: bos_token if add_bos_token, the sequence, eos_token if add_eos_token.
  auto flag = [&](const char* key) {
    const json v = tconf.is_object() ? tconf.value(key, json()) : json();
    if (!v.is_null() && !v.is_boolean())
      refuse_loaded(where, std::string("tokenizer_config.json's ") + key + " that is not a boolean");
    return v.is_boolean() && v.get<bool>();
  };
  auto id_of = [&](const std::optional<std::string>& s, const char* what) -> int64_t {
    if (auto it = added_ids.find(*s); it != added_ids.end()) return it->second;
    const json& vocab = model.contains("vocab") ? model.at("vocab") : kNone;
    if (auto it = vocab.is_object() ? vocab.find(*s) : vocab.end(); it != vocab.end() && it->is_number_integer())
      return it->get<int64_t>();
    refuse_loaded(where, std::string(what) + " '" + *s + "' is not one of tokenizer.json's tokens");
  };
  bos = config_token(tconf, "bos_token", bos), eos = config_token(tconf, "eos_token", eos);
  if (flag("add_bos_token") && bos) t.before.push_back(id_of(bos, "bos_token"));
  if (flag("add_eos_token") && eos) t.after.push_back(id_of(eos, "eos_token"));
  return t;
}

}  // namespace dcpctl::gguf
