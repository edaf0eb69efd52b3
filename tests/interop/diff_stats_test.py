#!/usr/bin/env python3
"""dcpctl diff and dcpctl stats, checked against real torch (the project's venv).

    diff_stats_test.py MODE DCPCTL FIXTURES_DIR

MODE is one of:
  stats     every fixture checkpoint (tests/fixtures/*/ckpt, tests/fixtures/layouts/*/ckpt): torch's
            view of every tensor (the bytes of `dcpctl consolidate --flat -o x.pt` read back with
            torch.load(weights_only=True), each checked against the SHA-256 torch wrote in
            expected.json) gives min/max/mean/std/abs max/L2 in float64 (tight tolerance) and
            NaN/+Inf/-Inf/zero counts (exact) equal to `dcpctl stats --json`; complex tensors as
            torch.view_as_real(t) (fixtures, and complex64/128/32 made here with NaN/Inf parts,
            across blocks and tiny windows); packed fp4 tensors are reported as skipped; --depth
            groups, --filter; --check-finite and --check-zero exit 3 naming each tensor (count,
            first index), 0 on clean input, complex included.
  diff      pairs made with torch in a temp dir: the same state saved twice, one element changed,
            one key dropped, a cast to bf16 (dtype changed; with --ignore-dtype and tolerances
            per-key agreement with torch.allclose on .double()), noise under several atol/rtol
            (torch.allclose), NaN with and without --equal-nan, a ULP bump, --select/--include/
            --exclude, --quiet, --json counts; each key's verdict equal to torch's (bitwise
            equality for the exact rule).
  formats   the same state as DCP, one .safetensors, an HF directory (index + 2 shards) and a
            torch.save .pt compare equal to each other (exit 0); Hugging Face pytorch_model*.bin
            directories written by transformers (tests/fixtures/hf_bin: sharded + index, single):
            stats equal torch.load's, diff against the same tensors as safetensors/.pt (0), a bf16
            export (per-key torch.allclose), a shard rewritten by torch (1), a missing shard or
            an index naming a key its file lacks (3); every fixture against
            dcp_to_torch_save of itself (exit 0; exit 5 where the .pt holds what weights_only
            refuses); a reshard by torch (dcp.save of DTensors, Shard(0) and Shard(1), over 2
            spawned gloo ranks) equal to the single-process save; --select app.model against
            the exported model.
  refusals  exit codes: missing input (4), run folder (2), unknown option (2), truncated
            safetensors (3), a tensor without its data file (3: incomplete), a .pt with io.BytesIO (5), a .pt
            with a non-contiguous view (5), a legacy (non-zip) torch.save (5).

A dcpctl that dies of a signal fails the test. Prints `N passed, M failed`; exit 1 on failure.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import dcp_oracle  # noqa: E402
from testlib import check, expect_rc, free_port, run, summary  # noqa: E402
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

warnings.filterwarnings("ignore")

def run_json(dcpctl: str, *args: str, rc: int = 0, what: str = "") -> dict:
    r = run(dcpctl, *args, "--json")
    if not expect_rc(r, rc, what or " ".join(map(str, args))):
        return {}
    return json.loads(r.stdout)


def save_dcp(sd: dict, path: Path) -> None:
    dcp.save(sd, checkpoint_id=str(path), no_dist=True)


def jf(v):
    """A JSON float of dcpctl's (number or 'nan'/'inf'/'-inf') as a Python float."""
    if v is None:
        return None
    return float(v)


def close(a: float | None, b: float, rel: float = 1e-12, abs_: float = 1e-300) -> bool:
    if a is None:
        return False
    if math.isnan(b):
        return math.isnan(a)
    if math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


# ---------------------------------------------------------------------------------------------
# stats


def torch_stats(t: torch.Tensor) -> dict:
    x = t.to(torch.float64).reshape(-1)
    n = x.numel()
    s = {"numel": n, "nan": int(torch.isnan(x).sum()), "pos_inf": int((x == math.inf).sum()),
         "neg_inf": int((x == -math.inf).sum()), "zeros": int((x == 0).sum())}
    if n:
        s["min"] = float(x.min())
        s["max"] = float(x.max())
        s["mean"] = float(x.mean())
        s["abs_max"] = float(x.abs().max())
        s["l2_norm"] = float(torch.linalg.vector_norm(x))
    if n >= 2:
        s["std"] = float(x.std())
    return s


# FP8 folders whose oracle is torch's dequantizing reader, not per-key digests (fp8-dequantize); the
# ModelOpt folders, whose oracle is ModelOpt's dequantization (codecs-read, dequantized.json).
NOT_DIGESTED = {"hf_fp8_transformers", "hf_fp8_deepseek", "modelopt_nvfp4", "modelopt_nvfp4_moe", "modelopt_nvfp4_mla",
                "modelopt_fp8", "modelopt_mxfp8", "modelopt_fp8_pb_wo", "modelopt_mixed"}


def fixture_checkpoints(fixtures: Path) -> list[Path]:
    out = sorted(p / "ckpt" for p in fixtures.iterdir() if (p / "ckpt").is_dir())
    out += sorted(p / "ckpt" for p in (fixtures / "layouts").iterdir() if (p / "ckpt").is_dir() and p.name not in NOT_DIGESTED)
    return out


def torch_view_via_pt(dcpctl: str, ckpt: Path, tmp: Path) -> dict:
    """torch's tensors of a fixture: consolidated by dcpctl to a flat .pt, loaded by torch, and
    each tensor's bytes checked against the SHA-256 torch itself wrote into expected.json."""
    pt = tmp / (ckpt.parent.name + ".pt")
    r = run(dcpctl, "consolidate", ckpt, "-o", pt, "--flat", "--force", "-q")
    if not expect_rc(r, 0, f"consolidate {ckpt} for the oracle"):
        return {}
    flat = torch.load(pt, weights_only=True)
    expected = dcp_oracle.load_expected(ckpt.parent)
    out = {}
    for k, v in flat.items():
        if not isinstance(v, torch.Tensor):
            continue
        e = expected["keys"].get(k)
        if check(e is not None and e.get("sha256") == dcp_oracle.sha256_tensor(v),
                 f"{ckpt}: {k}: bytes equal to torch's (expected.json sha256)"):
            out[k] = v
    pt.unlink()
    return out


