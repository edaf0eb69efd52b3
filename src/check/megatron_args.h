// A Megatron-LM checkpoint's own training arguments against the config.json it is exported under.
//
// Megatron-LM's training loop saves its whole argparse Namespace in every checkpoint
// (megatron/training/checkpointing.py, generate_state_dict: `state_dict['args'] = args`). Where it
// lies (read_megatron_args; the pickle is decoded by the restricted VM, never run):
//
//   fsdp_dtensor   a top-level non-tensor item `args`: the Namespace itself;
//   torch_dist     the common state: the non-tensor item `common_state/shard_0_1`, a ShardedObject
//                  holding torch.save([state]) (megatron-core 0.19.2's save, serialization.py),
//                  whose `state['args']` is the Namespace. A legacy `common.pt` beside the
//                  checkpoint (megatron-core before the common state moved into DCP) is not read.
//
// A plain megatron-core `dist_checkpointing.save` of a model's state dict has no args: nothing is
// checked, and the map's --json says so (`args_from` null, `args_note`).
//
// Shapes already tie the sizes to the tensors; the settings that change no shape are taken from
// config.json on faith, and a wrong one gives a wrong model with exit 0. check_megatron_args
// compares them, as transformers 5.23 reads config.json for the map's variant (megatron.json:
// llama_qwen, glm4_moe, deepseek_v3, mixtral, gpt_oss; each variant's "args" says which rows below apply
// and its router, as data: a new variant is a row of megatron.json). A setting config.json leaves
// out is its config class's default (the variant's "config_defaults", from transformers 5.23's
// classes, by model_type; a model_type not listed: only what config.json states is compared). RoPE settings are read
// from `rope_parameters` first, then the top level (transformers < 5's spelling), then `rope_scaling`. Floats agree
// within a relative 1e-6 (a value written through float32 is the same setting).
//
//   config.json                        Megatron-LM args                          variants
//   ---------------------------------  ----------------------------------------  ---------------
//   num_hidden_layers                  num_layers                                all   (if stated)
//   hidden_size                        hidden_size                               all   (if stated)
//   num_attention_heads                num_attention_heads                       all   (if stated)
//   num_key_value_heads                num_query_groups if group_query_attention,
//                                      else num_attention_heads                  not deepseek_v3 (if stated)
//   head_dim                           kv_channels (None: hidden / heads)        not deepseek_v3 (if stated)
//   intermediate_size                  ffn_hidden_size                           dense models (if stated)
//   moe_intermediate_size              moe_ffn_hidden_size (None: ffn_hidden_size)  MoE, not mixtral (if stated)
//   intermediate_size                  moe_ffn_hidden_size (None: ffn_hidden_size)  mixtral (if stated)
//   num_experts / n_routed_experts /   num_experts                               MoE (if stated)
//     num_local_experts
//   num_experts_per_tok                moe_router_topk                           MoE
//   tie_word_embeddings                not untie_embeddings_and_output_weights   all
//   hidden_act (silu / swish)          swiglu True                               all
//   (RMSNorm: every variant's norm)    normalization == RMSNorm                  all
//   rms_norm_eps                       norm_epsilon, else layernorm_epsilon      all
//   rope_theta                         rotary_base                               all
//   (RoPE)                             position_embedding_type == rope           not deepseek_v3
//   (rotate_half RoPE)                 rotary_interleaved False                  not deepseek_v3
//   partial_rotary_factor              rotary_percent                            not deepseek_v3
//   rope_type default                  use_rope_scaling False, no
//                                      rotary_seq_len_interpolation_factor       not deepseek_v3
//   rope_type llama3, factor,          use_rope_scaling True: rope_scaling_factor,
//     low_freq_factor 1, high_freq_      and megatron-core's fixed 1, 4, 8192     not deepseek_v3
//     factor 4, original_max_position_
//     embeddings 8192
//   rope_type linear, factor           rotary_seq_len_interpolation_factor       not deepseek_v3
//   (softmax router)                   moe_router_score_function == softmax      llama_qwen MoE, mixtral
//   norm_topk_prob                     not moe_router_pre_softmax                llama_qwen MoE
//   (Mixtral renormalizes the top k)   moe_router_pre_softmax False              mixtral
//   (no routed scaling)                moe_router_topk_scaling_factor None or 1  llama_qwen MoE, mixtral
//   (sigmoid router)                   moe_router_score_function == sigmoid      glm4_moe, deepseek_v3
//   norm_topk_prob                     moe_router_topk > 1 (megatron-core
//                                      normalizes a sigmoid top-k when k > 1)    glm4_moe, deepseek_v3
//   routed_scaling_factor              moe_router_topk_scaling_factor (None: 1)  glm4_moe, deepseek_v3
//   (GPT-OSS's gated MLP)              quick_geglu True, glu_linear_offset 1     gpt_oss (not hidden_act)
//   swiglu_limit, swiglu_alpha         activation_func_clamp_value; 1.702        gpt_oss
//   (sinks)                            softmax_type == learnable                 gpt_oss
//   sliding_window, layer_types        window_size (W - 1, 0), the layers
//                                      window_attn_skip_freq windows             gpt_oss
//   rope_parameters yarn: factor,      position_embedding_type yarn,
//     original_max_position_embed-     rotary_scaling_factor, yarn_original_max_
//     dings, beta_fast, beta_slow,     position_embeddings, yarn_beta_fast/slow,
//     truncate, the cos/sin scale      yarn_correction_range_round_to_int (None:
//                                      True), mscale / mscale_all_dim            gpt_oss
//   (the attention)                    multi_latent_attention (True: MLA)        all
//   q_lora_rank (null: none),          q_lora_rank, kv_lora_rank, qk_head_dim,   deepseek_v3 ("sizes",
//     kv_lora_rank, qk_nope_head_dim,    qk_pos_emb_head_dim, v_head_dim           if stated)
//     qk_rope_head_dim, v_head_dim
//   rope_interleave (True)             multi_latent_attention (MLA always takes  deepseek_v3
//                                      the RoPE columns even then odd);
//                                      rotary_interleaved False
//   rope_type yarn / default           rope_type (None: MLA's "yarn") / "rope"   deepseek_v3
//   yarn factor                        rotary_scaling_factor                     deepseek_v3
//   yarn original_max_position_        MLATransformerConfig's fixed 4096, 32,    deepseek_v3
//     embeddings, beta_fast,             1, True (no Megatron-LM argument under
//     beta_slow, truncate                MLA)
//   yarn's cos/sin and softmax scales  mscale, mscale_all_dim, as computed       deepseek_v3
//     (attention_factor, mscale,         (check_mla_rope); plain RoPE: megatron's
//     mscale_all_dim)                    softmax scale must be 1
//   n_group, topk_group                moe_router_num_groups, moe_router_group_  glm4_moe, deepseek_v3
//                                      topk (no limit either side agrees), and    (router "groups")
//                                      moe_router_topk / group_topk = 2
//   first_k_dense_replace /            moe_layer_freq (int N: every N-th layer;  MoE ("dense_layers")
//     mlp_only_layers + decoder_       list: the pattern)
//     sparse_step / (Mixtral: none)
//
// Why these mappings: megatron-core 0.19.2's topk_routing_with_score_function (softmax without
// pre-softmax is a softmax over the top k logits, i.e. transformers' renormalized top-k probs;
// with it, the top k of a softmax over all, not renormalized; a sigmoid's top k is always
// renormalized when k > 1; the scaling factor multiplies either), RotaryEmbedding._apply_scaling
// (Llama 3 scaling with low/high frequency factors 1 and 4 and an original context of 8192, fixed),
// and transformers 5.23's Qwen2/3-MoE, Mixtral, GLM-4.5 and DeepSeek-V3 routers.
//
// Group-limited routing: transformers' DeepSeek-V3 and GLM-4.5 routers score a group by the sum
// of its top 2 biased scores, megatron-core 0.19.2's group_limited_topk by its top moe_router_topk /
// moe_router_group_topk: the same choice only when that quotient is 2 (DeepSeek-V3's 8 / 4).
//
// Not checked (no exact mapping known here, or shapes already decide): a size config.json leaves
// out (its class defaults differ per model_type and the tensors decide them); the shared experts'
// sizes and gate; qk_layernorm, add_qkv_bias, add_bias_linear (keys and shapes decide them); vocab
// sizes (check/megatron_vocab.h); max_position_embeddings; dtypes; a model_type no variant's
// config_defaults lists (Kimi K2's kimi_k2: its remote-code class) has only what config.json
// states compared.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dcpctl {

