#include "gguf/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <regex>
#include <stdexcept>

#include "gguf/lowbit.h"
#include "gguf/vocab.h"
#include "util/error.h"
#include "view/moe_sparsity.h"

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
  throw UsageError(Where(),
                   "--outtype must be f32, f16, bf16, q8_0 (convert_hf_to_gguf.py's words), q4_0, q4_k, q5_k or q6_k "
                   "(llama-quantize's, --pure), not '" +
                       word + "'");
}

namespace {

// config.json's value at `key` when it is an integer; -1 when absent or null.
int64_t int_of(const json& c, const char* key) {
  auto it = c.find(key);
  return it != c.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

int64_t need_int(const json& c, const char* key, const std::string& where) {
  int64_t v = int_of(c, key);
  if (v < 0)
    throw UnsupportedError(Where(where),
                           std::string("a GGUF output needs config.json's ") + key + " (a non-negative integer)");
  return v;
}

// prepare_tensors: one dimension, a *_norm.weight, a router (ffn_gate_inp), a name not ending
// .weight: F32; a Q8_0 whose rows are not a multiple of 32: F16.
TensorType type_of(const std::string& n, const std::vector<int64_t>& shape, OutType out) {
  auto ends = [&](const char* s) {
    size_t k = std::strlen(s);
    return n.size() >= k && n.compare(n.size() - k, k, s) == 0;
  };
  bool f32 = shape.size() <= 1 || ends("_norm.weight") || ends(".ffn_gate_inp.weight") || !ends(".weight");
  // llama-quantize's fallbacks where the rows are not whole blocks (gguf/gguf.h's row_type): a Q8_0
  // (or Q4_0) whose rows are not a multiple of 32 is F16, a K-quant another block type first.
  return f32 ? TensorType::F32 : row_type(out.type, static_cast<uint64_t>(shape.back()));
}

// find_hparam: the first of `keys` config.json has (its value, null too); null when none.
json find_hparam(const json& c, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto it = c.find(k); it != c.end()) return *it;
  return json();
}

// TextModel's rope_parameters: rope_parameters, else rope_scaling, else {}; with the top level's
// rope_theta, original_max_position_embeddings and a `type` mirrored into it as TextModel does.
json rope_params(const json& c) {
  json r = json::object();
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (auto it = c.find(k); it != c.end()) {
      if (it->is_object() && !it->empty()) r = *it;
      break;  // hparams.get("rope_parameters", ...) takes the key when present, even null
    }
  if (r.contains("full_attention") || r.contains("sliding_attention")) return r;
  if (json t = find_hparam(
          c, {"global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"});
      !r.contains("rope_theta") && !t.is_null())
    r["rope_theta"] = t;
  if (!r.contains("rope_type") && r.contains("type") && !r["type"].is_null()) r["rope_type"] = r["type"];
  if (json f = find_hparam(c, {"partial_rotary_factor", "rope_pct", "rope_percent"});
      !r.contains("partial_rotary_factor") && !f.is_null())
    r["partial_rotary_factor"] = f;
  if (json o = find_hparam(c, {"original_max_position_embeddings"});
      !r.contains("original_max_position_embeddings") && !o.is_null())
    r["original_max_position_embeddings"] = o;
  return r;
}

}  // namespace

bool mxfp4_config(const json& config) {
  auto q = config.find("quantization_config");
  return q != config.end() && q->is_object() && q->value("quant_method", json()) == "mxfp4";
}

std::vector<uint8_t> mxfp4_repack(const TensorPlan& p, const uint8_t* blocks, const uint8_t* scales,
                                  const std::vector<int64_t>& bs) {
  if (!p.mxfp4 || bs.size() != 4 || bs[3] != 16)
    throw std::logic_error("gguf: mxfp4_repack of a plan that is not MXFP4 blocks");
  const int64_t e = bs[0], rows = bs[1], groups = bs[2];
  const int64_t step = p.gate_up ? 2 : 1, first = p.gate_up == 'u' ? 1 : 0;
  std::vector<uint8_t> out;
  out.reserve(static_cast<size_t>(e * (rows / step) * groups * 17));
  for (int64_t a = 0; a < e; ++a)
    for (int64_t r = first; r < rows; r += step)
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t at = (a * rows + r) * groups + g;
        const uint8_t* b = blocks + at * 16;
        out.push_back(scales[at]);
        for (int i = 0; i < 8; ++i) {  // transform_nibble_layout
          out.push_back(static_cast<uint8_t>((b[i] & 0x0F) | (b[8 + i] & 0x0F) << 4));
          out.push_back(static_cast<uint8_t>((b[i] >> 4) | (b[8 + i] >> 4) << 4));
        }
      }
  return out;
}

namespace {

// Gemma2Model.set_gguf_parameters: its own keys in its own order (not TextModel's; no rope key),
// each hparams[...] it reads a KeyError in the converter when config.json lacks it.
void gemma2_keys(Header& h, const std::string& a, const json& c, uint32_t file_type, const std::string& where) {
  auto need_float = [&](const char* key) {
    json v = c.value(key, json());
    if (!v.is_number())
      throw UnsupportedError(Where(where),
                             std::string("a GGUF of ") + a + " needs config.json's " + key + " (a number)");
    return v.get<float>();
  };
  h.add_u32(a + ".context_length", static_cast<uint32_t>(need_int(c, "max_position_embeddings", where)));
  h.add_u32(a + ".embedding_length", static_cast<uint32_t>(need_int(c, "hidden_size", where)));
  h.add_u32(a + ".block_count", static_cast<uint32_t>(need_int(c, "num_hidden_layers", where)));
  h.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(need_int(c, "intermediate_size", where)));
  const int64_t heads = need_int(c, "num_attention_heads", where);
  h.add_u32(a + ".attention.head_count", static_cast<uint32_t>(heads));
  h.add_u32(
      a + ".attention.head_count_kv",
      static_cast<uint32_t>(c.contains("num_key_value_heads") ? need_int(c, "num_key_value_heads", where) : heads));
  h.add_f32(a + ".attention.layer_norm_rms_epsilon", need_float("rms_norm_eps"));
  const int64_t head_dim = need_int(c, "head_dim", where);
  h.add_u32(a + ".attention.key_length", static_cast<uint32_t>(head_dim));
  h.add_u32(a + ".attention.value_length", static_cast<uint32_t>(head_dim));
  h.add_u32("general.file_type", file_type);
  h.add_f32(a + ".attn_logit_softcapping", need_float("attn_logit_softcapping"));
  h.add_f32(a + ".final_logit_softcapping", need_float("final_logit_softcapping"));
  h.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(need_int(c, "sliding_window", where)));
}

// Gemma3Model.set_gguf_parameters: TextModel's keys (their order), then its own written over them
// where they stand (context_length, head counts, rms epsilon, key / value length, rope.freq_base,
// each required here, as they are written whether config.json has them or not), then
// final_logit_softcapping when set and attention.sliding_window (sliding_window_pattern != 1).
// TextModel's rope keys are the full_attention parameters' (default, or linear with a factor), the
// sliding_attention theta as rope.freq_base_swa.
void gemma3_keys(Header& h, const std::string& a, const json& c, uint32_t file_type, const std::string& where) {
  const json rope = rope_params(c);
  const json full = rope.contains("full_attention") ? rope["full_attention"] : rope;
  const json swa = rope.contains("sliding_attention") ? rope["sliding_attention"] : json::object();
  const json type = full.value("rope_type", json()), theta = full.value("rope_theta", json());
  const json eps = c.value("rms_norm_eps", json());
  if (!eps.is_number() || !theta.is_number() || !full.is_object() || !swa.is_object())
    throw UnsupportedError(Where(where),
                           "a GGUF of " + a + " needs config.json's rms_norm_eps and the full attention's rope_theta");
  if (!type.is_null() && type != "default" && type != "linear")
    throw UnsupportedError(Where(where), "config.json's rope type " + type.dump() + " is not written into a GGUF of " +
                                             a + " by dcpctl (default, linear)");
  const int64_t head_dim = need_int(c, "head_dim", where);
  h.add_u32(a + ".block_count", static_cast<uint32_t>(need_int(c, "num_hidden_layers", where)));
  h.add_u32(a + ".context_length", static_cast<uint32_t>(need_int(c, "max_position_embeddings", where)));
  h.add_u32(a + ".embedding_length", static_cast<uint32_t>(need_int(c, "hidden_size", where)));
  h.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(need_int(c, "intermediate_size", where)));
  h.add_u32(a + ".attention.head_count", static_cast<uint32_t>(need_int(c, "num_attention_heads", where)));
  h.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(need_int(c, "num_key_value_heads", where)));
  if (json f = full.value("factor", json()); type == "linear" && !f.is_null()) {
    if (!f.is_number())
      throw UnsupportedError(Where(where), "config.json's rope factor " + f.dump() + " is not a number");
    h.add_string(a + ".rope.scaling.type", "linear");
    h.add_f32(a + ".rope.scaling.factor", f.get<float>());
  }
  h.add_f32(a + ".rope.freq_base", theta.get<float>());
  if (json t = swa.value("rope_theta", json()); !t.is_null()) {
    if (!t.is_number())
      throw UnsupportedError(Where(where),
                             "config.json's sliding attention rope_theta " + t.dump() + " is not a number");
    h.add_f32(a + ".rope.freq_base_swa", t.get<float>());
  }
  h.add_f32(a + ".attention.layer_norm_rms_epsilon", eps.get<float>());
  h.add_u32(a + ".attention.key_length", static_cast<uint32_t>(head_dim));
  h.add_u32(a + ".attention.value_length", static_cast<uint32_t>(head_dim));
  h.add_u32("general.file_type", file_type);
  if (json cap = c.value("final_logit_softcapping", json());
      !cap.is_null() && !(cap.is_number() && cap.get<double>() == 0)) {
    if (!cap.is_number())
      throw UnsupportedError(Where(where), "config.json's final_logit_softcapping " + cap.dump() + " is not a number");
    h.add_f32(a + ".final_logit_softcapping", cap.get<float>());
  }
  if (json cap = c.value("attn_logit_softcapping", json()); !cap.is_null())  // the converter asserts it is None
    throw UnsupportedError(
        Where(where),
        "config.json's attn_logit_softcapping is not None: llama.cpp's converter refuses a " + a + " with it");
  if (c.value("sliding_window_pattern", json()) != json(1))
    h.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(need_int(c, "sliding_window", where)));
}

// gguf-py's tensor_mapping for MODEL_ARCH.GEMMA3: Gemma 2's norms and the q/k norms.
const std::map<std::string, std::string> kGemma3Layer{{"post_attention_layernorm", "post_attention_norm"},
                                                      {"pre_feedforward_layernorm", "ffn_norm"},
                                                      {"post_feedforward_layernorm", "post_ffw_norm"},
                                                      {"self_attn.q_norm", "attn_q_norm"},
                                                      {"self_attn.k_norm", "attn_k_norm"}};

Arch gemma3_arch() {
  Arch a{"gemma3"};
  a.vocab = Arch::Vocab::Spm, a.no_space_prefix = true, a.norm_shift = 1, a.full_vocab = true;
  a.layer_names = &kGemma3Layer, a.keys = gemma3_keys;
  return a;
}

// gguf-py's tensor_mapping for MODEL_ARCH.GEMMA2: a layer's four norms.
const std::map<std::string, std::string> kGemma2Layer{{"post_attention_layernorm", "post_attention_norm"},
                                                      {"pre_feedforward_layernorm", "ffn_norm"},
                                                      {"post_feedforward_layernorm", "post_ffw_norm"}};

// Phi3MiniModel.set_gguf_parameters (its own keys in its own order). LongRoPE (rope_parameters'
// long_factor), for which it adds rope_scaling.attn_factor and the rope_factors_long/short tensors,
// is refused.
void phi3_keys(Header& h, const std::string& a, const json& c, uint32_t file_type, const std::string& where) {
  auto need = [&](std::initializer_list<const char*> keys, const char* what) {
    json v = find_hparam(c, keys);
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      throw UnsupportedError(
          Where(where), std::string("a GGUF of ") + a + " needs config.json's " + what + " (a non-negative integer)");
    return v.get<int64_t>();
  };
  const int64_t embd = need({"hidden_size", "n_embd"}, "hidden_size"),
                heads = need({"num_attention_heads", "n_head"}, "num_attention_heads");
  const int64_t heads_kv = need({"num_key_value_heads", "n_head_kv"}, "num_key_value_heads");
  const json eps = c.value("rms_norm_eps", json());
  const json rope = rope_params(c);
  const json orig = rope.value("original_max_position_embeddings", json()), theta = rope.value("rope_theta", json());
  const json pct = rope.value("partial_rotary_factor", json(1.0));
  if (!eps.is_number() || !orig.is_number_integer() || !theta.is_number() || !pct.is_number() || heads == 0)
    throw UnsupportedError(Where(where),
                           "a GGUF of " + a +
                               " needs config.json's rms_norm_eps, original_max_position_embeddings, rope_theta "
                               "and num_attention_heads (partial_rotary_factor a number)");
  if (json f = rope.value("long_factor", json()); !f.is_null() && !(f.is_array() && f.empty()))
    throw UnsupportedError(Where(where),
                           "a " + a +
                               " rope with long_factor (LongRoPE: the converter's rope_factors_long/short tensors) "
                               "is not written into a GGUF by dcpctl yet");
  h.add_u32(a + ".context_length",
            static_cast<uint32_t>(need({"n_positions", "max_position_embeddings"}, "max_position_embeddings")));
  h.add_u32(a + ".rope.scaling.original_context_length", orig.get<uint32_t>());
  h.add_u32(a + ".embedding_length", static_cast<uint32_t>(embd));
  h.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(need({"intermediate_size"}, "intermediate_size")));
  h.add_u32(a + ".block_count", static_cast<uint32_t>(need_int(c, "num_hidden_layers", where)));
  h.add_u32(a + ".attention.head_count", static_cast<uint32_t>(heads));
  h.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(heads_kv));
  h.add_f32(a + ".attention.layer_norm_rms_epsilon", eps.get<float>());
  // int(rot_pct * n_embd) // n_head: a Python float's product, toward zero, then floor division.
  h.add_u32(a + ".rope.dimension_count",
            static_cast<uint32_t>(static_cast<int64_t>(pct.get<double>() * static_cast<double>(embd)) / heads));
  h.add_f32(a + ".rope.freq_base", theta.get<float>());
  h.add_u32("general.file_type", file_type);
  const json window = c.value("sliding_window", json());  // None: 0 (Phi-4's)
  if (!window.is_null() && !window.is_number_integer())
    throw UnsupportedError(Where(where), "config.json's sliding_window " + window.dump() + " is not an integer");
  h.add_u32(a + ".attention.sliding_window", window.is_null() ? 0 : window.get<uint32_t>());
}

// gguf-py's tensor_mapping for MODEL_ARCH.PHI3: the fused projections, written as they are.
const std::map<std::string, std::string> kPhi3Layer{{"self_attn.qkv_proj", "attn_qkv"}, {"mlp.gate_up_proj", "ffn_up"}};

