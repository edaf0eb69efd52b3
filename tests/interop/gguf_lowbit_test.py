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
  fp8-ue8m0       the same with scale_fmt ue8m0 (power-of-two scales saved as F8_E8M0, DeepSeek-V3.1's)
  ds-fp8-block    fp8-block of gguf_test.py's tiny DeepSeek-V3 (MLA's kv_b split of the dequantized weight,
                  shared and routed experts one tensor each; the router, no nn.Linear, left alone)
  ct-fp8-channel  compressed-tensors 0.20.0's FP8_DYNAMIC (float-quantized, strategy channel), model-free
                  as llm-compressor writes it (tests/interop/quant_producers.py's ct_quantize)
  ct-fp8-block    compressed-tensors 0.20.0's FP8_BLOCK (float-quantized, strategy block 128 x 128)
  ct-nvfp4        compressed-tensors 0.20.0's NVFP4A16 (nvfp4-pack-quantized, global scales fused over q/k/v
                  and gate/up as llm-compressor fuses them): passed through as GGUF NVFP4 (type 40), each
                  weight's `.scale` (1 / weight_global_scale), Q/K rows permuted, first in the file
  dcpctl-nvfp4    dcpctl's own `consolidate --quantize nvfp4` of the same model (compressed-tensors' form)
  dcpctl-nvfp4-modelopt  ... `--quantize nvfp4 --quantize-format modelopt` (ModelOpt's W4A16_NVFP4, with
                  hf_quant_config.json: `.scale` from weight_scale_2, the prec_a4 keys)
  moe-ct-nvfp4    NVFP4A16 of a tiny Qwen3-MoE (4 experts, 64-wide rows): each layer's experts stacked per
                  projection (_flush_nvfp4_experts) with their `.scale` [4]
llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36's) writes tiny.gguf from the folder (its
dequant_model: float32(weight) * float32(scale); its _generate_nvfp4_tensors); dcpctl writes it from
the folder and from a DCP checkpoint of the same tensors (torch.distributed.checkpoint.save, the
config and tokenizer beside it), the latter also at --max-memory 1MiB (windows of rows, far below a
tensor): each equal to the converter's byte for byte (gguf_test.py's compare names the key or tensor
that differs).

MXFP4 (mxfp4_checks), which the converter refuses: compressed-tensors 0.20.0's MXFP4A16
(`ct-mxfp4`) and dcpctl's own `--quantize mxfp4 --quantize-format compressed-tensors`
(`dcpctl-mxfp4`), written by dcpctl as ggml's MXFP4 and checked against compressed-tensors' own
dequantization, the converter's file of the dequantized model, and llama.cpp running it.

Refusals, each exit 5 naming what and writing nothing: compressed-tensors FP8 of strategy tensor
(the converter asserts channel or block) and W4A16 (pack-quantized, not read by dcpctl yet).

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
    import numpy as np
    import torch
    import compressed_tensors  # noqa: F401
    import gguf_test as gt  # imports gguf, transformers, sentencepiece, gguf_oracle or skips
    import quant_producers as qp
    import gguf_oracle
except ImportError as e:
    skip_or_fail(f"the virtualenv lacks {e.name} (tools/requirements.txt)")

TALLY = gt.TALLY
check = TALLY.check

CASES = ["fp8-block:q8_0", "fp8-block:bf16", "fp8-ue8m0:f16", "ds-fp8-block:q8_0", "ct-fp8-channel:f16", "ct-fp8-block:q8_0", "ct-nvfp4:f16", "ct-nvfp4:q8_0",
         "dcpctl-nvfp4:bf16", "dcpctl-nvfp4-modelopt:f16", "moe-ct-nvfp4:f16"]
