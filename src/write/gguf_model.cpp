#include "write/gguf_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <regex>

#include "util/error.h"
#include "write/gguf_vocab.h"

namespace dcpctl::gguf {

using nlohmann::json;

OutType out_type(const std::string& word) {
  if (word == "f32") return {TensorType::F32, 0};
  if (word == "f16") return {TensorType::F16, 1};
  if (word == "bf16") return {TensorType::BF16, 32};
  if (word == "q8_0") return {TensorType::Q8_0, 7};
  // llama-quantize's words for these types, and the LlamaFileType it writes for each (Q4_K and Q5_K
  // are its _M file types, as `llama-quantize --pure IN OUT Q4_K` writes).
  if (word == "q4_0") return {TensorType::Q4_0, 2};
  if (word == "q4_k") return {TensorType::Q4_K, 15};
  if (word == "q5_k") return {TensorType::Q5_K, 17};
  if (word == "q6_k") return {TensorType::Q6_K, 18};
  throw UsageError(Where(), "--outtype must be f32, f16, bf16, q8_0 (convert_hf_to_gguf.py's words), q4_0, q4_k, q5_k or q6_k "
                            "(llama-quantize's, --pure), not '" + word + "'");
}

namespace {

// config.json's value at `key` when it is an integer; -1 when absent or null.
int64_t int_of(const json& c, const char* key) {
  auto it = c.find(key);
  return it != c.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

int64_t need_int(const json& c, const char* key, const std::string& where) {
  int64_t v = int_of(c, key);
  if (v < 0) throw UnsupportedError(Where(where), std::string("a GGUF output needs config.json's ") + key + " (a non-negative integer)");
  return v;
}

// TextModel's rope_parameters: rope_parameters, else rope_scaling, else {}.
json rope_params(const json& c) {
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (auto it = c.find(k); it != c.end() && it->is_object() && !it->empty()) return *it;
  return json::object();
}

}  // namespace

Arch arch_of(const json& config, const std::string& where) {
  std::string hf;
  if (auto it = config.find("architectures"); it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    hf = (*it)[0].get<std::string>();
  if (hf == "LlamaForCausalLM") return {"llama", true};
  if (hf == "Qwen2ForCausalLM") return {"qwen2", false};
  if (hf == "Qwen3ForCausalLM") return {"qwen3", false};
  throw UnsupportedError(Where(where), "a GGUF output of architecture '" + (hf.empty() ? std::string("(none in config.json)") : hf) +
                                           "' is not written (dcpctl writes LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM)");
}

TensorPlan tensor_plan(const Arch& arch, const json& config, const std::string& key, const std::vector<int64_t>& shape,
                       OutType out, const std::string& where) {
  static const std::map<std::string, std::string> top{
      {"model.embed_tokens", "token_embd"}, {"model.norm", "output_norm"}, {"lm_head", "output"}};
  static const std::map<std::string, std::string> layer{
      {"input_layernorm", "attn_norm"},       {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},         {"self_attn.o_proj", "attn_output"},
      {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},          {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"}};
  static const std::regex layer_re(R"(model\.layers\.(\d+)\.(.+)\.(weight|bias))");
  static const std::regex top_re(R"((.+)\.(weight|bias))");
  TensorPlan p;
  std::smatch m;
  std::string module;
  if (std::regex_match(key, m, layer_re)) {
    auto it = layer.find(m[2]);
    bool qk_norm = it != layer.end() && it->second.find("_norm") != std::string::npos && it->second.rfind("attn_", 0) == 0 && it->second != "attn_norm";
    if (it != layer.end() && (!qk_norm || arch.name == "qwen3")) {
      p.name = "blk." + m[1].str() + "." + it->second + "." + m[3].str();
      module = m[2];
    }
  } else if (std::regex_match(key, m, top_re)) {
    if (auto it = top.find(m[1]); it != top.end() && m[2] == "weight") p.name = it->second + ".weight";
  }
  if (p.name.empty())
    throw UnsupportedError(Where(where, std::nullopt, key), "'" + key + "' has no tensor in llama.cpp's " + arch.name +
                                                  " table (gguf-py's tensor_mapping) as dcpctl writes it");
  // prepare_tensors: one dimension, a *_norm.weight, a name not ending .weight: F32; a Q8_0 whose
  // rows are not a multiple of 32: F16.
  const std::string& n = p.name;
  bool f32 = shape.size() <= 1 || (n.size() >= 12 && n.compare(n.size() - 12, 12, "_norm.weight") == 0) ||
             n.size() < 7 || n.compare(n.size() - 7, 7, ".weight") != 0;
  p.type = f32 ? TensorType::F32 : row_type(out.type, static_cast<uint64_t>(shape.back()));
  if (arch.permute_qk && (module == "self_attn.q_proj" || module == "self_attn.k_proj")) {
    int64_t heads = need_int(config, "num_attention_heads", where);
    int64_t kv = int_of(config, "num_key_value_heads");
    p.permute_heads = module == "self_attn.k_proj" && kv > 0 ? kv : heads;
    if (shape.empty() || p.permute_heads <= 0 || shape[0] % (2 * p.permute_heads) != 0)
      throw UnsupportedError(Where(where, std::nullopt, key), "'" + key + "' has rows that are not 2 x " + std::to_string(p.permute_heads) +
                                                    " heads: the Q/K permutation llama.cpp applies cannot be made");
  }
  return p;
}

std::vector<uint8_t> permute_rows(const uint8_t* data, int64_t rows, int64_t cols, size_t elem, int64_t heads) {
  const int64_t half = rows / heads / 2;
  const size_t row_bytes = static_cast<size_t>(cols) * elem;
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
  // reshape(heads, 2, half, cols).swapaxes(1, 2): output row (h, j, i) is input row (h, i, j).
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t i = 0; i < 2; ++i)
        std::memcpy(out.data() + static_cast<size_t>(h * 2 * half + j * 2 + i) * row_bytes,
                    data + static_cast<size_t>(h * 2 * half + i * half + j) * row_bytes, row_bytes);
  return out;
}

std::string size_label(uint64_t params) {
  double n = static_cast<double>(params), scaled;
  const char* suffix;
  if (n > 1e12) scaled = n * 1e-12, suffix = "T";
  else if (n > 1e9) scaled = n * 1e-9, suffix = "B";
  else if (n > 1e6) scaled = n * 1e-6, suffix = "M";
  else scaled = n * 1e-3, suffix = "K";
  // fix = max(min_digits - len(str(round(scaled)).lstrip('0')), 0); Python's round is half to even.
  std::string digits = std::to_string(static_cast<long long>(std::nearbyint(scaled)));
  digits.erase(0, digits.find_first_not_of('0') == std::string::npos ? digits.size() : digits.find_first_not_of('0'));
  int fix = std::max(2 - static_cast<int>(digits.size()), 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", fix, scaled, suffix);
  return buf;
}

std::string id_to_title(const std::string& id) {
  static const std::regex version(R"(^(v\d+(?:\.\d+)*|\d.*)$)");
  std::string s = id;
  for (char& c : s)
    if (c == '-') c = ' ';
  std::string out, word;
  auto flush = [&] {
    if (word.empty()) return;
    bool has_cased = false, lower = true;
    for (unsigned char c : word) {
      if (std::isalpha(c)) has_cased = true;
      if (std::isupper(c)) lower = false;
    }
    if (has_cased && lower && !std::regex_match(word, version)) {
      // str.title(): a letter after a non-letter is upper, others lower.
      bool prev_alpha = false;
      for (char& c : word) {
        unsigned char u = static_cast<unsigned char>(c);
        c = static_cast<char>(prev_alpha ? std::tolower(u) : std::toupper(u));
        prev_alpha = std::isalpha(u);
      }
    }
    out += (out.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) flush();
    else word += c;
  }
  flush();
  return out;
}

void add_model_keys(Header& h, const Arch& arch, const json& config, const std::string& name, uint64_t params, OutType out,
                    const std::string& where) {
  const std::string& a = arch.name;
  for (const char* k : {"num_local_experts", "num_experts", "n_routed_experts", "layer_norm_eps", "layer_norm_epsilon", "mrope_section"})
    if (config.contains(k) && !config[k].is_null())
      throw UnsupportedError(Where(where), std::string("config.json's ") + k + " is not written into a GGUF by dcpctl yet");
  json rope = rope_params(config);
  if (rope.contains("full_attention") || rope.contains("sliding_attention") || rope.contains("mrope_section"))
    throw UnsupportedError(Where(where), "config.json's per-attention rope parameters are not written into a GGUF by dcpctl yet");
  if (auto t = rope.find("rope_type"); t != rope.end() && !(t->is_string() && t->get<std::string>() == "default"))
    throw UnsupportedError(Where(where), "config.json's rope type " + t->dump() + " is not written into a GGUF by dcpctl yet (default only)");
  h.add_string("general.architecture", a);
  h.add_string("general.type", "model");
  h.add_string("general.name", name);
  if (params > 0) h.add_string("general.size_label", size_label(params));
  h.add_u32(a + ".block_count", static_cast<uint32_t>(need_int(config, "num_hidden_layers", where)));
  if (int64_t v = int_of(config, "max_position_embeddings"); v >= 0) h.add_u32(a + ".context_length", static_cast<uint32_t>(v));
  int64_t hidden = need_int(config, "hidden_size", where);
  h.add_u32(a + ".embedding_length", static_cast<uint32_t>(hidden));
  if (int64_t v = int_of(config, "intermediate_size"); v >= 0) h.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(v));
  int64_t heads = need_int(config, "num_attention_heads", where);
  h.add_u32(a + ".attention.head_count", static_cast<uint32_t>(heads));
  if (int64_t v = int_of(config, "num_key_value_heads"); v >= 0) h.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(v));
  // rope_theta: in rope_parameters (transformers 5), else at the top (mirrored there by the converter).
  json theta = rope.contains("rope_theta") ? rope["rope_theta"] : config.value("rope_theta", json());
  if (theta.is_number()) h.add_f32(a + ".rope.freq_base", theta.get<float>());
  if (auto e = config.find("rms_norm_eps"); e != config.end() && e->is_number())
    h.add_f32(a + ".attention.layer_norm_rms_epsilon", e->get<float>());
  int64_t head_dim = int_of(config, "head_dim");
  if (head_dim >= 0) {
    h.add_u32(a + ".attention.key_length", static_cast<uint32_t>(head_dim));
    h.add_u32(a + ".attention.value_length", static_cast<uint32_t>(head_dim));
  }
  h.add_u32("general.file_type", out.file_type);
  if (a == "llama") {
    h.add_u32(a + ".vocab_size", static_cast<uint32_t>(need_int(config, "vocab_size", where)));
    h.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(head_dim >= 0 ? head_dim : hidden / heads));
  }
  h.add_u32("general.quantization_version", 2);
}

namespace {

// A tokenizer_config.json entry: a string, or an object's "content"; "" otherwise.
std::string token_text(const json& config, const std::string& key) {
  if (!config.is_object()) return {};
  auto it = config.find(key);
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return {};
}

bool looks_special(const std::string& t) {
  auto ends = [&](const std::string& s) { return t.size() >= s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0; };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || (t.rfind("<|", 0) == 0 && ends("|>")) ||
         (t.rfind("<\xef\xbd\x9c", 0) == 0 && ends("\xef\xbd\x9c>")) || (t.rfind("<unused", 0) == 0 && ends(">"));
}

std::string special_id(const json& step) {
  if (step.is_object() && step.contains("SpecialToken") && step["SpecialToken"].contains("id") && step["SpecialToken"]["id"].is_string())
    return step["SpecialToken"]["id"].get<std::string>();
  return {};
}
std::string sequence_id(const json& step) {
  if (step.is_object() && step.contains("Sequence") && step["Sequence"].contains("id") && step["Sequence"]["id"].is_string())
    return step["Sequence"]["id"].get<std::string>();
  return {};
}

}  // namespace

void add_tokenizer_keys(Header& h, const json& config, const json& tok, const json& tconf, const std::string& jinja,
                        const std::string& where) {
  const json& model = tok.contains("model") ? tok["model"] : json();
  if (!model.is_object() || model.value("type", "") != "BPE")
    throw UnsupportedError(Where(where), "a GGUF output needs a byte-level BPE tokenizer.json (llama.cpp's gpt2 vocabulary); this one is " +
                                             (model.is_object() ? model.value("type", std::string("untyped")) : std::string("missing")));
  if (tok.contains("normalizer") && !tok["normalizer"].is_null())
    throw UnsupportedError(Where(where), "a tokenizer.json with a normalizer is not written into a GGUF by dcpctl yet");
  // tokenizer.ggml.pre: the converter's digest (write/gguf_vocab.h), a name it knows or refused.
  std::string digest = pre_digest(tok, tconf, where), pre = pre_name(digest);
  if (pre.empty())
    throw UnsupportedError(Where(where), "the tokenizer's pre-tokenizer (digest " + digest +
                                             ") is not one llama.cpp's converter names here (llama-bpe, qwen2): BPE pre-tokenizer was not recognized");
  const int64_t vocab_size = need_int(config, "vocab_size", where);
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), 5);  // UNUSED
  std::vector<bool> have(static_cast<size_t>(vocab_size), false);
  auto place = [&](int64_t id, const std::string& text, int32_t type) {
    if (id < 0 || id >= vocab_size)
      throw UnsupportedError(Where(where), "token " + std::to_string(id) + " is past config.json's vocab_size " + std::to_string(vocab_size));
    tokens[id] = text, types[id] = type, have[id] = true;
  };
  for (const auto& [text, id] : model["vocab"].items()) place(id.get<int64_t>(), text, 1);  // NORMAL
  const json added = tok.value("added_tokens", json::array());
  for (const json& a : added) {
    std::string text = a.value("content", "");
    if (!a.value("special", false) && !looks_special(text)) {
      if (text.find("\xe2\x96\x81") != std::string::npos || !a.value("normalized", true))
        throw UnsupportedError(Where(where), "added token '" + text + "' (not special, or not normalized) is not written into a GGUF by dcpctl yet");
      place(a["id"].get<int64_t>(), text, 4);  // USER_DEFINED
    } else {
      place(a["id"].get<int64_t>(), text, 3);  // CONTROL
    }
  }
  for (int64_t i = 0; i < vocab_size; ++i)
    if (!have[i]) tokens[i] = "[PAD" + std::to_string(i) + "]";
  h.add_string("tokenizer.ggml.model", "gpt2");
  h.add_string("tokenizer.ggml.pre", pre);
  h.add_strings("tokenizer.ggml.tokens", tokens);
  h.add_i32s("tokenizer.ggml.token_type", types);

