#!/usr/bin/env python3
"""The Megatron -> HF bench's checkpoint and its Megatron-Bridge side (bench/megatron_hf.sh):

    PYTHON bench/megatron_moe.py make OUT        # OUT/ckpt (torch_dist), OUT/config.json
    PYTHON bench/megatron_moe.py bridge OUT HF   # Megatron-Bridge's export of OUT/ckpt into HF/

`make` builds a Qwen3-MoE-style GPTModel with megatron-core 0.19.2 on CPU (the local spec, one gloo
rank, random weights: 9 layers, hidden 1024, 16 heads in 4 query groups, head_dim 64, 16 experts of
ffn 1024 (SequentialMLP), top-2, vocab 32768, untied, float32: 544 M parameters, 2.18 GB) and saves
it with dist_checkpointing.save; config.json is transformers' Qwen3MoeConfig of the same model.
PYTHON: .venv-megatron (tools/dev.sh setup).

`bridge` is what a Megatron-Bridge user runs to get Hugging Face weights out of that checkpoint:
the same model built (TP1), megatron-core's dist_checkpointing.load of OUT/ckpt into it, then
Megatron-Bridge 0.6.2's AutoBridge.from_hf_config(config).export_hf_weights([model], cpu=True) into
safetensors (transformers' save_pretrained layout: 5 GB shards, an index). PYTHON: a venv with
megatron-bridge 0.6.2 installed --no-deps (the fixtures README's recipe 12); the shims of
make_megatron_hf.py (torch.cuda.synchronize / current_device on CPU, Python 3.12's typing.override,
Megatron-Bridge's unguarded TE import in its LoRA module).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "layouts"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "interop"))

VOCAB, LAYERS, HIDDEN, HEADS, GROUPS, HEAD_DIM = 32768, 9, 1024, 16, 4, 64
EXPERTS, MOE_FFN, TOPK = 16, 1024, 2


def init():
    import make_megatron_qwen3 as mq

    mq.init_one_rank(threads=2, timeout_s=1800)


def model():
    import torch
    import torch.nn.functional as F
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(0)
    cfg = TransformerConfig(
        num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, num_query_groups=GROUPS, kv_channels=HEAD_DIM,
        ffn_hidden_size=MOE_FFN, gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm",
        layernorm_epsilon=1e-6, add_bias_linear=False, add_qkv_bias=False, qk_layernorm=True, hidden_dropout=0.0,
        attention_dropout=0.0, bias_activation_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        bias_dropout_fusion=False, apply_rope_fusion=False, gradient_accumulation_fusion=False,
        use_cpu_initialization=True, params_dtype=torch.float32, pipeline_dtype=torch.float32, init_method_std=0.02,
        num_moe_experts=EXPERTS, moe_ffn_hidden_size=MOE_FFN, moe_router_topk=TOPK, moe_grouped_gemm=False,
        moe_token_dispatcher_type="allgather", moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.0)
    spec = get_gpt_layer_local_spec(num_experts=EXPERTS, moe_grouped_gemm=False, qk_layernorm=True, normalization="RMSNorm")
    return GPTModel(config=cfg, transformer_layer_spec=spec, vocab_size=VOCAB, max_sequence_length=4096,
                    position_embedding_type="rope", rotary_percent=1.0, rotary_base=1000000,
                    share_embeddings_and_output_weights=False)


def hf_config():
    import transformers

    c = transformers.Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=MOE_FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=GROUPS, head_dim=HEAD_DIM, rms_norm_eps=1e-6,
        max_position_embeddings=4096, tie_word_embeddings=False, num_experts=EXPERTS, moe_intermediate_size=MOE_FFN,
        num_experts_per_tok=TOPK, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    c.architectures = ["Qwen3MoeForCausalLM"]
    return c


def make(out: Path) -> None:
    from megatron.core import dist_checkpointing

    init()
    m = model()
    n = sum(p.numel() for p in m.parameters())
    sd = m.sharded_state_dict()
    sd["iteration"] = 1
    sd["checkpoint_version"] = 3.0
    (out / "ckpt").mkdir(parents=True, exist_ok=True)
    dist_checkpointing.save(sd, str(out / "ckpt"))
    hf_config().save_pretrained(out)
    print(json.dumps({"parameters": n, "bytes": 4 * n, "ckpt": str(out / "ckpt")}))


def bridge(out: Path, hf: Path) -> None:
    import make_megatron_hf as mh
    from megatron.core import dist_checkpointing
    from safetensors.torch import save_file

    init()
    m = model()
    loaded = dist_checkpointing.load(m.sharded_state_dict(), str(out / "ckpt"))
    for k in ("iteration", "checkpoint_version"):
        loaded.pop(k, None)
    m.load_state_dict(loaded, strict=False)
    AutoBridge = mh.import_bridge()
    hf.mkdir(parents=True, exist_ok=True)
    shard, size, n, index = {}, 0, 0, {}

    def flush():
        nonlocal shard, size, n
        if shard:
            n += 1
            name = f"model-{n:05d}.safetensors"
            save_file(shard, str(hf / name), metadata={"format": "pt"})
            index.update({k: name for k in shard})
            shard, size = {}, 0

    for name, t in AutoBridge.from_hf_config(hf_config()).export_hf_weights([m], cpu=True, show_progress=False):
        if size + t.numel() * t.element_size() > 5 * 10**9:
            flush()
        shard[name] = t.contiguous()
        size += t.numel() * t.element_size()
    flush()
    (hf / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))
    hf_config().save_pretrained(hf)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "bridge":
        bridge(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