def mode_stats(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    for ckpt in fixture_checkpoints(fixtures):
        label = str(ckpt.relative_to(fixtures))
        view = torch_view_via_pt(dcpctl, ckpt, tmp)
        j = run_json(dcpctl, "stats", ckpt, what=f"stats {label}")
        if not j:
            continue
        check(j.get("schema_version") == 1, f"{label}: schema_version 1")
        got = {e["key"]: e for e in j["tensors"]}
        skipped = {e["key"]: e for e in j["skipped"]}
        for k, t in view.items():
            if t.dtype == torch.float4_e2m1fn_x2:
                check(k in skipped, f"{label}: {k} ({t.dtype}) reported as skipped")
                continue
            if not check(k in got, f"{label}: {k} in stats"):
                continue
            if t.is_complex():  # summarised as torch.view_as_real(t)
                t = torch.view_as_real(t)
                check(got[k].get("view_as_real") == list(t.shape), f"{label}: {k}: view_as_real shape {list(t.shape)}")
            else:
                check("view_as_real" not in got[k], f"{label}: {k}: no view_as_real for a real tensor")
            g, ref = got[k], torch_stats(t)
            for f in ("numel", "nan", "pos_inf", "neg_inf", "zeros"):
                check(g[f] == ref[f], f"{label}: {k}: {f} {g[f]} == torch's {ref[f]}")
            # float64 sums of either order agree to a few ulps of the data's magnitude (a mean of
            # 1e-10 over values of 1e-3 has only the digits cancellation leaves it)
            scale = 64 * sys.float_info.epsilon * ref.get("abs_max", 0.0) if math.isfinite(ref.get("abs_max", 0.0)) else 0.0
            for f in ("min", "max", "mean", "std", "abs_max", "l2_norm"):
                if f in ref:
                    check(close(jf(g[f]), ref[f], 1e-12, max(scale, 1e-300)), f"{label}: {k}: {f} {g[f]} ~ torch's {ref[f]!r}")
                elif f in ("min", "max", "mean"):
                    check(g[f] is None, f"{label}: {k}: {f} of an empty tensor is null")
            if ref["nan"] + ref["pos_inf"] + ref["neg_inf"]:
                x = t.to(torch.float64)
                first = torch.nonzero(~torch.isfinite(x).reshape(-1))[0].item()
                idx = list(torch.unravel_index(torch.tensor(first), t.shape)) if t.dim() else []
                check(g["first_nonfinite_index"] == [int(i) for i in idx],
                      f"{label}: {k}: first non-finite index {g['first_nonfinite_index']} == {idx}")
        check(set(got) | set(skipped) == set(view), f"{label}: stats covers exactly torch's tensors "
              f"(extra {sorted(set(got) | set(skipped) - set(view))[:5]}, missing {sorted(set(view) - set(got) - set(skipped))[:5]})")

    # --depth groups and --filter, on the FSDP2 app state
    ckpt = fixtures / "fsdp2_app_state" / "ckpt"
    view = torch_view_via_pt(dcpctl, ckpt, tmp)
    j = run_json(dcpctl, "stats", ckpt, "--depth", "2", what="stats --depth 2")
    groups = {g["prefix"]: g for g in j.get("groups", [])}
    for prefix in ("app.model", "app.optim"):
        ts = [v for k, v in view.items() if k.startswith(prefix + ".")]
        allx = torch.cat([t.to(torch.float64).reshape(-1) for t in ts])
        g = groups.get(prefix, {})
        check(g.get("tensors") == len(ts) and g.get("numel") == allx.numel(), f"--depth 2: group {prefix} counts")
        check(close(jf(g.get("mean")), float(allx.mean()), 1e-10) and close(jf(g.get("std")), float(allx.std()), 1e-10),
              f"--depth 2: group {prefix} mean/std equal to torch over the concatenation")
    j = run_json(dcpctl, "stats", ckpt, "--filter", "*.exp_avg_sq", what="stats --filter")
    check(j and all(e["key"].endswith(".exp_avg_sq") for e in j["tensors"]) and len(j["tensors"]) ==
          sum(k.endswith(".exp_avg_sq") for k in view), "--filter keeps exactly the matching keys")

    # gates
    g = torch.Generator().manual_seed(3)
    clean = {"w": torch.randn(4, 5, generator=g), "b": torch.randn(5, generator=g), "step": torch.tensor(3)}
    save_dcp(clean, tmp / "clean")
    expect_rc(run(dcpctl, "stats", "--check-finite", "--check-zero", "-q", tmp / "clean"), 0, "gates on clean input")
    bad = {k: v.clone() for k, v in clean.items()}
    bad["w"][1, 2] = math.nan
    bad["w"][3, 0] = math.nan
    bad["w"][2, 4] = -math.inf
    bad["b"][:] = 0
    bad["h"] = torch.tensor([1.0, math.inf], dtype=torch.bfloat16)
    save_dcp(bad, tmp / "bad")
    r = run(dcpctl, "stats", "--check-finite", "-q", tmp / "bad")
    expect_rc(r, 3, "--check-finite on NaN/Inf")
    check("w: 2 NaN, 0 +Inf, 1 -Inf; first at [1, 2]" in r.stderr and "h: 0 NaN, 1 +Inf, 0 -Inf; first at [1]" in r.stderr,
          f"--check-finite names each tensor with counts and first index: {r.stderr!r}")
    check(r.stdout == "", "--quiet prints no table")
    r = run(dcpctl, "stats", "--check-zero", tmp / "bad")
    expect_rc(r, 3, "--check-zero on an all-zero tensor", "all zeros: b")
    j = run_json(dcpctl, "stats", "--check-finite", tmp / "bad", rc=3, what="--check-finite --json")
    f = j.get("checks", {}).get("finite", {})
    check(f.get("ok") is False and {x["key"] for x in f.get("failures", [])} == {"w", "h"}, "--json checks.finite")
    expect_rc(run(dcpctl, "stats", tmp / "bad"), 0, "stats without a gate exits 0 on NaN")

    # complex: torch.view_as_real(t) is what is summarised (real and imaginary parts); NaN/Inf in
    # either part counts, the first index is into view_as_real's shape; the gates cover complex
    g = torch.Generator().manual_seed(4)
    cx = {"z": torch.complex(torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)),
          "zz": torch.zeros(5, dtype=torch.complex128),
          "zh": torch.complex(torch.randn(7, generator=g), torch.randn(7, generator=g)).to(torch.complex32),
          # blocks and windows: 3 x 5000 complex128 values around a large common offset
          "big": torch.complex(1e4 + torch.randn(3, 5000, generator=g, dtype=torch.float64),
                               -2.0 + 1e-3 * torch.randn(3, 5000, generator=g, dtype=torch.float64))}
    cx_bad = {k: v.clone() for k, v in cx.items()}
    torch.view_as_real(cx_bad["z"])[1, 2, 1] = math.nan
    torch.view_as_real(cx_bad["z"])[2, 0, 0] = math.inf
    torch.view_as_real(cx_bad["big"])[2, 4321, 1] = -math.inf
    save_dcp(cx, tmp / "cx")
    save_dcp(cx_bad, tmp / "cx_bad")
    for name, sd in (("cx", cx), ("cx_bad", cx_bad)):
        for extra in ((), ("--max-memory", "4096", "--threads", "3")):
            j = run_json(dcpctl, "stats", tmp / name, *extra, what=f"stats of complex tensors {name} {extra}")
            got = {e["key"]: e for e in j.get("tensors", [])}
            check(not j.get("skipped"), f"{name}: no complex tensor skipped: {j.get('skipped')}")
            for k, t in sd.items():
                v = torch.view_as_real(t)
                g_, ref = got.get(k, {}), torch_stats(v)
                check(g_.get("view_as_real") == list(v.shape), f"{name}: {k}: view_as_real shape")
                for f in ("numel", "nan", "pos_inf", "neg_inf", "zeros"):
                    check(g_.get(f) == ref[f], f"{name} {extra}: {k}: {f} {g_.get(f)} == torch's {ref[f]} (view_as_real)")
                for f in ("min", "max", "mean", "std", "abs_max", "l2_norm"):
                    check(close(jf(g_.get(f)), ref[f], 1e-12, 1e-300), f"{name} {extra}: {k}: {f} {g_.get(f)} ~ torch's {ref[f]!r}")
                if not torch.isnan(t).any() and not torch.isinf(t).any():
                    check(close(jf(g_.get("l2_norm")), float(torch.linalg.vector_norm(t.to(torch.complex128))), 1e-12),
                          f"{name}: {k}: l2_norm equals the complex tensor's norm")
                if ref["nan"] + ref["pos_inf"] + ref["neg_inf"]:
                    first = torch.nonzero(~torch.isfinite(v.to(torch.float64)).reshape(-1))[0].item()
                    idx = [int(i) for i in torch.unravel_index(torch.tensor(first), v.shape)]
                    check(g_.get("first_nonfinite_index") == idx, f"{name}: {k}: first non-finite {g_.get('first_nonfinite_index')} == {idx}")
    r = run(dcpctl, "stats", "--check-finite", "-q", tmp / "cx_bad")
    expect_rc(r, 3, "--check-finite on complex NaN/Inf")
    check("z: 1 NaN, 1 +Inf, 0 -Inf; first at [1, 2, 1]" in r.stderr and "big: 0 NaN, 0 +Inf, 1 -Inf; first at [2, 4321, 1]" in r.stderr,
          f"--check-finite names complex tensors with view_as_real indices: {r.stderr!r}")
    # zstd items (FileSystemWriter(_extensions=[ZStandard()])): a chunk spanning many windows is
    # decoded once (chunk_decodes), and per window when the memory budget cannot hold it
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint._extension import ZStandard

    zs = {"w": torch.randn(512, 256, generator=g), "b": torch.randn(300, generator=g).to(torch.bfloat16)}
    dcp.save(zs, storage_writer=FileSystemWriter(str(tmp / "zstd"), _extensions=[ZStandard()]), no_dist=True)
    # 4 MiB, 4 threads: half the budget for window buffers (rows of w in 3 windows), the 512 KiB
    # chunk of w decoded once, b (one window) once: 2. 4000 B, 1 thread: 2000 B for buffers, so
    # windows of 222 elements (two per row of 256: 1024), no chunk fits beside them: decoded per
    # window, 1024 + 1.
    for budget, threads, want in (("4MiB", "4", 2), ("4000", "1", 1025)):
        j = run_json(dcpctl, "stats", tmp / "zstd", "--max-memory", budget, "--threads", threads, what=f"stats zstd --max-memory {budget}")
        got = {e["key"]: e for e in j.get("tensors", [])}
        for k, t in zs.items():
            ref = torch_stats(t)
            check(close(jf(got.get(k, {}).get("mean")), ref["mean"]) and close(jf(got.get(k, {}).get("std")), ref["std"]),
                  f"zstd --max-memory {budget}: {k}: mean/std equal torch's")
        check(j.get("chunk_decodes") == want, f"zstd, --max-memory {budget}: {j.get('chunk_decodes')} chunk decodes, wanted {want}")
    zs2 = {k: v.clone() for k, v in zs.items()}
    zs2["w"][500, 3] += 1
    dcp.save(zs2, storage_writer=FileSystemWriter(str(tmp / "zstd2"), _extensions=[ZStandard()]), no_dist=True)
    j = run_json(dcpctl, "diff", tmp / "zstd", tmp / "zstd2", "--max-memory", "4MiB", rc=1, what="diff of zstd checkpoints")
    e = next((x for x in j.get("keys", []) if x["key"] == "w"), {})
    check(e.get("differing") == 1 and e.get("first_index") == [500, 3] and verdicts(j).get("b") == "identical",
          f"diff of zstd checkpoints, chunks shared by windows: one element at [500, 3]: {e}")

    r = run(dcpctl, "stats", "--check-zero", "-q", tmp / "cx")
    expect_rc(r, 3, "--check-zero on an all-zero complex tensor", "all zeros: zz")
    r = run(dcpctl, "stats", tmp / "cx")
    check(r.returncode == 0 and "complex64*" in r.stdout and "[3, 4, 2]" in r.stdout and "view_as_real" in r.stdout,
          f"table marks complex rows and their view_as_real shape: {r.stdout}")


