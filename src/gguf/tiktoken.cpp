// Kimi K2's tiktoken tokenizer in a GGUF (gguf/tiktoken.h).
#include "gguf/tiktoken.h"

#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gguf/vocab.h"
#include "util/base64.h"
#include "util/error.h"

namespace dcpctl::gguf {

using nlohmann::json;

namespace {

// A rank's bytes as the converter's token text (QwenModel.token_bytes_to_string).
std::string as_text(std::string_view token) {
  std::string s;
  for (unsigned char b : token) s += byte_chars()[b];
  return s;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// tiktoken's load_tiktoken_bpe: bytes.splitlines(), each non-empty line split() into the token and
// its rank; a dict, so a repeated token keeps its first place and takes the last rank.
struct Ranks {
  std::vector<std::pair<std::string, int64_t>> order;
  std::unordered_map<std::string, size_t> at;  // token -> index in order
};

Ranks read_ranks(const std::string& text, const std::string& where) {
  Ranks r;
  size_t line_no = 0;
  for (size_t i = 0; i < text.size();) {
    size_t e = i;
    while (e < text.size() && text[e] != '\n' && text[e] != '\r') ++e;
    std::string_view line(text.data() + i, e - i);
    ++line_no;
    i = e < text.size() && text[e] == '\r' && e + 1 < text.size() && text[e + 1] == '\n' ? e + 2 : e + 1;
    if (line.empty()) continue;
    std::vector<std::string_view> fields;
    for (size_t p = 0; p < line.size();) {
      while (p < line.size() && is_space(line[p])) ++p;
      size_t q = p;
      while (q < line.size() && !is_space(line[q])) ++q;
      if (q > p) fields.push_back(line.substr(p, q - p));
      p = q;
    }
    std::optional<std::string> decoded;
    if (fields.size() == 2) decoded = base64_decode(fields[0], Base64::Standard);
    const std::string token = decoded.value_or("");
    bool ok = decoded && !fields[1].empty() && fields[1].size() <= 18;
    int64_t rank = 0;
    for (size_t k = 0; ok && k < fields[1].size(); ++k) {
      if (fields[1][k] < '0' || fields[1][k] > '9') ok = false;
      rank = rank * 10 + (fields[1][k] - '0');
    }
    if (!ok)
      throw UnsupportedError(Where(where, std::nullopt, "tiktoken.model line " + std::to_string(line_no)),
                             "not `base64(token) rank`, as tiktoken's load_tiktoken_bpe reads it");
    auto [it, fresh] = r.at.emplace(token, r.order.size());
    if (fresh)
      r.order.emplace_back(std::move(token), rank);
    else
      r.order[it->second].second = rank;
  }
  return r;
}

// QwenModel.bpe(mergeable_ranks, token, max_rank): the token's bytes merged lowest rank first, the
// leftmost on ties, while a pair's rank is below max_rank.
std::vector<std::string> bpe(const Ranks& r, const std::string& token, int64_t max_rank) {
  std::vector<std::string> parts;
  for (char c : token) parts.emplace_back(1, c);
  for (;;) {
    size_t best = 0;
    int64_t best_rank = -1;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = r.at.find(parts[i] + parts[i + 1]);
      if (it == r.at.end()) continue;
      const int64_t rank = r.order[it->second].second;
      if (best_rank < 0 || rank < best_rank) best = i, best_rank = rank;
    }
    if (best_rank < 0 || best_rank >= max_rank) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  return parts;
}

}  // namespace

bool is_kimi_tokenizer(const json& tconf) {
  if (!tconf.is_object() || !tconf.contains("auto_map") || !tconf["auto_map"].is_object()) return false;
  json a = tconf["auto_map"].value("AutoTokenizer", json());
  if (a.is_array() && !a.empty()) a = a[0];
  if (!a.is_string()) return false;
  std::string name = a.get<std::string>();
  if (auto p = name.find("--"); p != std::string::npos) name = name.substr(p + 2);
  return name == "tokenization_kimi.TikTokenTokenizer";
}

void add_kimi_tokenizer_keys(Header& h, const json& config, const std::string& tiktoken, const json& tconf,
                             const std::string& jinja, const std::string& where) {
  const Ranks r = read_ranks(tiktoken, where);
  // vocab (token text -> rank) and the merges, in the ranks' order.
  std::vector<std::pair<std::string, int64_t>> named;  // {**vocab, **special_tokens}, in order
  std::unordered_map<std::string, size_t> named_at;
  auto name = [&](const std::string& text, int64_t id) {
    auto [it, fresh] = named_at.emplace(text, named.size());
    if (fresh)
      named.emplace_back(text, id);
    else
      named[it->second].second = id;
  };
  std::vector<std::string> merges;
  for (const auto& [token, rank] : r.order) {
    name(as_text(token), rank);
    if (token.size() == 1) continue;
    std::vector<std::string> m = bpe(r, token, rank);
    if (m.size() == 2) merges.push_back(as_text(m[0]) + " " + as_text(m[1]));
  }
  // TikTokenTokenizer.special_tokens: the 258 ids after the ranks, named by added_tokens_decoder.
  std::unordered_map<int64_t, std::string> decoder;
  if (tconf.is_object() && tconf.contains("added_tokens_decoder") && tconf["added_tokens_decoder"].is_object())
    for (const auto& [k, v] : tconf["added_tokens_decoder"].items()) {
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(k, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      std::string content = v.is_object() && v.contains("content") && v["content"].is_string()
                                ? v["content"].get<std::string>()
                            : v.is_string() ? v.get<std::string>()
                                            : std::string();
      if (used != k.size() || content.empty())
        throw UnsupportedError(Where(where, std::nullopt, "added_tokens_decoder." + k),
                               "tokenizer_config.json's added token is not an id and a content");
      decoder[id] = content;
    }
  const int64_t base = static_cast<int64_t>(r.order.size());
  std::vector<std::pair<std::string, int64_t>>
      special;  // the dict comprehension: a repeated name keeps its first place, its last id
  std::unordered_map<std::string, size_t> special_at;
  for (int64_t i = base; i < base + 256 + 2; ++i) {
    auto d = decoder.find(i);
    std::string n = d != decoder.end() ? d->second : "<|reserved_token_" + std::to_string(i) + "|>";
    auto [it, fresh] = special_at.emplace(n, special.size());
    if (fresh)
      special.emplace_back(n, i);
    else
      special[it->second].second = i;
  }
  std::unordered_map<int64_t, bool> is_special;
  for (const auto& [n, id] : special) name(n, id), is_special[id] = true;
  std::unordered_map<int64_t, const std::string*> reverse;  // {id: tok for tok, id in ...}: the last name of an id
  for (const auto& [n, id] : named) reverse[id] = &n;

  const json vs = config.value("vocab_size", json());
  if (!vs.is_number_integer() || vs.get<int64_t>() < 0)
    throw UnsupportedError(Where(where), "a GGUF output needs config.json's vocab_size");
  const int64_t vocab_size = vs.get<int64_t>();
  // A token list is built per id: a vocab_size far past any tokenizer's (Kimi K2's 163,840) is refused
  // before memory is reserved for it.
  if (vocab_size > (int64_t(1) << 24))
    throw UnsupportedError(Where(where), "config.json's vocab_size " + std::to_string(vocab_size) +
                                             " is past the 16,777,216 ids a GGUF tokenizer is written for");
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(static_cast<size_t>(vocab_size)), types.reserve(static_cast<size_t>(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i) {
    auto it = reverse.find(i);
    if (it == reverse.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]"), types.push_back(5);  // UNUSED
    } else {
      tokens.push_back(*it->second), types.push_back(is_special.count(i) ? 3 : 1);  // CONTROL, NORMAL
    }
  }
  h.add_string("tokenizer.ggml.model", "gpt2");
  h.add_string("tokenizer.ggml.pre", "kimi-k2");
  h.add_strings("tokenizer.ggml.tokens", tokens);
  h.add_i32s("tokenizer.ggml.token_type", types);
  if (!merges.empty()) h.add_strings("tokenizer.ggml.merges", merges);  // gguf-py writes no empty array

  // SpecialVocab(load_merges=False) without tokenizer.json: no added tokens to find
  // tokenizer_config.json's bos_token & co. in, so the ids are config.json's alone. Its cls has no
  // GGUFWriter method (add_to_gguf skips it with a warning), so none is written.
  static const char* kTypes[] = {"bos", "eos", "unk", "sep", "pad", "mask"};
  static const char* kIdKeys[] = {"bos_token_id",       "eos_token_id",     "unknown_token_id",
                                  "seperator_token_id", "padding_token_id", "mask_token_id"};
  for (size_t t = 0; t < 6; ++t) {
    json v = config.value(std::string(kTypes[t]) + "_token_id", json());
    if (v.is_null() && config.contains("text_config") && config["text_config"].is_object())
      v = config["text_config"].value(std::string(kTypes[t]) + "_token_id", json());
    if (v.is_boolean())
      throw UnsupportedError(Where(where), std::string("config.json's ") + kTypes[t] + "_token_id is a boolean");
    if (v.is_number_integer() && v.get<int64_t>() < 0)
      throw UnsupportedError(Where(where),
                             std::string("config.json's ") + kTypes[t] + "_token_id is negative (the converter fails)");
    if (v.is_number_integer()) h.add_u32(std::string("tokenizer.ggml.") + kIdKeys[t], v.get<uint32_t>());
  }
  if (!tconf.is_object() || tconf.empty()) return;  // "if not tokenizer_config: return"
  for (const char* typ : {"bos", "eos", "sep"})     // the add_*_token gguf-py has a key for, in SpecialVocab's order
    if (auto e = tconf.find(std::string("add_") + typ + "_token"); e != tconf.end() && e->is_boolean())
      h.add_bool(std::string("tokenizer.ggml.add_") + typ + "_token", e->get<bool>());
  json chat_template = jinja.empty() ? json() : json(jinja);
  if (tconf.contains("chat_template")) chat_template = tconf["chat_template"];
  if (!chat_template.is_null() && !chat_template.is_string())
    throw UnsupportedError(Where(where),
                           "a chat_template that is not one string is not written into a GGUF by dcpctl yet");
  if (chat_template.is_string()) h.add_string("tokenizer.chat_template", chat_template.get<std::string>());
}

}  // namespace dcpctl::gguf
