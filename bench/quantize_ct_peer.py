#!/usr/bin/env python3
"""The peer of bench/quantize_ct.sh: llm-compressor's model_free_ptq, on CPU.

  quantize_ct_peer.py make-tiny DIR        a tiny float32 Qwen3ForCausalLM (seeded) in DIR/src, for a quick
                                           agreement check before the 2.79 GB model (quantize_peer.py make)
  quantize_ct_peer.py SCHEME SRC OUT       model_free_ptq(SRC, OUT, scheme=SCHEME, ignore=["lm_head", "re:.*embed_tokens$"],
                                           device="cpu"): SCHEME is a compressed-tensors preset
                                           (FP8_DYNAMIC, NVFP4A16, MXFP8A16); the embeddings ignored too, as
                                           dcpctl leaves them (model_free_ptq, with no model definition, takes
                                           embed_tokens for a Linear)
  quantize_ct_peer.py check A B            every tensor of A/ against B/'s: the same keys, dtype, shape and
                                           bytes (bench/quantize_peer.py's check; exit 1 on a difference)

Versions (recorded by the bench): llmcompressor 0.14.0.1, which pins torch<=2.14, transformers<=5.17 and
compressed-tensors 0.19.0, installed with --no-deps over compressed-tensors 0.20.0, torch 2.15.0 and
transformers 5.23.0 (the venv of tests/interop/codecs_test.py), plus loguru, datasets, accelerate, requests:
    python3 -m venv V && V/bin/pip install compressed-tensors==0.20.0 torch==2.15.0 transformers==5.23.0 \
        datasets requests && V/bin/pip install --no-deps llmcompressor==0.14.0.1 loguru accelerate psutil nvidia-ml-py
Its model_free_ptq imports and runs with them on CPU (what the bench shows).
"""
import sys
import time
from pathlib import Path


def make_tiny(d: Path) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=64, tie_word_embeddings=False)
    torch.manual_seed(0)
    Qwen3ForCausalLM(cfg).save_pretrained(d / "src")


def quantize(scheme: str, src: str, out: str) -> None:
    import logging
    from loguru import logger
    logger.remove()
    logging.disable(logging.WARNING)
    from llmcompressor import model_free_ptq
    t = time.perf_counter()
    model_free_ptq(src, out, scheme=scheme, ignore=["lm_head", "re:.*embed_tokens$"], device="cpu", max_workers=1)
    print(f"model_free_ptq {scheme}: {time.perf_counter() - t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make-tiny":
        make_tiny(Path(sys.argv[2]))
    elif cmd == "check":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from quantize_peer import check  # the same comparison as bench/quantize.sh's
        sys.exit(check(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        quantize(cmd, sys.argv[2], sys.argv[3])