# ---------------------------------------------------------------------------------------------
# diff


def base_state(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(6, 5, generator=g),
        "b": torch.randn(7, generator=g).to(torch.float64),
        "h": torch.randn(4, 3, generator=g).to(torch.float16),
        "bf": torch.randn(5, 4, generator=g).to(torch.bfloat16),
        "f8": torch.randn(3, 4, generator=g).to(torch.float8_e4m3fn),
        "ids": torch.randint(-1000, 1000, (9,), generator=g),
        "mask": torch.rand(3, 3, generator=g) > 0.5,
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
    }


def verdicts(j: dict) -> dict:
    return {k["key"]: k["status"] for k in j.get("keys", [])}


FP8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


def t_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal (which has no float8 kernel: those compare as float32, exact for float8)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.float(), b.float()) if a.dtype in FP8 else torch.equal(a, b)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and dcp_oracle.tensor_bytes(a) == dcp_oracle.tensor_bytes(b)


def mode_diff(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    a = base_state()
    save_dcp(a, tmp / "a")
    save_dcp({k: v.clone() for k, v in a.items()}, tmp / "a2")
    for pair in (("a", "a"), ("a", "a2")):
        j = run_json(dcpctl, "diff", tmp / pair[0], tmp / pair[1], what=f"diff {pair}")
        check(j.get("same") is True and set(verdicts(j).values()) == {"identical"}, f"diff {pair}: same")
        check(all(t_equal(a[k], a[k].clone()) and bitwise_equal(a[k], a[k].clone()) for k in a), "torch.equal agrees")
    r = run(dcpctl, "diff", "-q", tmp / "a", tmp / "a2")
    check(r.returncode == 0 and r.stdout == "" and r.stderr == "", "--quiet same: exit 0, prints nothing")

    # one element changed
    b = {k: v.clone() for k, v in a.items()}
    b["w"][4, 1] += 0.25
    save_dcp(b, tmp / "b")
    j = run_json(dcpctl, "diff", tmp / "a", tmp / "b", rc=1, what="one element changed")
    v = verdicts(j)
    for k in a:
        want = "identical" if t_equal(a[k], b[k]) else "values_changed"
        check(t_equal(a[k], b[k]) == bitwise_equal(a[k], b[k]), f"{k}: no NaN/-0 here: torch.equal is bitwise")
        check(v.get(k) == want, f"one element changed: {k}: {v.get(k)} (torch.equal: {want})")
    e = next((x for x in j.get("keys", []) if x["key"] == "w"), {})
    d = float((a["w"][4, 1].double() - b["w"][4, 1].double()).abs())
    check(e.get("differing") == 1 and e.get("first_index") == [4, 1] and close(jf(e.get("max_abs_diff")), d),
          f"one element changed: count 1, first [4, 1], max abs {d}: {e}")
    check(j.get("keys", [{}])[0].get("key") == "w", "the differing key is listed first")
    r = run(dcpctl, "diff", "-q", tmp / "a", tmp / "b")
    check(r.returncode == 1 and r.stdout == "", "--quiet different: exit 1, prints nothing")
    r = run(dcpctl, "diff", tmp / "a", tmp / "b")
    check(r.returncode == 1 and "values_changed" in r.stdout and "first at [4, 1]" in r.stdout and
          "1 values changed" in r.stdout, f"human table and summary: {r.stdout}")

    # one key dropped, one added
    c = {k: v for k, v in a.items() if k != "h"}
    c["extra"] = torch.ones(2)
    save_dcp(c, tmp / "c")
    j = run_json(dcpctl, "diff", tmp / "a", tmp / "c", rc=1, what="key dropped")
    v = verdicts(j)
    check(v.get("h") == "only_in_a" and v.get("extra") == "only_in_b" and v.get("w") == "identical",
          f"key dropped: {v}")
    check(j.get("counts", {}).get("only_in_a") == 1 and j["counts"].get("only_in_b") == 1, "counts")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "a", tmp / "c", "--exclude", "h", "--exclude", "extra"), 0,
              "--exclude the differing keys")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "a", tmp / "b", "--include", "b*"), 0, "--include only equal keys")

    # a cast
    floats = [k for k, t in a.items() if t.is_floating_point() and t.dtype != torch.bfloat16]
    cast = {k: (t.to(torch.bfloat16) if k in floats else t) for k, t in a.items()}
    save_dcp(cast, tmp / "cast")
    j = run_json(dcpctl, "diff", tmp / "a", tmp / "cast", rc=1, what="cast")
    v = verdicts(j)
    check(all(v.get(k) == "dtype_changed" for k in floats) and v.get("bf") == "identical", f"cast: dtype_changed {v}")
    for atol, rtol in ((0.0, 0.0), (1e-2, 1e-2), (0.0, 1e-2), (1e-3, 0.0)):
        j = run_json(dcpctl, "diff", tmp / "a", tmp / "cast", "--ignore-dtype", "--atol", atol, "--rtol", rtol,
                     rc=0 if all(torch.allclose(a[k].double(), cast[k].double(), rtol=rtol, atol=atol) for k in floats) else 1,
                     what=f"cast --ignore-dtype atol={atol} rtol={rtol}")
        v = verdicts(j)
        for k in floats:
            want = "identical" if torch.allclose(a[k].double(), cast[k].double(), rtol=rtol, atol=atol) else "values_changed"
            check(v.get(k) == want, f"cast atol={atol} rtol={rtol}: {k}: {v.get(k)} (torch.allclose: {want})")
    j = run_json(dcpctl, "diff", tmp / "a", tmp / "cast", "--ignore-dtype", rc=1, what="cast --ignore-dtype exact")
    e = next((x for x in j.get("keys", []) if x["key"] == "w"), {})
    ref = (a["w"].double() - cast["w"].double()).abs()
    check(e.get("differing") == int((ref > 0).sum()) and close(jf(e.get("max_abs_diff")), float(ref.max())),
          f"cast: differing count and max abs diff equal torch's: {e}")
    # bf16 rounding is at most half a bf16 ULP: measured in the narrower dtype, <= 1
    check(e.get("max_ulp_diff") in (0, 1), f"cast: max ULP in bf16 is at most 1: {e.get('max_ulp_diff')}")

    # noise under tolerances
    g = torch.Generator().manual_seed(5)
    n = {k: (t + 1e-3 * torch.randn(t.shape, generator=g).to(t.dtype) if t.is_floating_point() and t.dtype in
             (torch.float32, torch.float64) else t.clone()) for k, t in a.items()}
    save_dcp(n, tmp / "noise")
    for atol, rtol in ((1e-2, 0.0), (1e-4, 1e-3), (0.0, 1e-3), (1e-3, 1e-2), (1e-6, 1e-6)):
        j = run_json(dcpctl, "diff", tmp / "noise", tmp / "a", "--atol", atol, "--rtol", rtol,
                     rc=0 if all(torch.allclose(n[k].double(), a[k].double(), rtol=rtol, atol=atol) for k in a) else 1,
                     what=f"noise atol={atol} rtol={rtol}")
        v = verdicts(j)
        for k in a:
            want = "identical" if torch.allclose(n[k].double(), a[k].double(), rtol=rtol, atol=atol) else "values_changed"
            check(v.get(k) == want, f"noise atol={atol} rtol={rtol}: {k}: {v.get(k)} (torch.allclose: {want})")
        for e in j.get("keys", []):
            if e["status"] != "values_changed" or e["key"] not in ("w", "b"):
                continue
            k = e["key"]
            x, y = n[k].double(), a[k].double()
            bad = ~torch.isclose(x, y, rtol=rtol, atol=atol)
            first = torch.nonzero(bad.reshape(-1))[0].item()
            rel = ((x - y).abs() / y.abs())[bad].max()
            check(e["differing"] == int(bad.sum()) and e["first_index"] == [int(i) for i in torch.unravel_index(torch.tensor(first), x.shape)]
                  and close(jf(e["max_abs_diff"]), float((x - y).abs()[bad].max())) and close(jf(e["max_rel_diff"]), float(rel)),
                  f"noise atol={atol} rtol={rtol}: {k}: counts, first index, max abs/rel equal torch's: {e}")

    # NaN: bitwise equal NaNs are the same; with a tolerance only --equal-nan makes them equal
    nan = {"x": torch.tensor([1.0, math.nan, 3.0])}
    save_dcp(nan, tmp / "nan1")
    save_dcp({"x": nan["x"].clone()}, tmp / "nan2")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "nan1", tmp / "nan2"), 0, "NaN bit-identical: same (exact rule)")
    check(not torch.allclose(nan["x"], nan["x"]) and torch.allclose(nan["x"], nan["x"], equal_nan=True), "torch's rule")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "nan1", tmp / "nan2", "--atol", "0"), 1, "NaN with a tolerance: differs")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "nan1", tmp / "nan2", "--atol", "0", "--equal-nan"), 0, "--equal-nan")
    payload = nan["x"].clone()
    payload.view(torch.int32)[1] = 0x7FC00001
    save_dcp({"x": payload}, tmp / "nan3")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "nan1", tmp / "nan3"), 1, "NaN payloads differ bit for bit")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "nan1", tmp / "nan3", "--equal-nan"), 0, "--equal-nan: any NaN equals NaN")
    zero = {"x": torch.tensor([0.0, -0.0])}
    save_dcp(zero, tmp / "z1")
    save_dcp({"x": torch.tensor([0.0, 0.0])}, tmp / "z2")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "z1", tmp / "z2"), 1, "-0.0 vs 0.0 differ bit for bit")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "z1", tmp / "z2", "--atol", "0"), 0, "-0.0 == 0.0 by value")

    # ULPs in the tensor's dtype
    u = {"bf": a["bf"].clone()}
    u["bf"].view(torch.int16)[2, 3] += 3
    save_dcp({"bf": a["bf"]}, tmp / "u1")
    save_dcp(u, tmp / "u2")
    j = run_json(dcpctl, "diff", tmp / "u1", tmp / "u2", rc=1, what="ULP bump")
    e = j.get("keys", [{}])[0]
    check(e.get("max_ulp_diff") == 3 and e.get("first_index") == [2, 3], f"bf16 bumped by 3 ULP: {e}")

    # complex: (re, im) pairs as torch.view_as_real shows them; with a tolerance an element is
    # close when both parts are (torch.allclose on view_as_real), exact is bit for bit
    g = torch.Generator().manual_seed(6)
    za = {"z": torch.complex(torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)),
          "zd": torch.complex(torch.randn(40, generator=g, dtype=torch.float64), torch.randn(40, generator=g, dtype=torch.float64))}
    save_dcp(za, tmp / "za")
    save_dcp({k: v.clone() for k, v in za.items()}, tmp / "za2")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "za", tmp / "za2"), 0, "complex: the same state twice")
    zb = {k: v.clone() for k, v in za.items()}
    torch.view_as_real(zb["z"])[2, 3, 1] += 0.5  # the imaginary part of one element
    save_dcp(zb, tmp / "zb")
    j = run_json(dcpctl, "diff", tmp / "za", tmp / "zb", rc=1, what="complex: one imaginary part changed")
    e = next((x for x in j.get("keys", []) if x["key"] == "z"), {})
    d = float((torch.view_as_real(za["z"]).double() - torch.view_as_real(zb["z"]).double()).abs().max())
    check(verdicts(j).get("z") == "values_changed" and verdicts(j).get("zd") == "identical" and e.get("differing") == 1 and
          e.get("first_index") == [2, 3] and close(jf(e.get("max_abs_diff")), d) and not torch.equal(za["z"], zb["z"]),
          f"complex: one element differs at [2, 3] by {d} (torch.equal false): {e}")
    zn = {k: torch.view_as_complex(torch.view_as_real(v) + 1e-3 * torch.randn(torch.view_as_real(v).shape, generator=g, dtype=torch.view_as_real(v).dtype))
          for k, v in za.items()}
    save_dcp(zn, tmp / "zn")
    for atol, rtol in ((1e-2, 0.0), (1e-3, 1e-3), (0.0, 1e-2), (2e-3, 0.0), (1e-6, 1e-6)):
        rr, rn = {k: torch.view_as_real(v).double() for k, v in za.items()}, {k: torch.view_as_real(v).double() for k, v in zn.items()}
        want_all = all(torch.allclose(rn[k], rr[k], rtol=rtol, atol=atol) for k in za)
        j = run_json(dcpctl, "diff", tmp / "zn", tmp / "za", "--atol", atol, "--rtol", rtol, rc=0 if want_all else 1,
                     what=f"complex noise atol={atol} rtol={rtol}")
        for e in j.get("keys", []):
            k = e["key"]
            bad = (~torch.isclose(rn[k], rr[k], rtol=rtol, atol=atol)).any(-1)  # per element: either part
            want = "values_changed" if bad.any() else "identical"
            check(e["status"] == want, f"complex noise atol={atol} rtol={rtol}: {k}: {e['status']} (torch.allclose on view_as_real: {want})")
            if bad.any():
                first = torch.nonzero(bad.reshape(-1))[0].item()
                idx = [int(i) for i in torch.unravel_index(torch.tensor(first), bad.shape)]
                check(e["differing"] == int(bad.sum()) and e["first_index"] == idx,
                      f"complex noise atol={atol} rtol={rtol}: {k}: {e['differing']} differing (torch: {int(bad.sum())}), first {e['first_index']} == {idx}")
    zc = {k: v.to(torch.complex128 if v.dtype == torch.complex64 else torch.complex64) for k, v in za.items()}
    save_dcp(zc, tmp / "zc")
    j = run_json(dcpctl, "diff", tmp / "za", tmp / "zc", rc=1, what="complex cast: dtype changed")
    check(set(verdicts(j).values()) == {"dtype_changed"}, f"complex64 vs complex128: dtype_changed: {verdicts(j)}")
    for atol, rtol in ((0.0, 0.0), (0.0, 1e-6)):
        want = all(torch.allclose(torch.view_as_real(za[k]).double(), torch.view_as_real(zc[k]).double(), rtol=rtol, atol=atol) for k in za)
        expect_rc(run(dcpctl, "diff", "-q", tmp / "za", tmp / "zc", "--ignore-dtype", "--atol", atol, "--rtol", rtol), 0 if want else 1,
                  f"complex64 vs complex128 --ignore-dtype atol={atol} rtol={rtol} (torch.allclose: {want})")
    zp1 = {"z": za["z"].clone()}
    torch.view_as_real(zp1["z"])[0, 0, 1] = math.nan
    zp2 = {"z": zp1["z"].clone()}
    torch.view_as_real(zp2["z"]).view(torch.int32)[0, 0, 1] = 0x7FC00001  # another NaN payload
    save_dcp(zp1, tmp / "zp1")
    save_dcp(zp2, tmp / "zp2")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "zp1", tmp / "zp2"), 1, "complex NaN payloads differ bit for bit")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "zp1", tmp / "zp2", "--equal-nan"), 0, "complex: --equal-nan, NaN part equal to NaN")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "zp1", tmp / "za", "--equal-nan", "--include", "z"), 1, "complex: NaN vs a number differs")

    # shape change
    save_dcp({"w": a["w"].reshape(5, 6)}, tmp / "reshaped")
    j = run_json(dcpctl, "diff", tmp / "a", tmp / "reshaped", "--include", "w", rc=1, what="shape changed")
    check(verdicts(j).get("w") == "shape_changed", "shape_changed")
    # non-tensor values
    save_dcp({"w": a["w"], "epoch": 3, "cfg": {"lr": 0.1, "name": "x"}}, tmp / "v1")
    save_dcp({"w": a["w"], "epoch": 4, "cfg": {"lr": 0.1, "name": "x"}}, tmp / "v2")
    j = run_json(dcpctl, "diff", tmp / "v1", tmp / "v2", rc=1, what="non-tensor values")
    v = verdicts(j)
    check(v.get("epoch") == "values_changed" and v.get("cfg.lr") == "identical" and v.get("w") == "identical", f"values: {v}")


