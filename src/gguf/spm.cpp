// A SentencePiece tokenizer as the converter writes it (gguf/spm.h).
#include "gguf/spm.h"

#include <sentencepiece_processor.h>

#include "gguf/model.h"
#include "util/error.h"

namespace dcpctl::gguf {

using nlohmann::json;

namespace {

// SentencePieceTokenTypes (conversion/base.py), which are SentencePiece's ModelProto piece types.
enum : int32_t {
  kPieceNormal = 1,
  kPieceUnknown = 2,
  kPieceControl = 3,
  kPieceUserDefined = 4,
  kPieceUnused = 5,
  kPieceByte = 6
};

// An id the converter indexes its token lists with: an int (added_tokens_decoder's keys through
// int()); a negative one, which Python would count from the end, is refused.
size_t token_id_of(const json& v, const std::string& what, const std::string& where) {
  int64_t id = -1;
  bool ok = v.is_number_integer();
  if (ok) id = v.get<int64_t>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    size_t used = 0;
    try {
      id = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ok = used == s.size() && used > 0;
  }
  if (!ok || id < 0)
    throw UnsupportedError(Where(where),
                           what + " " + v.dump() + " is not a token id dcpctl writes (an integer, at least 0)");
  return static_cast<size_t>(id);
}

// Phi3MiniModel.set_vocab's added token (tokenizer_config.json's added_tokens_decoder, then
// tokenizer.json's added_tokens): its content as it is, score -1000.0, CONTROL when special,
// else USER_DEFINED; an id past the vocabulary is the converter's IndexError.
void phi3_added(SpmVocab& v, size_t k, const json& data, const std::string& what, const std::string& where) {
  if (k >= v.tokens.size())
    throw UnsupportedError(Where(where), what + " is past config.json's vocab_size " + std::to_string(v.tokens.size()) +
                                             ": llama.cpp's converter fails on it (Phi3MiniModel.set_vocab)");
  const json special = data.value("special", json());
  if (!special.is_null() && !special.is_boolean())
    throw UnsupportedError(Where(where), what + ": special is " + special.dump());
  v.tokens[k] = data["content"].get<std::string>();
  v.scores[k] = -1000.0f;
  v.types[k] = special.is_boolean() && special.get<bool>() ? kPieceControl : kPieceUserDefined;
}

}  // namespace

bool is_llama_hf_tokenizer(const json& tok) {
  if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object()) return false;
  const json& m = tok["model"];
  const bool bpe = m.value("type", json()) == "BPE";
  const bool llama3 = bpe && m.value("ignore_merges", false) && !m.value("byte_fallback", true);
  const json decoder = tok.value("decoder", json());
  return !llama3 && bpe && m.value("byte_fallback", false) && decoder.is_object() &&
         decoder.value("type", json()) == "Sequence";
}

