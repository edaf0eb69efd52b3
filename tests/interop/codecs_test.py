#!/usr/bin/env python3
"""Quantized folders of every producer read by dcpctl, checked against the producer's own
dequantization bit for bit (issue 57; the folders and references: quant_producers.py and
tests/fixtures/layouts/make_modelopt.py).

    codecs_test.py DCPCTL FIXTURES [--only NAME[,NAME...]] [--report]

One Python launch for every case (the imports of torch, transformers and compressed-tensors are
most of its time). For each folder:

  - `consolidate F -o OUT/ --dtype fp32` and `--dtype bf16`: every quantized weight equals the
    reference in that dtype, byte for byte (compressed-tensors 0.20.0's CompressedTensorsDequantizer,
    ModelOpt 0.47.0's QTensor.dequantize as recorded in dequantized.json, transformers 5.23's
    Fp8Dequantize._dequantize_one), every other tensor is the source's cast as torch's Tensor.to()
    casts it, no scale, packed weight, zero point, shape or global scale is left, and config.json
    has no quantization_config;
  - `inspect --json F` and `verify F` describe the folder (exit 0; the scheme named);

and the fail-closed cases: a scheme no codec explains, a config naming a format its tensors do not
have, a DeepSeek-V4 FP8 weight without its `.scale`: exit 5 under --dtype, naming the scheme and
the tensor, nothing written.

`diff SRC OUT` of each quantized folder against the model it was written from (issue 57 item 4,
check_diff): compressed-tensors' own folders, ModelOpt's committed ones and every `--quantize`
export exit 0, each quantized weight compared within its codec's bound (`bound` codec, the codec
named, `inexact` counted, in --json and text); compressed-tensors' asymmetric INT4 (no bound) exit 5
naming the weight; and each `--quantize` form of the dense model damaged on a copy (an element one
step of its grid toward zero, from a value at or beyond it; a block's scale doubled; NVFP4's global
scale inverted) exits 1 naming the weight.

`--quantize w4a16` (compressed-tensors' W4A16, and --quantize-group 32) is checked as the other writes
(check_writes: byte for byte against compressed-tensors' own compressor, its config, read back,
verified, diffed, damaged, a DCP output through reshard), and transformers' from_pretrained of it
gives the logits of the model holding dcpctl's read-back weights (check_w4a16_logits); --quantize-group
with another scheme, not a multiple of 8, or without --quantize: exit 2.

`--report` prints each case's outcome and carries on (what the current binary does with each
folder); without it the first failure of a case is reported and the test fails at the end.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from testlib import EXIT_INVALID, EXIT_OK, EXIT_UNSUPPORTED, EXIT_USAGE, check, expect_rc, hf_loaded, run, summary  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import quant_producers as qp  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
QUANT_SUFFIXES = ("weight_scale", "weight_scale_inv", "weight_scale_2", "weight_global_scale", "weight_packed",
                  "weight_shape", "weight_zero_point", "weight_g_idx", "input_scale", "input_global_scale", ".scale",
                  "_amax", "_outer_scale_denominator")


def quant_aux(k: str, source: dict) -> bool:
    """Whether `k` is a quantization tensor a decode consumes: a scale, a packed weight's parts, not a
    module's own parameter of the same tail (Inkling's `q_l2_clip.scale`; DeepSeek-V4's `X.scale`
    is a scale only beside `X.weight`)."""
    if k.endswith(".scale"):
        return k[:-6] + ".weight" in source
    return k.endswith(QUANT_SUFFIXES)


def out_tensors(d: Path) -> dict:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                                                                      b.contiguous().reshape(-1).view(torch.uint8))


def sha_f32(t: torch.Tensor) -> str:
    return hashlib.sha256(t.to(torch.float32).contiguous().numpy().tobytes()).hexdigest()


class Case:
    def __init__(self, name: str, folder: Path, scheme: str, quantized: set, want: dict | None = None,
                 digests: dict | None = None, source: dict | None = None, partial_model: bool = False,
                 src: Path | None = None):
        self.name, self.folder, self.scheme = name, folder, scheme
        self.src = src  # the unquantized folder it was written from, where there is one
        # The folder holds the codec's layout but not every tensor the model class defines (the
        # DeepSeek-V4 layout written after transformers' reading code: no hc_head, no compressor).
        # Its exports go to one .safetensors file, which the model schema does not judge, and verify
        # must name exactly the schema's key problems (exit 3) and nothing of the codec.
        self.partial_model = partial_model
        self.quantized = quantized  # weight names the reference dequantizes
        self.want = want or {}  # dtype word -> {name: tensor} (the reference)
        self.digests = digests or {}  # name -> float32 sha256 (ModelOpt's, recorded)
        self.source = source or {}  # every tensor as stored
        self.verify_warning = None  # the one warning code verify names (exit 0); None: no warning asked
        # A float32 tensor of a bfloat16 model may stay float32 (the ones transformers keeps so; the
        # case's from_pretrained comparison holds the export to transformers' own load).
        self.keeps_float32 = False


# The folders dcpctl reads (their codecs are in src/view/codecs/); every other one is refused under
# --dtype, naming its scheme (READ_REFUSED's word) and one of its tensors, nothing written.
READS = {f"ct-{s}-{m}" for s in qp.CT_SCHEMES for m in ("dense", "moe")} | {"ct-w4a16-top-format"} | {
    "modelopt_nvfp4", "modelopt_nvfp4_moe", "modelopt_nvfp4_mla", "modelopt_fp8", "modelopt_mxfp8", "modelopt_fp8_pb_wo",
    "modelopt_mixed",
    "dsv4-i8", "dsv4-f4", "dsv41-mxfp8", "dsv41-fp8-experts", "inkling2-loop", "inkling2-loop-text"}


def refused_word(case: "Case") -> str:
    if case.name.startswith("ct-"):
        return "compressed-tensors"
    if case.name.startswith("modelopt"):
        return "modelopt"
    return "expert_dtype 'fp4'"


def check_copy(dcpctl: str, case: "Case", work: Path) -> None:
    """Without --dtype the folder is copied as saved: exit 0, every tensor byte for byte."""
    r = run(dcpctl, "consolidate", case.folder, "-o", f"{work / (case.name + '-copy')}/", "-q")
    if expect_rc(r, EXIT_OK, f"{case.name}: without --dtype it is copied as saved"):
        got = out_tensors(work / (case.name + "-copy"))
        check(all(k in got and same_bytes(got[k], v) for k, v in case.source.items()),
              f"{case.name}: the copy holds every tensor byte for byte")


def check_refused(dcpctl: str, case: "Case", work: Path, report: bool) -> None:
    for word in DTYPES:
        out = work / f"{case.name}-{word}"
        target = f"{out}.safetensors" if case.partial_model else f"{out}/"
        r = run(dcpctl, "consolidate", case.folder, "-o", target, "--dtype", word, "-q")
        what = f"{case.name}: consolidate --dtype {word} (no codec reads it yet)"
        if report:
            print(f"  {what}: exit {r.returncode} {r.stderr.strip()[-200:]}")
        named = [k for k in case.source if f"'{k}'" in r.stderr]
        check(r.returncode == EXIT_UNSUPPORTED and refused_word(case) in r.stderr and named,
              f"{what}: exit {r.returncode} (wanted 5) naming {refused_word(case)!r} and a tensor: {r.stderr.strip()[-300:]}")
        check(not out.exists(), f"{what}: nothing written")
    r = run(dcpctl, "consolidate", case.folder, "-o", f"{work / (case.name + '-q')}/", "--quantize", "fp8-block", "-q")
    check(r.returncode == EXIT_UNSUPPORTED and refused_word(case) in r.stderr,
          f"{case.name}: --quantize fp8-block of it: exit {r.returncode} (wanted 5): {r.stderr.strip()[-300:]}")
    check_copy(dcpctl, case, work)


def check_read(dcpctl: str, case: Case, work: Path, report: bool) -> None:
    if case.name not in READS:
        check_refused(dcpctl, case, work, report)
        return
    for word, dtype in DTYPES.items():
        out = work / f"{case.name}-{word}"
        target = f"{out}.safetensors" if case.partial_model else f"{out}/"
        r = run(dcpctl, "consolidate", case.folder, "-o", target, "--dtype", word, "-q")
        what = f"{case.name}: consolidate --dtype {word}"
        if report:
            print(f"  {what}: exit {r.returncode} {r.stderr.strip()[-200:]}")
        if not expect_rc(r, EXIT_OK, what):
            continue
        got = load_file(target) if case.partial_model else out_tensors(out)
        left = sorted(k for k in got if quant_aux(k, case.source))
        check(not left, f"{what}: no scale or packed tensor left: {left[:5]}")
        if not case.partial_model:
            cfg = json.loads((out / "config.json").read_text())
            check("quantization_config" not in cfg, f"{what}: config.json keeps quantization_config")
        bad = []
        for k in sorted(case.quantized):
            g = got.get(k)
            if g is None:
                bad.append(f"{k} missing")
                continue
            if word in case.want:
                if not same_bytes(g, case.want[word][k]):
                    d = (g.float() - case.want[word][k].float()).abs().max().item() if g.shape == case.want[word][k].shape else "shape"
                    bad.append(f"{k} {g.dtype} {tuple(g.shape)} off by {d}")
            elif word == "fp32" and case.digests:
                if g.dtype != torch.float32 or sha_f32(g) != case.digests[k]:
                    bad.append(f"{k} {g.dtype}: not ModelOpt's float32 bytes")
        check(not bad, f"{what}: quantized weights equal the reference: {bad[:4]} ({len(bad)} of {len(case.quantized)})")
        plain = [k for k in case.source if not quant_aux(k, case.source) and k not in case.quantized
                 and k.rsplit(".", 1)[0] + ".weight" not in case.quantized]
        wrong = []
        for k in plain:
            src = case.source[k]
            want = src.to(dtype) if src.is_floating_point() else src
            kept = case.keeps_float32 and src.dtype == torch.float32 and k in got and same_bytes(got[k], src)
            if k not in got or not (same_bytes(got[k], want) or kept):
                wrong.append(k)
        check(not wrong, f"{what}: the unquantized tensors are the source's cast: {wrong[:4]}")
    if case.src is not None:
        if "pack-quantized" == case.scheme and "-asym" in case.name:  # asymmetric INT4: no bound implemented
            r = run(dcpctl, "diff", case.src, case.folder)
            check(r.returncode == EXIT_UNSUPPORTED and "compressed-tensors" in r.stderr and ".weight" in r.stderr,
                  f"{case.name}: diff SRC F (no bound for its format): exit {r.returncode} (wanted 5) naming it: "
                  f"{r.stderr.strip()[-300:]}")
        else:
            check_diff(dcpctl, case.src, case.folder, case.name, case.quantized)
    r = run(dcpctl, "inspect", "--json", case.folder)
    if expect_rc(r, EXIT_OK, f"{case.name}: inspect --json"):
        check(case.scheme in r.stdout, f"{case.name}: inspect names the scheme {case.scheme!r}")
    r = run(dcpctl, "inspect", case.folder)
    if expect_rc(r, EXIT_OK, f"{case.name}: inspect"):
        check(case.scheme in r.stdout, f"{case.name}: inspect's text names the scheme {case.scheme!r}")
    r = run(dcpctl, "verify", case.folder)
    if report:
        print(f"  {case.name}: verify exit {r.returncode}")
    if case.partial_model:
        if expect_rc(r, EXIT_INVALID, f"{case.name}: verify (a partial model)"):
            codes = set(re.findall(r"^\s*\[([a-z0-9-]+)\]", r.stdout + r.stderr, re.M))
            check(codes and codes <= {"schema-key-missing", "schema-key-unexpected"},
                  f"{case.name}: verify names only the model schema's key problems, not the codec's: {sorted(codes)}")
        return
    if case.verify_warning:
        # llm-compressor 0.14 leaves each per-expert gate/up unfused (quant_producers.py): vLLM
        # decodes an expert's fused w13 with gate_proj's global scale, warning "Accuracy may be
        # affected"; verify warns the same (exit 0), naming the experts
        codes = set(re.findall(r"\[([a-z0-9-]+)\]", r.stdout + r.stderr))
        check(r.returncode == EXIT_OK and codes == {case.verify_warning} and ".mlp.experts." in r.stdout,
              f"{case.name}: verify exit {r.returncode} (wanted 0) warning only [{case.verify_warning}] of experts: "
              f"{sorted(codes)}")
        # and a copy of it as saved is written (the export's own check warns, as verify does)
        check_copy(dcpctl, case, work)
        return
    expect_rc(r, EXIT_OK, f"{case.name}: verify")


def check_diff(dcpctl: str, src: Path, out: Path, what: str, quantized, codec: str | None = None) -> None:
    """`diff SRC OUT` of a quantized folder against its source: exit 0, each quantized weight under its
    codec's bound (named, with its inexact count), in --json and text."""
    r = run(dcpctl, "diff", src, out, "--json")
    doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    if not check(r.returncode == EXIT_OK and doc.get("same") is True,
                 f"{what}: diff SRC OUT exit {r.returncode} (wanted 0): "
                 f"{[(k['key'], k.get('differing'), k.get('codec')) for k in doc.get('keys', []) if k['status'] != 'identical'][:4]} "
                 f"{r.stderr.strip()[-300:]}"):
        return
    keys = {k["key"]: k for k in doc["keys"]}
    bounded = {k for k, v in keys.items() if v.get("bound") == "codec"}
    check(bounded == set(quantized), f"{what}: diff compares exactly the quantized weights under their codec's bound: "
                                     f"{sorted(bounded ^ set(quantized))[:4]}")
    names = {keys[k].get("codec") for k in bounded}
    check(all(n for n in names) and (codec is None or names == {codec}) and all(keys[k].get("bound_rule") for k in bounded),
          f"{what}: the codec named for each ({names}, wanted {codec})")
    check(sum(keys[k]["inexact"] for k in bounded) > 0, f"{what}: inexact values counted")
    t = run(dcpctl, "diff", src, out)
    check(t.returncode == EXIT_OK and "within their codec's bound" in t.stdout and all(n in t.stdout for n in names),
          f"{what}: diff's text names the codec's bound: {t.stdout[-400:]}")