struct Checkpoint;
struct MappedModel;
struct MapConfig;

struct MegatronArgs {
  std::string from;       // where they were read: "<checkpoint>: item 'args'" and the like
  nlohmann::json values;  // the Namespace's fields JSON can hold (others: an enum, a torch dtype, left out)
};

// The Megatron-LM args the checkpoint carries; nullopt when it carries none, or an `args` that is
// not an argparse.Namespace (`note` then says so). FormatError when the item cannot be read.
std::optional<MegatronArgs> read_megatron_args(const Checkpoint& ck, std::string* note = nullptr);

// What was compared: one {"config", "args", "value", "config_from"} per agreeing field, in the
// table's order. UnsupportedError (exit 5: the checkpoint is intact, config.json does not describe
// it) naming `config_path`, every contradiction (config.json's field
// and value, the args field and value) and where the args came from, when any disagree.
// `variant_args`: the "args" of the map's variant (view/maps/keymap.h's variant_args: megatron.json's
// variants say how their config reads the args: attention, RoPE, router, and each model_type's
// class defaults); config.json's model_type chooses the defaults. UsageError when it is malformed.
nlohmann::json check_megatron_args(const MegatronArgs& args, const nlohmann::json& config,
                                   const std::string& config_path, const nlohmann::json& variant_args);

// The check of a --map output (view/model.h's ModelRequest::check_map, set by the exports): for a
// Megatron -> Hugging Face map, reads `saved`'s args and checks them against `config`, filling
// `map`'s args_from / args_checked / args_note (its --json); any other map is left as it is.
void check_megatron_map(const Checkpoint& saved, MappedModel& map, const MapConfig& config);

// The refusal of a config.json that contradicts what the trainer recorded (the Megatron args, the
// torchtitan job config: check/titan_config.h): `header` says what it disagrees with, each of
// `problems` one disagreement. Exit 5: the checkpoint is intact, config.json does not describe it.
[[noreturn]] void throw_config_contradiction(const std::string& config_path, const std::string& header,
                                             const std::vector<std::string>& problems);

// config.json's RoPE field `key` (not null) and how it is spelled there, for both checks:
// rope_parameters.KEY, then the top level's KEY, then rope_scaling.KEY (transformers < 5), and for
// rope_type rope_scaling.type (transformers < 5's name for it); nullopt where none is given.
std::optional<std::pair<nlohmann::json, std::string>> config_rope_field(const nlohmann::json& config,
                                                                        const std::string& key);

}  // namespace dcpctl
