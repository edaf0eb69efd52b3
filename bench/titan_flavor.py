"""Registers the torchtitan 0.3.0 flavors of bench/maps.sh, built with torchtitan's own layer
builders and inits, as its registered flavors are:

- "bench3g" (llama3): dim 2048, 12 layers, 16 heads / 8 KV heads (head_dim 128), ffn 8192, vocab
  32768, untied, llama RoPE scaling: 889 M parameters, 3.56 GB float32 (_build_llama3_layers).
- "bench_moe" (deepseek_v3): dim 1024, 8 layers (the first dense, ffn 4096; then 7 MoE layers of
  32 routed experts of hidden 768, top-k 8 sigmoid routing, one shared expert, expert_bias_E),
  MLA with q LoRA (q rank 512, kv rank 512, qk_nope 128, qk_rope 64, v 128; 16 heads), yarn RoPE,
  vocab 32768, untied: 680 M parameters (78% of them routed experts), 2.72 GB float32
  (_build_dsv3_layers).

Imported by make_titan_ckpt.py, and by run_convert_to_hf.py before it runs torchtitan's
scripts/checkpoint_conversion/convert_to_hf.py unmodified (which builds `model_registry(flavor)`).

    titan_flavor.py hf-config FLAVOR      prints the matching Hugging Face config.json
"""
import json
import sys
from dataclasses import dataclass
from typing import Any

import torchtitan.models.deepseek_v3 as D
import torchtitan.models.llama3 as L
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm


@dataclass(frozen=True)
class Flavor:
    model: str          # torchtitan.models.<model>, convert_to_hf.py's --model_name
    key_map: str        # dcpctl consolidate --map
    hf_config: dict[str, Any]
    perturb_constants: bool = False   # make_titan_ckpt.py: see there


# ---- llama3 "bench3g" ----
DIM, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 2048, 12, 16, 8, 8192, 32768

HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": DIM,
    "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS, "head_dim": DIM // HEADS, "vocab_size": VOCAB, "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072, "tie_word_embeddings": False, "hidden_act": "silu",
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "torch_dtype": "float32",
}


def _bench3g(attn_backend: str = "flex", tp_gemm_backend: str = "default") -> L.Llama3Model.Config:
    return L.Llama3Model.Config(
        dim=DIM, vocab_size=VOCAB,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM, param_init=L._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=DIM, param_init=L._NORM_INIT),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB, param_init=L._output_linear_init(DIM)),
        layers=L._build_llama3_layers(
            fuse_qkv=True, n_layers=LAYERS, dim=DIM, n_heads=HEADS, n_kv_heads=KV_HEADS, hidden_dim=FFN,
            rope=ComplexRoPE.Config(dim=DIM // HEADS, max_seq_len=131072, theta=500000, scaling="llama"),
            attn_backend=attn_backend, tp_gemm_backend=tp_gemm_backend))


# ---- deepseek_v3 "bench_moe" ----
M_DIM, M_LAYERS, M_DENSE, M_HEADS, M_VOCAB = 1024, 8, 1, 16, 32768
M_Q_LORA, M_KV_LORA, M_NOPE, M_ROPE, M_V = 512, 512, 128, 64, 128
M_DENSE_FFN, M_MOE_FFN, M_EXPERTS, M_SHARED, M_TOPK = 4096, 768, 32, 1, 8
M_ROUTE_SCALE = 2.5

MOE_HF_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": M_DIM,
    "intermediate_size": M_DENSE_FFN, "moe_intermediate_size": M_MOE_FFN, "num_hidden_layers": M_LAYERS,
    "first_k_dense_replace": M_DENSE, "moe_layer_freq": 1, "num_attention_heads": M_HEADS,
    "num_key_value_heads": M_HEADS, "n_routed_experts": M_EXPERTS, "n_shared_experts": M_SHARED,
    "num_experts_per_tok": M_TOPK, "n_group": 1, "topk_group": 1, "norm_topk_prob": True,
    "routed_scaling_factor": M_ROUTE_SCALE, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
    "q_lora_rank": M_Q_LORA, "kv_lora_rank": M_KV_LORA, "qk_nope_head_dim": M_NOPE,
    "qk_rope_head_dim": M_ROPE, "v_head_dim": M_V, "head_dim": M_ROPE, "rope_interleave": True,
    "vocab_size": M_VOCAB, "rms_norm_eps": 1e-5, "max_position_embeddings": 4096 * 40,
    "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
    "num_nextn_predict_layers": 0,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "beta_fast": 32.0,
                        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                        "original_max_position_embeddings": 4096},
    "torch_dtype": "float32",
}


def _bench_moe(attn_backend: str, moe_comm_backend: str, non_blocking_capacity_factor: float | None = None,
               num_mtp_layers: int = 0) -> D.DeepSeekV3Model.Config:
    layers = D._build_dsv3_layers(
        n_layers=M_LAYERS, n_dense_layers=M_DENSE, dim=M_DIM, n_heads=M_HEADS, q_lora_rank=M_Q_LORA,
        kv_lora_rank=M_KV_LORA, qk_nope_head_dim=M_NOPE, qk_rope_head_dim=M_ROPE, v_head_dim=M_V, mscale=1.0,
        dense_hidden_dim=M_DENSE_FFN, moe_hidden_dim=M_MOE_FFN, num_experts=M_EXPERTS,
        num_shared_experts=M_SHARED, router_top_k=M_TOPK, router_score_func="sigmoid",
        router_route_scale=M_ROUTE_SCALE, router_route_norm=True, attn_backend=attn_backend,
        moe_comm_backend=moe_comm_backend, non_blocking_capacity_factor=non_blocking_capacity_factor,
        rope=ComplexRoPE.Config(dim=M_ROPE, max_seq_len=4096 * 4, theta=10000.0, scaling="yarn", rope_factor=40.0,
                                beta_fast=32.0, beta_slow=1.0, original_seq_len=4096))
    return D.DeepSeekV3Model.Config(
        vocab_size=M_VOCAB, dim=M_DIM,
        tok_embeddings=Embedding.Config(num_embeddings=M_VOCAB, embedding_dim=M_DIM, param_init=D._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=M_DIM, param_init=D._NORM_INIT),
        lm_head=Linear.Config(in_features=M_DIM, out_features=M_VOCAB, param_init=D._output_linear_init(M_DIM)),
        layers=layers,
        mtp_layers=D._build_mtp_layers(layers[-1], dim=M_DIM, num_mtp_layers=num_mtp_layers))


L.llama3_configs["bench3g"] = _bench3g
D.deepseekv3_configs["bench_moe"] = _bench_moe

FLAVORS = {
    "bench3g": Flavor(model="llama3", key_map="torchtitan-llama3", hf_config=HF_CONFIG),
    "bench_moe": Flavor(model="deepseek_v3", key_map="torchtitan-deepseek-v3", hf_config=MOE_HF_CONFIG,
                        perturb_constants=True),
}
FLAVOR = "bench3g"   # the default


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "hf-config" or sys.argv[2] not in FLAVORS:
        sys.exit(f"usage: {sys.argv[0]} hf-config {{{'|'.join(FLAVORS)}}}")
    json.dump(FLAVORS[sys.argv[2]].hf_config, sys.stdout, indent=2)
    print()