def _step_toward_zero(t: torch.Tensor, flat: int, packed: bool) -> torch.Tensor:
    """Element `flat` of a weight as stored one step of its grid toward zero: an E2M1 nibble (packed two a
    byte, the low first) or an e4m3 byte, its magnitude code less one; an INT4 of int32 words (compressed-
    tensors' pack-quantized: the bytes of little-endian words, two values a byte, the low first, stored + 8)
    one integer nearer 0."""
    t = t.clone()
    b = t.view(torch.uint8).reshape(-1)
    if t.dtype == torch.int32:
        byte, high = flat // 2, flat % 2
        v = int(b[byte])
        q = ((v >> 4) if high else (v & 15)) - 8
        assert q, "a zero code"
        u = q - (1 if q > 0 else -1) + 8
        b[byte] = ((v & 15) | (u << 4)) if high else ((v & 0xF0) | u)
    elif packed:
        byte, high = flat // 2, flat % 2
        v = int(b[byte])
        nib = (v >> 4) if high else (v & 15)
        assert nib & 7, "a zero code"
        nib -= 1
        b[byte] = ((v & 15) | (nib << 4)) if high else ((v & 0xF0) | nib)
    else:
        assert int(b[flat]) & 0x7F, "a zero code"
        b[flat] = int(b[flat]) - 1
    return t


def _scale_doubled(t: torch.Tensor, flat: int) -> torch.Tensor:
    """One stored scale doubled: an E8M0 byte (uint8) one more, an e4m3 byte's exponent one more, a float
    scale times two."""
    t = t.clone()
    if t.dtype == torch.uint8:
        t.view(-1)[flat] += 1
    elif t.dtype == torch.float8_e4m3fn:
        b = t.view(torch.uint8).reshape(-1)
        b[flat] = int(b[flat]) + 8
    else:
        t.view(-1)[flat] *= 2
    return t


