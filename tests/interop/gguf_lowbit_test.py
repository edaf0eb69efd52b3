#!/usr/bin/env python3
"""consolidate -o model.gguf of low-bit sources against llama.cpp's own converter (docs/gguf.md,
"Low-bit sources"; issue 82 item 4).

    gguf_lowbit_test.py DCPCTL [SOURCE:OUTTYPE ...]   (default: CASES)

Each source is gguf_test.py's tiny Llama (hidden 64, 2 layers, 4 heads of 128, 2 KV heads, Llama
3's tokenizer rebuilt by tools/gguf_oracle.py, saved by transformers in bfloat16) quantized by the
real producer:
  fp8-block       transformers 5.23's own FineGrainedFP8 quantizer (Fp8Quantize._quantize_one, 32 x 32
                  blocks: several along both dimensions of every weight) on every 2-D Linear weight,
                  the config transformers writes (quant_method fp8, weight_block_size)
  ct-fp8-channel  compressed-tensors 0.20.0's FP8_DYNAMIC (float-quantized, strategy channel), model-free
                  as llm-compressor writes it (tests/interop/quant_producers.py's ct_quantize)
  ct-fp8-block    compressed-tensors 0.20.0's FP8_BLOCK (float-quantized, strategy block 128 x 128)
  ct-nvfp4        compressed-tensors 0.20.0's NVFP4A16 (nvfp4-pack-quantized, global scales fused over q/k/v
                  and gate/up as llm-compressor fuses them): passed through as GGUF NVFP4 (type 40), each
                  weight's `.scale` (1 / weight_global_scale), Q/K rows permuted, first in the file
  dcpctl-nvfp4    dcpctl's own `consolidate --quantize nvfp4` of the same model (compressed-tensors' form)
llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36's) writes tiny.gguf from the folder
(its dequant_model: float32(weight) * float32(scale); its _generate_nvfp4_tensors); dcpctl writes it from the folder and from a
DCP checkpoint of the same tensors (torch.distributed.checkpoint.save, the config and tokenizer
beside it), the latter also at --max-memory 1MiB (windows of rows, far below a tensor): each equal to the converter's byte for byte (gguf_test.py's compare names the key or
tensor that differs). Refusals, each exit 5 naming what and writing nothing: compressed-tensors
FP8 of strategy tensor (the converter asserts channel or block) and W4A16 (pack-quantized, not
read by dcpctl yet).

Exit status: 0 pass, 1 failure, 77 skip (the virtualenv lacks gguf, torch, transformers or
compressed-tensors, or the sdist was never fetched; a failure instead under CI, tests/skip.py).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from skip import skip_or_fail  # noqa: E402

try:
    import torch
    import compressed_tensors  # noqa: F401
    import gguf_test as gt  # imports gguf, transformers, sentencepiece, gguf_oracle or skips
    import quant_producers as qp
    import gguf_oracle
except ImportError as e:
    skip_or_fail(f"the virtualenv lacks {e.name} (tools/requirements.txt)")

TALLY = gt.TALLY
check = TALLY.check

CASES = ["fp8-block:q8_0", "fp8-block:bf16", "ct-fp8-channel:f16", "ct-fp8-block:q8_0", "ct-nvfp4:f16", "ct-nvfp4:q8_0",
         "dcpctl-nvfp4:bf16"]
REFUSED = {"ct-fp8-tensor": "strategy 'tensor'", "ct-w4a16": "pack-quantized"}
# Per case: the converter's exit, dcpctl's exit and comparison from the folder, from DCP and from DCP
# at --max-memory 1MiB.
CHECKS_PER_CASE = 7
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def fp8_block(base: Path, out: Path) -> None:
    """transformers' FineGrainedFP8 of every 2-D Linear weight of `base` (not the embeddings, not the
    head: modules_to_not_convert's lm_head), as from_pretrained(quantization_config=...) quantizes."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.finegrained_fp8 import Fp8Quantize
    from transformers.utils.quantization_config import FineGrainedFP8Config
    qc = FineGrainedFP8Config(weight_block_size=(32, 32))

    class Q:
        quantization_config = qc

    op = Fp8Quantize(Q())
    sd = {}
    for k, v in load_file(base / "model.safetensors").items():
        if k.endswith(".weight") and v.dim() == 2 and "embed" not in k and "lm_head" not in k:
            sd.update(op._quantize_one(k, v))
        else:
            sd[k] = v
    scales = [k for k in sd if k.endswith("_scale_inv")]
    if len(scales) != 14 or any(sd[k[:-len("_scale_inv")]].dtype != torch.float8_e4m3fn for k in scales):
        raise AssertionError(f"transformers quantized {len(scales)} weights, not the 14 Linear weights, to float8_e4m3fn")
    out.mkdir(parents=True)
    save_file(sd, out / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((base / "config.json").read_text())
    cfg["quantization_config"] = qc.to_dict()
    (out / "config.json").write_text(json.dumps(cfg, indent=2))


SCHEMES = {"ct-fp8-channel": "fp8-channel", "ct-fp8-block": "fp8-block", "ct-fp8-tensor": "fp8-tensor", "ct-w4a16": "w4a16-g32",
           "ct-nvfp4": "nvfp4a16"}


def source(name: str, base: Path, out: Path, dcpctl: str) -> None:
    if name == "fp8-block":
        fp8_block(base, out)
    elif name == "dcpctl-nvfp4":
        out.parent.mkdir(parents=True)
        r = subprocess.run([dcpctl, "consolidate", str(base), "-o", f"{out}/", "--quantize", "nvfp4", "-q"], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"dcpctl --quantize nvfp4: exit {r.returncode}: {r.stderr[-1000:]}")
    else:
        qp.ct_quantize(base, out, SCHEMES[name])
    for f in TOKENIZER_FILES:
        shutil.copy(base / f, out / f)


def main(argv: list[str]) -> int:
    dcpctl = argv[0]
    cases = argv[1:] or CASES
    try:
        gguf_oracle.fetch()
    except Exception as e:  # noqa: BLE001
        skip_or_fail(f"llama-cpp-python's sdist not fetched ({e}); tools/dev.sh setup fetches it")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = tmp / "base" / "tiny"
        gt.tiny_model("llama-bf16", base)
        for case in cases:
            name, outtype = case.split(":")
            if name not in SCHEMES and name not in ("fp8-block", "dcpctl-nvfp4"):
                check(False, f"{case}: no such source")
                continue
            hf, dcp_dir = tmp / name / "hf" / "tiny", tmp / name / "dcp"
            if not hf.exists():
                source(name, base, hf, dcpctl)
                gt.dcp_of(hf, dcp_dir)
            want = tmp / case.replace(":", "-") / "converter" / "tiny.gguf"
            r = gguf_oracle.convert(hf, want, ["--outtype", outtype])
            if not check(r.returncode == 0, f"{case}: the converter failed: {r.stderr[-2000:]}"):
                continue
            # From the DCP checkpoint also at --max-memory 1MiB (the embedding alone is 32 MB in float32):
            # the windows of rows (heads for q/k) are the whole tensor's bytes.
            for src, memory in ((hf, []), (dcp_dir, []), (dcp_dir, ["--max-memory", "1MiB"])):
                got = tmp / case.replace(":", "-") / f"from-{src.name}{'-1MiB' if memory else ''}" / "tiny.gguf"
                got.parent.mkdir(parents=True)
                r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(got), "--outtype", outtype, "-q", *memory],
                                   capture_output=True, text=True)
                if check(r.returncode == 0, f"{case} from {src.name}: dcpctl exit {r.returncode}: {r.stderr[-2000:]}"):
                    before = len(TALLY.failures)
                    gt.compare(f"{case} from {src.name}", want, got)
                    check(len(TALLY.failures) == before, f"{case} from {src.name}: compared")
            print(f"{case}: {'ok' if not TALLY.failures else 'FAILED'}", flush=True)
        for name, says in REFUSED.items():
            hf = tmp / name / "hf" / "tiny"
            source(name, base, hf, dcpctl)
            out = tmp / f"{name}.gguf"
            r = subprocess.run([dcpctl, "consolidate", str(hf), "-o", str(out)], capture_output=True, text=True)
            check(r.returncode == 5 and says in r.stderr and not out.exists(),
                  f"{name}: exit {r.returncode}, want 5 naming {says!r}, nothing written: {r.stderr[-600:]}")
    return TALLY.summary("gguf-lowbit", min_checks=CHECKS_PER_CASE * len(cases) + len(REFUSED))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
