"""Registers the torchtitan 0.3.0 Llama 3 flavor "bench3g" (bench/maps.sh): dim 2048, 12 layers,
16 heads / 8 KV heads (head_dim 128), ffn 8192, vocab 32768, untied, llama RoPE scaling: 889 M
parameters, 3.56 GB float32. Built with torchtitan's own _build_llama3_layers and inits, as its
registered flavors are.

Imported by make_titan_ckpt.py, and by run_convert_to_hf.py before it runs torchtitan's
scripts/checkpoint_conversion/convert_to_hf.py unmodified (which builds `model_registry(flavor)`).
"""
import torchtitan.models.llama3 as L
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm

FLAVOR = "bench3g"
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


L.llama3_configs[FLAVOR] = _bench3g