SpmVocab spm_vocab(const std::string& model, const std::string& model_path, const json& config,
                   const json& added_tokens, const json& tconf, const std::string& where, const json* phi3_tokenizer) {
  const bool phi3 = phi3_tokenizer != nullptr;
  sentencepiece::SentencePieceProcessor sp;
  if (const auto st = sp.LoadFromSerializedProto(model); !st.ok())
    throw FormatError(Where(model_path), "SentencePiece does not load this tokenizer.model (" + st.ToString() +
                                             "), nor does llama.cpp's converter");
  const int64_t pieces = sp.GetPieceSize();
  // find_hparam(["vocab_size_per_layer_input", "vocab_size"], optional=True) or tokenizer.vocab_size()
  // Phi3MiniModel: hparams.get('vocab_size', tokenizer.vocab_size()).
  int64_t n = pieces;
  for (const char* key : {"vocab_size_per_layer_input", "vocab_size"})
    if (const json v = config.value(key, json()); (!phi3 || key == std::string("vocab_size")) && !v.is_null()) {
      if (!v.is_number_integer())
        throw UnsupportedError(Where(where),
                               std::string("config.json's ") + key + " " + v.dump() + " is not an integer");
      n = v.get<int64_t>() != 0 ? v.get<int64_t>() : pieces;
      break;
    }
  if (n < 0 || n > (int64_t(1) << 24))
    throw UnsupportedError(Where(where),
                           "a vocabulary of " + std::to_string(n) + " tokens is not written into a GGUF by dcpctl");
  SpmVocab v;
  v.tokens.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v.tokens.push_back("[PAD" + std::to_string(i) + "]");
  v.scores.assign(static_cast<size_t>(n), -10000.0f);
  v.types.assign(static_cast<size_t>(n), kPieceUnused);
  if (phi3 && pieces > n)  // tokens[token_id] = ...: an IndexError in Phi3MiniModel.set_vocab
    throw UnsupportedError(Where(model_path), "tokenizer.model has " + std::to_string(pieces) +
                                                  " pieces, more than config.json's vocab_size " + std::to_string(n) +
                                                  ": llama.cpp's converter fails on it (Phi3MiniModel.set_vocab)");
  for (int id = 0; id < pieces && id < n; ++id) {
    int32_t type = kPieceNormal;
    if (sp.IsUnknown(id))
      type = kPieceUnknown;
    else if (sp.IsControl(id))
      type = kPieceControl;
    else if (sp.IsUnused(id))
      type = kPieceUnused;
    else if (sp.IsByte(id))
      type = kPieceByte;
    v.tokens[id] = sp.IdToPiece(id), v.scores[id] = sp.GetScore(id), v.types[id] = type;
  }
  if (added_tokens.is_object())
    for (const auto& [text, idv] : added_tokens.items()) {
      if (!idv.is_number_integer())
        throw UnsupportedError(Where(where), "added_tokens.json's id of '" + text + "' is not an integer");
      const size_t k = token_id_of(idv, "added_tokens.json's id of '" + text + "'", where);
      if (k >= static_cast<size_t>(n)) continue;  // "ignore token ...: id is out of range"
      v.tokens[k] = text, v.scores[k] = -1000.0f, v.types[k] = kPieceUserDefined;
    }
  if (tconf.is_object() && tconf.contains("added_tokens_decoder") && tconf["added_tokens_decoder"].is_object())
    for (const auto& [key, data] : tconf["added_tokens_decoder"].items()) {
      const size_t k = token_id_of(json(key), "tokenizer_config.json's added_tokens_decoder key", where);
      if (!data.is_object() || !data.contains("content") || !data["content"].is_string())
        throw UnsupportedError(Where(where),
                               "tokenizer_config.json's added_tokens_decoder '" + key + "' has no content string");
      if (phi3) {
        phi3_added(v, k, data, "tokenizer_config.json's added_tokens_decoder '" + key + "'", where);
        continue;
      }
      if (k >= static_cast<size_t>(n)) continue;
      std::string text = data["content"].get<std::string>();
      const json special = data.value("special", json());
      if ((special.is_boolean() && special.get<bool>()) || does_token_look_special(text)) {
        v.types[k] = kPieceControl;
      } else if (!special.is_null() && !special.is_boolean()) {
        throw UnsupportedError(
            Where(where), "tokenizer_config.json's added_tokens_decoder '" + key + "': special is " + special.dump());
      } else {
        for (size_t at; (at = text.find("\xe2\x96\x81")) != std::string::npos;) text.replace(at, 3, " ");
        v.types[k] = kPieceUserDefined;
      }
      v.scores[k] = -1000.0f, v.tokens[k] = text;
    }
  if (phi3 && phi3_tokenizer->is_object() && phi3_tokenizer->contains("added_tokens") &&
      (*phi3_tokenizer)["added_tokens"].is_array())
    for (const json& a : (*phi3_tokenizer)["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string())
        throw UnsupportedError(Where(where),
                               "tokenizer.json's added token " + a.dump() + " has no id and content string");
      phi3_added(v, token_id_of(a["id"], "tokenizer.json's added token id", where), a,
                 "tokenizer.json's added token " + a["id"].dump(), where);
    }
  return v;
}

void add_llama_vocab_keys(Header& h, const json& config, const json& tconf, const std::string& where) {
  const json vs = config.value("vocab_size", json(32000));
  if (vs == json(32016) || vs == json(49152))
    throw UnsupportedError(Where(where), "a llama vocabulary of " + vs.dump() +
                                             " tokens (CodeLlama's, Granite's), to which the converter adds keys of "
                                             "its own, is not written into a GGUF by dcpctl yet");
  if (tconf.is_object())
    if (const json p = tconf.value("add_prefix_space", json()); p.is_boolean())
      h.add_bool("tokenizer.ggml.add_space_prefix", p.get<bool>());
}

void add_spm_tokenizer_keys(Header& h, const json& config, const std::string& model, const std::string& model_path,
                            const json& added_tokens, const json& tokenizer, const json& tconf,
                            const std::string& jinja, const std::string& where, bool phi3) {
  const SpmVocab v = spm_vocab(model, model_path, config, added_tokens, tconf, where, phi3 ? &tokenizer : nullptr);
  h.add_string("tokenizer.ggml.model", "llama");
  h.add_string("tokenizer.ggml.pre", "default");
  h.add_strings("tokenizer.ggml.tokens", v.tokens);
  h.add_f32s("tokenizer.ggml.scores", v.scores);
  h.add_i32s("tokenizer.ggml.token_type", v.types);
  add_special_vocab(h, config, tokenizer, tconf, jinja, where, "", false, static_cast<int64_t>(v.tokens.size()));
}

}  // namespace dcpctl::gguf