Arch phi3_arch() {
  Arch a{"phi3"};
  a.vocab = Arch::Vocab::Phi3, a.layer_names = &kPhi3Layer, a.keys = phi3_keys;
  return a;
}

Arch gemma2_arch() {
  Arch a{"gemma2"};
  a.vocab = Arch::Vocab::Spm, a.no_space_prefix = true, a.norm_shift = 1, a.drop_head = true;
  a.layer_names = &kGemma2Layer, a.keys = gemma2_keys;
  return a;
}

// LlamaModel's: Q/K rows permuted, tokenizer.model tried first, its own keys and rope_freqs.
Arch llama_arch(const std::string& name, Arch::Experts experts) {
  Arch a{name, true, experts, Arch::Vocab::SpmFirst};
  a.llama_model = true;
  return a;
}

// GraniteModel.set_gguf_parameters after LlamaModel's: each multiplier that is set (truthy).
void granite_keys(Header& h, const std::string& a, const json& c, const std::string& where) {
  for (const auto& [hf, key] :
       std::initializer_list<std::pair<const char*, const char*>>{{"attention_multiplier", ".attention.scale"},
                                                                  {"embedding_multiplier", ".embedding_scale"},
                                                                  {"residual_multiplier", ".residual_scale"},
                                                                  {"logits_scaling", ".logit_scale"}}) {
    const json v = c.value(hf, json());
    if (v.is_null() || v == json(0) || v == json(0.0) || v == json(false)) continue;
    if (!v.is_number())
      throw UnsupportedError(Where(where), std::string("config.json's ") + hf + " " + v.dump() + " is not a number");
    h.add_f32(a + key, v.get<float>());
  }
}

Arch granite_arch() {
  Arch a = llama_arch("granite", Arch::Experts::None);
  a.no_head_dim = true, a.extra_keys = granite_keys;
  return a;
}

// Olmo2Model.set_gguf_parameters after TextModel's: where config.json has sliding_window (OLMo 3),
// it and the per-layer pattern (layer_types' sliding_attention, else every layer but each 4th).
void olmo2_keys(Header& h, const std::string& a, const json& c, const std::string& where) {
  if (!c.contains("sliding_window")) return;
  h.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(need_int(c, "sliding_window", where)));
  std::vector<bool> pattern;
  if (const json t = c.value("layer_types", json()); c.contains("layer_types")) {
    if (!t.is_array()) throw UnsupportedError(Where(where), "config.json's layer_types is not a list");
    for (const json& x : t) pattern.push_back(x == "sliding_attention");
  } else {
    for (int64_t i = 0; i < need_int(c, "num_hidden_layers", where); ++i) pattern.push_back((i + 1) % 4 != 0);
  }
  h.add_bools(a + ".attention.sliding_window_pattern", pattern);
}

// gguf-py's tensor_mapping for MODEL_ARCH.OLMO2: no pre-norms; post-attention and post-feedforward
// norms; q/k norms over the whole projections.
const std::map<std::string, std::string> kOlmo2Layer{{"post_attention_layernorm", "post_attention_norm"},
                                                     {"post_feedforward_layernorm", "post_ffw_norm"},
                                                     {"self_attn.q_norm", "attn_q_norm"},
                                                     {"self_attn.k_norm", "attn_k_norm"}};

Arch olmo2_arch() {
  Arch a{"olmo2"};
  a.layer_names = &kOlmo2Layer, a.extra_keys = olmo2_keys;
  return a;
}

// gguf-py's tensor_mapping for MODEL_ARCH.STARCODER2: the plain MLP (its LayerNorms' and
// projections' biases are named as their weights).
const std::map<std::string, std::string> kStarcoder2Layer{{"mlp.c_fc", "ffn_up"}, {"mlp.c_proj", "ffn_down"}};

Arch starcoder2_arch() {
  Arch a{"starcoder2"};
  a.layer_names = &kStarcoder2Layer, a.layer_norm = true;
  return a;
}

// CommandR2Model.set_gguf_parameters after TextModel's: logit_scale (a KeyError without it) and
// rope.scaling.type none (over a linear or yarn scaling TextModel wrote: refused here).
void command_r_keys(Header& h, const std::string& a, const json& c, const std::string& where) {
  const json scale = c.value("logit_scale", json());
  if (!scale.is_number())
    throw UnsupportedError(Where(where), "a GGUF of " + a + " needs config.json's logit_scale (a number)");
  if (json t = rope_params(c).value("rope_type", json()); !t.is_null() && t != "default")
    throw UnsupportedError(Where(where), "config.json's rope type " + t.dump() + " is not written into a GGUF of " + a +
                                             " by dcpctl (default)");
  h.add_f32(a + ".logit_scale", scale.get<float>());
  h.add_string(a + ".rope.scaling.type", "none");
}

// gguf-py's tensor_mapping for MODEL_ARCH.COMMAND_R: the q/k norms (Command R+'s).
const std::map<std::string, std::string> kCommandRLayer{{"self_attn.q_norm", "attn_q_norm"},
                                                        {"self_attn.k_norm", "attn_k_norm"}};

Arch command_r_arch() {
  Arch a{"command-r"};
  a.layer_names = &kCommandRLayer, a.layer_norm = true, a.no_head = true, a.context_model_max_length = true;
  a.extra_keys = command_r_keys;
  return a;
}

// FalconModel.set_gguf_parameters: its own keys (the context 2048, "not in config.json"; the feed
// forward 4 x hidden; head_count_kv num_kv_heads, else n_head_kv, else 1).
void falcon_keys(Header& h, const std::string& a, const json& c, uint32_t file_type, const std::string& where) {
  const json heads = find_hparam(c, {"num_attention_heads", "n_head"});
  json kv = c.value("num_kv_heads", json());
  if (kv.is_null()) kv = c.value("n_head_kv", json(1));
  const json eps = c.value("layer_norm_epsilon", json());
  if (!heads.is_number_integer() || !kv.is_number_integer() || !eps.is_number())
    throw UnsupportedError(
        Where(where),
        "a GGUF of " + a + " needs config.json's num_attention_heads, num_kv_heads and layer_norm_epsilon");
  const int64_t hidden = need_int(c, "hidden_size", where);
  h.add_u32(a + ".context_length", 2048);
  h.add_string(a + ".tensor_data_layout", "jploski");
  h.add_u32(a + ".embedding_length", static_cast<uint32_t>(hidden));
  h.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(4 * hidden));
  h.add_u32(a + ".block_count", static_cast<uint32_t>(need_int(c, "num_hidden_layers", where)));
  h.add_u32(a + ".attention.head_count", heads.get<uint32_t>());
  h.add_u32(a + ".attention.head_count_kv", kv.get<uint32_t>());
  h.add_f32(a + ".attention.layer_norm_epsilon", eps.get<float>());
  h.add_u32("general.file_type", file_type);
}

// gguf-py's tensor_mapping for MODEL_ARCH.FALCON: Falcon-7B's input_layernorm, Falcon-40B's ln_mlp
// (attn_norm) and ln_attn (attn_norm_2), the fused query_key_value and the MLP.
const std::map<std::string, std::string> kFalconLayer{{"input_layernorm", "attn_norm"},
                                                      {"ln_mlp", "attn_norm"},
                                                      {"ln_attn", "attn_norm_2"},
                                                      {"self_attention.query_key_value", "attn_qkv"},
                                                      {"self_attention.dense", "attn_output"},
                                                      {"mlp.dense_h_to_4h", "ffn_up"},
                                                      {"mlp.dense_4h_to_h", "ffn_down"}};
const std::map<std::string, std::string> kFalconTop{
    {"transformer.word_embeddings", "token_embd"}, {"transformer.ln_f", "output_norm"}, {"lm_head", "output"}};

Arch falcon_arch() {
  Arch a{"falcon"};
  a.layer_prefix = "transformer.h.", a.layer_names = &kFalconLayer, a.top_names = &kFalconTop, a.falcon_qkv = true;
  a.keys = falcon_keys, a.layer_norm = true;
  return a;
}

// Mistral3Model's Ministral3Model.set_gguf_parameters after LlamaModel's, for model_type ministral3:
// its yarn rope (asserted) with mscale_all_dim as rope.scaling.yarn_log_multiplier (as it is, not
// DeepSeek's 0.1 x) and llama_4_scaling_beta as attention.temperature_scale (KeyErrors without them).
void ministral3_keys(Header& h, const std::string& a, const json& c, const std::string& where) {
  if (c.value("model_type", json()) != "ministral3") return;
  const json rope = rope_params(c);
  const json mscale = rope.value("mscale_all_dim", json()), beta = rope.value("llama_4_scaling_beta", json());
  if (rope.value("rope_type", json()) != "yarn" || !mscale.is_number() || !beta.is_number())
    throw UnsupportedError(
        Where(where),
        "a GGUF of ministral3 needs its yarn rope_parameters with mscale_all_dim and llama_4_scaling_beta "
        "(the converter asserts them)");
  h.add_f32(a + ".rope.scaling.yarn_log_multiplier", mscale.get<float>());
  h.add_f32(a + ".attention.temperature_scale", beta.get<float>());
}

Arch ministral3_arch() {
  Arch a = llama_arch("mistral3", Arch::Experts::None);
  a.extra_keys = ministral3_keys;
  return a;
}

// MPTModel.set_gguf_parameters: its own keys, and no general.file_type (it does not add one);
// head_count_kv only where attn_config's kv_n_heads is set, clamp_kqv where clip_qkv is.
void mpt_keys(Header& h, const std::string& a, const json& c, uint32_t, const std::string& where) {
  const json attn = c.value("attn_config", json());
  if (!attn.is_object() || !attn.contains("clip_qkv") || !attn.contains("alibi"))
    throw UnsupportedError(
        Where(where),
        "a GGUF of mpt needs config.json's attn_config with clip_qkv and alibi (the converter reads them)");
  const int64_t d_model = need_int(c, "d_model", where);
  h.add_u32(a + ".context_length", static_cast<uint32_t>(need_int(c, "max_seq_len", where)));
  h.add_u32(a + ".embedding_length", static_cast<uint32_t>(d_model));
  h.add_u32(a + ".block_count", static_cast<uint32_t>(need_int(c, "n_layers", where)));
  h.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(4 * d_model));
  h.add_u32(a + ".attention.head_count", static_cast<uint32_t>(need_int(c, "n_heads", where)));
  if (const json kv = attn.value("kv_n_heads", json()); kv.is_number_integer() && kv.get<int64_t>() > 0)
    h.add_u32(a + ".attention.head_count_kv", kv.get<uint32_t>());
  else if (!kv.is_null() && !(kv.is_number_integer() && kv.get<int64_t>() == 0))
    throw UnsupportedError(Where(where), "config.json's attn_config kv_n_heads " + kv.dump() + " is not a count");
  h.add_f32(a + ".attention.layer_norm_epsilon", 1e-5f);
  if (const json clip = attn["clip_qkv"]; !clip.is_null()) {
    if (!clip.is_number())
      throw UnsupportedError(Where(where), "config.json's attn_config clip_qkv " + clip.dump() + " is not a number");
    h.add_f32(a + ".attention.clamp_kqv", clip.get<float>());
  }
  const json bias_max = attn.value("alibi_bias_max", json());
  if (attn["alibi"] == json(true) && !bias_max.is_number())
    throw UnsupportedError(Where(where), "config.json's attn_config alibi_bias_max is not a number");
  h.add_f32(a + ".attention.max_alibi_bias", attn["alibi"] == json(true) ? bias_max.get<float>() : 0.0f);
}

// gguf-py's tensor_mapping for MODEL_ARCH.MPT (transformer.blocks.N's).
const std::map<std::string, std::string> kMptLayer{{"norm_1", "attn_norm"},          {"attn.Wqkv", "attn_qkv"},
                                                   {"attn.out_proj", "attn_output"}, {"norm_2", "ffn_norm"},
                                                   {"ffn.up_proj", "ffn_up"},        {"ffn.down_proj", "ffn_down"}};
const std::map<std::string, std::string> kMptTop{
    {"transformer.wte", "token_embd"}, {"transformer.norm_f", "output_norm"}, {"lm_head", "output"}};

Arch mpt_arch() {
  Arch a{"mpt"};
  a.layer_prefix = "transformer.blocks.", a.layer_names = &kMptLayer, a.top_names = &kMptTop, a.keys = mpt_keys;
  return a;
}

// The architecture table: config.json's architectures[0] -> what the converter's model class
// (ModelBase.register) writes.
const std::vector<std::pair<std::string, Arch>>& arch_table() {
  using E = Arch::Experts;
  static const std::vector<std::pair<std::string, Arch>> table{
      // LlamaModel serves Llama, Mistral and Mixtral alike (general.architecture llama).
      {"LlamaForCausalLM", llama_arch("llama", E::None)},
      {"MistralForCausalLM", llama_arch("llama", E::None)},
      {"MixtralForCausalLM", llama_arch("llama", E::Mixtral)},
      {"Qwen2ForCausalLM", {"qwen2", false, E::None, Arch::Vocab::SpmFirst}},
      {"Qwen3ForCausalLM", {"qwen3", false, E::None, Arch::Vocab::SpmFirst}},
      {"Qwen3MoeForCausalLM", {"qwen3moe", false, E::Qwen}},
      // DeepseekV2Model serves DeepSeek-V2 (V2-Lite: no q_lora, softmax gating) and V3 (Kimi K2's too).
      {"DeepseekV2ForCausalLM", {"deepseek2", false, E::Deepseek}},
      {"DeepseekV3ForCausalLM", {"deepseek2", false, E::Deepseek}},
      // Kimi K2.5's text model (the converter registers KimiK25ForConditionalGeneration with
      // DeepseekV2Model; its vision tower is KimiK25Model's mmproj file, not written here).
      // transformers 5.24's own class, Kimi_K25ForConditionalGeneration, is not the converter's.
      {"KimiK25ForConditionalGeneration", {"deepseek2", false, E::Deepseek}},
      {"Glm4MoeForCausalLM", {"glm4moe", false, E::Deepseek}},
      {"GptOssForCausalLM", {"gpt-oss", false, E::GptOss}},
      {"Gemma2ForCausalLM", gemma2_arch()},
      {"Phi3ForCausalLM", phi3_arch()},
      {"Gemma3ForCausalLM", gemma3_arch()},
      {"GraniteForCausalLM", granite_arch()},
      {"Olmo2ForCausalLM", olmo2_arch()},
      {"Starcoder2ForCausalLM", starcoder2_arch()},
      {"CohereForCausalLM", command_r_arch()},
      {"FalconForCausalLM", falcon_arch()},
      // Mistral3Model (its Mistral3ForConditionalGeneration, the text model inside a vision one, is
      // not here: its keys are language_model's).
      {"Ministral3ForCausalLM", ministral3_arch()},
      // MosaicML's remote-code name, which MPTModel registers (transformers' MptForCausalLM is not).
      {"MPTForCausalLM", mpt_arch()},
      {"RWForCausalLM", falcon_arch()},
  };
  return table;
}