def check_diff_damaged(dcpctl: str, src: Path, out: Path, what: str, root: Path) -> None:
    """Copies of a quantized export, each damaged one way, against its source: exit 1 naming the weight."""
    from safetensors import safe_open
    stored = out_tensors(out)
    source = out_tensors(src)
    dq_dir = root / (out.name + "-diff-fp32")
    r = run(dcpctl, "consolidate", out, "-o", f"{dq_dir}/", "--dtype", "fp32", "-q")
    if not expect_rc(r, EXIT_OK, f"{what}: --dtype fp32 (to pick the elements to damage)"):
        return
    dq = out_tensors(dq_dir)
    shutil.rmtree(dq_dir)
    meta = {}
    with safe_open(next(out.glob("*.safetensors")), "pt") as f:
        meta = f.metadata()
    w = max(k for k in dq if k.endswith("mlp.down_proj.weight") and k not in stored or k in stored
            and k.endswith("mlp.down_proj.weight") and stored[k].dtype in (torch.uint8, torch.float8_e4m3fn))
    wkey = w[:-7] + ".weight_packed" if w[:-7] + ".weight_packed" in stored else w
    packed = stored[wkey].dtype == torch.uint8  # E2M1 pairs (compressed-tensors' weight_packed, ModelOpt's weight)
    skey = next(k for k in (w + "_scale_inv", w[:-7] + ".weight_scale", w + "_scale") if k in stored)
    x, d = source[w].float().reshape(-1), dq[w].float().reshape(-1)
    # the element whose source value lies nearest its decoded one, at or beyond it: moved one step
    # toward zero it is off by that step (twice the half step) and little more, beyond the bound and
    # within one of twice the half step (what a doubled half_step would let through)
    beyond = torch.where((x.abs() >= d.abs()) & (d != 0), (x.abs() - d.abs()) / d.abs().clamp(min=1e-30), float("inf"))
    if not check(bool(torch.isfinite(beyond.min())), f"{what}: an element to move"):
        return
    flat = int(beyond.argmin())
    scale = stored[skey]
    # the scale of a block holding nonzero values: the one `flat` sees
    rows, cols = source[w].shape
    sr, sc = (scale.shape[0], scale.shape[1]) if scale.dim() == 2 else (1, 1)
    sflat = ((flat // cols) * sr // rows) * sc + (flat % cols) * sc // cols
    damages = [("one element one step of the grid toward zero", wkey, _step_toward_zero(stored[wkey], flat, packed)),
               ("one block's scale doubled", skey, _scale_doubled(scale, sflat))]
    g = w[:-7] + ".weight_global_scale"
    if g in stored:
        damages.append(("the global scale inverted (ModelOpt's direction)", g, 1 / stored[g]))
    for i, (how, key, value) in enumerate(damages):
        bad = root / f"{out.name}-damaged-{i}"
        shutil.copytree(out, bad)
        t = dict(stored)
        t[key] = value
        for f in bad.glob("*.safetensors"):
            f.unlink()
        save_file({k: v.contiguous() for k, v in t.items()}, bad / "model.safetensors", metadata=meta)
        r = run(dcpctl, "diff", src, bad, "--json")
        doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
        changed = [k["key"] for k in doc.get("keys", []) if k["status"] != "identical"]
        check(r.returncode == 1 and changed == [w],
              f"{what}, {how}: diff exit {r.returncode} (wanted 1) naming only {w}: {changed[:4]} {r.stderr.strip()[-200:]}")
        shutil.rmtree(bad)


def ct_cases(root: Path, only: set) -> list:
    cases = []
    dense = qp.tiny_dense(root / "dense")
    moe = qp.tiny_moe(root / "moe")
    for scheme in qp.CT_SCHEMES:
        for src in (dense,) if scheme in qp.CT_DENSE_ONLY else (dense, moe):
            name = f"ct-{scheme}-{src.name}"
            if only and name not in only and scheme not in only:
                continue
            f = qp.ct_quantize(src, root / name, scheme)
            stored = qp.folder_tensors(f)
            want = {w: qp.ct_reference(f, d) for w, d in DTYPES.items()}
            quantized = {k for k in want["fp32"] if k not in stored}
            quantized |= {k for k in stored if k.endswith(".weight") and k[:-7] + ".weight_scale" in stored}
            fmt = json.loads((f / "config.json").read_text())["quantization_config"]["format"]
            cases.append(Case(name, f, fmt, quantized, want=want, source=stored, src=src))
            if scheme == "nvfp4a16" and src.name == "moe":
                cases[-1].verify_warning = "quant-global-scale-unfused"
    return cases


def ct_top_format_case(root: Path, only: set) -> list:
    """W4A16 whose config names the format only at the top (no group's `format`)."""
    name = "ct-w4a16-top-format"
    if only and name not in only:
        return []
    src = root / "dense" if (root / "dense").exists() else qp.tiny_dense(root / "dense")
    f = qp.ct_quantize(src, root / name, "w4a16", group_format=False)
    stored = qp.folder_tensors(f)
    want = {w: qp.ct_reference(f, d) for w, d in DTYPES.items()}
    return [Case(name, f, "pack-quantized", {k for k in want["fp32"] if k not in stored}, want=want, source=stored)]


def refusals(dcpctl: str, root: Path, fixtures: Path, report: bool) -> None:
    """Fail closed: exit 5 (unexplained) or 3 (a scale missing) under --dtype, naming the scheme or the
    tensor, nothing written."""
    cases = []
    src = root / "dense" if (root / "dense").exists() else qp.tiny_dense(root / "dense")
    # a compressed-tensors format no codec explains (the bytes are W4A16's)
    f = qp.ct_quantize(src, root / "ct-unknown", "w4a16")
    cfg = json.loads((f / "config.json").read_text())
    cfg["quantization_config"]["format"] = "marlin-24"
    cfg["quantization_config"]["config_groups"]["group_0"]["format"] = "marlin-24"
    (f / "config.json").write_text(json.dumps(cfg))
    cases.append(("ct format marlin-24", f, {EXIT_UNSUPPORTED}, ["marlin-24", "weight_packed"]))
    # a scale removed from a compressed-tensors NVFP4 folder
    f = qp.ct_quantize(src, root / "ct-noscale", "nvfp4a16")
    t = qp.folder_tensors(f)
    del t["model.layers.1.mlp.up_proj.weight_scale"]
    save_file(t, f / "model.safetensors")
    cases.append(("ct nvfp4 without a weight_scale", f, {3, EXIT_UNSUPPORTED},
                  ["model.layers.1.mlp.up_proj"] if "ct-nvfp4a16-dense" in READS else ["compressed-tensors", "weight"]))
    # a ModelOpt algorithm no codec explains (the bytes are NVFP4's)
    f = root / "mo-unknown"
    shutil.copytree(fixtures / "layouts" / "modelopt_nvfp4" / "ckpt", f)
    for name in ("config.json", "hf_quant_config.json"):
        text = (f / name).read_text().replace('"NVFP4"', '"W4A8_AWQ"')
        (f / name).write_text(text)
    cases.append(("modelopt quant_algo W4A8_AWQ", f, {EXIT_UNSUPPORTED}, ["W4A8_AWQ", "model.layers.0"]))
    # FP8_BLOCK_SCALES: no string of nvidia-modelopt 0.47.0 (its blockwise FP8 exports as fp8_pb_wo)
    f = root / "mo-block-scales"
    shutil.copytree(fixtures / "layouts" / "modelopt_fp8_pb_wo" / "ckpt", f)
    for name in ("config.json", "hf_quant_config.json"):
        (f / name).write_text((f / name).read_text().replace('"fp8_pb_wo"', '"FP8_BLOCK_SCALES"'))
    cases.append(("modelopt quant_algo FP8_BLOCK_SCALES", f, {EXIT_UNSUPPORTED}, ["FP8_BLOCK_SCALES", "model.layers.0"]))
    # MIXED_PRECISION with ggml-packed layers (ModelOpt's development tree writes them: quantized_layers
    # {module: {quant_algo, group_size, block_payload_bytes, packing: "ggml"}}; nvidia-modelopt 0.47.0,
    # the newest release, writes no `packing`): each refused naming the layer's type (the bytes are
    # NVFP4's, the config written as that tree's convert_hf_quant_config_format writes it).
    for algo, group, payload in (("Q8_0", 32, 34), ("IQ2_XS", 256, 74), ("IQ2_XXS", 256, 66)):
        f = root / f"mo-mixed-{algo.lower()}"
        shutil.copytree(fixtures / "layouts" / "modelopt_nvfp4" / "ckpt", f)
        cfg = json.loads((f / "config.json").read_text())
        qc = cfg["quantization_config"]
        ggml = {"quant_algo": algo, "group_size": group, "block_payload_bytes": payload, "packing": "ggml"}
        layers = {"model.layers.0.self_attn.q_proj": {"quant_algo": "NVFP4", "group_size": 16},
                  "model.layers.0.mlp.down_proj": ggml}
        qc.update(quant_algo="MIXED_PRECISION", quantized_layers=layers,
                  config_groups={"group_0": {**qc["config_groups"]["group_0"], "targets": [
                      "model.layers.0.self_attn.q_proj"]}, "group_1": {**ggml, "targets": ["model.layers.0.mlp.down_proj"]}})
        (f / "config.json").write_text(json.dumps(cfg))
        cases.append((f"modelopt MIXED_PRECISION with a {algo} layer packed as ggml", f, {EXIT_UNSUPPORTED},
                      ["MIXED_PRECISION", f"'model.layers.0.mlp.down_proj' is {algo} packed as 'ggml'",
                       "model.layers.0"]))
    # MIXED_PRECISION with a layer of an algorithm no codec reads (W4A8_AWQ), not packed: named too
    f = root / "mo-mixed-awq"
    shutil.copytree(fixtures / "layouts" / "modelopt_mixed" / "ckpt", f)
    cfg = json.loads((f / "config.json").read_text())
    cfg["quantization_config"]["quantized_layers"]["model.layers.0.mlp.up_proj"] = {"quant_algo": "W4A8_AWQ",
                                                                                   "group_size": 128}
    (f / "config.json").write_text(json.dumps(cfg))
    cases.append(("modelopt MIXED_PRECISION with a W4A8_AWQ layer", f, {EXIT_UNSUPPORTED},
                  ["MIXED_PRECISION", "'model.layers.0.mlp.up_proj' is W4A8_AWQ", "model.layers.0"]))
    # hf_quant_config.json alone says ModelOpt (config.json without quantization_config)
    f = root / "mo-sidecar"
    shutil.copytree(fixtures / "layouts" / "modelopt_nvfp4" / "ckpt", f)
    cfg = json.loads((f / "config.json").read_text())
    del cfg["quantization_config"]
    (f / "config.json").write_text(json.dumps(cfg))
    cases.append(("hf_quant_config.json only", f, {EXIT_UNSUPPORTED}, ["hf_quant_config.json", "NVFP4"]))
    # DeepSeek V4.1's Engram table (float8 rows, an E8M0 scale per 32 values of a row): no reader of
    # the pinned versions decodes it (transformers 5.24.0 has no Engram; vLLM 0.33 only on a GPU)
    f = qp.dsv4(root / "dsv41-engram", engram=True)
    cases.append(("DeepSeek V4.1's Engram table", f, {EXIT_UNSUPPORTED}, ["Engram", "'layers.0.engram.embed.weight'"]))
    # Inkling2Loop's stacks beside their scales in a folder whose model_type is not inkling2_loop: no
    # codec applies, and they are not cast (the MXFP8 stack is float8)
    f = root / "ink-other-type"
    if (root / "inkling2-loop").exists():
        shutil.copytree(root / "inkling2-loop", f)
    else:
        qp.inkling2_loop(f)
    cfg = json.loads((f / "config.json").read_text())
    cfg["model_type"] = "inkling2"
    (f / "config.json").write_text(json.dumps(cfg))
    cases.append(("Inkling2Loop stacks under model_type inkling2", f, {EXIT_UNSUPPORTED},
                  ["Inkling2Loop expert stack", "_weight_scale'"]))
    # DeepSeek-V4: an FP8 weight whose X.scale is gone is never cast
    f = qp.dsv4(root / "dsv4-noscale")
    t = qp.folder_tensors(f)
    del t["layers.1.attn.wq_a.scale"]
    save_file(t, f / "model.safetensors")
    cases.append(("DeepSeek-V4 FP8 weight without X.scale", f, {3, EXIT_UNSUPPORTED},
                  ["layers.1.attn.wq_a"] if "dsv4-i8" in READS else ["expert_dtype", "weight"]))
    # verify: a ModelOpt weight_scale removed, a module the config ignores quantized (issue 57: both
    # passed before)
    f = root / "mo-verify-noscale"
    shutil.copytree(fixtures / "layouts" / "modelopt_nvfp4" / "ckpt", f)
    t = qp.folder_tensors(f)
    del t["model.layers.0.self_attn.q_proj.weight_scale"]
    save_file(t, f / "model.safetensors")
    r = run(dcpctl, "verify", f)
    check(r.returncode == 3 and "quant-scale-missing" in r.stdout + r.stderr and "model.layers.0.self_attn.q_proj.weight" in r.stdout + r.stderr,
          f"verify of a ModelOpt folder without a weight_scale: exit {r.returncode} naming the weight: {(r.stdout + r.stderr)[-300:]}")
    f = root / "mo-verify-ignored"
    shutil.copytree(fixtures / "layouts" / "modelopt_nvfp4" / "ckpt", f)
    cfg = json.loads((f / "config.json").read_text())
    cfg["quantization_config"]["ignore"].append("model.layers.0.self_attn.q_proj")
    (f / "config.json").write_text(json.dumps(cfg))
    r = run(dcpctl, "verify", f)
    check(r.returncode == 3 and "quant-excluded-quantized" in r.stdout + r.stderr,
          f"verify of a ModelOpt folder quantizing an ignored module: exit {r.returncode}: {(r.stdout + r.stderr)[-300:]}")
    verify_damaged(dcpctl, root, fixtures, src)
    for what, folder, rcs, names in cases:
        out = root / ("never-" + folder.name)
        r = run(dcpctl, "consolidate", folder, "-o", f"{out}/", "--dtype", "bf16", "-q")
        if report:
            print(f"  refusal {what}: exit {r.returncode} {r.stderr.strip()[-200:]}")
        check(r.returncode in rcs and all(n in r.stderr for n in names),
              f"{what}: exit {r.returncode} (wanted {sorted(rcs)}) naming {names}: {r.stderr.strip()[-300:]}")
        check(not out.exists(), f"{what}: nothing written")


def verify_damaged(dcpctl: str, root: Path, fixtures: Path, src: Path) -> None:
    """verify of quantized folders written by ModelOpt 0.47.0 (committed) and compressed-tensors
    0.20.0 (at test time), each damaged one way: exit 3 with the scale check's code, naming the
    tensor (issue 57 item 4)."""
    def modelopt(case: str, name: str) -> Path:
        f = root / name
        shutil.copytree(fixtures / "layouts" / case / "ckpt", f)
        return f

    def damage(f: Path, edit) -> Path:
        t = qp.folder_tensors(f)
        edit(t)
        save_file({k: v.contiguous() for k, v in t.items()}, f / "model.safetensors", metadata={"format": "pt"})
        return f

    ct_nv = qp.ct_quantize(src, root / "ct-verify-base", "nvfp4a16")
    r = run(dcpctl, "verify", ct_nv)
    expect_rc(r, EXIT_OK, "verify of compressed-tensors' NVFP4A16 dense folder (the base of the damaged copies)")

    def ct(name: str) -> Path:
        f = root / name
        shutil.copytree(ct_nv, f)
        return f
    ct6 = qp.ct_quantize(src, root / "ct6-verify-base", "mxfp6a16")

    def ct6_copy(name: str) -> Path:
        f = root / name
        shutil.copytree(ct6, f)
        return f
    m = "model.layers.0."
    e = "model.layers.0.mlp.experts."
    # compressed-tensors' MXFP6: its E8M0 scale a column short, its packed weight a byte column short
    # (no longer four codes in three bytes); --dtype refuses both too (exit 3 naming the tensor).
    ct6_cut = damage(ct6_copy("ct6-v-cut"), lambda t: t.update(
        {m + "self_attn.v_proj.weight_scale": t[m + "self_attn.v_proj.weight_scale"][:, :-1]}))
    ct6_shape = damage(ct6_copy("ct6-v-shape"), lambda t: t.update(
        {m + "mlp.up_proj.weight_packed": t[m + "mlp.up_proj.weight_packed"][:, :-1]}))
    # ModelOpt's FP8_PB_WO: a block scale cut off, and the scales of another grid ([1, 1, 4, 1] for
    # [2, 1, 2, 1]).
    pb_cut = damage(modelopt("modelopt_fp8_pb_wo", "mo-v-pb-cut"), lambda t: t.update(
        {m + "mlp.down_proj.weight_scale": t[m + "mlp.down_proj.weight_scale"][:, :, :1]}))
    pb_shape = damage(modelopt("modelopt_fp8_pb_wo", "mo-v-pb-shape"), lambda t: t.update(
        {m + "self_attn.o_proj.weight_scale": t[m + "self_attn.o_proj.weight_scale"].reshape(1, 1, 4, 1)}))
    for f, key in ((ct6_cut, m + "self_attn.v_proj.weight_scale"), (ct6_shape, m + "mlp.up_proj.weight_packed"),
                   (pb_cut, m + "mlp.down_proj.weight_scale"), (pb_shape, m + "self_attn.o_proj.weight_scale")):
        r = run(dcpctl, "consolidate", f, "-o", f"{root / (f.name + '-out')}/", "--dtype", "bf16", "-q")
        check(r.returncode == EXIT_INVALID and f"'{key}'" in r.stderr and not (root / (f.name + "-out")).exists(),
              f"consolidate --dtype bf16 of {f.name}: exit {r.returncode} (wanted 3) naming {key}, nothing written: "
              f"{r.stderr.strip()[-300:]}")
    cases = [
        ("a compressed-tensors MXFP6 weight_scale a column short", ct6_cut, "quant-scale-shape",
         m + "self_attn.v_proj.weight_scale"),
        ("a compressed-tensors MXFP6 weight_packed a byte column short", ct6_shape, "quant-scale-shape",
         m + "mlp.up_proj.weight_packed"),
        ("a ModelOpt FP8_PB_WO block scale cut off", pb_cut, "quant-scale-shape", m + "mlp.down_proj.weight_scale"),
        ("ModelOpt FP8_PB_WO scales of another grid", pb_shape, "quant-scale-shape", m + "self_attn.o_proj.weight_scale"),
        ("a ModelOpt MIXED_PRECISION NVFP4 layer's weight_scale a column short", damage(
            modelopt("modelopt_mixed", "mo-v-mixed-nvfp4"), lambda t: t.update(
                {m + "self_attn.k_proj.weight_scale": t[m + "self_attn.k_proj.weight_scale"][:, :-1]})),
         "quant-scale-shape", m + "self_attn.k_proj.weight_scale"),
        ("a ModelOpt MIXED_PRECISION FP8 layer's weight_scale as [1, 1]", damage(
            modelopt("modelopt_mixed", "mo-v-mixed-fp8"), lambda t: t.update(
                {m + "mlp.up_proj.weight_scale": t[m + "mlp.up_proj.weight_scale"].reshape(1, 1)})),
         "quant-scale-shape", m + "mlp.up_proj.weight_scale"),
        ("a ModelOpt weight_scale a column short", damage(modelopt("modelopt_nvfp4_moe", "mo-v-shape"),
         lambda t: t.update({e + "1.up_proj.weight_scale": t[e + "1.up_proj.weight_scale"][:, :-1]})),
         "quant-scale-shape", e + "1.up_proj.weight_scale"),
        ("a ModelOpt weight_scale_2 removed", damage(modelopt("modelopt_nvfp4_moe", "mo-v-noscale2"),
         lambda t: t.pop(m + "self_attn.o_proj.weight_scale_2")),
         "quant-scale-missing", m + "self_attn.o_proj.weight_scale_2"),
        ("a ModelOpt NVFP4 (W4A4) input_scale removed", damage(modelopt("modelopt_nvfp4", "mo-v-noinput"),
         lambda t: t.pop(m + "mlp.down_proj.input_scale")),
         "quant-scale-missing", m + "mlp.down_proj.input_scale"),
        ("a ModelOpt k_proj weight_scale_2 doubled", damage(modelopt("modelopt_nvfp4_moe", "mo-v-unfused"),
         lambda t: t.update({m + "self_attn.k_proj.weight_scale_2": t[m + "self_attn.k_proj.weight_scale_2"] * 2})),
         "quant-global-scale-unfused", m + "self_attn.k_proj.weight_scale_2"),
        ("a ModelOpt kv_a_proj_with_mqa weight_scale_2 doubled (MLA's fused_qkv_a_proj)", damage(
            modelopt("modelopt_nvfp4_mla", "mo-v-unfused-mla"),
            lambda t: t.update({m + "self_attn.kv_a_proj_with_mqa.weight_scale_2":
                                t[m + "self_attn.kv_a_proj_with_mqa.weight_scale_2"] * 2})),
         "quant-global-scale-unfused", m + "self_attn.q_a_proj.weight_scale_2"),
        ("ModelOpt's weight_scale_2 inverted (compressed-tensors' direction)", damage(
            modelopt("modelopt_nvfp4_moe", "mo-v-inverted"),
            lambda t: t.update({k: 1 / v for k, v in t.items() if k.endswith("weight_scale_2")})),
         "quant-global-scale-inverted", m + "self_attn.q_proj.weight_scale_2"),
        ("compressed-tensors' weight_global_scale inverted (ModelOpt's direction)", damage(
            ct("ct-v-inverted"), lambda t: t.update({k: 1 / v for k, v in t.items() if k.endswith("weight_global_scale")})),
         "quant-global-scale-inverted", m + "self_attn.q_proj.weight_global_scale"),
        ("a compressed-tensors weight_global_scale removed", damage(
            ct("ct-v-noglobal"), lambda t: t.pop("model.layers.1.mlp.down_proj.weight_global_scale")),
         "quant-scale-missing", "model.layers.1.mlp.down_proj.weight_global_scale"),
        ("a compressed-tensors gate_proj weight_global_scale changed", damage(
            ct("ct-v-unfused"), lambda t: t.update({m + "mlp.gate_proj.weight_global_scale":
                                                    t[m + "mlp.gate_proj.weight_global_scale"] * 0.5})),
         "quant-global-scale-unfused", m + "mlp."),
        ("a compressed-tensors weight_scale cast to bfloat16", damage(
            ct("ct-v-dtype"), lambda t: t.update({m + "self_attn.v_proj.weight_scale":
                                                  t[m + "self_attn.v_proj.weight_scale"].to(torch.bfloat16)})),
         "quant-scale-shape", m + "self_attn.v_proj.weight_scale"),
    ]
    for what, f, code, key in cases:
        r = run(dcpctl, "verify", f)
        out = r.stdout + r.stderr
        codes = set(re.findall(r"\[([a-z0-9-]+)\]", out))
        check(r.returncode == EXIT_INVALID and codes == {code} and key in out,
              f"verify, {what}: exit {r.returncode} (wanted 3) with only [{code}] naming {key}: {sorted(codes)} {out[-400:]}")


def modelopt_cases(fixtures: Path, only: set) -> list:
    cases = []
    for d in sorted((fixtures / "layouts").glob("modelopt_*")):
        if only and d.name not in only:
            continue
        exp = json.loads((d / "dequantized.json").read_text())
        stored = qp.folder_tensors(d / "ckpt")
        cases.append(Case(d.name, d / "ckpt", exp["quant_algo"], set(exp["float32_sha256"]),
                          digests=exp["float32_sha256"], source=stored, src=d / "src" if (d / "src").exists() else None))
    return cases


def dsv4_cases(root: Path, only: set) -> list:
    cases = []
    # V4's FP4 experts (I8 or F4 codes), V4.1's MXFP8 Linear layers (32x32 blocks) and its FP8 experts
    # (expert_dtype fp8, float32 scales)
    for name, experts, at, block in (("dsv4-i8", "i8", "qc", 128), ("dsv4-f4", "f4", "top", 128),
                                     ("dsv41-mxfp8", "i8", "qc", 32), ("dsv41-fp8-experts", "fp8", "qc", 128)):
        if only and name not in only:
            continue
        f = qp.dsv4(root / name, experts=experts, expert_dtype_at=at, block=block)
        stored = qp.folder_tensors(f)
        want = {w: qp.dsv4_reference(f, d) for w, d in DTYPES.items()}
        quantized = {k for k in stored if k.endswith(".weight") and k[:-7] + ".scale" in stored}
        cases.append(Case(name, f, "fp8", quantized, want=want, source=stored, partial_model=True))
    return cases


INK_CASES = {"inkling2-loop": False, "inkling2-loop-text": True}  # name -> the text model alone


def ink_cases(root: Path, only: set) -> list:
    """Inkling2Loop's NVFP4 and MXFP8 expert stacks beside plain ones (quant_producers.inkling2_loop),
    against transformers 5.24.0's own Inkling2LoopDequantizeExperts over the same bytes."""
    cases = []
    for name, text in INK_CASES.items():
        if only and name not in only:
            continue
        f = qp.inkling2_loop(root / name, text=text)
        stored = qp.folder_tensors(f)
        want = {w: qp.inkling2_loop_reference(f, d) for w, d in DTYPES.items()}
        check(set(want["fp32"]) == {k for k in stored if k.endswith(qp.INK_STACKS) and k + "_scale" in stored}
              and len(want["fp32"]) == 2 * len(qp.INK_LAYOUT), f"{name}: the reference decodes every quantized stack")
        case = Case(name, f, "inkling2-loop", set(want["fp32"]), want=want, source=stored)
        case.keeps_float32 = True
        cases.append(case)
    return cases


def check_ink_loaded(dcpctl: str, root: Path) -> None:
    """transformers 5.24.0's from_pretrained of the quantized folder (its conversion dequantizes the
    stacks, then interleaves w13 into gate_up_proj) and of dcpctl's --dtype export of it: the same
    parameters, bit for bit, nothing missing or unexpected; and each damaged copy of the folder
    exits 3 under --dtype naming the tensor, nothing written, and in verify with the scale check's code."""
    for name, text in INK_CASES.items():
        f = root / name
        if not f.exists():
            continue
        cls = qp.inkling2_loop_class(text)
        for word, dtype in DTYPES.items():
            out = root / f"{name}-load-{word}"
            if not expect_rc(run(dcpctl, "consolidate", f, "-o", f"{out}/", "--dtype", word, "-q"), EXIT_OK,
                             f"{name}: consolidate --dtype {word} for from_pretrained"):
                continue
            a, ia = cls.from_pretrained(f, dtype=dtype, output_loading_info=True)
            b, ib = cls.from_pretrained(out, dtype=dtype, output_loading_info=True)
            hf_loaded(out)
            sa, sb = a.state_dict(), b.state_dict()
            experts = [k for k in sa if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]
            differ = [k for k in sa if k not in sb or not same_bytes(sa[k], sb[k])]
            check(not any(ia.values()) and not any(ib.values()) and len(experts) == 8 and not differ
                  and all(sa[k].dtype == dtype and sa[k].abs().max() > 0 for k in experts),
                  f"{name} --dtype {word}: from_pretrained of dcpctl's export equals transformers' own dequantizing "
                  f"load: {differ[:4]} {ia} {ib}")
    f = root / "inkling2-loop"
    if not f.exists():
        return
    p = "model.llm.layers.{}.mlp.experts."
    damaged = [  # (what, the tensor damaged, how, verify's code)
        ("an NVFP4 w13_weight_scale a column short", p.format(0) + "w13_weight_scale", lambda v: v[..., :-1],
         "quant-scale-shape"),
        ("an MXFP8 w2_weight_scale an expert short", p.format(1) + "w2_weight_scale", lambda v: v[:-1],
         "quant-scale-shape"),
        ("an NVFP4 w2_weight_amax as [E, 1]", p.format(2) + "w2_weight_amax", lambda v: v[:, None], "quant-scale-shape"),
        ("an NVFP4 w13_weight_outer_scale_denominator removed", p.format(2) + "w13_weight_outer_scale_denominator",
         None, "quant-scale-missing"),
    ]
    for i, (what, key, edit, code) in enumerate(damaged):
        d = root / f"inkling2-loop-damaged-{i}"
        shutil.copytree(f, d)
        t = qp.folder_tensors(d)
        if edit is None:
            del t[key]
        else:
            t[key] = edit(t[key]).contiguous()
        save_file(t, d / "model.safetensors", metadata={"format": "pt"})
        out = root / f"{d.name}-out"
        r = run(dcpctl, "consolidate", d, "-o", f"{out}/", "--dtype", "bf16", "-q")
        check(r.returncode == EXIT_INVALID and f"'{key}'" in r.stderr and not out.exists(),
              f"inkling2-loop, {what}: --dtype bf16 exit {r.returncode} (wanted 3) naming {key}, nothing written: "
              f"{r.stderr.strip()[-300:]}")
        r = run(dcpctl, "verify", d)
        said = r.stdout + r.stderr
        check(r.returncode == EXIT_INVALID and f"[{code}]" in said and key in said,
              f"inkling2-loop, {what}: verify exit {r.returncode} (wanted 3) with [{code}] naming {key}: {said[-400:]}")


# --quantize WORD [flags] -> the compressed-tensors scheme of quant_producers it writes (issue 57 item
# 3), and the codec `diff` names for its quantized weights.
WRITES = {
    ("fp8-dynamic",): ("fp8-channel", "fp8-dynamic"),
    ("fp8-block", "--quantize-format", "compressed-tensors"): ("fp8-block", "fp8-block (compressed-tensors)"),
    ("nvfp4",): ("nvfp4a16", "nvfp4 (compressed-tensors)"),
    ("mxfp8",): ("mxfp8a16", "mxfp8 (compressed-tensors)"),
    ("mxfp4", "--quantize-format", "compressed-tensors"): ("mxfp4a16", "mxfp4 (compressed-tensors)"),
    ("w4a16",): ("w4a16", "w4a16 (compressed-tensors)"),
    ("w4a16", "--quantize-group", "32"): ("w4a16-g32", "w4a16 (compressed-tensors)"),  # o_proj's zero block: whole groups (eps scales)
}
# Sources each scheme is written from besides the bf16 dense and MoE and the fp32 dense ones:
# partial 128x128 blocks (an intermediate size of 200); DeepSeek-V3's MLA (q_a_proj and kv_a_proj_with_mqa
# share a global scale).
EXTRA_SOURCES = {("fp8-block", "--quantize-format", "compressed-tensors"): ["dense-odd"],
                 ("nvfp4",): ["mla"]}
# Sources a scheme is written from instead of `base` (--quantize-group's own run: the dense model).
ONLY_SOURCES = {("w4a16", "--quantize-group", "32"): ["dense"]}
# The modules each source keeps (fp8_kept_reason's carve-outs), which `ignore` must list.
KEPT = {"dense": {"lm_head", "model.embed_tokens"}, "dense-fp32": {"lm_head", "model.embed_tokens"},
        "moe": {"lm_head", "model.embed_tokens", "model.layers.0.mlp.gate"}, "dense-odd": {"lm_head", "model.embed_tokens"},
        "mla": {"lm_head", "model.embed_tokens"}}


def check_writes(dcpctl: str, root: Path, only: set, report: bool) -> None:
    """dcpctl's --quantize writes against compressed-tensors 0.20.0's own quantization of the same
    weights, byte for byte (tensors, and the quantization_config llm-compressor's model_free_ptq
    writes), read back by dcpctl as compressed-tensors' decompressor reads it, verify exit 0, and
    transformers' from_pretrained reporting no missing or unexpected key."""
    srcs = {"dense": root / "dense", "moe": root / "moe", "dense-fp32": root / "dense-fp32"}
    if not srcs["dense"].exists():
        qp.tiny_dense(srcs["dense"])
    if not srcs["moe"].exists():
        qp.tiny_moe(srcs["moe"])
    qp.tiny_dense(srcs["dense-fp32"], torch.float32)
    srcs["dense-odd"] = qp.tiny_dense(root / "dense-odd", dims=dict(qp.DENSE_DIMS, intermediate_size=200))
    srcs["mla"] = qp.tiny_mla(root / "mla")
    base = ["dense", "moe", "dense-fp32"]
    # schemes that need calibrated activation scales: refused, naming the scale, nothing written
    for word, missing in (("fp8-static", "input_scale"), ("nvfp4-w4a4", "input_global_scale")):
        out = root / f"never-{word}"
        r = run(dcpctl, "consolidate", srcs["dense"], "-o", f"{out}/", "--quantize", word, "-q")
        check(r.returncode == EXIT_UNSUPPORTED and missing in r.stderr and not out.exists(),
              f"--quantize {word}: exit {r.returncode} (wanted 5) naming {missing}, nothing written: {r.stderr.strip()[-300:]}")
    # ... and in ModelOpt's form, naming its input_scale
    out = root / "never-nvfp4-w4a4-modelopt"
    r = run(dcpctl, "consolidate", srcs["dense"], "-o", f"{out}/", "--quantize", "nvfp4-w4a4", "--quantize-format", "modelopt",
            "-q")
    check(r.returncode == EXIT_UNSUPPORTED and "input_scale (ModelOpt" in r.stderr and not out.exists(),
          f"--quantize nvfp4-w4a4 --quantize-format modelopt: exit {r.returncode} (wanted 5) naming ModelOpt's input_scale: "
          f"{r.stderr.strip()[-300:]}")
    # --quantize-group: w4a16's alone, a multiple of 8, with --quantize (exit 2, nothing written)
    for flags, why in ((("--quantize", "nvfp4", "--quantize-group", "64"), "--quantize-group goes with w4a16"),
                       (("--quantize", "w4a16", "--quantize-group", "12"), "a multiple of 8"),
                       (("--quantize-group", "64"), "go with --quantize")):
        out = root / "never-group"
        r = run(dcpctl, "consolidate", srcs["dense"], "-o", f"{out}/", *flags, "-q")
        check(r.returncode == EXIT_USAGE and why in r.stderr and not out.exists(),
              f"consolidate {' '.join(flags)}: exit {r.returncode} (wanted 2) saying {why!r}, nothing written: "
              f"{r.stderr.strip()[-300:]}")
    for flags, (scheme, codec) in WRITES.items():
        for sname in ONLY_SOURCES.get(flags, base) + EXTRA_SOURCES.get(flags, []):
            src = srcs[sname]
            name = "write-" + "-".join(f.lstrip("-") for f in flags) + "-" + sname
            if only and name not in only and "writes" not in only:
                continue
            out = root / name
            r = run(dcpctl, "consolidate", src, "-o", f"{out}/", "--quantize", *flags, "-q")
            what = f"consolidate {sname} --quantize {' '.join(flags)}"
            if report:
                print(f"  {what}: exit {r.returncode} {r.stderr.strip()[-200:]}")
            if not expect_rc(r, EXIT_OK, what):
                continue
            qc = json.loads((out / "config.json").read_text()).get("quantization_config", {})
            ignore = qc.get("ignore", [])
            check(set(ignore) == KEPT[sname], f"{what}: ignore lists the kept modules {sorted(KEPT[sname])}: {ignore}")
            want_qc = qp.ct_model_free_config(scheme, ignore)
            check(qc == want_qc, f"{what}: quantization_config is model_free_ptq's: {json.dumps(qc, sort_keys=True)[:600]} "
                                 f"!= {json.dumps(want_qc, sort_keys=True)[:600]}")
            want, _ = qp.ct_quantize_tensors(qp.folder_tensors(src), scheme, ignore=ignore, fused=qp.FUSED + qp.EXPERT_FUSED + qp.MLA_FUSED)
            got = out_tensors(out)
            check(set(got) == set(want), f"{what}: the tensors compressed-tensors writes: {sorted(set(got) ^ set(want))[:6]}")
            bad = [f"{k} {got[k].dtype} {tuple(got[k].shape)} vs {want[k].dtype} {tuple(want[k].shape)}"
                   for k in sorted(want) if k in got and not same_bytes(got[k], want[k])]
            check(not bad, f"{what}: byte for byte compressed-tensors' own: {bad[:4]} ({len(bad)} of {len(want)})")
            # one global scale a fused group: q/k/v, gate/up, each expert's gate/up, MLA's q_a/kv_a (what vLLM fuses)
            gs = {k: v for k, v in got.items() if k.endswith(".weight_global_scale")}
            fused = {}
            for k, v in gs.items():
                key = re.sub(r"(q_proj|k_proj|v_proj)\.weight_global_scale$", "qkv", k)
                key = re.sub(r"(gate_proj|up_proj)\.weight_global_scale$", "gate_up", key)
                key = re.sub(r"(q_a_proj|kv_a_proj_with_mqa)\.weight_global_scale$", "qkv_a", key)
                fused.setdefault(key, set()).add(v.item())
            uneven = [k for k, v in fused.items() if len(v) != 1]
            check(not gs or (len(fused) < len(gs) and not uneven),
                  f"{what}: one global scale a fused group: {uneven[:4]}")
            # dcpctl reads back what it wrote as compressed-tensors' decompressor does
            back = root / (name + "-bf16")
            r = run(dcpctl, "consolidate", out, "-o", f"{back}/", "--dtype", "bf16", "-q")
            if expect_rc(r, EXIT_OK, f"{what}, then --dtype bf16"):
                # (compressed-tensors' dequantizer leaves the unquantized tensors as stored: cast here)
                ref, read = qp.ct_reference(out, torch.bfloat16), out_tensors(back)
                wrong = [k for k in ref if k not in read or not same_bytes(read[k], ref[k].to(torch.bfloat16))]
                check(set(read) == set(ref) and not wrong,
                      f"{what}, then --dtype bf16: compressed-tensors' dequantization: {wrong[:4]} {sorted(set(read) ^ set(ref))[:4]}")
            r = run(dcpctl, "verify", out)
            expect_rc(r, EXIT_OK, f"{what}: verify")
            quantized = {k[:-len("_packed")] if k.endswith(".weight_packed") else k for k in got
                         if k.endswith((".weight", ".weight_packed")) and k[:k.rfind(".")] + ".weight_scale" in got}
            check_diff(dcpctl, src, out, what, quantized, codec)
            if sname == "dense":
                check_diff_damaged(dcpctl, src, out, what, root)
            if sname == "dense" and flags in (("nvfp4",), ("w4a16",)):
                # a DCP output of 2 ranks (reshard --quantize), then consolidated: the same bytes
                dcp, hf = root / (name + "-dcp"), root / (name + "-dcp-hf")
                r = run(dcpctl, "reshard", src, "-o", dcp, "-w", "2", "--quantize", *flags, "-q")
                if expect_rc(r, EXIT_OK, f"{what}: reshard -w 2 --quantize"):
                    r = run(dcpctl, "consolidate", dcp, "-o", f"{hf}/", "-q")
                    if expect_rc(r, EXIT_OK, f"{what}: reshard -w 2 --quantize, consolidated"):
                        again = out_tensors(hf)
                        check(set(again) == set(got) and all(same_bytes(again[k], got[k]) for k in got),
                              f"{what}: reshard -w 2 --quantize then consolidate writes the same bytes")
            if sname != "dense-fp32":
                from transformers import AutoModelForCausalLM
                hf_loaded(out)  # judged here, a load that fails included (compressed-tensors' own folder beside it)
                try:
                    model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
                except Exception as e:  # noqa: BLE001
                    # transformers 5.23 cannot load some formats on fused MoE experts (its
                    # CompressedTensorsDequantize takes per-channel scales only): so be it only where
                    # compressed-tensors' own folder of the same tensors fails the same way
                    theirs = root / (name + "-ct")
                    shutil.copytree(out, theirs)
                    save_file({k: v.contiguous() for k, v in want.items()}, theirs / "model.safetensors",
                              metadata={"format": "pt"})
                    try:
                        AutoModelForCausalLM.from_pretrained(theirs)
                        check(False, f"{what}: from_pretrained fails ({str(e)[-200:]}) where compressed-tensors' own folder loads")
                    except Exception:  # noqa: BLE001
                        print(f"  {what}: from_pretrained fails on compressed-tensors' own folder too (transformers 5.23)")
                    continue
                problems = {k: v for k, v in info.items() if v}
                check(not problems, f"{what}: from_pretrained reports {problems}")
                sd = model.state_dict()
                # (transformers 5.23 holds a Qwen3-MoE's experts stacked: the attention's are compared)
                q = [k for k in want if k.endswith((".weight", ".weight_packed")) and k in sd
                     and want[k].dtype in (torch.float8_e4m3fn, torch.uint8, torch.int32)]
                check(q and all(same_bytes(sd[k], got[k]) for k in q),
                      f"{what}: from_pretrained holds the written quantized weights")
                if flags[0] == "w4a16" and sname == "dense":
                    check_w4a16_logits(model, src, back, what)
                del model


def check_w4a16_logits(model, src: Path, back: Path, what: str) -> None:
    """transformers' own decompression of the W4A16 folder (CompressedTensorsConfig, decompressed on CPU at
    the first forward) gives the logits of the unquantized model with dcpctl's read-back weights put in
    (`back`: --dtype bf16 of the folder), and they are near the unquantized model's."""
    from transformers import AutoModelForCausalLM
    ids = torch.arange(1, 33).reshape(2, 16) % 64
    base = AutoModelForCausalLM.from_pretrained(src).eval()
    read = AutoModelForCausalLM.from_pretrained(src).eval()
    read.load_state_dict(out_tensors(back), strict=False)
    with torch.no_grad():
        want, got, exact = base(ids).logits.float(), model.eval()(ids).logits.float(), read(ids).logits.float()
    err = (got - exact).abs().max().item()
    check(err <= 1e-2 * exact.abs().max().item(),
          f"{what}: from_pretrained's logits are those of dcpctl's read-back weights: off by {err}")
    q_err, top = (got - want).abs().max().item(), want.abs().max().item()
    print(f"  {what}: logits off the unquantized model's by {q_err:.3f} of {top:.3f} (INT4 round to nearest)")
    check(q_err <= 0.5 * top, f"{what}: logits near the unquantized model's: off by {q_err} of {top}")


# The ModelOpt folders --quantize writes from their src/, by --quantize word: ModelOpt's NVFP4
# (W4A4) reference stands for W4A16_NVFP4 (its weights and scales are the same; W4A16 leaves out
# the input_scale and the input activations of the config).
MODELOPT_WRITES = {"modelopt_nvfp4": "nvfp4", "modelopt_nvfp4_moe": "nvfp4", "modelopt_nvfp4_mla": "nvfp4",
                   "modelopt_mxfp8": "mxfp8"}


def check_modelopt_writes(dcpctl: str, fixtures: Path, root: Path, only: set, report: bool) -> None:
    """--quantize nvfp4|mxfp8 --quantize-format modelopt against nvidia-modelopt 0.47.0's own export
    of the same model (the committed modelopt_*/src/, quantized by make_modelopt.py into ckpt/):
    every tensor byte for byte (NVFP4's W4A4 input_scale aside: W4A16 writes none), config.json's
    quantization_config and hf_quant_config.json as ModelOpt writes them (W4A16_NVFP4, MXFP8), one
    weight_scale_2 a fused group (q/k/v, gate/up, each expert's gate/up, MLA's q_a_proj and
    kv_a_proj_with_mqa), read back to ModelOpt's own dequantization, verify exit 0."""
    for case, word in MODELOPT_WRITES.items():
        name = f"write-{word}-modelopt-" + case
        if only and name not in only and "writes" not in only:
            continue
        d, out = fixtures / "layouts" / case, root / name
        r = run(dcpctl, "consolidate", d / "src", "-o", f"{out}/", "--quantize", word, "--quantize-format", "modelopt",
                "-q")
        what = f"consolidate {case}/src --quantize {word} --quantize-format modelopt"
        if report:
            print(f"  {what}: exit {r.returncode} {r.stderr.strip()[-200:]}")
        if not expect_rc(r, EXIT_OK, what):
            continue
        want = {k: v for k, v in qp.folder_tensors(d / "ckpt").items() if not k.endswith(".input_scale")}
        got = out_tensors(out)
        check(set(got) == set(want), f"{what}: the tensors ModelOpt writes: {sorted(set(got) ^ set(want))[:6]}")
        bad = [f"{k} {got[k].dtype} {tuple(got[k].shape)} vs {want[k].dtype} {tuple(want[k].shape)}"
               for k in sorted(want) if k in got and not same_bytes(got[k], want[k])]
        check(not bad, f"{what}: byte for byte ModelOpt's own export: {bad[:4]} ({len(bad)} of {len(want)})")
        if word == "nvfp4":
            s2 = {}
            for k, v in got.items():
                if k.endswith(".weight_scale_2"):
                    key = re.sub(r"(q_proj|k_proj|v_proj|gate_proj|up_proj)\.weight_scale_2$", "fused", k)
                    key = re.sub(r"(q_a_proj|kv_a_proj_with_mqa)\.weight_scale_2$", "fused_qkv_a", key)
                    s2.setdefault(key, set()).add(v.item())
            check(s2 and all(len(v) == 1 for v in s2.values()) and len(s2) < sum(k.endswith("_scale_2") for k in got),
                  f"{what}: one weight_scale_2 a fused group: {s2}")
        want_qc = json.loads((d / "ckpt" / "config.json").read_text())["quantization_config"]
        want_hq = (d / "ckpt" / "hf_quant_config.json").read_text()
        if want_qc["quant_algo"] == "NVFP4":  # the W4A4 reference, as W4A16_NVFP4
            want_qc["quant_algo"] = "W4A16_NVFP4"
            want_qc["config_groups"]["group_0"].pop("input_activations", None)
            want_hq = want_hq.replace('"quant_algo": "NVFP4"', '"quant_algo": "W4A16_NVFP4"')
        qc = json.loads((out / "config.json").read_text()).get("quantization_config")
        check(qc == want_qc, f"{what}: quantization_config is ModelOpt's: {qc} != {want_qc}")
        hq = out / "hf_quant_config.json"
        check(hq.exists() and hq.read_text() == want_hq, f"{what}: hf_quant_config.json is ModelOpt's, byte for byte")
        # read back as ModelOpt's QTensor.dequantize computes it (its digests, recorded)
        exp = json.loads((d / "dequantized.json").read_text())["float32_sha256"]
        back = root / (name + "-fp32")
        r = run(dcpctl, "consolidate", out, "-o", f"{back}/", "--dtype", "fp32", "-q")
        if expect_rc(r, EXIT_OK, f"{what}, then --dtype fp32"):
            read = out_tensors(back)
            wrong = [k for k, h in exp.items() if k not in read or sha_f32(read[k]) != h]
            check(not wrong, f"{what}, then --dtype fp32: ModelOpt's dequantization: {wrong[:4]}")
        expect_rc(run(dcpctl, "verify", out), EXIT_OK, f"{what}: verify")
        check_diff(dcpctl, d / "src", out, what, set(exp), f"{word} (modelopt)")
        if case in ("modelopt_nvfp4", "modelopt_mxfp8"):
            check_diff_damaged(dcpctl, d / "src", out, what, root)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dcpctl")
    ap.add_argument("fixtures", type=Path)
    ap.add_argument("--only", default="")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    work = Path(tempfile.mkdtemp(prefix="dcpctl-codecs-"))
    t0 = time.time()
    try:
        cases = (ct_cases(work / "src", only) + ct_top_format_case(work / "src", only)
                 + modelopt_cases(a.fixtures, only) + dsv4_cases(work / "src", only) + ink_cases(work / "src", only))
        (work / "out").mkdir()
        print(f"{len(cases)} folders written and their references computed in {time.time() - t0:.1f} s")
        # ModelOpt's committed folders are found by listing: one lost must fail, not shrink the run
        modelopt = [c.name for c in cases if c.name.startswith("modelopt_")]
        check(bool(only) or len(modelopt) >= 6, f"{len(modelopt)} layouts/modelopt_* folders, fewer than the 6 committed")
        for case in cases:
            if a.report:
                print(case.name)
            check_read(a.dcpctl, case, work / "out", a.report)
        check_ink_loaded(a.dcpctl, work / "src")
        if not only or "refusals" in only:
            refusals(a.dcpctl, work / "src", a.fixtures, a.report)
        t1 = time.time()
        check_writes(a.dcpctl, work / "src", only, a.report)
        check_modelopt_writes(a.dcpctl, a.fixtures, work / "src", only, a.report)
        print(f"--quantize writes: {time.time() - t1:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"codecs: {time.time() - t0:.1f} s")
    return summary("codecs")


if __name__ == "__main__":
    sys.exit(main())