# ---------------------------------------------------------------------------------------------
# formats


def write_hf_dir(sd: dict, path: Path) -> None:
    path.mkdir()
    keys = list(sd)
    half = len(keys) // 2
    parts = [keys[:half], keys[half:]]
    wm = {}
    for i, part in enumerate(parts, 1):
        name = f"model-{i:05d}-of-{len(parts):05d}.safetensors"
        save_file({k: sd[k].contiguous() for k in part}, str(path / name), metadata={"format": "pt"})
        wm.update({k: name for k in part})
    total = sum(t.numel() * t.element_size() for t in sd.values())
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": wm}))


def _reshard_worker(rank: int, world: int, port: int, out: str, seed: int) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # forked: the parent's OpenMP pool does not survive the fork
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    sd = base_state(seed)
    del sd["empty"]  # as mode_formats' single-process save
    out_sd = {}
    for k, t in sd.items():
        if t.dim() == 0 or t.numel() == 0 or t.dtype == torch.float8_e4m3fn:
            out_sd[k] = t
        else:
            place = Shard(1) if (t.dim() == 2 and k in ("w", "bf")) else Shard(0)
            out_sd[k] = distribute_tensor(t, mesh, [place])
    dcp.save(out_sd, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def mode_formats(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    sd = base_state(1)
    del sd["empty"]  # safetensors writes (0, 3) fine, but keep the formats to what each holds
    tensors = {k: v for k, v in sd.items()}
    save_dcp(tensors, tmp / "dcp")
    save_file(tensors, str(tmp / "model.safetensors"))
    write_hf_dir(tensors, tmp / "hf")
    torch.save(tensors, tmp / "model.pt")
    torch.save({"model": tensors, "epoch": 7}, tmp / "nested.bin")
    inputs = [tmp / "dcp", tmp / "model.safetensors", tmp / "hf", tmp / "model.pt"]
    for x in inputs:
        for y in inputs:
            if x != y:
                expect_rc(run(dcpctl, "diff", "-q", x, y), 0, f"{x.name} vs {y.name}: same")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "nested.bin", tmp / "hf", "--select", "model"), 0,
              "nested .bin --select model vs HF dir")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "nested.bin", tmp / "hf"), 1, "without --select the keys differ")
    changed = dict(tensors)
    changed["h"] = tensors["h"].clone()
    changed["h"][0, 0] = -changed["h"][0, 0] + 1
    save_file(changed, str(tmp / "changed.safetensors"))
    j = run_json(dcpctl, "diff", tmp / "hf", tmp / "changed.safetensors", rc=1, what="HF vs changed safetensors")
    check(verdicts(j).get("h") == "values_changed" and j.get("counts", {}).get("values_changed") == 1, "one key changed across formats")

    # --select on an app state against the exported model
    save_dcp({"app": {"model": tensors, "epoch": 2}}, tmp / "app")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "app", tmp / "model.safetensors", "--select", "app.model"), 0,
              "app state --select app.model vs model.safetensors")
    expect_rc(run(dcpctl, "stats", "-q", tmp / "model.pt"), 0, "stats on a .pt")

    # reshard by torch: 2 gloo ranks, Shard(0) and Shard(1)
    import torch.multiprocessing as mp

    # forked, not spawned: the workers need no second start of Python and torch
    mp.start_processes(_reshard_worker, args=(2, free_port(), str(tmp / "w2"), 1), nprocs=2, join=True,
                       start_method="fork")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "dcp", tmp / "w2"), 0, "single-process save vs torch's 2-rank save")
    expect_rc(run(dcpctl, "diff", "-q", tmp / "w2", tmp / "hf", "--max-memory", "64"), 0,
              "2-rank save vs HF dir in a tiny memory budget (element-sized windows)")
    j = run_json(dcpctl, "stats", tmp / "w2", what="stats of the 2-rank save")
    got = {e["key"]: e for e in j.get("tensors", [])}
    for k, t in tensors.items():
        ref = torch_stats(t)
        if k in got and "mean" in ref:
            check(close(jf(got[k]["mean"]), ref["mean"]) and got[k]["zeros"] == ref["zeros"], f"stats w2 {k} equal to torch")

    hf_bin_dirs(dcpctl, fixtures, tmp)

    # every fixture against torch's own dcp_to_torch_save of it
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    cases = sorted(p for p in fixtures.iterdir() if (p / "ckpt").is_dir())
    check(len(cases) >= 14, f"{len(cases)} fixtures with a ckpt/ under {fixtures}, fewer than the 14 committed")
    for case in cases:
        pt = tmp / f"{case.name}.pt"
        try:
            dcp_to_torch_save(str(case / "ckpt"), str(pt))
        except Exception as e:  # noqa: BLE001
            check(False, f"{case.name}: dcp_to_torch_save failed: {e}")
            continue
        try:
            torch.load(pt, weights_only=True)
            safe = True
        except Exception:  # noqa: BLE001
            safe = False
        r = run(dcpctl, "diff", case / "ckpt", pt)
        if safe:
            expect_rc(r, 0, f"{case.name} vs dcp_to_torch_save: same ({r.stdout[-800:]})")
            if case.name in ("dtensor_2d_mesh", "dtensor_shard0_uneven", "sample"):
                # grids of chunks walked in windows of every size, down to single elements
                for budget in ("64", "500", "2000", "100000"):
                    expect_rc(run(dcpctl, "diff", "-q", case / "ckpt", pt, "--max-memory", budget, "--threads", "3"), 0,
                              f"{case.name} vs dcp_to_torch_save, --max-memory {budget}")
        else:
            expect_rc(r, 5, f"{case.name} vs dcp_to_torch_save holding what weights_only refuses", "weights_only")
        pt.unlink()