// TextModel.filter_tensors' multimodal tensors: a key starting with one of these, or holding one
// of kMultimodalParts, is not the text model's.
constexpr const char* kMultimodalStarts[] = {
    "mlp",     "vit.",       "vpm.",           "siglip2.",          "conformer.",
    "merger.", "resampler.", "sound_encoder.", "sound_projection.", "speech_embeddings."};
constexpr const char* kMultimodalParts[] = {
    "visual.",          "vision.",         "audio.",      "talker.",         "vision_",
    "audio_",           "token2wav.",      "code2wav.",   "projector.",      "pre_mm_projector_norm",
    "image_newline",    "view_seperator",  "patch_embed", "patch_embedding", "patch_merger.",
    "patch_merge_mlp.", "model.connector."};

}  // namespace

json converter_hparams(const json& config) {
  auto text = config.find("text_config");
  if (!config.is_object() || text == config.end()) return config;
  json merged = config;
  if (text->is_object())
    for (const auto& [k, v] : text->items()) merged[k] = v;
  return merged;
}

std::string converter_key(const std::string& key) {
  for (const char* s : kMultimodalStarts)
    if (key.rfind(s, 0) == 0) return "";
  for (const char* s : kMultimodalParts)
    if (key.find(s) != std::string::npos) return "";
  std::string out = key;
  static const std::string lm = "language_model.";
  for (size_t at = out.find(lm); at != std::string::npos; at = out.find(lm, at)) out.erase(at, lm.size());
  return out;
}

