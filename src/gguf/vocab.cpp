// The converter's pre-tokenizer digest (gguf/vocab.h).
#include "gguf/vocab.h"

#include <map>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gguf/added_vocab.h"
#include "gguf/hf_tokenizer.h"
#include "gguf/normalizer.h"
#include "gguf/pretokenizer.h"
#include "util/error.h"
#include "util/sha256.h"

namespace dcpctl::gguf {

using nlohmann::json;

// conversion/base.py's chktxt, byte for byte (UTF-8): the converter names a pre-tokenizer by the
// SHA-256 of its encoding of this text, so the digest cannot be computed without it. From llama.cpp
// (MIT License, Copyright (c) 2023-2026 The ggml authors), as shipped in llama-cpp-python 0.3.36.
// One literal, byte for byte the converter's: clang-format 14 splits it anew on every pass.
// clang-format off
const char* const kCheckText =
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫\ufe0f (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 \?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!\?\?\?\?\?\? I've been 'told he's there, 'RE you sure\? 'M not sure I'll make it, 'D you like some tea\? We'Ve a'lL";
// clang-format on

namespace {

struct PairHash {
  size_t operator()(const std::pair<std::string_view, std::string_view>& p) const noexcept {
    const size_t a = std::hash<std::string_view>{}(p.first), b = std::hash<std::string_view>{}(p.second);
    return a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  }
};

[[noreturn]] void refuse_digest(const std::string& where, const std::string& what) {
  throw UnsupportedError(
      Where(where), "llama.cpp's converter names a tokenizer by its output, and dcpctl cannot run this one: " + what +
                        " (tokenizer.ggml.pre)");
}

}  // namespace

const std::vector<std::string>& byte_chars() {
  static const std::vector<std::string> chars = [] {
    std::vector<std::string> out(256);
    unsigned next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const unsigned c = printable ? b : next++;
      std::string u;
      if (c < 0x80) {
        u += static_cast<char>(c);
      } else {
        u += static_cast<char>(0xC0 | (c >> 6));
        u += static_cast<char>(0x80 | (c & 0x3F));
      }
      out[b] = u;
    }
    return out;
  }();
  return chars;
}

namespace {

// Byte-level BPE over tokenizer.json's model, keyed by views of its own strings (which outlive
// them): a real vocabulary is 150,000 to 260,000 tokens and merges, read once each.
class ByteLevelBpe {
 public:
  ByteLevelBpe(const json& model, bool ignore_merges, const std::string& where)
      : ignore_merges_(ignore_merges), where_(where) {
    const json& vj = model.at("vocab");
    if (!vj.is_object()) refuse_digest(where, "a vocabulary that is not a JSON object");
    vocab_.reserve(vj.size());
    for (const auto& [k, v] : vj.items()) vocab_[k] = v.get<int64_t>();
    const json& merges = model.at("merges");
    rank_.reserve(merges.size());
    size_t r = 0;
    for (const json& m : merges) {
      std::pair<std::string_view, std::string_view> p;
      if (m.is_array()) {
        p = {m.at(0).get_ref<const std::string&>(), m.at(1).get_ref<const std::string&>()};
      } else {
        const std::string_view s = m.get_ref<const std::string&>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos) refuse_digest(where, "a merge without a space");
        p = {s.substr(0, sp), s.substr(sp + 1)};
      }
      rank_.emplace(p, r++);
    }
  }