  // gguf-py's SpecialVocab (load_merges): merges, the special ids, add_*_token, the chat template.
  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array())
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        std::string joined;
        for (int p = 0; p < 2; ++p) {
          if (p) joined += ' ';
          for (char c : m[p].get<std::string>()) joined += c == ' ' ? std::string("\xc5\xa0") : std::string(1, c);  // chr(ord(' ') + 256)
        }
        merges.push_back(joined);
      }
    }
  json tc = tconf.is_object() ? tconf : json();
  std::string bos = token_text(tc, "bos_token"), cls = token_text(tc, "cls_token"), eos = token_text(tc, "eos_token"),
              sep = token_text(tc, "sep_token");
  if (bos.empty() && !cls.empty() && tc.is_object()) tc["bos_token"] = bos = cls;
  if (eos.empty() && !sep.empty() && tc.is_object()) tc["eos_token"] = eos = sep;
  std::vector<std::pair<std::string, bool>> add;  // add_special_token, in insertion order
  auto set_add = [&](const std::string& typ, bool v, bool only_default) {
    for (auto& [t, val] : add)
      if (t == typ) {
        if (!only_default) val = v;
        return;
      }
    add.emplace_back(typ, v);
  };
  if (tok.contains("post_processor") && tok["post_processor"].is_object()) {
    const json& pp = tok["post_processor"];
    json procs = pp.contains("processors") ? pp["processors"] : json::array({pp});
    for (const json& p : procs) {
      std::string type = p.value("type", "");
      if (type == "ByteLevel") {
        set_add("bos", false, true), set_add("eos", false, true);
      } else if (type == "TemplateProcessing") {
        if (!tc.is_object()) throw UnsupportedError(Where(where), "a TemplateProcessing tokenizer without tokenizer_config.json is not written into a GGUF by dcpctl yet");
        json single = p.value("single", json::array()), pair = p.value("pair", json::array());
        std::string first, last;
        if (single.size() > 1) {
          if (!(first = special_id(single[0])).empty()) {
            if (first != bos && first != cls) throw UnsupportedError(Where(where), "a template's leading special token '" + first + "' that is not bos_token is not written into a GGUF by dcpctl yet");
            set_add("bos", true, false);
          }
          if (!(last = special_id(single.back())).empty()) {
            if (last != eos) throw UnsupportedError(Where(where), "a template's trailing special token '" + last + "' that is not eos_token is not written into a GGUF by dcpctl yet");
            set_add("eos", true, false);
          }
        }
        if (!pair.empty()) {
          size_t start = !first.empty() && special_id(pair[0]) == first ? 1 : 0;
          size_t stop = !last.empty() && special_id(pair.back()) == last ? pair.size() - 1 : pair.size();
          if (start < stop) {
            json mid(json::array());
            for (size_t i = start; i < stop; ++i) mid.push_back(pair[i]);
            if (sequence_id(mid[0]) == "A" && sequence_id(mid.back()) == "B" && mid.size() > 2) {
              bool add_sep = false;
              std::string e = special_id(mid[1]);
              if (!e.empty() && (e == sep || e == eos) && last.empty()) add_sep = true;
              if (mid.size() == 4) {  // A [sep] [eos] B
                std::string e2 = special_id(mid[2]);
                if (!e2.empty() && (e2 == sep || e2 == eos)) add_sep = true;
              }
              set_add("sep", add_sep, false);
              if (add_sep && sep.empty()) tc["sep_token"] = eos;
            }
          }
        }
      } else if (!type.empty()) {
        throw UnsupportedError(Where(where), "a tokenizer.json post-processor " + type + " is not written into a GGUF by dcpctl yet");
      }
    }
  }
  // The special ids: tokenizer_config.json's tokens found among the added tokens, then config.json's *_token_id.
  std::vector<std::pair<std::string, int64_t>> ids;
  auto set_id = [&](const std::string& typ, int64_t id) {
    if (id < 0) return;
    for (const auto& [t, v] : ids)
      if (t == typ) return;
    ids.emplace_back(typ, id);
  };
  static const char* kTypes[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  json chat_template;
  if (tc.is_object()) {
    if (!jinja.empty()) chat_template = jinja;
    if (tc.contains("chat_template")) chat_template = tc["chat_template"];
    if (!chat_template.is_null() && !chat_template.is_string())
      throw UnsupportedError(Where(where), "a chat_template that is not one string is not written into a GGUF by dcpctl yet");
    for (const char* typ : kTypes) {
      std::string t(typ);
      if (auto e = tc.find("add_" + t + "_token"); e != tc.end() && e->is_boolean()) set_add(t, e->get<bool>(), true);
      std::string text = token_text(tc, t + "_token");
      if (text.empty() && !(tc.contains(t + "_token") && tc[t + "_token"].is_string())) continue;
      for (const json& a : added)
        if (a.value("content", "") == text) {
          set_id(t, a["id"].get<int64_t>());
          break;
        }
    }
  }
  for (const char* typ : kTypes) {
    json v = config.value(std::string(typ) + "_token_id", json());
    if (v.is_number_integer()) set_id(typ, v.get<int64_t>());
  }
  if (!merges.empty()) h.add_strings("tokenizer.ggml.merges", merges);
  static const std::map<std::string, std::string> id_keys{{"bos", "bos_token_id"}, {"eos", "eos_token_id"}, {"unk", "unknown_token_id"},
                                                          {"sep", "seperator_token_id"}, {"pad", "padding_token_id"},
                                                          {"cls", "cls_token_id"}, {"mask", "mask_token_id"}};
  for (const auto& [t, id] : ids) h.add_u32("tokenizer.ggml." + id_keys.at(t), static_cast<uint32_t>(id));
  for (const auto& [t, v] : add)
    if (t == "bos" || t == "eos" || t == "sep") h.add_bool("tokenizer.ggml.add_" + t + "_token", v);
  if (chat_template.is_string()) h.add_string("tokenizer.chat_template", chat_template.get<std::string>());
}

}  // namespace dcpctl::gguf