REFUSED = {"ct-fp8-tensor": "strategy 'tensor'", "ct-w4a16": "pack-quantized"}
# Per case: the converter's exit, verify of its file, dcpctl's exit and comparison from the folder,
# from DCP and from DCP at --max-memory 1MiB.
CHECKS_PER_CASE = 8
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def fp8_block(base: Path, out: Path, scale_fmt: str | None = None) -> None:
    """transformers' FineGrainedFP8 of every 2-D Linear weight of `base` (not the embeddings, not the
    head: modules_to_not_convert's lm_head, not a MoE router: DeepSeek's is no nn.Linear), as
    from_pretrained(quantization_config=...) quantizes; `scale_fmt` "ue8m0": power-of-two scales
    saved as F8_E8M0 (DeepSeek-V3.1's)."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.finegrained_fp8 import Fp8Quantize
    from transformers.utils.quantization_config import FineGrainedFP8Config
    qc = FineGrainedFP8Config(weight_block_size=(32, 32), **({"scale_fmt": scale_fmt} if scale_fmt else {}))

    class Q:
        quantization_config = qc

    op = Fp8Quantize(Q())
    sd = {}
    linear = 0
    for k, v in load_file(base / "model.safetensors").items():
        if k.endswith(".weight") and v.dim() == 2 and "embed" not in k and "lm_head" not in k and not k.endswith("mlp.gate.weight"):
            sd.update(op._quantize_one(k, v))
            linear += 1
        else:
            sd[k] = v
    scales = [k for k in sd if k.endswith("_scale_inv")]
    want = torch.float8_e8m0fnu if scale_fmt == "ue8m0" else torch.float32
    # (_quantize_one leaves a weight whose rows are not whole blocks as it is: DeepSeek's kv_a_proj_with_mqa here)
    if len(scales) < 14 or any(sd[k[:-len("_scale_inv")]].dtype != torch.float8_e4m3fn or sd[k].dtype != want
                                                    for k in scales):
        raise AssertionError(f"transformers quantized {len(scales)} of {linear} Linear weights (not 14 or more) to float8_e4m3fn with {want} scales")
    out.mkdir(parents=True)
    save_file(sd, out / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((base / "config.json").read_text())
    cfg["quantization_config"] = qc.to_dict()
    (out / "config.json").write_text(json.dumps(cfg, indent=2))


# The MoE sources (moe-*): gguf_test.py's tiny Qwen3-MoE with 64-wide expert rows (NVFP4's 64-value
# super-blocks), 4 experts saved one tensor each; their DCP checkpoint holds the folder's tensors as
# they are (transformers would load the quantized model otherwise).
# ds-*: gguf_test.py's tiny DeepSeek-V3 (MLA: the kv_b split of a dequantized weight; shared and
# routed experts), likewise.
BASES = {"moe": "qwen3moe64", "ds": "deepseek2"}
gt.ARCHS["qwen3moe64"] = (gt.transformers.Qwen3MoeConfig, "qwen2", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64))

SCHEMES = {"ct-fp8-channel": "fp8-channel", "ct-fp8-block": "fp8-block", "ct-fp8-tensor": "fp8-tensor", "ct-w4a16": "w4a16-g32",
           "ct-nvfp4": "nvfp4a16", "ct-mxfp4": "mxfp4a16",
           "moe-ct-nvfp4": "nvfp4a16"}


# dcpctl's own quantized outputs (consolidate --quantize ...), each byte for byte its producer's
# (compressed-tensors 0.20.0, ModelOpt 0.47.0: codecs-read).
DCPCTL_SOURCES = {"dcpctl-nvfp4": ["nvfp4"], "dcpctl-nvfp4-modelopt": ["nvfp4", "--quantize-format", "modelopt"],
                  "dcpctl-mxfp4": ["mxfp4", "--quantize-format", "compressed-tensors"]}


def plain_dcp(hf: Path, out: Path) -> None:
    """A DCP checkpoint of the folder's tensors as saved, its config and tokenizer beside."""
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    out.mkdir(parents=True)
    dcp.save(load_file(hf / "model.safetensors"), checkpoint_id=str(out), no_dist=True)
    for f in ("config.json", *TOKENIZER_FILES):
        shutil.copy(hf / f, out / f)


def source(name: str, base: Path, out: Path, dcpctl: str) -> None:
    if name in ("fp8-block", "ds-fp8-block"):
        fp8_block(base, out)
    elif name == "fp8-ue8m0":
        fp8_block(base, out, "ue8m0")
    elif name in DCPCTL_SOURCES:
        out.parent.mkdir(parents=True)
        how = DCPCTL_SOURCES[name]
        r = subprocess.run([dcpctl, "consolidate", str(base), "-o", f"{out}/", "--quantize", *how, "-q"], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"dcpctl --quantize nvfp4: exit {r.returncode}: {r.stderr[-1000:]}")
    else:
        qp.ct_quantize(base, out, SCHEMES[name])
    for f in TOKENIZER_FILES:
        shutil.copy(base / f, out / f)
    if name.startswith("moe-"):  # the experts are there, quantized one tensor each
        experts = [k for k in qp.folder_tensors(out) if ".experts." in k and k.endswith("weight_packed")]
        if len(experts) != 4 * 3 * 2:
            raise AssertionError(f"{name}: {len(experts)} packed experts, not 4 x 3 x 2 layers")