  // The ids of one pre-tokenized piece (in the byte-level alphabet), appended to `ids`.
  void encode(const std::string& piece, std::vector<int64_t>& ids) const {
    std::vector<std::string> sym;  // its characters: each one byte of the text
    for (size_t at = 0; at < piece.size();) {
      const auto lead = static_cast<unsigned char>(piece[at]);
      const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      sym.push_back(piece.substr(at, n));
      at += n;
    }
    if (auto it = vocab_.find(piece); ignore_merges_ && it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
    for (;;) {
      size_t best = SIZE_MAX, at = 0;
      for (size_t k = 0; k + 1 < sym.size(); ++k) {
        auto it = rank_.find({std::string_view(sym[k]), std::string_view(sym[k + 1])});
        if (it != rank_.end() && it->second < best) best = it->second, at = k;
      }
      if (best == SIZE_MAX) break;
      sym[at] += sym[at + 1];
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    for (const std::string& s : sym) {
      auto it = vocab_.find(s);
      if (it == vocab_.end()) refuse_digest(where_, "a symbol missing from the vocabulary ('" + s + "')");
      ids.push_back(it->second);
    }
  }

 private:
  std::unordered_map<std::string_view, int64_t> vocab_;
  std::unordered_map<std::pair<std::string_view, std::string_view>, size_t, PairHash> rank_;
  bool ignore_merges_;
  std::string where_;
};

}  // namespace

std::string pre_digest(const json& tok, const json& tconf, const json& config, const std::string& where) {
  const LoadedTokenizer loaded = as_transformers_loads(tok, tconf, config, where);
  const ByteLevelBpe bpe(tok.at("model"), loaded.ignore_merges, where);
  // The added tokens split out first, each stretch between them normalized, pre-tokenized and
  // encoded on its own (tokenizers' AddedVocabulary, gguf/added_vocab.h).
  std::vector<int64_t> ids = loaded.before;
  for (const AddedSplit& s : split_added(loaded.added, loaded.normalizer, kCheckText, where)) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    for (const std::string& piece : pre_tokenize(loaded.pre_tokenizer, s.text, where)) bpe.encode(piece, ids);
  }
  ids.insert(ids.end(), loaded.after.begin(), loaded.after.end());
  std::string list = "[";
  for (size_t k = 0; k < ids.size(); ++k) list += (k ? ", " : "") + std::to_string(ids[k]);
  list += "]";
  return Sha256::of(list);
}

std::string pre_name(const std::string& digest) {
  // The converter's table (conversion/base.py), the digests checked by tools/gguf_oracle.py.
  static const std::map<std::string, std::string> names{
      {"0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5", "llama-bpe"},
      {"e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "qwen2"},
      // The families of gguf_oracle.py's FAMILIES (tests/interop/gguf_tokenizers_test.py).
      {"049ecf7629871e3041641907f3de7c733e4dbfdc736f57d882ba0b0845599754", "deepseek-llm"},
      {"347715f544604f9118bb75ed199f68779f423cabb20db6de6f31b908d04d7821", "deepseek-coder"},
      {"3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454", "gpt-2"},
      {"35d91631860c815f952d711435f48d356ebac988362536bed955d43bfa436e34", "starcoder"},
      {"9c2227e4dd922002fb81bde4fc02b0483ca4f12911410dee2255e4987644e3f8", "command-r"},
      // MPT's (GPT-NeoX's vocabulary, NFC): the converter's table names this digest `mpt`, then
      // `olmo` (OLMo 1.7's), a run of ifs: the last is written.
      {"b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166", "olmo"},
      {"8aeee3860c56296a157a1fe2fad249ec40aa59b1bb5709f4ade11c4e6fe652ed", "falcon"},
      {"6221ad2852e85ce96f791f476e0b390cf9b474c9e3d1362f53a24a06dc8220ff", "refact"},
      // Mistral NeMo's Tekken (Mistral-Nemo-Base-2407's row), rebuilt from mistral-common's file.
      {"63b97e4253352e6f357cc59ea5b583e3a680eaeaf2632188c2b952de2588485e", "tekken"},
      // GLM's (the converter's rows for glm-4-9b-hf, GLM-4.5-Air and GLM-4.7-Flash): Llama 3's split
      // pattern over GLM's own vocabulary; not checked here, as no GLM vocabulary is at hand (a
      // digest dcpctl computes otherwise than transformers matches none and is refused).
      {"a1336059768a55c99a734006ffb02203cd450fed003e9a71886c88acf24fdbc2", "glm4"},
      {"9ca2dd618e8afaf09731a7cf6e2105b373ba6a1821559f258b272fe83e6eb902", "glm4"},
      {"cdf5f35325780597efd76153d4d1c16778f766173908894c04afc20108536267", "glm4"},
  };
  auto it = names.find(digest);
  return it == names.end() ? "" : it->second;
}

}  // namespace dcpctl::gguf
