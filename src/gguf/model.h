// What llama.cpp's converter (convert_hf_to_gguf.py of llama-cpp-python 0.3.36; docs/gguf.md)
// writes for a Hugging Face model, beside the bytes of its tensors: the architecture's tensor names
// (gguf-py's tensor_mapping.py), each tensor's type, the Llama-family Q/K row permutation, the
// metadata keys from config.json, and the tokenizer's keys from tokenizer.json and
// tokenizer_config.json, each in the order the converter adds them.
//
// Architectures: config.json's architectures[0] LlamaForCausalLM, MistralForCausalLM and
// MixtralForCausalLM (llama), Qwen2ForCausalLM (qwen2), Qwen3ForCausalLM (qwen3),
// Qwen3MoeForCausalLM (qwen3moe), DeepseekV2ForCausalLM and DeepseekV3ForCausalLM (deepseek2; Kimi K2 with
// its tiktoken tokenizer: gguf/tiktoken.h; Kimi K2.5's text model, KimiK25ForConditionalGeneration), Glm4MoeForCausalLM
// (glm4moe), GptOssForCausalLM (gpt-oss), Gemma2ForCausalLM (gemma2), Gemma3ForCausalLM (gemma3), Phi3ForCausalLM
// (phi3), GraniteForCausalLM (granite), Olmo2ForCausalLM (olmo2), Starcoder2ForCausalLM (starcoder2), CohereForCausalLM
// (command-r), FalconForCausalLM (falcon), Ministral3ForCausalLM (mistral3), MPTForCausalLM (mpt), each a row of
// model.cpp's architecture table (Arch: what the family's model class does beyond TextModel);
// experts stacked per layer, GPT-OSS's fused experts split, DeepSeek's kv_b split, Llama 3's rope_freqs generated, the
// linear and yarn rope keys. Anything else, a tensor the table does not name, another rope type, or a tokenizer the
// converter would treat otherwise (not byte-level BPE, a pre-tokenizer it does not name: gguf/vocab.h) is refused,
// UnsupportedError (exit 5) naming it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"

