#include "meta/codecs/codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>
#include <stdexcept>

namespace dcpctl {

const std::vector<const Codec*>& codecs() {
  // A new codec: one line here (and its file in src/meta/codecs/).
  static const std::vector<const Codec*> list = {
      &fp8_block_codec(),
      &mxfp4_codec(),
      &f4_codec(),
      &deepseek_v4_codec(),
      &compressed_tensors_codec(),
      &modelopt_codec(),
      &ct_fp8_dynamic_codec(),
      &ct_fp8_block_codec(),
      &ct_nvfp4_codec(),
      &ct_mxfp8_codec(),
      &ct_mxfp4_codec(),
      &ct_w4a16_codec(),
      &mo_nvfp4_codec(),
      &mo_mxfp8_codec(),
      &inkling2_loop_codec(),
  };
  return list;
}

std::set<std::string> codecs_beside(const std::set<std::string>& keys) {
  std::set<std::string> out;
  for (const Codec* c : codecs())
    if (c->beside)
      for (const std::string& k : keys)
        for (std::string& b : c->beside(k))
          if (keys.count(b)) out.insert(std::move(b));
  return out;
}

const Codec* quantize_codec(const std::string& word, const std::string& format) {
  for (const Codec* c : codecs())
    if (c->quantize_word && word == c->quantize_word && (format.empty() || format == c->quant_method)) return c;
  return nullptr;
}

std::vector<std::string> quantize_formats(const std::string& word) {
  std::vector<std::string> out;
  for (const Codec* c : codecs())
    if (c->quantize_word && (word.empty() || word == c->quantize_word) &&
        std::find(out.begin(), out.end(), c->quant_method) == out.end())
      out.push_back(c->quant_method);
  return out;
}

const std::vector<CalibratedScheme>& calibrated_schemes() {
  static const std::vector<CalibratedScheme> list = {
      {"fp8-static",
       "input_scale, each Linear's static FP8 activation scale (compressed-tensors' FP8 preset, ModelOpt's FP8): "
       "activation ranges calibrated on data, which a checkpoint does not hold",
       "fp8-dynamic (activations scaled per token at run time)"},
      {"nvfp4-w4a4",
       "input_global_scale (compressed-tensors' NVFP4 preset) or input_scale (ModelOpt's quant_algo NVFP4), each "
       "Linear's NVFP4 activation global scale: activation ranges calibrated on data, which a checkpoint does not hold",
       "nvfp4, weights only (compressed-tensors' NVFP4A16, or ModelOpt's W4A16_NVFP4 with --quantize-format modelopt)"},
  };
  return list;
}

double e2m1_half_step(double q) {
  const double m = std::fabs(q);
  return m < 1.75 ? 0.25 : m < 3.5 ? 0.5 : 1.0;
}

double e2m3_half_step(double q) {
  const double m = std::fabs(q);
  return m < 2 ? 0.0625 : m < 4 ? 0.125 : 0.25;
}

bool explained_by_reader(const nlohmann::json&, const nlohmann::json&) {
  return false;
}

const CodecRow* Codec::row(DType weight, DType scale) const {
  for (const CodecRow& r : rows)
    if (r.weight == weight && r.scale == scale) return &r;
  return nullptr;
}

const CodecRow& Codec::written_row() const {
  for (const CodecRow& r : rows)
    if (r.writes) return r;
  throw std::logic_error(std::string("no row of codec ") + name + " is written");
}

bool Codec::weight_dtype(DType d) const {
  for (const CodecRow& r : rows)
    if (r.weight == d) return true;
  return false;
}

std::string fused_group(const std::string& weight) {
  // llm-compressor's microscale fused mappings (q/k/v, DeepSeek's wq_a/wkv_a_with_mqa, gate/up,
  // w1/w3), and, as vLLM fuses each expert's w13 with one global scale, an expert's gate/up too.
  // MLA's q_a_proj/kv_a_proj_with_mqa under transformers' names: vLLM loads them into one
  // fused_qkv_a_proj, ModelOpt 0.47's export gives them one weight_scale_2 (they read the same
  // input), and llm-compressor's calibrated path fuses them (observers FUSED_LAYER_NAMES); its
  // model-free mappings know DeepSeek's own names only.
  static const std::vector<std::pair<std::regex, std::string>> members = {
      {std::regex(R"(((attn|attention)\.)(q_proj|k_proj|v_proj)\.weight$)"), "$1{qkv}"},
      {std::regex(R"(((attn|attention)\.)(wq_a|wkv_a_with_mqa)\.weight$)"), "$1{wq_a,wkv_a}"},
      {std::regex(R"(((attn|attention)\.)(q_a_proj|kv_a_proj_with_mqa)\.weight$)"), "$1{q_a,kv_a}"},
      {std::regex(R"((\.)(gate_proj|up_proj)\.weight$)"), "$1{gate,up}"},
      {std::regex(R"((^|\.)(w1|w3)\.weight$)"), "$1{w1,w3}"},
  };
  for (const auto& [re, key] : members)
    if (std::regex_search(weight, re)) return std::regex_replace(weight, re, key);
  return weight;
}

NameIndex tensor_names(const Metadata& md) {
  NameIndex by_name;
  by_name.reserve(md.tensors.size());
  for (uint32_t i = 0; i < md.tensors.size(); ++i) by_name.emplace(md.tensors[i].fqn, i);
  return by_name;
}

bool ends_with_longer(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() > n && s.compare(s.size() - n, std::string::npos, tail) == 0;
}

}  // namespace dcpctl
