#!/usr/bin/env python3
"""The model of bench/gguf.sh: Llama 3.2 1B's architecture with random weights, 2.47 GB in bfloat16.

    make_gguf_model.py WORK     WORK/llama/ (the Hugging Face folder) and WORK/dcp/ (a DCP checkpoint of
                                the same tensors) and WORK/info.json; kept: a second run checks info.json
                                and returns at once

WORK/llama/: `LlamaForCausalLM(config).save_pretrained(..)` by transformers 5.23.0 (torch 2.15.0) in
bfloat16, seeded (torch.manual_seed(0), transformers' own init), with the published
meta-llama/Llama-3.2-1B config.json values (hidden 2048, 16 layers, 32 heads, 8 KV heads, head_dim 64,
intermediate 8192, vocabulary 128,256, tied embeddings, rope_theta 500000 with the `llama3` rope
scaling, whose rope_freqs tensor the converter writes) and a real Llama 3 tokenizer
(tools/gguf_oracle.py tokenizer llama-bpe: llama.cpp's own Llama 3 vocabulary file, the digest the
converter names `llama-bpe`). 1,235,814,400 parameters; one safetensors file of 2.47 GB (under
save_pretrained's 50 GB shard size), as Meta publishes it. The folder is named `llama` so that the
converter's `general.name` (from the folder's name) and dcpctl's (from the output's stem, llama.gguf)
are both "Llama".

WORK/dcp/: the same tensors (the safetensors file's, read back: the tied head is not among them, as
save_pretrained leaves it out) saved by torch.distributed.checkpoint.save, one process, no process
group: a training job's checkpoint of the model under its Hugging Face keys, which dcpctl reads with
`--assets WORK/llama` for config.json and the tokenizer.

Run with the project's virtualenv (.venv/bin/python: torch, transformers, safetensors).
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CONFIG = dict(
    architectures=["LlamaForCausalLM"], vocab_size=128256, hidden_size=2048, intermediate_size=8192,
    num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64, hidden_act="silu",
    max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000,
    eos_token_id=128001, attention_bias=False, mlp_bias=False,
    rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_position_embeddings=8192),
)


def make(work: Path) -> dict:
    info_path = work / "info.json"
    if info_path.exists() and (work / "dcp" / ".metadata").exists():
        return json.loads(info_path.read_text())
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM
    t0 = time.perf_counter()
    hf, ckpt = work / "llama", work / "dcp"
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, str(root / "tools" / "gguf_oracle.py"), "tokenizer", "llama-bpe", str(hf)],
                   check=True, stdout=subprocess.DEVNULL)
    torch.manual_seed(0)
    cfg = LlamaConfig(**CONFIG)
    torch.set_default_dtype(torch.bfloat16)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(hf)
    del model
    tensors = {}
    for f in sorted(hf.glob("*.safetensors")):
        tensors.update(load_file(f))
    dcp.save(tensors, checkpoint_id=str(ckpt))
    info = dict(parameters=sum(t.numel() for t in tensors.values()),
                bytes=sum(t.numel() * t.element_size() for t in tensors.values()),
                tensors=len(tensors), torch=torch.__version__, transformers=__import__("transformers").__version__,
                seconds=round(time.perf_counter() - t0, 1))
    info_path.write_text(json.dumps(info, indent=1) + "\n")
    return info


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    print(json.dumps(make(Path(sys.argv[1]))))