# gguf-py's names of the tiny Llama's Linear weights (LlamaModel's table) -> the Hugging Face module.
LINEAR = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
# Per MXFP4 source: dcpctl's exit from the folder and from DCP, the two files equal, the 14 MXFP4
# tensors (their dequantization checked with them), the rest against the converter; and for the
# first, llama.cpp's logits.
CHECKS_PER_MXFP4 = 5
MXFP4_SOURCES = ("ct-mxfp4", "dcpctl-mxfp4")
MXFP4_BOUND = 0.2  # measured 0.052 (2026-11-29)


def llama_scores(lc, path: Path) -> np.ndarray:
    """llama.cpp's float32 logits at every position of PROMPT (its own tokens, BOS first)."""
    llm = lc.Llama(model_path=str(path), n_ctx=64, n_batch=64, logits_all=True, verbose=False, n_threads=2,
                   n_threads_batch=2, type_k=0, type_v=0)
    try:
        ids = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)
        llm.eval(ids)
        return np.array(llm.scores[: len(ids)], dtype=np.float32)
    finally:
        llm.close()


def mxfp4_checks(dcpctl: str, name: str, base: Path, tmp: Path, run_llama: bool) -> None:
    """compressed-tensors' MXFP4 on a Llama, which the converter refuses: dcpctl writes each Linear
    weight as ggml's MXFP4 (type 39), nothing dequantized. Checked: the converter does refuse it;
    dcpctl's files from the folder and from DCP are equal; gguf-py's dequantization of every MXFP4
    tensor equals compressed-tensors' own dequantization of the source (its
    CompressedTensorsDequantizer, float32; q/k rows permuted as LlamaModel.permute) bit for bit;
    every other tensor and key equals the converter's file of that dequantized model (but
    general.file_type, 38 here); llama.cpp runs the file, its logits within a bound of its logits on
    the dequantized model's F32 file (ggml's MXFP4 dot product rounds the activations to Q8_0)."""
    import gguf
    from safetensors.torch import save_file
    hf, dcp_dir = tmp / name / "hf" / "tiny", tmp / name / "dcp"
    source(name, base, hf, dcpctl)
    gt.dcp_of(hf, dcp_dir)
    r = gguf_oracle.convert(hf, tmp / name / "converter" / "tiny.gguf", ["--outtype", "f16"])
    print(f"{name}: the converter exits {r.returncode}: {r.stderr.strip().splitlines()[-1:] if r.stderr else ''}")
    files = []
    for src in (hf, dcp_dir):
        got = tmp / name / f"from-{src.name}" / "tiny.gguf"
        got.parent.mkdir(parents=True)
        r = subprocess.run([dcpctl, "consolidate", str(src), "-o", str(got), "--outtype", "f16", "-q"], capture_output=True, text=True)
        if check(r.returncode == 0, f"{name} from {src.name}: dcpctl exit {r.returncode}: {r.stderr[-2000:]}"):
            files.append(got)
    if len(files) != 2:
        return
    check(files[0].read_bytes() == files[1].read_bytes(), f"{name}: the files from the folder and from DCP differ")
    # compressed-tensors' own dequantization of the source.
    ref = qp.ct_reference(hf, torch.float32)
    cfg = json.loads((hf / "config.json").read_text())
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    mx = {n: t for n, t in gt.fields(files[0])[1].items() if t[0] == "MXFP4"}
    bad = []
    for name_, (_, _, data) in mx.items():
        blk, short = name_.split(".")[1], name_.split(".")[2]
        want = ref[f"model.layers.{blk}.{LINEAR[short]}.weight"].float()
        if short in ("attn_q", "attn_k"):
            n = heads if short == "attn_q" else kv
            want = want.reshape(n, 2, want.shape[0] // n // 2, *want.shape[1:]).swapaxes(1, 2).reshape(want.shape)
        got = gguf.quants.dequantize(np.frombuffer(data, dtype=np.uint8), gguf.GGMLQuantizationType.MXFP4).reshape(want.shape)
        # Equal values (ggml's E2M1 table has one zero: compressed-tensors' -0.0 reads back as +0.0).
        if got.dtype != np.float32 or not np.array_equal(got, want.numpy()):
            bad.append((name_, float(np.abs(got - want.numpy()).max())))
    check(len(mx) == 14 and not bad, f"{name}: {len(mx)} MXFP4 tensors (want 14), dequantized unlike compressed-tensors: {bad}")
    # The rest: the converter's file of the dequantized model.
    plain = tmp / name / "dequantized" / "tiny"
    plain.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in ref.items()}, plain / "model.safetensors", metadata={"format": "pt"})
    cfg.pop("quantization_config")
    (plain / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in TOKENIZER_FILES:
        shutil.copy(base / f, plain / f)
    want = tmp / name / "dequantized.gguf"
    r = gguf_oracle.convert(plain, want, ["--outtype", "f32"])
    if not check(r.returncode == 0, f"{name}: the converter on the dequantized model failed: {r.stderr[-1500:]}"):
        return
    wkv, wts = gt.fields(want)
    gkv, gts = gt.fields(files[0])
    # F32 there, F16 here: compare the file at f16 too for the tensors that are not MXFP4.
    want16 = tmp / name / "dequantized16.gguf"
    gguf_oracle.convert(plain, want16, ["--outtype", "f16"])
    _, wts16 = gt.fields(want16)
    diffs = [k for k in wkv if k != "general.file_type" and wkv[k] != gkv.get(k)] + [k for k in gkv if k not in wkv]
    diffs += [n for n, v in gts.items() if v[0] != "MXFP4" and wts16.get(n) != v]
    diffs += [n for n in wts if n not in gts] + ([] if list(gts)[14:] == [n for n in wts16 if n not in set(mx)] else ["order"])
    check(not diffs and gkv["general.file_type"][1] == 38, f"{name}: against the converter's file of the dequantized model: {diffs[:10]}, "
                                                            f"file_type {gkv['general.file_type'][1]}")
    # llama.cpp runs it (the first source only: a second costs CI seconds and checks the same code).
    if not run_llama:
        return
    if not (gguf_oracle.build_dir() / "built").exists():
        check(False, "llama-cpp-python is not built (tools/dev.sh setup runs tools/gguf_oracle.py build)")
        return
    lc = gguf_oracle.llama_cpp()
    a, b = llama_scores(lc, files[0]), llama_scores(lc, want)
    err = float(np.abs(a - b).max()) / float(b.std())
    print(f"{name}: llama.cpp's logits on the MXFP4 file vs the dequantized F32 file: max |diff| {err:.4f} of their std, "
          f"argmax equal at {int((a.argmax(-1) == b.argmax(-1)).sum())}/{len(b)} positions")
    check(np.isfinite(a).all() and err < MXFP4_BOUND, f"{name}: llama.cpp's logits off by {err:.4f} of their std (bound {MXFP4_BOUND})")


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
            if name not in SCHEMES and name not in DCPCTL_SOURCES and name not in ("fp8-block", "fp8-ue8m0", "ds-fp8-block"):
                check(False, f"{case}: no such source")
                continue
            hf, dcp_dir = tmp / name / "hf" / "tiny", tmp / name / "dcp"
            if not hf.exists():
                moe = name.split("-")[0] in BASES
                arch = BASES.get(name.split("-")[0])
                if moe and not (tmp / f"base-{arch}").exists():
                    gt.tiny_model(f"{arch}-bf16", tmp / f"base-{arch}" / "tiny")
                source(name, tmp / f"base-{arch}" / "tiny" if moe else base, hf, dcpctl)
                if moe:
                    plain_dcp(hf, dcp_dir)
                else:
                    gt.dcp_of(hf, dcp_dir)
            want = tmp / case.replace(":", "-") / "converter" / "tiny.gguf"
            r = gguf_oracle.convert(hf, want, ["--outtype", outtype])
            if not check(r.returncode == 0, f"{case}: the converter failed: {r.stderr[-2000:]}"):
                continue
            # The file passes verify: its tensors (NVFP4's .scale / .input_scale among them) against
            # the architecture's table (gguf/arch_check.h, llama-model.cpp's generic scale pass).
            r = subprocess.run([dcpctl, "verify", str(want)], capture_output=True, text=True)
            check(r.returncode == 0 and "gguf-arch-not-checked" not in r.stdout,
                  f"{case}: verify of the converter's file: exit {r.returncode}: {r.stdout[-1500:]} {r.stderr[-500:]}")
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
        for name in MXFP4_SOURCES:
            mxfp4_checks(dcpctl, name, base, tmp, run_llama=name == MXFP4_SOURCES[0])
        for name, says in REFUSED.items():
            hf = tmp / name / "hf" / "tiny"
            source(name, base, hf, dcpctl)
            out = tmp / f"{name}.gguf"
            r = subprocess.run([dcpctl, "consolidate", str(hf), "-o", str(out)], capture_output=True, text=True)
            check(r.returncode == 5 and says in r.stderr and not out.exists(),
                  f"{name}: exit {r.returncode}, want 5 naming {says!r}, nothing written: {r.stderr[-600:]}")
    return TALLY.summary("gguf-lowbit", min_checks=CHECKS_PER_CASE * len(cases) + CHECKS_PER_MXFP4 * len(MXFP4_SOURCES) + 1 + len(REFUSED))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