Arch arch_of(const json& config, const std::string& where) {
  std::string hf;
  if (auto it = config.find("architectures");
      it != config.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    hf = (*it)[0].get<std::string>();
  std::string names;
  for (const auto& [name, arch] : arch_table()) {
    if (name == hf) return arch;
    names += (names.empty() ? "" : ", ") + name;
  }
  throw UnsupportedError(Where(where), "a GGUF output of architecture '" +
                                           (hf.empty() ? std::string("(none in config.json)") : hf) +
                                           "' is not written (dcpctl writes " + names + ")");
}

namespace {

// FalconModel.modify_tensors' regrouping of query_key_value (TensorPlan::qkv_groups): view(kv,
// heads / kv + 2, head_dim, hidden), its q heads, then k, then v; refused where that view fails.
void falcon_qkv_plan(TensorPlan& p, const json& config, const std::string& key, const std::string& suffix,
                     const std::string& where) {
  const json h = find_hparam(config, {"num_attention_heads", "n_head"}),
             kv = find_hparam(config, {"num_kv_heads", "n_head_kv"});
  const int64_t heads = h.is_number_integer() ? h.get<int64_t>() : 0,
                groups = kv.is_number_integer() && kv.get<int64_t>() > 0 ? kv.get<int64_t>() : 1;
  const int64_t hidden = int_of(config, "hidden_size"), head_dim = heads > 0 ? hidden / heads : 0;
  const std::vector<int64_t>& shape = p.shape;
  if (suffix != "weight" || heads <= 0 || heads % groups != 0 || shape.size() != 2 || shape[1] != head_dim * heads ||
      shape[0] != (heads + 2 * groups) * head_dim)
    throw UnsupportedError(Where(where, std::nullopt, key),
                           "'" + key + "' is not (" + std::to_string(heads) + " + 2 x " + std::to_string(groups) +
                               " kv heads) x head_dim rows of hidden_size: llama.cpp's converter cannot regroup it "
                               "(a Falcon-7B config saved by transformers 5 says num_kv_heads = heads)");
  p.qkv_groups = groups, p.qkv_heads = heads;
}

}  // namespace

TensorPlan tensor_plan(const Arch& arch, const json& config, const std::string& key, const std::vector<int64_t>& shape,
                       OutType out, const std::string& where) {
  static const std::map<std::string, std::string> top{
      {"model.embed_tokens", "token_embd"}, {"model.norm", "output_norm"}, {"lm_head", "output"}};
  static const std::map<std::string, std::string> layer{{"input_layernorm", "attn_norm"},
                                                        {"self_attn.q_proj", "attn_q"},
                                                        {"self_attn.k_proj", "attn_k"},
                                                        {"self_attn.v_proj", "attn_v"},
                                                        {"self_attn.o_proj", "attn_output"},
                                                        {"post_attention_layernorm", "ffn_norm"},
                                                        {"mlp.gate_proj", "ffn_gate"},
                                                        {"mlp.up_proj", "ffn_up"},
                                                        {"mlp.down_proj", "ffn_down"},
                                                        {"self_attn.q_norm", "attn_q_norm"},
                                                        {"self_attn.k_norm", "attn_k_norm"},
                                                        {"mlp.gate", "ffn_gate_inp"},
                                                        {"block_sparse_moe.gate", "ffn_gate_inp"},
                                                        {"mlp.router", "ffn_gate_inp"}};
  // DeepseekV2Model's MLA and shared experts (kv_b_proj is split by plan_tensors).
  static const std::map<std::string, std::string> mla{{"self_attn.q_a_proj", "attn_q_a"},
                                                      {"self_attn.q_a_layernorm", "attn_q_a_norm"},
                                                      {"self_attn.q_b_proj", "attn_q_b"},
                                                      {"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"},
                                                      {"self_attn.kv_a_layernorm", "attn_kv_a_norm"},
                                                      {"mlp.shared_experts.gate_proj", "ffn_gate_shexp"},
                                                      {"mlp.shared_experts.up_proj", "ffn_up_shexp"},
                                                      {"mlp.shared_experts.down_proj", "ffn_down_shexp"},
                                                      {"mlp.gate.e_score_correction", "exp_probs_b"}};
  static const std::regex layer_re(R"(model\.layers\.(\d+)\.(.+)[._](weight|bias))");
  static const std::regex top_re(R"((.+)\.(weight|bias))");
  TensorPlan p;
  std::smatch m;
  std::string module;
  // A family whose layers are not model.layers.N (Falcon's transformer.h.N): its prefix read as
  // model.layers.'s (and only its: model.layers.N is no layer of such a family).
  std::string as_model_layers;
  if (arch.layer_prefix && key.rfind(arch.layer_prefix, 0) == 0)
    as_model_layers = "model.layers." + key.substr(std::strlen(arch.layer_prefix));
  const std::string& layer_key = arch.layer_prefix ? as_model_layers : key;
  if (std::regex_match(layer_key, m, layer_re)) {
    // A "_bias" ending only for e_score_correction_bias (mapped to .bias, as the converter's
    // try_suffixes do).
    const bool underscore = key[key.size() - m[3].length() - 1] == '_';
    const std::string* gname = nullptr;
    if (arch.layer_names && !underscore) {
      if (auto it = arch.layer_names->find(m[2]); it != arch.layer_names->end()) gname = &it->second;
    }
    const bool own = gname != nullptr;  // the family's own name: taken as it is
    if (auto it = layer.find(m[2]); !gname && it != layer.end() && !underscore) gname = &it->second;
    // Glm4MoeModel: DeepSeek's shared experts and e_score_correction_bias, not its MLA.
    const bool glm = arch.name == "glm4moe";
    if (auto it = mla.find(m[2]); !gname &&
                                  (arch.name == "deepseek2" || (glm && m[2].str().rfind("self_attn.", 0) != 0)) &&
                                  it != mla.end() && (!underscore || it->second == "exp_probs_b"))
      gname = &it->second;
    // Glm4MoeModel's MTP (nextn) layers, past num_hidden_layers: a decoder layer's tensors named as
    // any layer's, and these (gguf-py's NEXTN_* names, in that block).
    static const std::map<std::string, std::string> nextn{{"eh_proj", "nextn.eh_proj"},
                                                          {"embed_tokens", "nextn.embed_tokens"},
                                                          {"enorm", "nextn.enorm"},
                                                          {"hnorm", "nextn.hnorm"},
                                                          {"shared_head.head", "nextn.shared_head_head"},
                                                          {"shared_head.norm", "nextn.shared_head_norm"}};
    if (auto it = nextn.find(m[2]); !gname && glm && !underscore && it != nextn.end() &&
                                    int_of(config, "num_hidden_layers") >= 0 &&
                                    std::stoll(m[1]) >= int_of(config, "num_hidden_layers"))
      gname = &it->second;
    bool qk_norm = gname && (*gname == "attn_q_norm" || *gname == "attn_k_norm");
    bool router = gname && *gname == "ffn_gate_inp";
    if (gname && (!qk_norm || own || arch.name == "qwen3" || arch.name == "qwen3moe" || glm) &&
        (!router ||
         ((arch.experts == Arch::Experts::Qwen || arch.experts == Arch::Experts::Deepseek) ? m[2] == "mlp.gate"
          : arch.experts == Arch::Experts::GptOss
              ? m[2] == "mlp.router"
              : arch.experts == Arch::Experts::Mixtral && (m[2] == "block_sparse_moe.gate" || m[2] == "mlp.gate")))) {
      // GLM4_MOE and GPT_OSS have no ffn_norm: post_attention_layernorm is their post_attention_norm.
      const bool post = *gname == "ffn_norm" && (glm || arch.name == "gpt-oss");
      p.name = "blk." + m[1].str() + "." + (post ? std::string("post_attention_norm") : *gname) + "." + m[3].str();
      module = m[2];
    }
  } else if (std::regex_match(key, m, top_re)) {
    // a bias: the final LayerNorm's (StarCoder 2's output_norm.bias)
    if (arch.top_names) {
      if (auto it = arch.top_names->find(m[1]); it != arch.top_names->end()) p.name = it->second + "." + m[2].str();
    }
    if (auto it = top.find(m[1]); p.name.empty() && it != top.end() &&
                                  (m[2] == "weight" || it->second == "output_norm") &&
                                  !(arch.no_head && it->second == "output") && !arch.top_names)
      p.name = it->second + "." + m[2].str();
  }
  if (p.name.empty())
    throw UnsupportedError(Where(where, std::nullopt, key),
                           "'" + key + "' has no tensor in llama.cpp's " + arch.name +
                               " table (gguf-py's tensor_mapping) as dcpctl writes it");
  p.shape = shape;
  p.type = type_of(p.name, shape, out);
  if (static const std::string norm = "norm.weight"; arch.norm_shift != 0 && key.size() >= norm.size() &&
                                                     key.compare(key.size() - norm.size(), norm.size(), norm) == 0)
    p.shift = arch.norm_shift;
  if (arch.falcon_qkv && module == "self_attention.query_key_value") falcon_qkv_plan(p, config, key, m[3], where);
  if (arch.permute_qk && (module == "self_attn.q_proj" || module == "self_attn.k_proj")) {
    int64_t heads = need_int(config, "num_attention_heads", where);
    int64_t kv = int_of(config, "num_key_value_heads");
    p.permute_heads = module == "self_attn.k_proj" && kv > 0 ? kv : heads;
    if (shape.empty() || p.permute_heads <= 0 || shape[0] % (2 * p.permute_heads) != 0)
      throw UnsupportedError(Where(where, std::nullopt, key),
                             "'" + key + "' has rows that are not 2 x " + std::to_string(p.permute_heads) +
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

std::vector<float> llama3_rope_factors(const json& config) {
  json rope = rope_params(config);
  auto num = [&](const char* k, double d) {
    json v = rope.value(k, json());
    return v.is_number() ? v.get<double>() : d;
  };
  // Python floats (double) wherever the converter's arithmetic is on Python numbers, float32 where
  // it is on torch tensors (a Python number there is made float32 first, and `x / t` is
  // `t.reciprocal() * x`, Tensor.__rtruediv__).
  const float base = static_cast<float>(num("rope_theta", 10000.0));
  int64_t dim = int_of(config, "head_dim");
  if (dim < 0) dim = int_of(config, "hidden_size") / int_of(config, "num_attention_heads");
  const double factor = num("factor", 8.0), low = num("low_freq_factor", 1.0), high = num("high_freq_factor", 4.0),
               old = num("original_max_position_embeddings", 8192.0);
  const double low_wavelen = old / low, high_wavelen = old / high;
  std::vector<float> out;
  for (int64_t i = 0; i < dim; i += 2) {
    float e = static_cast<float>(i) / static_cast<float>(dim);
    float freq = 1.0f / static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
    float wavelen = (1.0f / freq) * static_cast<float>(2 * M_PI);
    if (wavelen < static_cast<float>(high_wavelen)) {
      out.push_back(1.0f);
    } else if (wavelen > static_cast<float>(low_wavelen)) {
      out.push_back(static_cast<float>(factor));
    } else {
      float smooth =
          ((1.0f / wavelen) * static_cast<float>(old) - static_cast<float>(low)) / static_cast<float>(high - low);
      float denom = (1.0f - smooth) / static_cast<float>(factor) + smooth;
      out.push_back((1.0f / denom) * 1.0f);
    }
  }
  return out;
}

void refuse_per_layer_experts(const json& config, const std::string& where) {
  const std::optional<MoeSparsity> s = find_moe_sparsity(config);
  if (!s || !s->differs_from(config)) return;
  const std::optional<int64_t> own = config_expert_count(config);
  std::string which = s->invalid.empty() ? "" : " (" + s->invalid + ")";
  for (size_t l = 0; l < s->num_experts.size() && which.empty(); ++l)
    if (s->num_experts[l] && (!own || *s->num_experts[l] != *own))
      which = ": layer " + std::to_string(l) + " keeps " + std::to_string(*s->num_experts[l]) + " experts" +
              (own ? " where config.json counts " + std::to_string(*own) : std::string());
  throw UnsupportedError(Where(where, std::nullopt, s->field),
                         "a model pruned to other expert counts per layer" + which +
                             ": a GGUF holds one expert_count a model (llama.cpp builds every layer with it)");
}

std::vector<TensorPlan> plan_tensors(const Arch& arch, const json& config, const std::vector<Input>& inputs,
                                     OutType out, const std::string& where) {
  std::vector<TensorPlan> plans;
  if (arch.llama_model) {  // LlamaModel.generate_extra_tensors
    json rope = rope_params(config);
    if (json t = rope.value("rope_type", json()); t.is_string()) {
      std::string low = t.get<std::string>();
      for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (low == "llama3") {
        TensorPlan p;
        p.name = "rope_freqs.weight";
        p.values = llama3_rope_factors(config);
        p.shape = {static_cast<int64_t>(p.values.size())};
        p.type = TensorType::F32;
        plans.push_back(std::move(p));
      }
    }
  }
  // Experts: Qwen2MoeModel's mlp.experts.X.{down,gate,up}_proj, LlamaModel's (Mixtral)
  // block_sparse_moe.experts.X.{w1,w2,w3}; each layer's stacked when it has all of them.
  static const std::regex qwen_re(
      R"(model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(down_proj|gate_proj|up_proj)\.weight)");
  static const std::regex mixtral_re(R"(model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.(w1|w2|w3)\.weight)");
  const bool qwen = arch.experts == Arch::Experts::Qwen || arch.experts == Arch::Experts::Deepseek;
  const std::vector<std::pair<std::string, std::string>> order =
      qwen ? std::vector<std::pair<std::string, std::string>>{{"down_proj", "ffn_down_exps"},
                                                              {"gate_proj", "ffn_gate_exps"},
                                                              {"up_proj", "ffn_up_exps"}}
           : std::vector<std::pair<std::string, std::string>>{
                 {"w1", "ffn_gate_exps"}, {"w2", "ffn_down_exps"}, {"w3", "ffn_up_exps"}};
  int64_t n_experts = 0;
  if (arch.experts != Arch::Experts::None) {
    const char* what = arch.experts == Arch::Experts::Deepseek ? "n_routed_experts"
                       : qwen                                  ? "num_experts"
                                                               : "num_local_experts";
    json n = arch.experts == Arch::Experts::Deepseek ? config.value("n_routed_experts", json())
             : qwen                                  ? find_hparam(config, {"num_local_experts", "num_experts"})
                                                     : config.value("num_local_experts", json());
    if (!n.is_number_integer() || n.get<int64_t>() <= 0)
      throw UnsupportedError(Where(where), "a GGUF of " + arch.name + " experts needs config.json's " + what);
    n_experts = n.get<int64_t>();
    refuse_per_layer_experts(config, where);
  }
  std::map<int64_t, std::map<std::pair<std::string, int64_t>, size_t>> pending;  // layer -> (proj, expert) -> input
  std::map<int64_t, std::map<std::string, size_t>> fused;  // layer -> gate_up_proj / down_proj -> input
  std::map<std::pair<int64_t, std::string>, size_t>
      mx_blocks;                   // (layer, gate_up_proj / down_proj) -> its _blocks input
  std::vector<TensorPlan> extras;  // written before the others (GPT-OSS's MXFP4 experts, packed FP4 weights)
  std::map<std::pair<int64_t, std::string>, std::map<int64_t, size_t>>
      packed_experts;  // (layer, proj) -> expert -> input
  static const std::regex layer_re(R"(model\.layers\.(\d+)\..*)");
  const bool deepseek = arch.name == "deepseek2";
  const int64_t layers = int_of(config, "num_hidden_layers");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    std::smatch m;
    if (in.packed != TensorType::F32) {
      // _generate_nvfp4_tensors: written before every other tensor, in key order, each followed by
      // its non-trivial per-tensor factors (_write_scale_tensor: |x - 1| < 1e-6 is trivial);
      // compressed-tensors' MXFP4 (which the converter refuses) alike, as it writes GPT-OSS's.
      // Experts (mlp.experts.X.{gate,up,down}_proj): stacked per layer and projection where the
      // last of them comes (_flush_nvfp4_experts), their factors one per expert (F32 [experts],
      // written unless all within np.allclose of 1).
      static const std::regex packed_expert(
          R"(model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight)");
      if (std::regex_match(in.key, m, packed_expert)) {
        const json n = find_hparam(config, {"num_local_experts", "num_experts"});
        if (in.packed != TensorType::NVFP4 || !n.is_number_integer() || n.get<int64_t>() <= 0 ||
            std::stoll(m[2]) >= n.get<int64_t>())
          throw UnsupportedError(Where(where, std::nullopt, in.key),
                                 "'" + in.key +
                                     "' is a packed FP4 expert: dcpctl stacks NVFP4 experts "
                                     "(expert ids below config.json's num_local_experts / num_experts) only");
        auto& group = packed_experts[{std::stoll(m[1]), m[3].str()}];
        group[std::stoll(m[2])] = i;
        if (static_cast<int64_t>(group.size()) < n.get<int64_t>()) continue;
        static const std::map<std::string, std::string> names{
            {"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"}, {"down_proj", "ffn_down_exps"}};
        TensorPlan p;
        const std::string stem = "blk." + m[1].str() + "." + names.at(m[3]);
        p.name = stem + ".weight";
        std::vector<float> scale2, input_scale;
        for (const auto& [x, k] : group) {
          if (inputs[k].shape != inputs[group.begin()->second].shape)
            throw UnsupportedError(
                Where(where, std::nullopt, inputs[k].key),
                "'" + inputs[k].key + "' is not of the shape of expert 0's: the experts cannot be stacked");
          p.inputs.push_back(k);
          scale2.push_back(inputs[k].scale2), input_scale.push_back(inputs[k].input_scale);
        }
        p.shape = {n.get<int64_t>(), in.shape[0], in.shape[1]};
        p.packed = true;
        p.type = TensorType::NVFP4;
        extras.push_back(std::move(p));
        for (const auto& [v, suffix] : std::initializer_list<std::pair<const std::vector<float>*, const char*>>{
                 {&scale2, ".scale"}, {&input_scale, ".input_scale"}})
          if (std::any_of(v->begin(), v->end(),
                          [](float f) { return !(std::abs(static_cast<double>(f) - 1.0) <= 1e-6 + 1e-5); })) {
            TensorPlan s;
            s.name = stem + suffix;
            s.values = *v;
            s.shape = {static_cast<int64_t>(v->size())};
            s.type = TensorType::F32;
            extras.push_back(std::move(s));
          }
        packed_experts.erase({std::stoll(m[1]), m[3].str()});
        continue;
      }
      TensorPlan p = tensor_plan(arch, config, in.key, in.shape, out, where);
      if (p.name.size() < 7 || p.name.compare(p.name.size() - 7, 7, ".weight") != 0 || in.shape.size() != 2)
        throw UnsupportedError(Where(where, std::nullopt, in.key),
                               "'" + in.key + "' is packed FP4 but not a 2-D weight: not written into a GGUF");
      p.inputs = {i};
      p.packed = true;
      p.type = in.packed;
      const std::string stem = p.name.substr(0, p.name.size() - 7);
      extras.push_back(std::move(p));
      for (const auto& [v, suffix] : std::initializer_list<std::pair<float, const char*>>{
               {in.scale2, ".scale"}, {in.input_scale, ".input_scale"}})
        if (!(std::abs(static_cast<double>(v) - 1.0) < 1e-6)) {
          TensorPlan s;
          s.name = stem + suffix;
          s.values = {v};
          s.shape = {1};
          s.type = TensorType::F32;
          extras.push_back(std::move(s));
        }
      continue;
    }
    // the family's filter_tensors; a tied head where the family has none (a trainer's copy)
    if (in.key == "lm_head.weight" && (arch.drop_head || (arch.no_head && config.value("tie_word_embeddings", false))))
      continue;
    if (arch.full_vocab && in.key == "model.embed_tokens.weight" &&
        (in.shape.empty() || in.shape[0] != int_of(config, "vocab_size")))
      throw UnsupportedError(Where(where, std::nullopt, in.key),
                             "'" + in.key +
                                 "' has other rows than config.json's vocab_size: the converter cuts "
                                 "it to the tokenizer's tokens (" +
                                 arch.name + "), which dcpctl does not yet");
    if (deepseek) {
      // DeepseekV2Model.modify_tensors: a tied lm_head and the MTP layers (past
      // num_hidden_layers) are left out.
      if (in.key == "lm_head.weight" && config.value("tie_word_embeddings", false)) continue;
      if (std::regex_match(in.key, m, layer_re) && std::stoll(m[1]) >= layers) continue;
      static const std::regex kv_b_re(R"(model\.layers\.(\d+)\.self_attn\.kv_b_proj\.weight)");
      if (std::regex_match(in.key, m, kv_b_re)) {
        const int64_t heads = int_of(config, "num_key_value_heads"), nope = int_of(config, "qk_nope_head_dim"),
                      v = int_of(config, "v_head_dim");
        if (heads <= 0 || nope <= 0 || v <= 0 || in.shape.size() != 2 || in.shape[0] != heads * (nope + v))
          throw UnsupportedError(Where(where, std::nullopt, in.key),
                                 "'" + in.key +
                                     "' is not num_key_value_heads x (qk_nope_head_dim + v_head_dim) rows: "
                                     "the converter's k_b / v_b split cannot be made");
        for (char part : {'k', 'v'}) {
          TensorPlan p;
          p.name = "blk." + m[1].str() + (part == 'k' ? ".attn_k_b.weight" : ".attn_v_b.weight");
          p.inputs = {i};
          p.kv_b = part, p.kv_b_heads = heads, p.kv_b_nope = nope, p.kv_b_v = v;
          p.shape = part == 'k' ? std::vector<int64_t>{heads, in.shape[1], nope}
                                : std::vector<int64_t>{heads, v, in.shape[1]};
          p.type = type_of(p.name, p.shape, out);
          plans.push_back(std::move(p));
        }
        continue;
      }
    }
    // Glm4MoeModel: the MTP (nextn) layers are blocks num_hidden_layers .. + num_nextn_predict_layers - 1
    // (tensor_plan names them); one past those has no name in the converter's map.
    if (arch.name == "glm4moe" && std::regex_match(in.key, m, layer_re) && layers >= 0 &&
        std::stoll(m[1]) >= layers + std::max<int64_t>(int_of(config, "num_nextn_predict_layers"), 0))
      throw UnsupportedError(Where(where, std::nullopt, in.key),
                             "'" + in.key + "' is past config.json's num_hidden_layers " + std::to_string(layers) +
                                 " and num_nextn_predict_layers: it has no block in llama.cpp's glm4moe table");
    if (arch.experts == Arch::Experts::GptOss) {
      // GptOssModel: self_attn.sinks as attn_sinks.weight; the fused experts split (gate_up_proj:
      // transposed, its even rows the gate, odd the up; down_proj transposed; their biases alike).
      static const std::regex sinks_re(R"(model\.layers\.(\d+)\.self_attn\.sinks)");
      static const std::regex fused_re(
          R"(model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias|_blocks|_scales)?)");
      if (std::regex_match(in.key, m, sinks_re)) {
        TensorPlan p;
        p.name = "blk." + m[1].str() + ".attn_sinks.weight";
        p.inputs = {i};
        p.shape = in.shape;
        p.type = type_of(p.name, p.shape, out);
        plans.push_back(std::move(p));
        continue;
      }
      if (std::regex_match(in.key, m, fused_re)) {
        const std::string blk = "blk." + m[1].str() + ".", proj = m[2], suffix = m[3];
        if (suffix == "_blocks" || suffix == "_scales") {
          // GptOssModel.generate_extra_tensors: each pair repacked at its scales (the blocks come
          // just before them in key order), before every other tensor of the file.
          if (!mxfp4_config(config))
            throw UnsupportedError(Where(where, std::nullopt, in.key),
                                   "'" + in.key +
                                       "' is MXFP4 without config.json's quantization_config "
                                       "quant_method mxfp4: not written into a GGUF by dcpctl");
          if (suffix == "_blocks") {
            mx_blocks[{std::stoll(m[1]), proj}] = i;
            continue;
          }
          auto b = mx_blocks.find({std::stoll(m[1]), proj});
          if (b == mx_blocks.end())
            throw UnsupportedError(
                Where(where, std::nullopt, in.key),
                "'" + in.key + "' has no " + proj + "_blocks before it: the MXFP4 experts cannot be repacked");
          const std::vector<int64_t>& bs = inputs[b->second].shape;
          if (bs.size() != 4 || bs[3] != 16 || bs[0] != n_experts ||
              in.shape != std::vector<int64_t>(bs.begin(), bs.begin() + 3) ||
              (proj == "gate_up_proj" && bs[1] % 2 != 0))
            throw UnsupportedError(
                Where(where, std::nullopt, in.key),
                "'" + in.key + "' and its blocks are not [" + std::to_string(n_experts) +
                    " experts, rows, groups] and [experts, rows, groups, 16]: the MXFP4 experts cannot be repacked");
          auto add = [&](const std::string& name, char part) {
            TensorPlan p;
            p.name = blk + name + ".weight";
            p.inputs = {b->second, i};
            p.mxfp4 = true, p.gate_up = part;
            p.shape = {bs[0], part ? bs[1] / 2 : bs[1], bs[2] * 32};
            p.type = TensorType::MXFP4;
            extras.push_back(std::move(p));
          };
          if (proj == "down_proj")
            add("ffn_down_exps", 0);
          else
            add("ffn_gate_exps", 'g'), add("ffn_up_exps", 'u');
          mx_blocks.erase(b);
          continue;
        }
        const bool bias = suffix == "_bias";
        const size_t dims = bias ? 2 : 3;
        if (in.shape.size() != dims || in.shape[0] != n_experts || (proj == "gate_up_proj" && in.shape.back() % 2 != 0))
          throw UnsupportedError(Where(where, std::nullopt, in.key),
                                 "'" + in.key + "' is not [" + std::to_string(n_experts) + " experts, " +
                                     (bias ? "" : "rows, ") + (proj == "gate_up_proj" ? "2 x ffn" : "cols") +
                                     "]: GPT-OSS's experts cannot be split");
        auto add = [&](const std::string& name, char part, bool transpose, std::vector<int64_t> shape) {
          TensorPlan p;
          p.name = blk + name + (bias ? ".bias" : ".weight");
          p.inputs = {i};
          p.gate_up = part, p.transpose = transpose;
          p.shape = std::move(shape);
          p.type = type_of(p.name, p.shape, out);
          plans.push_back(std::move(p));
        };
        const int64_t e = in.shape[0];
        if (proj == "down_proj") {
          if (bias)
            add("ffn_down_exps", 0, false, in.shape);
          else
            add("ffn_down_exps", 0, true, {e, in.shape[2], in.shape[1]});
        } else {
          const int64_t ffn = in.shape.back() / 2;
          for (char part : {'g', 'u'})
            add(part == 'g' ? "ffn_gate_exps" : "ffn_up_exps", part, false,
                bias ? std::vector<int64_t>{e, ffn} : std::vector<int64_t>{e, ffn, in.shape[1]});
        }
        continue;
      }
    }
    static const std::regex in_memory_re(R"(model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj))");
    if (arch.experts != Arch::Experts::None && arch.experts != Arch::Experts::GptOss &&
        std::regex_match(in.key, m, in_memory_re)) {
      // transformers' in-memory experts: both of a layer's, then emitted as its experts saved one
      // by one would be (the same place in key order: the experts' keys are adjacent either way).
      const int64_t bid = std::stoll(m[1]);
      auto& layer = fused[bid];
      layer[m[2].str()] = i;
      if (layer.size() < 2) continue;
      const Input &gu = inputs[layer.at("gate_up_proj")], &down = inputs[layer.at("down_proj")];
      if (gu.shape.size() != 3 || down.shape.size() != 3 || gu.shape[0] != n_experts || down.shape[0] != n_experts ||
          gu.shape[1] != 2 * down.shape[2] || gu.shape[2] != down.shape[1])
        throw UnsupportedError(Where(where, std::nullopt, gu.key),
                               "'" + gu.key + "' and its down_proj are not [" + std::to_string(n_experts) +
                                   " experts, 2 x ffn, hidden] and [experts, hidden, ffn] (transformers' in-memory "
                                   "experts, not transposed): dcpctl does not write them into a GGUF");
      const int64_t e = gu.shape[0], ffn = down.shape[2], hidden = down.shape[1];
      for (const auto& [proj, gguf_name] : order) {
        TensorPlan p;
        p.name = "blk." + std::to_string(bid) + "." + gguf_name + ".weight";
        const bool is_down = proj == "down_proj" || proj == "w2";
        p.inputs = {layer.at(is_down ? "down_proj" : "gate_up_proj")};
        if (!is_down) p.gate_up = proj == "gate_proj" || proj == "w1" ? 'G' : 'U';
        p.shape = is_down ? std::vector<int64_t>{e, hidden, ffn} : std::vector<int64_t>{e, ffn, hidden};
        p.type = type_of(p.name, p.shape, out);
        plans.push_back(std::move(p));
      }
      fused.erase(bid);
      continue;
    }
    if (arch.experts != Arch::Experts::None && std::regex_match(in.key, m, qwen ? qwen_re : mixtral_re)) {
      int64_t bid = std::stoll(m[1]), xid = std::stoll(m[2]);
      if (xid >= n_experts)
        throw UnsupportedError(
            Where(where, std::nullopt, in.key),
            "'" + in.key + "' is expert " + std::to_string(xid) + " of config.json's " + std::to_string(n_experts));
      auto& layer = pending[bid];
      layer[{m[3].str(), xid}] = i;
      if (static_cast<int64_t>(layer.size()) < 3 * n_experts) continue;
      for (const auto& [proj, gguf_name] : order) {
        TensorPlan p;
        p.name = "blk." + std::to_string(bid) + "." + gguf_name + ".weight";
        for (int64_t x = 0; x < n_experts; ++x) {
          size_t k = layer.at({proj, x});
          if (inputs[k].shape != inputs[layer.at({proj, 0})].shape || inputs[k].shape.size() != 2)
            throw UnsupportedError(
                Where(where, std::nullopt, inputs[k].key),
                "'" + inputs[k].key + "' is not of the shape of expert 0's: the experts cannot be stacked");
          p.inputs.push_back(k);
        }
        p.shape = inputs[p.inputs[0]].shape;
        p.shape.insert(p.shape.begin(), n_experts);
        p.type = type_of(p.name, p.shape, out);
        plans.push_back(std::move(p));
      }
      pending.erase(bid);
      continue;
    }
    if (arch.experts != Arch::Experts::None && in.key.find(".experts.") != std::string::npos)
      throw UnsupportedError(Where(where, std::nullopt, in.key),
                             "'" + in.key + "' is an expert tensor of a form dcpctl does not write into a GGUF of " +
                                 arch.name + " yet (one tensor per expert and projection)");
    TensorPlan p = tensor_plan(arch, config, in.key, in.shape, out, where);
    p.inputs = {i};
    plans.push_back(std::move(p));
  }
  if (!fused.empty()) {
    const auto& [proj, k] = *fused.begin()->second.begin();
    throw UnsupportedError(Where(where, std::nullopt, inputs[k].key),
                           "'" + inputs[k].key + "' has no " + (proj == "down_proj" ? "gate_up_proj" : "down_proj") +
                               " beside it: the experts cannot be written");
  }
  if (!pending.empty())
    throw UnsupportedError(Where(where), "layer " + std::to_string(pending.begin()->first) + " has " +
                                             std::to_string(pending.begin()->second.size()) +
                                             " expert tensors, not config.json's " + std::to_string(n_experts) +
                                             " experts x 3");
  if (!packed_experts.empty()) {
    const auto& [at, group] = *packed_experts.begin();
    throw UnsupportedError(Where(where, std::nullopt, inputs[group.begin()->second].key),
                           "layer " + std::to_string(at.first) + "'s NVFP4 " + at.second + " has " +
                               std::to_string(group.size()) + " experts, not config.json's: they cannot be stacked");
  }
  if (!mx_blocks.empty()) {
    const std::string& k = inputs[mx_blocks.begin()->second].key;
    throw UnsupportedError(Where(where, std::nullopt, k),
                           "'" + k + "' has no _scales after it: the MXFP4 experts cannot be repacked");
  }
  if (!extras.empty()) {
    // MXFP4 and NVFP4 ggml types are llama-quantize's to requantize: the --pure files are not reproduced here.
    if (out.type != TensorType::F32 && out.type != TensorType::F16 && out.type != TensorType::BF16 &&
        out.type != TensorType::Q8_0)
      throw UnsupportedError(Where(where),
                             std::string("--outtype ") + type_name(out.type) +
                                 " of MXFP4 or NVFP4 weights (llama-quantize over the converter's file) "
                                 "is not written by dcpctl: f32, f16, bf16 or q8_0 keep them as they are");
    plans.insert(plans.begin(), std::make_move_iterator(extras.begin()), std::make_move_iterator(extras.end()));
  }
  return plans;
}

std::string sort_key(const Arch& arch, const std::string& key) {
  static const std::regex mixtral_mlp(R"((model\.layers\.\d+\.)mlp\.((?:experts|gate)\..*))");
  std::smatch m;
  if (arch.experts == Arch::Experts::Mixtral && std::regex_match(key, m, mixtral_mlp))
    return m[1].str() + "block_sparse_moe." + m[2].str();
  return key;
}

std::vector<float> fused_part(const TensorPlan& p, const float* x, const std::vector<int64_t>& in) {
  std::vector<float> out;
  if (in.size() == 2 && p.gate_up) {  // a bias [E, 2F]: [..., off::2]
    const int64_t e = in[0], f = in[1] / 2, off = p.gate_up == 'u';
    out.reserve(static_cast<size_t>(e * f));
    for (int64_t a = 0; a < e; ++a)
      for (int64_t j = 0; j < f; ++j) out.push_back(x[a * 2 * f + 2 * j + off]);
    return out;
  }
  if (in.size() != 3) throw std::logic_error("gguf: fused_part of a tensor that is not [experts, rows, cols]");
  const int64_t e = in[0], r = in[1], c = in[2];
  if (p.gate_up == 'G' || p.gate_up == 'U') {  // [E, 2F, H] -> rows [0, F) or [F, 2F) of each expert
    const int64_t f = r / 2, off = p.gate_up == 'U' ? f : 0;
    out.reserve(static_cast<size_t>(e * f * c));
    for (int64_t a = 0; a < e; ++a) out.insert(out.end(), x + (a * r + off) * c, x + (a * r + off + f) * c);
    return out;
  }
  // transpose(-1, -2): out[a][j][k] = x[a][k][j]; gate_up then keeps the rows j = 2i + off.
  const int64_t step = p.gate_up ? 2 : 1, off = p.gate_up == 'u', rows = c / step;
  out.reserve(static_cast<size_t>(e * rows * r));
  for (int64_t a = 0; a < e; ++a)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < r; ++k) out.push_back(x[(a * r + k) * c + i * step + off]);
  return out;
}

std::vector<float> falcon_qkv_part(const TensorPlan& p, const float* x, int64_t rows, int64_t cols) {
  // view(groups, per + 2, head_dim, cols): each group's `per` q heads, then its k head, then its v head.
  const int64_t groups = p.qkv_groups, per = p.qkv_heads / groups, head_dim = rows / (groups * (per + 2));
  std::vector<float> out;
  out.reserve(static_cast<size_t>(rows * cols));
  auto put = [&](int64_t g, int64_t j) {
    const float* at = x + ((g * (per + 2) + j) * head_dim) * cols;
    out.insert(out.end(), at, at + head_dim * cols);
  };
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < per; ++j) put(g, j);
  for (int64_t g = 0; g < groups; ++g) put(g, per);
  for (int64_t g = 0; g < groups; ++g) put(g, per + 1);
  return out;
}

std::vector<float> kv_b_part(const TensorPlan& p, const float* x, int64_t cols) {
  // view(heads, nope + v, cols); k_b = [:, :nope].transpose(1, 2), v_b = [:, nope:].
  const int64_t heads = p.kv_b_heads, nope = p.kv_b_nope, v = p.kv_b_v, per = nope + v;
  std::vector<float> out;
  out.reserve(static_cast<size_t>(heads * (p.kv_b == 'k' ? nope : v) * cols));
  for (int64_t h = 0; h < heads; ++h) {
    const float* head = x + h * per * cols;
    if (p.kv_b == 'k') {
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < nope; ++r) out.push_back(head[r * cols + c]);
    } else {
      out.insert(out.end(), head + nope * cols, head + per * cols);
    }
  }
  return out;
}