def torch_load_bin_dir(d: Path) -> dict:
    """What transformers' loader reads from a pytorch_model*.bin directory: every file the index
    names (or pytorch_model.bin), torch.load(weights_only=True), merged."""
    index = d / "pytorch_model.bin.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["pytorch_model.bin"]
    out = {}
    for f in files:
        out.update(torch.load(d / f, weights_only=True))
    return out


def hf_bin_dirs(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    """Hugging Face directories of torch.save files written by transformers 4.57.6
    save_pretrained(safe_serialization=False) (tests/fixtures/hf_bin/README.md)."""
    sharded, single = fixtures / "hf_bin" / "sharded", fixtures / "hf_bin" / "single"
    views = {}
    for d in (sharded, single):
        view = views[d.name] = torch_load_bin_dir(d)
        j = run_json(dcpctl, "stats", d, what=f"stats of hf_bin/{d.name}")
        check(j.get("layout") == "torch-save", f"hf_bin/{d.name}: layout torch-save ({j.get('layout')})")
        got = {e["key"]: e for e in j.get("tensors", [])}
        check(set(got) == set(view), f"hf_bin/{d.name}: stats covers exactly torch's keys ({len(got)} vs {len(view)})")
        for k, t in view.items():
            g_, ref = got.get(k, {}), torch_stats(t)
            check(g_.get("dtype") == str(t.dtype).removeprefix("torch.") and g_.get("shape") == list(t.shape),
                  f"hf_bin/{d.name}: {k}: dtype and shape")
            for f in ("numel", "nan", "zeros"):
                check(g_.get(f) == ref[f], f"hf_bin/{d.name}: {k}: {f} {g_.get(f)} == torch's {ref[f]}")
            for f in ("min", "max", "mean", "std", "l2_norm"):
                check(close(jf(g_.get(f)), ref[f], 1e-12, 1e-300), f"hf_bin/{d.name}: {k}: {f} {g_.get(f)} ~ torch's {ref[f]!r}")
    check(len({f for f in sharded.iterdir() if f.suffix == ".bin"}) == 3, "the sharded fixture has 3 .bin shards")

    # the same tensors in other formats, written here by torch / safetensors
    tensors = views["sharded"]
    write_hf_dir(tensors, tmp / "bin_as_hf")
    torch.save(tensors, tmp / "bin_as.pt")
    for other in (tmp / "bin_as_hf", tmp / "bin_as.pt", sharded):
        expect_rc(run(dcpctl, "diff", "-q", sharded, other), 0, f"hf_bin/sharded vs {other.name}: same")
    # a bf16 export of the same model: dtype changed; by value within bf16's rounding
    j = run_json(dcpctl, "diff", sharded, single, rc=1, what="hf_bin sharded vs single")
    check(set(verdicts(j).values()) == {"dtype_changed"}, f"fp32 vs bf16 dirs: dtype_changed ({set(verdicts(j).values())})")
    for rtol in (1e-2, 1e-4):
        want = {k: torch.allclose(tensors[k].double(), views["single"][k].double(), rtol=rtol, atol=0) for k in tensors}
        j = run_json(dcpctl, "diff", sharded, single, "--ignore-dtype", "--rtol", str(rtol), rc=0 if all(want.values()) else 1,
                     what=f"hf_bin sharded vs single --ignore-dtype --rtol {rtol}")
        v = verdicts(j)
        check(all(v.get(k) == ("identical" if w else "values_changed") for k, w in want.items()),
              f"--rtol {rtol}: every key's verdict equals torch.allclose")

    # one shard rewritten by torch with one element changed
    changed = tmp / "bin_changed"
    shutil.copytree(sharded, changed)
    shard = changed / "pytorch_model-00002-of-00003.bin"
    sd = torch.load(shard, weights_only=True)
    key = sorted(sd)[0]
    sd[key] = sd[key].clone()
    sd[key].view(-1)[5] += 1.0
    torch.save(sd, shard)
    j = run_json(dcpctl, "diff", sharded, changed, rc=1, what="hf_bin: one element changed in shard 2")
    e = next((x for x in j.get("keys", []) if x["key"] == key), {})
    check(e.get("status") == "values_changed" and e.get("differing") == 1 and j.get("counts", {}).get("values_changed") == 1,
          f"hf_bin: {key} changed, nothing else: {e}")

    # incomplete: a shard the index names is missing; the index names a key in a file without it
    gone = tmp / "bin_gone"
    shutil.copytree(sharded, gone)
    (gone / "pytorch_model-00002-of-00003.bin").unlink()
    expect_rc(run(dcpctl, "stats", gone), 3, "hf_bin: a shard missing", "pytorch_model-00002-of-00003.bin")
    expect_rc(run(dcpctl, "diff", sharded, gone), 3, "hf_bin: diff with a shard missing", "pytorch_model-00002-of-00003.bin")
    moved = tmp / "bin_moved"
    shutil.copytree(sharded, moved)
    idx = json.loads((moved / "pytorch_model.bin.index.json").read_text())
    k0 = next(k for k, f in idx["weight_map"].items() if f.startswith("pytorch_model-00001"))
    idx["weight_map"][k0] = "pytorch_model-00003-of-00003.bin"
    (moved / "pytorch_model.bin.index.json").write_text(json.dumps(idx))
    expect_rc(run(dcpctl, "stats", moved), 3, "hf_bin: index names a key in a file without it", k0)
    single_only = tmp / "bin_single"
    shutil.copytree(single, single_only)
    (single_only / "pytorch_model.bin").write_bytes(b"not a zip")
    expect_rc(run(dcpctl, "stats", single_only), 3, "hf_bin: pytorch_model.bin that is not a zip", "pytorch_model.bin")


# ---------------------------------------------------------------------------------------------
# refusals


def mode_refusals(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    sample = fixtures / "sample" / "ckpt"
    expect_rc(run(dcpctl, "diff", sample, tmp / "nope"), 4, "missing input", "nope")
    expect_rc(run(dcpctl, "stats", tmp / "nope"), 4, "stats of a missing input")
    run_dir = fixtures / "layouts" / "run_torchtitan" / "run"
    expect_rc(run(dcpctl, "diff", run_dir, sample), 2, "a run folder")
    expect_rc(run(dcpctl, "stats", run_dir), 2, "stats of a run folder")
    expect_rc(run(dcpctl, "diff", sample, sample, "--bogus"), 2, "unknown option")
    expect_rc(run(dcpctl, "diff", sample), 2, "one input only")
    expect_rc(run(dcpctl, "diff", sample, sample, "--select", "nothing.here"), 2, "--select matching neither side")
    expect_rc(run(dcpctl, "diff", sample, sample, "--atol", "-1"), 2, "negative tolerance")

    save_file({"w": torch.randn(64, 64)}, str(tmp / "t.safetensors"))
    data = (tmp / "t.safetensors").read_bytes()
    (tmp / "cut.safetensors").write_bytes(data[: len(data) - 100])
    expect_rc(run(dcpctl, "diff", tmp / "t.safetensors", tmp / "cut.safetensors"), 3, "truncated safetensors")
    expect_rc(run(dcpctl, "stats", tmp / "cut.safetensors"), 3, "stats of a truncated safetensors")

    broken = tmp / "broken"
    shutil.copytree(fixtures / "dtensor_shard0_uneven" / "ckpt", broken)
    (broken / "__1_0.distcp").unlink()
    expect_rc(run(dcpctl, "diff", fixtures / "dtensor_shard0_uneven" / "ckpt", broken), 3, "a data file missing (the checkpoint is incomplete)", "__1_0.distcp")
    expect_rc(run(dcpctl, "stats", broken), 3, "stats with a data file missing (incomplete)", "__1_0.distcp")

    torch.save({"w": torch.ones(2), "buf": io.BytesIO(b"x")}, tmp / "unsafe.pt")
    expect_rc(run(dcpctl, "stats", tmp / "unsafe.pt"), 5, ".pt holding io.BytesIO", "buf")
    torch.save({"w": torch.randn(3, 4).t()}, tmp / "strided.pt")
    expect_rc(run(dcpctl, "diff", tmp / "strided.pt", tmp / "strided.pt"), 5, ".pt with a transposed view", "'w'")
    with open(tmp / "legacy.pt", "wb") as f:
        torch.save({"w": torch.ones(2)}, f, _use_new_zipfile_serialization=False)
    expect_rc(run(dcpctl, "stats", tmp / "legacy.pt"), 5, "legacy torch.save format", "legacy")
    (tmp / "junk.pt").write_bytes(b"not a zip at all")
    expect_rc(run(dcpctl, "stats", tmp / "junk.pt"), 3, "a .pt that is not a zip")


def main() -> int:
    mode, dcpctl, fixtures = sys.argv[1], os.path.abspath(sys.argv[2]), Path(sys.argv[3]).resolve()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="dcpctl-diffstats-") as t:
        {"stats": mode_stats, "diff": mode_diff, "formats": mode_formats, "refusals": mode_refusals}[mode](
            dcpctl, fixtures, Path(t))
    return summary("diff_stats_test")


if __name__ == "__main__":
    sys.exit(main())
