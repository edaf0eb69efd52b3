#!/usr/bin/env python3
"""The peers' side of bench/quantize.sh, and its model.

  quantize_peer.py make DIR          a 2.79 GB float32 Qwen3ForCausalLM (transformers 5.23, seeded
                                     random init: hidden 2048, intermediate 5632, 12 layers, 16 heads,
                                     8 KV heads, vocab 32000, untied; 697 M parameters) saved with
                                     save_pretrained into DIR/src (kept between runs)
  quantize_peer.py fp8 SRC OUT       the way users quantize offline today (prime-rl #3348's
                                     convert_bf16_to_fp8.py, Megatron-Bridge's export): every tensor
                                     loaded into memory, each Linear weight through transformers 5.23's
                                     own Fp8Quantize op (128x128 blocks; what FineGrainedFP8's save
                                     path runs; its from_pretrained quantization needs a GPU), the
                                     rest cast to bf16, save_file + config.json with quantization_config
  quantize_peer.py bf16 SRC OUT      from_pretrained(SRC, dtype=bfloat16).save_pretrained(OUT)
  quantize_peer.py check A B         every tensor of A/ equal to B/'s (dtype, shape, bytes)
  quantize_peer.py make-gpt-oss DIR  a 2.3 GB float32 GptOssForCausalLM (transformers 5.23, seeded random
                                     init: hidden 1024, intermediate 1024, 16 experts, 10 layers, vocab
                                     32000; its experts [E, in, out] as GptOssExperts keeps them) saved
                                     with save_pretrained into DIR/src-gpt-oss (kept between runs), for
                                     bench/quantize_mxfp4.sh
  quantize_peer.py save SRC OUT      from_pretrained(SRC) + save_pretrained(OUT) in its dtype (the peers'
                                     load-and-save, without quantizing: transformers 5.23 quantizes to
                                     MXFP4 only with the `kernels` package's Hub kernels, see
                                     bench/quantize_mxfp4.sh)

Phases (load, convert, save) go to stderr.
"""
import json
import shutil
import sys
import time
from pathlib import Path


def make(d: Path) -> None:
    src = d / "src"
    if (src / "config.json").exists():
        return
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=12, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=128, tie_word_embeddings=False, max_position_embeddings=4096)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    model.save_pretrained(src, max_shard_size="1GB")
    n = sum(p.numel() for p in model.parameters())
    (d / "info.json").write_text(json.dumps({"parameters": n, "bytes": n * 4}))


def make_gpt_oss(d: Path) -> None:
    src = d / "src-gpt-oss"
    if (src / "config.json").exists():
        return
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM
    cfg = GptOssConfig(vocab_size=32000, hidden_size=1024, intermediate_size=1024, num_hidden_layers=10,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=64, num_local_experts=16,
                       num_experts_per_tok=4, layer_types=["sliding_attention", "full_attention"] * 5)
    torch.manual_seed(0)
    model = GptOssForCausalLM(cfg)
    model.save_pretrained(src, max_shard_size="1GB")
    n = sum(p.numel() for p in model.parameters())
    (d / "info-gpt-oss.json").write_text(json.dumps({"parameters": n, "bytes": n * 4}))


def save(src: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM
    t0 = time.perf_counter()
    m = AutoModelForCausalLM.from_pretrained(src, dtype="auto")
    t1 = time.perf_counter()
    m.save_pretrained(out)
    t2 = time.perf_counter()
    print(f"peer-save phases: from_pretrained {t1 - t0:.2f} s, save_pretrained {t2 - t1:.2f} s", file=sys.stderr)


def folder(d: Path) -> dict:
    from safetensors.torch import load_file
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def fp8(src: Path, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers.integrations.finegrained_fp8 import Fp8Quantize
    from transformers.utils.quantization_config import FineGrainedFP8Config

    class Q:
        quantization_config = FineGrainedFP8Config(weight_block_size=(128, 128))

    t0 = time.perf_counter()
    sd = folder(src)
    t1 = time.perf_counter()
    op, res, keep = Fp8Quantize(Q()), {}, []
    for k, v in sd.items():
        if k.endswith(".weight") and v.dim() == 2 and not any(p in k for p in ("embed", "lm_head", "norm")):
            res.update(op._quantize_one(k, v))
        else:
            res[k] = v.to(torch.bfloat16)
            if v.dim() == 2:
                keep.append(k[: -len(".weight")])
    t2 = time.perf_counter()
    out.mkdir()
    save_file(res, out / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    cfg["dtype"] = "bfloat16"
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
                                  "modules_to_not_convert": keep}
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    t3 = time.perf_counter()
    print(f"peer-fp8 phases: load {t1 - t0:.2f} s, quantize {t2 - t1:.2f} s, save {t3 - t2:.2f} s", file=sys.stderr)


def bf16(src: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM
    t0 = time.perf_counter()
    m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    t1 = time.perf_counter()
    m.save_pretrained(out)
    t2 = time.perf_counter()
    print(f"peer-bf16 phases: from_pretrained {t1 - t0:.2f} s, save_pretrained {t2 - t1:.2f} s", file=sys.stderr)


def check(a: Path, b: Path) -> int:
    import torch
    ta, tb = folder(a), folder(b)
    if sorted(ta) != sorted(tb):
        print(f"keys differ: {sorted(set(ta) ^ set(tb))[:5]}")
        return 1
    bad = [k for k in ta if ta[k].dtype != tb[k].dtype or ta[k].shape != tb[k].shape
           or not torch.equal(ta[k].view(torch.uint8).flatten(), tb[k].view(torch.uint8).flatten())]
    print(f"{len(ta)} tensors, {len(ta) - len(bad)} equal byte for byte" + (f"; differ: {bad[:5]}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(Path(sys.argv[2]))
    elif cmd == "fp8":
        shutil.rmtree(sys.argv[3], ignore_errors=True)
        fp8(Path(sys.argv[2]), Path(sys.argv[3]))
    elif cmd == "bf16":
        shutil.rmtree(sys.argv[3], ignore_errors=True)
        bf16(Path(sys.argv[2]), Path(sys.argv[3]))
    elif cmd == "make-gpt-oss":
        make_gpt_oss(Path(sys.argv[2]))
    elif cmd == "save":
        shutil.rmtree(sys.argv[3], ignore_errors=True)
        save(Path(sys.argv[2]), Path(sys.argv[3]))
    elif cmd == "check":
        sys.exit(check(Path(sys.argv[2]), Path(sys.argv[3])))