std::string size_label(const std::vector<TensorPlan>& tensors) {
  uint64_t total = 0, shared = 0, expert = 0, expert_sum = 0, n_expert_tensors = 0;
  for (const TensorPlan& t : tensors) {
    uint64_t size = 1;
    for (int64_t d : t.shape) size *= static_cast<uint64_t>(d);
    if (t.name.find("_exps.") != std::string::npos && t.shape.size() >= 3) {
      uint64_t count = static_cast<uint64_t>(
          t.shape[t.name.find(".bias") != std::string::npos ? t.shape.size() - 2 : t.shape.size() - 3]);
      expert += size / count, expert_sum += count, ++n_expert_tensors;
    } else {
      shared += size;
    }
    total += size;
  }
  if (total == 0) return {};
  if (n_expert_tensors > 0 && expert_sum / n_expert_tensors > 0)
    return std::to_string(expert_sum / n_expert_tensors) + "x" + size_label(shared + expert);
  return size_label(total);
}

std::string size_label(uint64_t params) {
  double n = static_cast<double>(params), scaled;
  const char* suffix;
  if (n > 1e12)
    scaled = n * 1e-12, suffix = "T";
  else if (n > 1e9)
    scaled = n * 1e-9, suffix = "B";
  else if (n > 1e6)
    scaled = n * 1e-6, suffix = "M";
  else
    scaled = n * 1e-3, suffix = "K";
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
    if (std::isspace(static_cast<unsigned char>(c)))
      flush();
    else
      word += c;
  }
  flush();
  return out;
}

namespace {

// general.file_type (prepare_metadata): an MXFP4 model (quant_method mxfp4) written as f32, f16
// or bf16 is MOSTLY_MXFP4_MOE. So is, as dcpctl writes it, compressed-tensors' MXFP4 (gguf/lowbit.h's
// ct_mxfp4_config); an NVFP4 one (nvfp4_config) MOSTLY_NVFP4.
// The keys before the architecture's (prepare_metadata: the architecture, type, name, size label).
void add_general_keys(Header& h, const std::string& a, const std::string& name, const std::string& label) {
  h.add_string("general.architecture", a);
  h.add_string("general.type", "model");
  h.add_string("general.name", name);
  if (!label.empty()) h.add_string("general.size_label", label);
}

uint32_t file_type_of(const Arch& arch, const json& config, OutType out) {
  const bool wide = out.type == TensorType::F32 || out.type == TensorType::F16 || out.type == TensorType::BF16;
  const bool mxfp4_moe = ((arch.name == "gpt-oss" && mxfp4_config(config)) || ct_mxfp4_config(config)) && wide;
  return mxfp4_moe ? 38 : wide && nvfp4_config(config) ? 39 : out.file_type;
}

}  // namespace