namespace dcpctl::gguf {

// The converter's --outtype: f32, f16, bf16, q8_0.
struct OutType {
  TensorType type = TensorType::F16;
  uint32_t file_type = 1;  // general.file_type (LlamaFileType): ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32
};
// The word's type; UsageError naming the words otherwise.
OutType out_type(const std::string& word);

// An architecture the converter writes.
struct Arch {
  std::string name;         // general.architecture ("llama")
  bool permute_qk = false;  // LlamaModel.permute of q_proj / k_proj rows (and biases)
  // How its experts are saved and stacked: none; Qwen2MoeModel's mlp.experts.N.{down,gate,up}_proj
  // (emitted down, gate, up); LlamaModel's (Mixtral) block_sparse_moe.experts.N.w1/w2/w3 (emitted
  // w1 gate, w2 down, w3 up).
  // DeepseekV2Model's (and Glm4MoeModel's) are Qwen's too, counted by n_routed_experts. Qwen's,
  // Mixtral's and DeepSeek's may also come in transformers' in-memory form (a DCP checkpoint of a
  // transformers-5 model): mlp.experts.gate_up_proj [experts, 2 x ffn, hidden] (the gate rows, then
  // the up rows) and mlp.experts.down_proj [experts, hidden, ffn], Mixtral's under mlp. too; written
  // as the converter writes the same model saved per expert.
  // GptOssModel's are fused per layer: mlp.experts.gate_up_proj [experts, hidden, 2 x ffn] (gate and
  // up interleaved), down_proj [experts, ffn, hidden], and their biases.
  enum class Experts { None, Qwen, Mixtral, Deepseek, GptOss } experts = Experts::None;
  // Where set_vocab finds the tokenizer: Gpt2 tokenizer.json (_set_vocab_gpt2, or Kimi's tiktoken);
  // SpmFirst tokenizer.model when the folder has one, else tokenizer.json (LlamaModel's and
  // Qwen2Model's set_vocab); Spm tokenizer.model only (Gemma2Model's: refused without it); Phi3
  // Phi3MiniModel's own reading of tokenizer.model (gguf/spm.h), or tokenizer.json where
  // tokenizer_config.json's tokenizer_class is GPT2Tokenizer.
  enum class Vocab { Gpt2, SpmFirst, Spm, Phi3 } vocab = Vocab::Gpt2;
  // What set_vocab writes after the tokenizer's keys: tokenizer.ggml.add_space_prefix false
  // (Gemma's add_add_space_prefix(False)).
  bool no_space_prefix = false;
  // Added to every tensor whose HF key ends in norm.weight (GemmaModel.modify_tensors: Gemma's
  // RMSNorm scales by 1 + weight, llama.cpp's by the weight), in float32 as the converter adds it
  // (a float16 source in float16: TensorPlan::shift).
  float norm_shift = 0;
  // The converter's filter_tensors leaves lm_head.weight out (Gemma: the head is the embeddings).
  bool drop_head = false;
  // A LlamaModel (its subclass Granite's too): set_vocab's add_space_prefix (gguf/spm.h's
  // add_llama_vocab_keys), vocab_size and rope.dimension_count after TextModel's keys, Llama 3's
  // rope_freqs.
  bool llama_model = false;
  // GraniteModel pops head_dim from the hyperparameters: no key_length / value_length, the rope
  // dimension hidden / heads.
  bool no_head_dim = false;
  // LayerNorm (StarCoder 2): config.json's layer_norm_eps / layer_norm_epsilon / norm_epsilon
  // written as attention.layer_norm_epsilon (TextModel's, after the RMS epsilon), not refused.
  bool layer_norm = false;
  // Keys the family's set_gguf_parameters adds after TextModel's (and LlamaModel's); null: none.
  void (*extra_keys)(Header& h, const std::string& arch, const nlohmann::json& config,
                     const std::string& where) = nullptr;
  // The family's table has no output tensor (Command-R: an untied lm_head.weight is the converter's
  // "Can not map tensor"): refused; a tied one is left out as for every family.
  bool no_head = false;
  // context_length from model_max_length first (CommandR2Model), then max_position_embeddings.
  bool context_model_max_length = false;
  // The layers' key prefix where it is not model.layers. (Falcon's transformer.h.), and the
  // family's top-level names (replacing embed_tokens / norm / lm_head's); null: the common ones.
  const char* layer_prefix = nullptr;
  const std::map<std::string, std::string>* top_names = nullptr;
  // FalconModel.modify_tensors regroups query_key_value (TensorPlan::qkv_groups).
  bool falcon_qkv = false;
  // Gemma3Model.modify_tensors cuts the embedding to the tokenizer's tokens (config.json's
  // vocab_size with tokenizer.model): an embedding of other rows is refused.
  bool full_vocab = false;
  // The family's own layer tensors (gguf-py's tensor_mapping for its MODEL_ARCH), looked up before
  // the common ones: HF module -> GGUF name; null: none.
  const std::map<std::string, std::string>* layer_names = nullptr;
  // The family's set_gguf_parameters where it is not TextModel's (Gemma2Model writes its own keys
  // in its own order): the keys after general.*, up to and without general.quantization_version;
  // null: TextModel's, as add_model_keys writes it.
  void (*keys)(Header& h, const std::string& arch, const nlohmann::json& config, uint32_t file_type,
               const std::string& where) = nullptr;
};
// The hyperparameters the converter reads of config.json (TextModel.__init__): a vision-language
// model's text_config moved to the root, over the keys there (`{**hparams, **text_config}`), so
// that its architectures, sizes and ids are the text model's where text_config names them (Kimi
// K2.5's KimiK25ForConditionalGeneration: a DeepSeek-V3 under `language_model.`). config.json as it
// is where it has no text_config. Every reader of the GGUF module takes this, not config.json.
nlohmann::json converter_hparams(const nlohmann::json& config);
// A checkpoint key as the converter's filter_tensors passes it to the text model: "" for a tensor
// TextModel.filter_tensors leaves out (a vision tower's, a multimodal projector's, an audio
// encoder's: `vision_tower.*`, `mm_projector.*`, `model.visual.*`, ...), else the key with
// `language_model.` taken out (ModelBase.filter_tensors: `language_model.model.layers.N.*` and
// transformers' in-memory `model.language_model.layers.N.*` both read as `model.layers.N.*`).
std::string converter_key(const std::string& key);
// The architecture of the converter's hyperparameters (converter_hparams' architectures[0]: the
// converter's get_model_architecture, text_config's first); UnsupportedError naming it when the
// converter's model is not one here.
Arch arch_of(const nlohmann::json& config, const std::string& where);

// One tensor as the converter writes it.
struct TensorPlan {
  std::string name;  // the GGUF name ("blk.0.attn_q.weight")
  TensorType type = TensorType::F32;
  int64_t permute_heads = 0;   // > 0: rows permuted as LlamaModel.permute with this many heads
  std::vector<int64_t> shape;  // as written, torch's order
  // The Hugging Face tensors it is made of (indices into plan_tensors' inputs): one, or the experts
  // of a layer stacked along a new first dimension in expert order (torch.stack); none for a tensor
  // the converter computes (rope_freqs), whose float32 values are `values`.
  std::vector<size_t> inputs;
  std::vector<float> values;
  // DeepseekV2Model's kv_b_proj split (MLA): 'k' k_b (each head's first qk_nope rows,
  // transposed), 'v' v_b (its last v_head_dim rows); 0 none.
  char kv_b = 0;
  int64_t kv_b_heads = 0, kv_b_nope = 0, kv_b_v = 0;
  // GptOssModel's fused experts: gate_up 'g' the even, 'u' the odd rows of gate_up_proj transposed
  // ([experts, hidden, 2 x ffn] -> [experts, ffn, hidden]), or of its bias's last dimension
  // ([experts, 2 x ffn] -> [experts, ffn]); 'G' the first, 'U' the second half of transformers'
  // in-memory gate_up_proj's rows ([experts, 2 x ffn, hidden] -> [experts, ffn, hidden]);
  // transpose: the last two dimensions swapped (down_proj).
  char gate_up = 0;
  bool transpose = false;
  // GptOssModel.repack_mxfp4: MXFP4 experts as OpenAI's checkpoints hold them (inputs: X_blocks
  // uint8 [experts, rows, groups, 16], then X_scales uint8 [experts, rows, groups]) copied into
  // ggml's MXFP4 (type MXFP4, shape [experts, rows, groups x 32]); gate_up 'g' / 'u' their even /
  // odd rows (gate_up_proj's), 0 all of them (down_proj).
  bool mxfp4 = false;
  // A Linear's packed FP4 weight passed through (gguf/lowbit.h: NVFP4 by nvfp4_pack, or
  // compressed-tensors' MXFP4 by mxfp4_pack; inputs: the packed weight; `type` says which), its
  // rows moved as the plan's Q/K permutation moves them (LlamaModel._repack_nvfp4 permutes the
  // packed rows and the block scale's alike).
  bool packed = false;
  // Falcon's query_key_value [(heads + 2 x groups) x head_dim, hidden] regrouped as
  // FalconModel.modify_tensors does (the "jploski" layout): every group's q heads, then each
  // group's k head, then each group's v head; 0: none. Made whole (a window is the tensor).
  int64_t qkv_groups = 0, qkv_heads = 0;
  // Added to each value (Arch::norm_shift of a norm's weight); its source saved in float16 is
  // added in float16 (the converter's data_torch + 1 on a float16 tensor), rounded there.
  float shift = 0;
};
// Whether config.json's quantization_config says quant_method mxfp4 (the converter's _is_mxfp4).
bool mxfp4_config(const nlohmann::json& config);
// The bytes of an MXFP4 plan (`p.mxfp4`) from its inputs' raw bytes: for each row kept and each
// group, the scale byte, then the group's 16 bytes reordered as transform_nibble_layout reorders
// them (OpenAI's byte i holds values 2i (low nibble) and 2i + 1; ggml's byte j holds values j (low)
// and j + 16).
std::vector<uint8_t> mxfp4_repack(const TensorPlan& p, const uint8_t* blocks, const uint8_t* scales,
                                  const std::vector<int64_t>& blocks_shape);
// Falcon's regrouped query_key_value (`p.qkv_groups`) of a float32 [rows, cols] at `x`.
std::vector<float> falcon_qkv_part(const TensorPlan& p, const float* x, int64_t rows, int64_t cols);
// The k_b or v_b part (`p.kv_b`) of kv_b_proj's float32 [heads * (nope + v), cols] at `x`.
std::vector<float> kv_b_part(const TensorPlan& p, const float* x, int64_t cols);
// The gate_up / transpose part (`p.gate_up`, `p.transpose`) of a float32 input of shape `in` at `x`.
std::vector<float> fused_part(const TensorPlan& p, const float* x, const std::vector<int64_t>& in);
// The HF key's GGUF tensor; UnsupportedError naming the key when the table has none.
TensorPlan tensor_plan(const Arch& arch, const nlohmann::json& config, const std::string& key,
                       const std::vector<int64_t>& shape, OutType out, const std::string& where);

// A Hugging Face tensor of the checkpoint.
struct Input {
  std::string key;
  std::vector<int64_t> shape;
  // A packed FP4 weight passed through (gguf/lowbit.h; `key` its X.weight, `shape` the weight's
  // [rows, cols]) as NVFP4 or MXFP4 (F32: none), NVFP4's with its per-tensor factors as written
  // (`.scale`, `.input_scale`: F32 [1], each only when it is not 1, as _write_scale_tensor decides).
  TensorType packed = TensorType::F32;
  float scale2 = 1, input_scale = 1;
};
// The key `inputs` are sorted by: the key itself, or for Mixtral's in-memory form
// (model.layers.N.mlp.{experts,gate}) the key its safetensors file has (block_sparse_moe.), so that
// the tensors come in the converter's order.
std::string sort_key(const Arch& arch, const std::string& key);
// UnsupportedError (exit 5) for a pruned MoE model whose layers keep other expert counts than
// config.json's own (view/moe_sparsity.h): llama.cpp reads one expert_count a model and builds every
// layer's stacks with it, so such a model has no GGUF. `where`: the config's path, for the message.
void refuse_per_layer_experts(const nlohmann::json& config, const std::string& where);
// Every GGUF tensor of a model whose tensors are `inputs` (sorted by sort_key, as the converter reads a
// safetensors file), in the converter's order: the generated ones first (rope_freqs), then each as
// its key comes, a layer's experts stacked where the last of them comes (the converter buffers
// them until it has all n_experts x 3). UnsupportedError naming a key the table has none for, or
// an expert that is missing.
std::vector<TensorPlan> plan_tensors(const Arch& arch, const nlohmann::json& config, const std::vector<Input>& inputs,
                                     OutType out, const std::string& where);

// Llama 3's rope_freqs (LlamaModel.generate_extra_tensors for rope_type llama3): head_dim / 2
// factors, computed in float32 as torch computes them there.
std::vector<float> llama3_rope_factors(const nlohmann::json& config);

// LlamaModel.permute: rows (h, i, j) -> (h, j, i) of a [rows, cols] tensor of `elem` bytes per
// element, rows = heads * 2 * half (a bias: cols 1). Returns the permuted bytes.
std::vector<uint8_t> permute_rows(const uint8_t* data, int64_t rows, int64_t cols, size_t elem, int64_t heads);

// general.size_label for `params` parameters (gguf-py's model_weight_count_rounded_notation).
std::string size_label(uint64_t params);
// general.size_label of the tensors written (gguf-py's GGUFWriter.get_total_parameter_count and
// utility.size_label): "4x1.2M" when there are experts (*_exps. tensors), else size_label(total).
std::string size_label(const std::vector<TensorPlan>& tensors);
// gguf-py's Metadata.id_to_title ("tiny-llama" -> "Tiny Llama").
std::string id_to_title(const std::string& id);

// The keys before the tokenizer, in the converter's order: general.*, the architecture's, file type.
// `label` "": no general.size_label.
void add_model_keys(Header& h, const Arch& arch, const nlohmann::json& config, const std::string& name,
                    const std::string& label, OutType out, const std::string& where);
// The tokenizer's keys (tokenizer.ggml.*) as _set_vocab_gpt2 and gguf-py's SpecialVocab write them.
// `tokenizer_config` null: none; `chat_template_jinja` "": no chat_template.jinja beside it.
// `arch` glm4moe: _set_vocab_glm's special tokens too ([gMASK] bos, <|user|> eot, <|endoftext|> unk,
// <|observation|> eom, each where not set already).
void add_tokenizer_keys(Header& h, const nlohmann::json& config, const nlohmann::json& tokenizer,
                        const nlohmann::json& tokenizer_config, const std::string& chat_template_jinja,
                        const std::string& where, const std::string& arch = "");

// gguf-py's SpecialVocab(dir, load_merges, n_vocab).add_to_gguf: tokenizer.json's merges (when
// `load_merges`), the special ids (tokenizer_config.json's *_token found among tokenizer.json's
// added tokens, then config.json's *_token_id; ids at or past `n_vocab` skipped, < 0: no limit),
// add_bos/eos/sep_token (the post-processor's, then tokenizer_config.json's), the chat template and
// the normalizer's lowercase / strip_accents. `tokenizer` null: no tokenizer.json. `arch` glm4moe:
// _set_vocab_glm's ids too (add_tokenizer_keys).
void add_special_vocab(Header& h, const nlohmann::json& config, const nlohmann::json& tokenizer,
                       const nlohmann::json& tokenizer_config, const std::string& chat_template_jinja,
                       const std::string& where, const std::string& arch, bool load_merges, int64_t n_vocab);
// The converter's does_token_look_special: <pad>, <mask>, <|...|>, <unused...> and the like.
bool does_token_look_special(const std::string& text);

// What llama.cpp's loader (llama-model.cpp's load_arch_tensors, llama.cpp as in the sdist of
// docs/gguf.md) asks of a file of an architecture written here (general.architecture llama, qwen2,
// qwen3, qwen3moe, deepseek2, glm4moe, gpt-oss, gemma2, gemma3, phi3, granite, olmo2, starcoder2, command-r, falcon,
// mistral3, mpt), from the file's keys: each tensor's name and shape (torch's order: ggml's ne reversed; -1 where a key
// it comes from is absent, any length then), whether the loader needs it, and the tensor whose presence stands in for
// it (a fused attn_qkv for attn_q/k/v, a fused ffn_gate_up_exps for the gate and up experts), and llama-model.cpp's
// generic pass after them: each Linear weight's optional `.scale` / `.input_scale` (NVFP4's factors). `key`: the file's
// value of a key as an integer (tokenizer.ggml.tokens: its length), nullopt when absent. nullopt: an architecture not
// here.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool required = true;
  std::string unless;  // "": none; else a tensor that, present, makes this one not required
};
std::optional<std::vector<ExpectedTensor>> expected_tensors(
    const std::string& arch, const std::function<std::optional<int64_t>(const std::string&)>& key);

}  // namespace dcpctl::gguf
