#include "view/codecs/quantize.h"

#include <fnmatch.h>

#include <algorithm>
#include <regex>

#include "util/error.h"
#include "view/codecs/codecs.h"

namespace dcpctl {

using nlohmann::json;

namespace {

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

const json& language_config(const json& config) {
  static const json none = json::object();
  if (!config.is_object()) return none;
  return config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
}

void list_tied_head(const json& config, bool saved_head, json& modules) {
  const auto tied = [](const json& j) {
    return j.is_object() && j.contains("tie_word_embeddings") && j["tie_word_embeddings"] == true;
  };
  if ((tied(language_config(config)) || tied(config)) && !saved_head &&
      std::find(modules.begin(), modules.end(), "lm_head") == modules.end())
    modules.push_back("lm_head");
}

std::string fp8_kept_reason(const std::string& key, const QuantizeRequest& rq) {
  for (const std::string& g : rq.skip)
    if (fnmatch(g.c_str(), key.c_str(), 0) == 0) return "--quantize-skip '" + g + "'";
  if (contains(key, "embed")) return "an embedding";
  if (contains(key, "lm_head") || key == "output.weight" || contains(key, "output_layer.")) return "the output head";
  if (contains(key, "norm")) return "a norm";
  if (contains(key, "router") || contains(key, ".gate.weight") || key.rfind("gate.weight", 0) == 0)
    return "a router (MoE gate)";
  if (contains(key, "e_score_correction_bias")) return "the router's score correction bias";
  if (contains(key, "visual") || contains(key, "vision")) return "a vision tower";
  static const std::regex mtp(R"((^|\.)(mtp|mtp_layers|nextn)(\.|$))");
  if (std::regex_search(key, mtp)) return "an MTP block";
  if (rq.config.is_object()) {
    const json& c = language_config(rq.config);
    if (c.contains("num_hidden_layers") && c["num_hidden_layers"].is_number_integer()) {
      static const std::regex layer(R"((^|\.)layers\.(\d+)\.)");
      std::smatch m;
      if (std::regex_search(key, m, layer) && std::stoll(m[2].str()) >= c["num_hidden_layers"].get<int64_t>())
        return "an MTP block (layer " + m[2].str() + " past num_hidden_layers)";
    }
  }
  return "";
}

Checkpoint quantized_view(const Checkpoint& ck, const QuantizeRequest& rq) {
  if (const Codec* codec = quantize_codec(rq.scheme, rq.format))
    for (const CodecView& v : codec_views())
      if (v.quantize && v.codec == codec) return v.quantize(ck, rq);
  if (!rq.format.empty() && quantize_codec(rq.scheme)) {
    std::string forms;
    for (const std::string& f : quantize_formats(rq.scheme)) forms += (forms.empty() ? "" : ", ") + f;
    throw UsageError(Where(), "--quantize " + rq.scheme + " --quantize-format " + rq.format + ": " + rq.scheme +
                                  " is written in the form of " + forms);
  }
  // "fp8-block (e4m3, one float32 scale per block) or mxfp4 (GPT-OSS's experts)"
  std::vector<std::string> words;
  for (const CodecView& v : codec_views())
    if (v.quantize && quantize_codec(v.codec->quantize_word) == v.codec)
      words.push_back(std::string(v.codec->quantize_word) + " (" + v.codec->quantize_brief + ")");
  std::string list;
  for (size_t i = 0; i < words.size(); ++i) list += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  throw UsageError(Where(), "--quantize " + rq.scheme + ": dcpctl quantizes to " + list);
}

}  // namespace dcpctl