void add_model_keys(Header& h, const Arch& arch, const json& config, const std::string& name, const std::string& label,
                    OutType out, const std::string& where) {
  const std::string& a = arch.name;
  const bool moe = arch.experts != Arch::Experts::None;
  for (const char* k : {"num_local_experts", "num_experts", "n_routed_experts"})
    if (!moe && config.contains(k) && !config[k].is_null())
      throw UnsupportedError(Where(where),
                             std::string("config.json's ") + k + " is not written into a GGUF of " + a + " by dcpctl");
  if (arch.keys) {  // the family's own set_gguf_parameters
    add_general_keys(h, a, name, label);
    arch.keys(h, a, config, file_type_of(arch, config, out), where);
    h.add_u32("general.quantization_version", 2);
    return;
  }
  const bool deepseek = a == "deepseek2", glm = a == "glm4moe", gpt_oss = a == "gpt-oss";
  // Glm4MoeModel counts the MTP (nextn) layers as blocks, whether or not the checkpoint holds them
  // (transformers' GLM does not; their tensors are refused by plan_tensors).
  const json nextn = glm ? config.value("num_nextn_predict_layers", json()) : json();
  if (!nextn.is_null() && !(nextn.is_number_integer() && nextn.get<int64_t>() >= 0))
    throw UnsupportedError(Where(where), "config.json's num_nextn_predict_layers " + nextn.dump() + " is not a count");
  for (const char* k :
       {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon", "mrope_section", "shared_expert_intermediate_size"})
    if (config.contains(k) && !config[k].is_null() &&
        !(arch.layer_norm && std::string(k).find("eps") != std::string::npos))
      throw UnsupportedError(Where(where),
                             std::string("config.json's ") + k + " is not written into a GGUF by dcpctl yet");
  // Expert groups and the router's score function: DeepSeek's and GLM's only, here.
  for (const char* k : {"n_group", "topk_group", "score_function", "scoring_func", "score_func",
                        "moe_router_activation", "moe_router_activation_func", "expert_selection_fn"})
    if (!deepseek && !glm && config.contains(k) && !config[k].is_null())
      throw UnsupportedError(Where(where),
                             std::string("config.json's ") + k + " is not written into a GGUF by dcpctl yet");
  json rope = rope_params(config);
  if (rope.contains("full_attention") || rope.contains("sliding_attention") || rope.contains("mrope_section"))
    throw UnsupportedError(Where(where),
                           "config.json's per-attention rope parameters are not written into a GGUF by dcpctl yet");
  std::string rope_type;
  if (auto t = rope.find("rope_type"); t != rope.end() && !t->is_null()) {
    rope_type = t->is_string() ? t->get<std::string>() : t->dump();
    bool llama3 = t->is_string() && rope_type.size() == 6 &&
                  std::equal(rope_type.begin(), rope_type.end(), "llama3",
                             [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == y; });
    if (!(rope_type == "default" || rope_type == "linear" || rope_type == "yarn" || (llama3 && arch.llama_model)))
      throw UnsupportedError(Where(where),
                             "config.json's rope type '" + rope_type + "' is not written into a GGUF of " + a +
                                 " by dcpctl (default, linear, yarn" + (arch.llama_model ? ", llama3)" : ")"));
  }
  add_general_keys(h, a, name, label);
  h.add_u32(a + ".block_count", static_cast<uint32_t>(need_int(config, "num_hidden_layers", where) +
                                                      (nextn.is_null() ? 0 : nextn.get<int64_t>())));
  // CommandR2Model takes model_max_length first (max_position_embeddings is not what it was trained on).
  if (json v = arch.context_model_max_length ? find_hparam(config, {"model_max_length", "max_position_embeddings"})
                                             : config.value("max_position_embeddings", json());
      v.is_number_integer() && v.get<int64_t>() >= 0)
    h.add_u32(a + ".context_length", v.get<uint32_t>());
  int64_t hidden = need_int(config, "hidden_size", where);
  h.add_u32(a + ".embedding_length", static_cast<uint32_t>(hidden));
  if (int64_t v = int_of(config, "intermediate_size"); v >= 0)
    h.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(v));
  int64_t heads = need_int(config, "num_attention_heads", where);
  h.add_u32(a + ".attention.head_count", static_cast<uint32_t>(heads));
  // DeepseekV2Model: MLA is written as MQA (one KV head).
  if (int64_t v = deepseek ? 1 : int_of(config, "num_key_value_heads"); v >= 0)
    h.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(v));
  // The rope scaling keys (TextModel.set_gguf_parameters): linear and yarn with a factor; llama3
  // is the rope_freqs tensor instead (plan_tensors).
  if (json factor = rope.value("factor", json()); (rope_type == "linear" || rope_type == "yarn") && !factor.is_null()) {
    if (!factor.is_number())
      throw UnsupportedError(Where(where), "config.json's rope factor " + factor.dump() + " is not a number");
    h.add_string(a + ".rope.scaling.type", rope_type);
    h.add_f32(a + ".rope.scaling.factor", factor.get<float>());
    if (rope_type == "yarn") {
      json orig = rope.value("original_max_position_embeddings", json());
      if (!orig.is_number_integer() || orig.get<int64_t>() < 0)
        throw UnsupportedError(Where(where),
                               "a yarn rope needs original_max_position_embeddings (the converter fails without it)");
      h.add_u32(a + ".rope.scaling.original_context_length", orig.get<uint32_t>());
      json attn = rope.contains("attention_factor") ? rope["attention_factor"] : rope.value("attn_factor", json());
      for (auto [key, v] : {std::pair<const char*, json>{"yarn_ext_factor", rope.value("extrapolation_factor", json())},
                            {"yarn_attn_factor", attn},
                            {"yarn_beta_fast", rope.value("beta_fast", json())},
                            {"yarn_beta_slow", rope.value("beta_slow", json())}}) {
        if (v.is_null()) continue;
        if (!v.is_number())
          throw UnsupportedError(Where(where),
                                 std::string("config.json's rope ") + key + " " + v.dump() + " is not a number");
        h.add_f32(a + ".rope.scaling." + key, v.get<float>());
      }
    }
  }
  if (json theta = rope.value("rope_theta", json()); theta.is_number())
    h.add_f32(a + ".rope.freq_base", theta.get<float>());
  json eps = find_hparam(config, {"rms_norm_eps", "norm_eps"});
  if (deepseek && config.value("rms_norm_eps", json()).is_null()) eps = 1e-6;  // hparams.get('rms_norm_eps', 1e-6)
  if (eps.is_number()) h.add_f32(a + ".attention.layer_norm_rms_epsilon", eps.get<float>());
  if (json e = find_hparam(config, {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"});
      arch.layer_norm && e.is_number())
    h.add_f32(a + ".attention.layer_norm_epsilon", e.get<float>());
  bool expert_count = false;
  if (json n = find_hparam(config, {"num_local_experts", "num_experts", "n_routed_experts"}); n.is_number_integer())
    h.add_u32(a + ".expert_count", n.get<uint32_t>()), expert_count = true;
  if (json n = find_hparam(config, {"num_experts_per_tok", "num_experts_per_token", "top_k_experts"});
      n.is_number_integer())
    h.add_u32(a + ".expert_used_count", n.get<uint32_t>());
  if (json n = config.value("n_group", json()); n.is_number_integer())
    h.add_u32(a + ".expert_group_count", n.get<uint32_t>());
  if (json n = config.value("topk_group", json()); n.is_number_integer())
    h.add_u32(a + ".expert_group_used_count", n.get<uint32_t>());
  bool gating = false;
  if (json f = find_hparam(config, {"score_function", "scoring_func", "score_func", "moe_router_activation",
                                    "moe_router_activation_func", "expert_selection_fn"});
      !f.is_null()) {
    static const std::map<std::string, uint32_t> funcs{{"softmax", 1}, {"sigmoid", 2}, {"sqrtsoftplus", 4}};
    auto it = f.is_string() ? funcs.find(f.get<std::string>()) : funcs.end();
    if (it == funcs.end())
      throw UnsupportedError(Where(where),
                             "config.json's expert score function " + f.dump() + " is not one llama.cpp has");
    // Glm4MoeModel sets sigmoid later, over this one where it stands.
    h.add_u32(a + ".expert_gating_func", glm ? 2 : it->second), gating = true;
  }
  // DeepseekV2Model: key_length kv_lora_rank + qk_rope_head_dim, value_length kv_lora_rank, in the
  // place of head_dim's when config.json has one (gguf-py overwrites a key where it stands).
  const int64_t kv_lora =
      deepseek ? (config.value("kv_lora_rank", json()).is_null() ? 512 : need_int(config, "kv_lora_rank", where)) : 0;
  const int64_t rope_dim = deepseek ? need_int(config, "qk_rope_head_dim", where) : 0;
  int64_t head_dim = arch.no_head_dim ? -1 : int_of(config, "head_dim");  // GraniteModel pops head_dim
  bool lengths = false;
  if (head_dim >= 0) {
    h.add_u32(a + ".attention.key_length", static_cast<uint32_t>(deepseek ? kv_lora + rope_dim : head_dim));
    h.add_u32(a + ".attention.value_length", static_cast<uint32_t>(deepseek ? kv_lora : head_dim));
    lengths = true;
  }
  h.add_u32("general.file_type", file_type_of(arch, config, out));
  if (glm) {  // Glm4MoeModel.set_gguf_parameters
    json pr = rope.value("partial_rotary_factor", json(0.5));
    if (!pr.is_number())
      throw UnsupportedError(Where(where), "config.json's partial_rotary_factor " + pr.dump() + " is not a number");
    const double dim = static_cast<double>(head_dim >= 0 ? head_dim : hidden / heads) * pr.get<double>();
    h.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(dim));  // int(): toward zero
    // expert_count: written above from n_routed_experts already (gguf-py overwrites it in place).
    if (json v = config.value("moe_intermediate_size", json()); !v.is_null())
      h.add_u32(a + ".expert_feed_forward_length", v.get<uint32_t>());
    if (json v = config.value("n_shared_experts", json()); !v.is_null())
      h.add_u32(a + ".expert_shared_count", v.get<uint32_t>());
    if (json v = config.value("first_k_dense_replace", json()); !v.is_null())
      h.add_u32(a + ".leading_dense_block_count", v.get<uint32_t>());
    if (!gating) h.add_u32(a + ".expert_gating_func", 2);  // sigmoid
    if (json v = config.value("routed_scaling_factor", json()); !v.is_null())
      h.add_f32(a + ".expert_weights_scale", v.get<float>());
    if (json v = config.value("norm_topk_prob", json()); !v.is_null())
      h.add_bool(a + ".expert_weights_norm", v.get<bool>());
    if (!nextn.is_null()) h.add_u32(a + ".nextn_predict_layers", nextn.get<uint32_t>());
  }
  if (gpt_oss) {  // GptOssModel.set_gguf_parameters
    h.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(need_int(config, "sliding_window", where)));
    h.add_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(need_int(config, "intermediate_size", where)));
  }
  if (deepseek) {
    const bool has_moe = !config.value("n_routed_experts", json()).is_null();
    json dense = config.value("first_k_dense_replace", json());
    h.add_u32(a + ".leading_dense_block_count",
              dense.is_null() ? (has_moe ? 0 : static_cast<uint32_t>(need_int(config, "num_hidden_layers", where)))
                              : dense.get<uint32_t>());
    h.add_u32(a + ".vocab_size", static_cast<uint32_t>(need_int(config, "vocab_size", where)));
    if (json q = config.value("q_lora_rank", json()); !q.is_null())
      h.add_u32(a + ".attention.q_lora_rank", q.get<uint32_t>());
    h.add_u32(a + ".attention.kv_lora_rank", static_cast<uint32_t>(kv_lora));
    if (!lengths) {
      h.add_u32(a + ".attention.key_length", static_cast<uint32_t>(kv_lora + rope_dim));
      h.add_u32(a + ".attention.value_length", static_cast<uint32_t>(kv_lora));
    }
    h.add_u32(a + ".attention.key_length_mla",
              static_cast<uint32_t>(need_int(config, "qk_nope_head_dim", where) + rope_dim));
    h.add_u32(a + ".attention.value_length_mla", static_cast<uint32_t>(need_int(config, "v_head_dim", where)));
    json ff = find_hparam(config, {"moe_intermediate_size", "intermediate_size"});
    if (!ff.is_number_integer())
      throw UnsupportedError(Where(where), "a GGUF of deepseek2 needs config.json's moe_intermediate_size");
    h.add_u32(a + ".expert_feed_forward_length", ff.get<uint32_t>());
    if (json n = config.value("n_routed_experts", json()); !n.is_null() && !expert_count)
      h.add_u32(a + ".expert_count", n.get<uint32_t>());
    json shared = config.value("n_shared_experts", json(0));
    h.add_u32(a + ".expert_shared_count", shared.is_number_integer() ? shared.get<uint32_t>() : 0);
    if (json s = config.value("routed_scaling_factor", json()); s.is_number())
      h.add_f32(a + ".expert_weights_scale", s.get<float>());
    if (json n = config.value("norm_topk_prob", json()); n.is_boolean() && n.get<bool>())
      h.add_bool(a + ".expert_weights_norm", true);
    h.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(rope_dim));
    if (json m = rope.value("mscale_all_dim", json()); m.is_number())
      h.add_f32(a + ".rope.scaling.yarn_log_multiplier", static_cast<float>(0.1 * m.get<double>()));
  }
  if (arch.llama_model) {  // LlamaModel.set_gguf_parameters
    h.add_u32(a + ".vocab_size", static_cast<uint32_t>(need_int(config, "vocab_size", where)));
    h.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(head_dim >= 0 ? head_dim : hidden / heads));
  }
  if (arch.extra_keys) arch.extra_keys(h, a, config, where);
  if (arch.experts == Arch::Experts::Qwen) {  // Qwen2MoeModel.set_gguf_parameters
    if (int64_t v = int_of(config, "moe_intermediate_size"); v >= 0)
      h.add_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(v));
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
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return {};
}

}  // namespace

bool does_token_look_special(const std::string& t) {
  auto ends = [&](const std::string& s) {
    return t.size() >= s.size() && t.compare(t.size() - s.size(), s.size(), s) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || (t.rfind("<|", 0) == 0 && ends("|>")) ||
         (t.rfind("<\xef\xbd\x9c", 0) == 0 && ends("\xef\xbd\x9c>")) || (t.rfind("<unused", 0) == 0 && ends(">"));
}

namespace {

std::string special_id(const json& step) {
  if (step.is_object() && step.contains("SpecialToken") && step["SpecialToken"].contains("id") &&
      step["SpecialToken"]["id"].is_string())
    return step["SpecialToken"]["id"].get<std::string>();
  return {};
}
std::string sequence_id(const json& step) {
  if (step.is_object() && step.contains("Sequence") && step["Sequence"].contains("id") &&
      step["Sequence"]["id"].is_string())
    return step["Sequence"]["id"].get<std::string>();
  return {};
}

}  // namespace

void add_tokenizer_keys(Header& h, const json& config, const json& tok, const json& tconf, const std::string& jinja,
                        const std::string& where, const std::string& arch) {
  const json& model = tok.contains("model") ? tok["model"] : json();
  if (!model.is_object() || model.value("type", "") != "BPE")
    throw UnsupportedError(
        Where(where),
        "a GGUF output needs a byte-level BPE tokenizer.json (llama.cpp's gpt2 vocabulary); this one is " +
            (model.is_object() ? model.value("type", std::string("untyped")) : std::string("missing")));
  // tokenizer.ggml.pre: the converter's digest (gguf/vocab.h), a name it knows or refused;
  // the tokenizer class transformers loads depends on config.json's model_type too.
  std::string digest = pre_digest(tok, tconf, config, where), pre = pre_name(digest);
  if (pre.empty())
    throw UnsupportedError(Where(where),
                           "the tokenizer's pre-tokenizer (digest " + digest +
                               ") is not one llama.cpp's converter names here (llama-bpe, qwen2, glm4, deepseek-llm, "
                               "deepseek-coder, gpt-2, "
                               "starcoder, command-r, olmo, falcon, refact, tekken): BPE pre-tokenizer was not "
                               "recognized (tokenizer.ggml.pre)");
  const int64_t vocab_size = need_int(config, "vocab_size", where);
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), 5);  // UNUSED
  std::vector<bool> have(static_cast<size_t>(vocab_size), false);
  auto place = [&](int64_t id, const std::string& text, int32_t type) {
    if (id < 0 || id >= vocab_size)
      throw UnsupportedError(Where(where), "token " + std::to_string(id) + " is past config.json's vocab_size " +
                                               std::to_string(vocab_size));
    tokens[id] = text, types[id] = type, have[id] = true;
  };
  for (const auto& [text, id] : model["vocab"].items()) place(id.get<int64_t>(), text, 1);  // NORMAL
  const json added = tok.value("added_tokens", json::array());
  for (const json& a : added) {
    std::string text = a.value("content", "");
    if (!a.value("special", false) && !does_token_look_special(text)) {
      if (text.find("\xe2\x96\x81") != std::string::npos || !a.value("normalized", true))
        throw UnsupportedError(
            Where(where),
            "added token '" + text + "' (not special, or not normalized) is not written into a GGUF by dcpctl yet");
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
  add_special_vocab(h, config, tok, tconf, jinja, where, arch, true, -1);
}

namespace {

// SpecialVocab._parse_normalizer: Lowercase, StripAccents, BertNormalizer's flags, within Sequences.
void parse_normalizer(const json& n, json& lowercase, json& strip_accents) {
  if (!n.is_object()) return;
  const std::string type = n.value("type", "");
  if (type == "Lowercase") lowercase = true;
  if (type == "StripAccents") strip_accents = true;
  if (type == "BertNormalizer") {
    if (n.contains("lowercase")) lowercase = n["lowercase"];
    if (n.contains("strip_accents")) strip_accents = n["strip_accents"];
  }
  if (type == "Sequence")
    for (const json& m : n.value("normalizers", json::array())) parse_normalizer(m, lowercase, strip_accents);
}

}  // namespace

void add_special_vocab(Header& h, const json& config, const json& tok, const json& tconf, const std::string& jinja,
                       const std::string& where, const std::string& arch, bool load_merges, int64_t n_vocab) {
  const json none = json::object();
  const json& model = tok.is_object() && tok.contains("model") && tok["model"].is_object() ? tok["model"] : none;
  const json added = tok.is_object() ? tok.value("added_tokens", json::array()) : json::array();
  // gguf-py's SpecialVocab (load_merges): merges, the special ids, add_*_token, the chat template.
  std::vector<std::string> merges;
  if (load_merges && model.contains("merges") && model["merges"].is_array())
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        std::string joined;
        for (int p = 0; p < 2; ++p) {
          if (p) joined += ' ';
          for (char c : m[p].get<std::string>())
            joined += c == ' ' ? std::string("\xc5\xa0") : std::string(1, c);  // chr(ord(' ') + 256)
        }
        merges.push_back(joined);
      }
    }
  json lowercase, strip_accents;
  if (tok.is_object() && tok.contains("normalizer")) parse_normalizer(tok["normalizer"], lowercase, strip_accents);
  // "if not tokenizer_config": an empty one counts as none.
  json tc = tconf.is_object() && !tconf.empty() ? tconf : json();
  std::string bos = token_text(tc, "bos_token"), cls = token_text(tc, "cls_token"), eos = token_text(tc, "eos_token"),
              sep = token_text(tc, "sep_token");
  if (tok.is_object() && bos.empty() && !cls.empty() && tc.is_object()) tc["bos_token"] = bos = cls;
  if (tok.is_object() && eos.empty() && !sep.empty() && tc.is_object()) tc["eos_token"] = eos = sep;
  std::vector<std::pair<std::string, bool>> add;  // add_special_token, in insertion order
  auto set_add = [&](const std::string& typ, bool v, bool only_default) {
    for (auto& [t, val] : add)
      if (t == typ) {
        if (!only_default) val = v;
        return;
      }
    add.emplace_back(typ, v);
  };
  if (tok.is_object() && tok.contains("post_processor") && tok["post_processor"].is_object()) {
    const json& pp = tok["post_processor"];
    json procs = pp.contains("processors") ? pp["processors"] : json::array({pp});
    for (const json& p : procs) {
      std::string type = p.value("type", "");
      if (type == "ByteLevel") {
        set_add("bos", false, true), set_add("eos", false, true);
      } else if (type == "TemplateProcessing") {
        if (!tc.is_object())
          throw UnsupportedError(
              Where(where),
              "a TemplateProcessing tokenizer without tokenizer_config.json is not written into a GGUF by dcpctl yet");
        json single = p.value("single", json::array()), pair = p.value("pair", json::array());
        std::string first, last;
        if (single.size() > 1) {
          if (!(first = special_id(single[0])).empty()) {
            if (first != bos && first != cls)
              throw UnsupportedError(Where(where),
                                     "a template's leading special token '" + first +
                                         "' that is not bos_token is not written into a GGUF by dcpctl yet");
            set_add("bos", true, false);
          }
          if (!(last = special_id(single.back())).empty()) {
            if (last != eos)
              throw UnsupportedError(Where(where),
                                     "a template's trailing special token '" + last +
                                         "' that is not eos_token is not written into a GGUF by dcpctl yet");
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
        throw UnsupportedError(Where(where),
                               "a tokenizer.json post-processor " + type + " is not written into a GGUF by dcpctl yet");
      }
    }
  }
  // The special ids: tokenizer_config.json's tokens found among the added tokens, then config.json's *_token_id.
  std::vector<std::pair<std::string, int64_t>> ids;
  auto set_id = [&](const std::string& typ, int64_t id) {
    if (id < 0 || (n_vocab >= 0 && id >= n_vocab)) return;  // out of range: skipped with a warning
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
      throw UnsupportedError(Where(where),
                             "a chat_template that is not one string is not written into a GGUF by dcpctl yet");
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
  if (arch == "glm4moe") {  // _set_vocab_glm: tokenizer.get_added_vocab()[...], each where not set already
    for (const auto& [typ, text] : std::vector<std::pair<std::string, std::string>>{
             {"bos", "[gMASK]"}, {"eot", "<|user|>"}, {"unk", "<|endoftext|>"}, {"eom", "<|observation|>"}}) {
      int64_t id = -1;
      for (const json& a : added)
        if (a.value("content", "") == text) id = a["id"].get<int64_t>();
      if (id < 0)
        throw UnsupportedError(Where(where), "a GGUF of glm4moe needs the added token '" + text +
                                                 "' (the converter's _set_vocab_glm looks it up)");
      set_id(typ, id);
    }
  }
  if (!merges.empty()) h.add_strings("tokenizer.ggml.merges", merges);
  static const std::map<std::string, std::string> id_keys{
      {"bos", "bos_token_id"},       {"eos", "eos_token_id"},     {"unk", "unknown_token_id"},
      {"sep", "seperator_token_id"}, {"pad", "padding_token_id"}, {"cls", "cls_token_id"},
      {"mask", "mask_token_id"},     {"eot", "eot_token_id"},     {"eom", "eom_token_id"}};
  for (const auto& [t, id] : ids)  // GGUFWriter has no add_cls_token_id: add_to_gguf skips it
    if (t != "cls") h.add_u32("tokenizer.ggml." + id_keys.at(t), static_cast<uint32_t>(id));
  for (const auto& [t, v] : add)
    if (t == "bos" || t == "eos" || t == "sep") h.add_bool("tokenizer.ggml.add_" + t + "_token", v);
  if (chat_template.is_string()) h.add_string("tokenizer.chat_template", chat_template.get<std::string>());
  if (lowercase.is_boolean()) h.add_bool("tokenizer.ggml.normalizer.lowercase", lowercase.get<bool>());
  if (strip_accents.is_boolean()) h.add_bool("tokenizer.ggml.normalizer.strip_accents", strip_accents.get<bool>());
}

// ---- The loader's tensors for an architecture written here (expected_tensors, gguf_model.h) ----

namespace {

// A dense family's tensors as its load_arch_tensors creates them (src/models/ARCH.cpp of the
// sdist's llama.cpp), each dimension named by a letter of the file's keys: E embedding_length,
// F feed_forward_length, G 2 x F, Q head_count x key_length, K head_count_kv x key_length,
// V head_count_kv x value_length, H key_length, A head_count, B head_count_kv, S E + 2 x V (Falcon's
// fused qkv), R rope.dimension_count / 2, N the vocabulary; 0: no dimension. `qkv` where the family's
// create_tensor_qkv stands (attn_q/k/v and their optional biases, or a fused attn_qkv).
struct FamilyTensor {
  const char* name;
  char d0, d1;
  bool required;
  int64_t min_blocks = 0;  // created only when block_count is at least this (command-r's q/k norms)
};
struct FamilyTable {
  const char* arch;
  std::vector<FamilyTensor> top, layer;
  bool qkv;
  bool qkv_required = true;  // false: create_tensor_qkv with TENSOR_NOT_REQUIRED
};
const std::vector<FamilyTable>& family_tables() {
  static const std::vector<FamilyTable> tables{
      // gemma2.cpp: no output.weight (the embeddings, TENSOR_DUPLICATED).
      {"gemma2",
       {{"token_embd.weight", 'N', 'E', true}, {"output_norm.weight", 'E', 0, true}},
       {{"attn_norm.weight", 'E', 0, true},
        {"attn_output.weight", 'E', 'Q', true},
        {"post_attention_norm.weight", 'E', 0, true},
        {"ffn_norm.weight", 'E', 0, true},
        {"ffn_gate.weight", 'F', 'E', true},
        {"ffn_up.weight", 'F', 'E', true},
        {"ffn_down.weight", 'E', 'F', true},
        {"post_ffw_norm.weight", 'E', 0, true}},
       true},
      // gemma3.cpp: gemma2's and the q/k norms, output.weight optional.
      {"gemma3",
       {{"token_embd.weight", 'N', 'E', true},
        {"output_norm.weight", 'E', 0, true},
        {"output.weight", 'N', 'E', false}},
       {{"attn_norm.weight", 'E', 0, true},
        {"attn_output.weight", 'E', 'Q', true},
        {"post_attention_norm.weight", 'E', 0, true},
        {"attn_k_norm.weight", 'H', 0, true},
        {"attn_q_norm.weight", 'H', 0, true},
        {"ffn_norm.weight", 'E', 0, true},
        {"ffn_gate.weight", 'F', 'E', true},
        {"ffn_up.weight", 'F', 'E', true},
        {"ffn_down.weight", 'E', 'F', true},
        {"post_ffw_norm.weight", 'E', 0, true}},
       true},
      // granite.cpp (dense): llama's with optional biases.
      {"granite",
       {{"token_embd.weight", 'N', 'E', true},
        {"output_norm.weight", 'E', 0, true},
        {"output.weight", 'N', 'E', false},
        {"rope_freqs.weight", 'R', 0, false}},
       {{"attn_norm.weight", 'E', 0, true},
        {"attn_output.weight", 'E', 'Q', true},
        {"attn_output.bias", 'E', 0, false},
        {"ffn_norm.weight", 'E', 0, true},
        {"ffn_gate.weight", 'F', 'E', true},
        {"ffn_down.weight", 'E', 'F', true},
        {"ffn_up.weight", 'F', 'E', true},
        {"ffn_gate.bias", 'F', 0, false},
        {"ffn_down.bias", 'E', 0, false},
        {"ffn_up.bias", 'F', 0, false}},
       true},
      // olmo2.cpp: q/k norms over the projections; output.weight required.
      {"olmo2",
       {{"token_embd.weight", 'N', 'E', true}, {"output_norm.weight", 'E', 0, true}, {"output.weight", 'N', 'E', true}},
       {{"attn_output.weight", 'E', 'E', true},
        {"attn_q_norm.weight", 'E', 0, true},
        {"attn_k_norm.weight", 'K', 0, true},
        {"post_attention_norm.weight", 'E', 0, true},
        {"ffn_gate.weight", 'F', 'E', true},
        {"ffn_up.weight", 'F', 'E', true},
        {"ffn_down.weight", 'E', 'F', true},
        {"post_ffw_norm.weight", 'E', 0, true}},
       true},
      // starcoder2.cpp: LayerNorms with biases, every projection's bias.
      {"starcoder2",
       {{"token_embd.weight", 'N', 'E', true},
        {"output_norm.weight", 'E', 0, true},
        {"output_norm.bias", 'E', 0, true},
        {"output.weight", 'N', 'E', false}},
       {{"attn_norm.weight", 'E', 0, true},
        {"attn_norm.bias", 'E', 0, true},
        {"attn_output.weight", 'E', 'E', true},
        {"attn_output.bias", 'E', 0, true},
        {"ffn_norm.weight", 'E', 0, true},
        {"ffn_norm.bias", 'E', 0, true},
        {"ffn_down.weight", 'E', 'F', true},
        {"ffn_up.weight", 'F', 'E', true},
        {"ffn_down.bias", 'E', 0, true},
        {"ffn_up.bias", 'F', 0, true}},
       true},
      // command-r.cpp: the head is the embeddings; q/k norms ([heads, key_length]) from 64 layers.
      {"command-r",
       {{"token_embd.weight", 'N', 'E', true}, {"output_norm.weight", 'E', 0, true}},
       {{"attn_norm.weight", 'E', 0, true},
        {"attn_q_norm.weight", 'A', 'H', true, 64},
        {"attn_k_norm.weight", 'B', 'H', true, 64},
        {"attn_output.weight", 'E', 'E', true},
        {"ffn_gate.weight", 'F', 'E', true},
        {"ffn_down.weight", 'E', 'F', true},
        {"ffn_up.weight", 'F', 'E', true}},
       true},
      // falcon.cpp: LayerNorms with biases; Falcon-40B's second norm optional; the fused qkv.
      {"falcon",
       {{"token_embd.weight", 'N', 'E', true},
        {"output_norm.weight", 'E', 0, true},
        {"output_norm.bias", 'E', 0, true},
        {"output.weight", 'N', 'E', false}},
       {{"attn_norm.weight", 'E', 0, true},
        {"attn_norm.bias", 'E', 0, true},
        {"attn_norm_2.weight", 'E', 0, false},
        {"attn_norm_2.bias", 'E', 0, false},
        {"attn_qkv.weight", 'S', 'E', true},
        {"attn_output.weight", 'E', 'E', true},
        {"ffn_down.weight", 'E', 'F', true},
        {"ffn_up.weight", 'F', 'E', true}},
       false},
      // mistral3.cpp (llama.cpp's llama loader under its own name): Llama's dense tensors.
      {"mistral3",
       {{"token_embd.weight", 'N', 'E', true},
        {"output_norm.weight", 'E', 0, true},
        {"output.weight", 'N', 'E', false},
        {"rope_freqs.weight", 'R', 0, false}},
       {{"attn_norm.weight", 'E', 0, true},
        {"attn_output.weight", 'E', 'Q', true},
        {"attn_output.bias", 'E', 0, false},
        {"ffn_norm.weight", 'E', 0, true},
        {"ffn_gate.weight", 'F', 'E', true},
        {"ffn_down.weight", 'E', 'F', true},
        {"ffn_up.weight", 'F', 'E', true},
        {"ffn_gate.bias", 'F', 0, false},
        {"ffn_down.bias", 'E', 0, false},
        {"ffn_up.bias", 'F', 0, false}},
       true},
      // mpt.cpp: biases and positions optional (not in a no_bias ALiBi model).
      {"mpt",
       {{"token_embd.weight", 'N', 'E', true},
        {"output_norm.weight", 'E', 0, true},
        {"output_norm.bias", 'E', 0, false},
        {"output.weight", 'N', 'E', false}},
       {{"attn_norm.weight", 'E', 0, true},
        {"attn_norm.bias", 'E', 0, false},
        {"attn_qkv.weight", 'S', 'E', true},
        {"attn_qkv.bias", 'S', 0, false},
        {"attn_output.weight", 'E', 'E', true},
        {"attn_output.bias", 'E', 0, false},
        {"ffn_norm.weight", 'E', 0, true},
        {"ffn_norm.bias", 'E', 0, false},
        {"ffn_down.weight", 'E', 'F', true},
        {"ffn_down.bias", 'E', 0, false},
        {"ffn_up.weight", 'F', 'E', true},
        {"ffn_up.bias", 'F', 0, false}},
       false},
      // phi3.cpp: q/k/v (or a fused attn_qkv) each not required; ffn_up is gate and up fused;
      // LongRoPE's factors (not written by dcpctl) optional.
      {"phi3",
       {{"token_embd.weight", 'N', 'E', true},
        {"output_norm.weight", 'E', 0, true},
        {"output.weight", 'N', 'E', false},
        {"rope_factors_long.weight", 'R', 0, false},
        {"rope_factors_short.weight", 'R', 0, false}},
       {{"attn_norm.weight", 'E', 0, true},
        {"attn_output.weight", 'E', 'E', true},
        {"ffn_norm.weight", 'E', 0, true},
        {"ffn_down.weight", 'E', 'F', true},
        {"ffn_up.weight", 'G', 'E', true}},
       true,
       false},
  };
  return tables;
}

std::optional<std::vector<ExpectedTensor>> family_tensors(
    const std::string& arch, const std::function<std::optional<int64_t>(const std::string&)>& key) {
  const FamilyTable* t = nullptr;
  for (const FamilyTable& f : family_tables())
    if (arch == f.arch) t = &f;
  if (!t) return std::nullopt;
  auto k = [&](const std::string& name) { return key(arch + "." + name); };
  auto mul = [](int64_t a, int64_t b) { return a < 0 || b < 0 ? int64_t{-1} : a * b; };
  const int64_t embd = k("embedding_length").value_or(-1), ff = k("feed_forward_length").value_or(-1);
  const int64_t heads = k("attention.head_count").value_or(-1), heads_kv = k("attention.head_count_kv").value_or(heads);
  const int64_t head_k = k("attention.key_length").value_or(heads > 0 && embd >= 0 ? embd / heads : -1);
  const int64_t head_v = k("attention.value_length").value_or(head_k);
  std::optional<int64_t> vocab = k("vocab_size");
  if (!vocab) vocab = key("tokenizer.ggml.tokens");
  const int64_t q = mul(heads, head_k), kv = mul(heads_kv, head_k), v = mul(heads_kv, head_v);
  auto dim = [&](char d) {
    switch (d) {
      case 'E': return embd;
      case 'F': return ff;
      case 'G': return mul(2, ff);
      case 'Q': return q;
      case 'K': return kv;
      case 'V': return v;
      case 'H': return head_k;
      case 'A': return heads;
      case 'B': return heads_kv;
      case 'S': return embd < 0 || v < 0 ? int64_t{-1} : embd + 2 * v;
      case 'R': return k("rope.dimension_count") ? *k("rope.dimension_count") / 2 : int64_t{-1};
      default: return vocab.value_or(-1);  // 'N'
    }
  };
  std::vector<ExpectedTensor> out;
  auto add = [&](const std::string& b, const FamilyTensor& f) {
    std::vector<int64_t> shape{dim(f.d0)};
    if (f.d1) shape.push_back(dim(f.d1));
    out.push_back({b + f.name, shape, f.required, {}});
  };
  for (const FamilyTensor& f : t->top) add("", f);
  const int64_t blocks = k("block_count").value_or(0);
  for (int64_t i = 0; i < blocks; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    if (t->qkv) {  // create_tensor_qkv
      const int64_t qkv = q < 0 || kv < 0 || v < 0 ? -1 : q + kv + v;
      out.push_back({b + "attn_qkv.weight", {qkv, embd}, false, {}});
      out.push_back({b + "attn_qkv.bias", {qkv}, false, {}});
      for (const auto& [n, rows] : {std::pair<const char*, int64_t>{"attn_q", q}, {"attn_k", kv}, {"attn_v", v}}) {
        out.push_back({b + n + ".weight", {rows, embd}, t->qkv_required, b + "attn_qkv.weight"});
        out.push_back({b + n + ".bias", {rows}, false, {}});
      }
    }
    for (const FamilyTensor& f : t->layer)
      if (blocks >= f.min_blocks) add(b, f);
  }
  return out;
}

std::optional<std::vector<ExpectedTensor>> arch_tensors(
    const std::string& arch, const std::function<std::optional<int64_t>(const std::string&)>& key) {
  const bool llama = arch == "llama", qwen2 = arch == "qwen2", qwen3 = arch == "qwen3" || arch == "qwen3moe",
             moe3 = arch == "qwen3moe", deepseek = arch == "deepseek2", glm = arch == "glm4moe",
             oss = arch == "gpt-oss";
  if (!llama && !qwen2 && !qwen3 && !deepseek && !glm && !oss) return std::nullopt;
  auto k = [&](const std::string& name) { return key(arch + "." + name); };
  auto or_unknown = [](std::optional<int64_t> v) { return v.value_or(-1); };
  // A product of dimensions, unknown (-1) when one is.
  auto mul = [](int64_t a, int64_t b) { return a < 0 || b < 0 ? int64_t{-1} : a * b; };
  const int64_t layers = or_unknown(k("block_count")), embd = or_unknown(k("embedding_length")),
                ff = or_unknown(k("feed_forward_length"));
  const int64_t heads = or_unknown(k("attention.head_count"));
  const int64_t heads_kv = k("attention.head_count_kv").value_or(heads);
  const int64_t head_k = k("attention.key_length").value_or(heads > 0 && embd >= 0 ? embd / heads : -1);
  const int64_t head_v = k("attention.value_length").value_or(head_k);
  std::optional<int64_t> vocab = k("vocab_size");
  if (!vocab) vocab = key("tokenizer.ggml.tokens");
  const int64_t n_vocab = or_unknown(vocab), experts = k("expert_count").value_or(0);
  const int64_t ff_exp = moe3 || deepseek || oss ? or_unknown(k("expert_feed_forward_length")) : ff;
  std::vector<ExpectedTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool required = true, std::string unless = {}) {
    out.push_back({std::move(name), std::move(shape), required, std::move(unless)});
  };
  // create_tensor_qkv: q, k and v (and their biases), or one fused attn_qkv in their place.
  auto add_qkv = [&](const std::string& b, int64_t q, int64_t kv, int64_t v, bool required) {
    const int64_t qkv = q < 0 || kv < 0 || v < 0 ? -1 : q + kv + v;
    add(b + "attn_qkv.weight", {qkv, embd}, false);
    add(b + "attn_qkv.bias", {qkv}, false);
    add(b + "attn_q.weight", {q, embd}, required, b + "attn_qkv.weight");
    add(b + "attn_k.weight", {kv, embd}, required, b + "attn_qkv.weight");
    add(b + "attn_v.weight", {v, embd}, required, b + "attn_qkv.weight");
    add(b + "attn_q.bias", {q}, false);
    add(b + "attn_k.bias", {kv}, false);
    add(b + "attn_v.bias", {v}, false);
  };
  add("token_embd.weight", {n_vocab, embd});
  add("output_norm.weight", {embd});
  add("output.weight", {n_vocab, embd}, oss);  // absent: the embeddings serve (a tied head); gpt-oss needs it
  if (glm || oss) {
    // glm4-moe.cpp's and openai-moe.cpp's load_arch_tensors (GLM-4.5's MTP layers, past
    // block_count - nextn_predict_layers, optional: llama.cpp loads a file without them).
    const int64_t nextn = glm ? k("nextn_predict_layers").value_or(0) : 0, trunk = layers < 0 ? -1 : layers - nextn;
    const int64_t n_expert = or_unknown(k("expert_count")), used = k("expert_used_count").value_or(0);
    const int64_t fe = glm ? k("expert_feed_forward_length").value_or(ff >= 0 && used > 0 ? ff / used : -1) : ff_exp;
    const int64_t rot = oss ? k("rope.dimension_count").value_or(head_k) : head_k;
    const int64_t q = mul(rot, heads), kv = mul(rot, heads_kv), v = oss ? kv : mul(head_v, heads_kv);
    for (int64_t i = 0; i < layers; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      const bool need = i < trunk || trunk < 0;
      add(b + "attn_norm.weight", {embd}, need);
      add_qkv(b, q, kv, v, need);
      add(b + "attn_output.weight", {embd, q}, need);
      add(b + "post_attention_norm.weight", {embd}, need);
      if (glm) {
        add(b + "attn_q_norm.weight", {head_k}, false);
        add(b + "attn_k_norm.weight", {head_k}, false);
      } else {
        add(b + "attn_output.bias", {embd});
        add(b + "attn_sinks.weight", {heads});
      }
      if (glm && i < k("leading_dense_block_count").value_or(0)) {
        add(b + "ffn_gate.weight", {ff, embd}, need);
        add(b + "ffn_down.weight", {embd, ff}, need);
        add(b + "ffn_up.weight", {ff, embd}, need);
      } else {
        add(b + "ffn_gate_inp.weight", {n_expert, embd}, need);
        add(b + (glm ? "exp_probs_b.bias" : "ffn_gate_inp.bias"), {n_expert}, need);
        add(b + "ffn_gate_exps.weight", {n_expert, fe, embd}, need);
        add(b + "ffn_down_exps.weight", {n_expert, embd, fe}, need);
        add(b + "ffn_up_exps.weight", {n_expert, fe, embd}, need);
        if (oss) {
          add(b + "ffn_gate_exps.bias", {n_expert, fe});
          add(b + "ffn_down_exps.bias", {n_expert, embd});
          add(b + "ffn_up_exps.bias", {n_expert, fe});
        }
        const int64_t shared = glm ? mul(fe, k("expert_shared_count").value_or(0)) : 0;
        if (shared != 0) {
          add(b + "ffn_gate_shexp.weight", {shared, embd}, need);
          add(b + "ffn_down_shexp.weight", {embd, shared}, need);
          add(b + "ffn_up_shexp.weight", {shared, embd}, need);
        }
      }
      if (i >= trunk && trunk >= 0)
        for (const char* t :
             {"nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.embed_tokens.weight",
              "nextn.shared_head_head.weight", "nextn.shared_head_norm.weight"}) {
          const std::string n = t;
          std::vector<int64_t> shape = n == "nextn.eh_proj.weight" ? std::vector<int64_t>{embd, mul(2, embd)}
                                       : n == "nextn.embed_tokens.weight" || n == "nextn.shared_head_head.weight"
                                           ? std::vector<int64_t>{n_vocab, embd}
                                           : std::vector<int64_t>{embd};
          add(b + n, shape, false);
        }
    }
    return out;
  }
  if (qwen2) add("output.bias", {n_vocab}, false);
  if (const int64_t rot = k("rope.dimension_count").value_or(head_k); llama)
    add("rope_freqs.weight", {rot < 0 ? -1 : rot / 2}, false);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm.weight", {embd});
    add(b + "ffn_norm.weight", {embd});
    if (!deepseek) {
      const int64_t q = qwen2 ? embd : mul(head_k, heads);
      const int64_t kk = llama ? mul(head_k, heads_kv) : mul(head_v, heads_kv), v = mul(head_v, heads_kv);
      add_qkv(b, q, kk, v, true);
      add(b + "attn_output.weight", {embd, qwen2 ? embd : mul(head_k, heads)});
      if (llama) add(b + "attn_output.bias", {embd}, false);
      if (qwen3) {
        add(b + "attn_q_norm.weight", {head_k});
        add(b + "attn_k_norm.weight", {head_k});
      }
    } else {
      // MLA (DeepseekV2Model's tensors as llama.cpp reads them).
      const int64_t q_lora = k("attention.q_lora_rank").value_or(0), kv_lora = or_unknown(k("attention.kv_lora_rank"));
      const int64_t k_mla = k("attention.key_length_mla").value_or(head_k),
                    v_mla = k("attention.value_length_mla").value_or(head_v);
      const int64_t rope = k("rope.dimension_count").value_or(head_k), nope = k_mla < 0 || rope < 0 ? -1 : k_mla - rope;
      if (q_lora > 0) {
        add(b + "attn_q_a_norm.weight", {q_lora});
        add(b + "attn_q_a.weight", {q_lora, embd});
        add(b + "attn_q_b.weight", {mul(heads, k_mla), q_lora});
      } else {
        add(b + "attn_q.weight", {mul(heads, k_mla), embd});
      }
      add(b + "attn_kv_a_norm.weight", {kv_lora});
      add(b + "attn_kv_a_mqa.weight", {kv_lora < 0 || rope < 0 ? -1 : kv_lora + rope, embd});
      if (k("attention.key_length_mla")) {
        add(b + "attn_k_b.weight", {heads, kv_lora, nope});
        add(b + "attn_v_b.weight", {heads, v_mla, kv_lora});
      } else {
        add(b + "attn_kv_b.weight", {mul(heads, nope < 0 || v_mla < 0 ? -1 : nope + v_mla), kv_lora});
      }
      add(b + "attn_output.weight", {embd, mul(heads, v_mla)});
    }
    const bool dense = deepseek ? i < k("leading_dense_block_count").value_or(0) : !moe3 && experts == 0;
    if (dense) {
      add(b + "ffn_gate.weight", {ff, embd});
      add(b + "ffn_down.weight", {embd, ff});
      add(b + "ffn_up.weight", {ff, embd});
      if (llama) {
        add(b + "ffn_gate.bias", {ff}, false);
        add(b + "ffn_down.bias", {embd}, false);
        add(b + "ffn_up.bias", {ff}, false);
      }
      continue;
    }
    const int64_t n_expert = moe3 || deepseek ? or_unknown(k("expert_count")) : experts;
    add(b + "ffn_gate_inp.weight", {n_expert, embd});
    add(b + "ffn_gate_up_exps.weight", {n_expert, mul(2, ff_exp), embd}, false);
    add(b + "ffn_gate_exps.weight", {n_expert, ff_exp, embd}, !llama, b + "ffn_gate_up_exps.weight");
    add(b + "ffn_up_exps.weight", {n_expert, ff_exp, embd}, true, b + "ffn_gate_up_exps.weight");
    add(b + "ffn_down_exps.weight", {n_expert, embd, ff_exp});
    if (deepseek) {
      add(b + "exp_probs_b.bias", {n_expert}, false);
      const int64_t shared = mul(ff_exp, k("expert_shared_count").value_or(0));
      const bool any = shared != 0;
      add(b + "ffn_gate_shexp.weight", {shared, embd}, any);
      add(b + "ffn_down_shexp.weight", {embd, shared}, any);
      add(b + "ffn_up_shexp.weight", {shared, embd}, any);
    }
  }
  return out;
}

}  // namespace

std::optional<std::vector<ExpectedTensor>> expected_tensors(
    const std::string& arch, const std::function<std::optional<int64_t>(const std::string&)>& key) {
  std::optional<std::vector<ExpectedTensor>> out = family_tensors(arch, key);
  if (!out) out = arch_tensors(arch, key);
  if (!out) return out;
  // llama-model.cpp's generic pass after every architecture's tensors: each Linear weight's
  // optional per-tensor ".scale" and ".input_scale" (NVFP4's scale2 and input scale: [1], or one per
  // expert [n_expert] for the stacked experts), loaded where the weight is.
  static const std::regex linear(
      R"((blk\.\d+\.)(attn_q|attn_k|attn_v|attn_output|attn_qkv|attn_gate|ffn_gate|ffn_down|ffn_up|)"
      R"(ffn_gate_shexp|ffn_down_shexp|ffn_up_shexp|ffn_gate_exps|ffn_down_exps|ffn_up_exps|)"
      R"(nextn\.eh_proj|nextn\.shared_head_head)\.weight)");
  const int64_t n_expert = key(arch + ".expert_count").value_or(-1);
  std::vector<ExpectedTensor> scales;
  for (const ExpectedTensor& t : *out) {
    std::smatch m;
    if (!std::regex_match(t.name, m, linear)) continue;
    const bool exps = m[2].str().size() > 5 && m[2].str().compare(m[2].str().size() - 5, 5, "_exps") == 0;
    for (const char* suffix : {".scale", ".input_scale"})
      scales.push_back({m[1].str() + m[2].str() + suffix, {exps ? n_expert : 1}, false, {}});
  }
  out->insert(out->end(), scales.begin(), scales.end());
  return out;
}

}  // namespace dcpctl::gguf
