#!/usr/bin/env python3
"""`dcpctl consolidate` checked by real torch (run with the project's venv python).

    consolidate_test.py MODE DCPCTL FIXTURES_DIR

The oracle is torch's own converter: every fixture is turned into a .pt by
``torch.distributed.checkpoint.format_utils.dcp_to_torch_save`` in a temporary directory and read
back with ``torch.load``; dcpctl's outputs are read with ``torch.load(weights_only=True)``,
``safetensors.torch.load_file`` and ``safe_open`` and compared with it: dtype, shape and every byte
(``torch.equal`` of the tensors viewed as uint8), and for the nested .pt the whole structure,
non-tensor values included.

MODE is one of:
  formats       every fixture x every output: single .safetensors, HF dir with a small
                --max-shard-size (several shards + index), HF dir with the default size (one
                model.safetensors, no index), HF dir with --max-shard-size 1 (a shard per tensor),
                .pt nested (as dcp_to_torch_save), .pt nested --keep-unsafe-values, .pt --flat.
                Tensors safetensors cannot hold make dcpctl exit 5 naming the key; the run passes
                once those keys are --exclude'd.
  select        --select app.model: exactly the model's state_dict keys, strict load_state_dict
                into the rebuilt model, equal to torch's own full state dict (model_full.pt); the
                same for torchtitan's model.*, sample's TinyLM and the nesting under --select.
  filters       --include / --exclude globs (repeatable, fnmatch semantics: '*' crosses dots,
                case-sensitive) against Python's fnmatch.fnmatchcase on every fixture.
  dtype         --dtype for every target on every fixture, bit for bit against torch's
                oracle_tensor.to(dtype) (floating tensors only; integer/bool/complex untouched).
  cast-special  a DCP checkpoint made here with dcp.save (one process) holding float32/float64
                special values (+-0, subnormals, every rounding boundary of every target, +-inf,
                NaNs with many payloads, max/min finite, values above fp8/fp16 range, 2^16 random
                bit patterns) and every bit pattern of float16/bfloat16/float8: dcpctl --dtype X
                against torch's .to(X), bit for bit, for each X.
  cross-fs      outputs on another filesystem than the checkpoint (/dev/shm or $DCPCTL_XDEV_DIR;
                skips with 77 when there is none, fails under CI): copy_file_range fails with EXDEV there, so
                the buffered copy path is the one checked (safetensors, HF dir, .pt, a cast).
  edge          small checkpoints made here: a tensor named `__metadata__` (safetensors' header
                entry) must not give an unloadable file with exit 0; `-o x.pt --max-shard-size`
                must not write a directory named x.pt.

Casts are compared bit for bit with torch's .to(), NaN signs and payloads included (the README
promises "bit for bit"); a tensor missing from an output fails. torch's CPU kernels give
position-dependent NaN bits for two (source, target) pairs only: tests/interop/torch_casts.py
says which and accepts exactly torch's two answers there.

Exit status: 0 pass, 1 failure, 77 skip (torch/safetensors missing; a failure instead under CI, tests/skip.py).
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from skip import skip_or_fail, skip_or_fail_code  # noqa: E402
from testlib import EXIT_UNSUPPORTED, check, each_case, fail, problems, run, same_tensor, summary  # noqa: E402

try:
    import torch
    import safetensors.torch as st
    from safetensors import safe_open
except ImportError as e:  # pragma: no cover
    skip_or_fail(f"the virtualenv lacks a module: {e}")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixtures"))
import dcp_oracle  # noqa: E402
import torch_casts  # noqa: E402

warnings.simplefilter("ignore")

NOTES: list[str] = []

# What users type for --dtype, and the torch dtype it means.
TARGETS = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp64": torch.float64,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
# Source dtypes --dtype converts (dcpctl's castable(): real floating point with a c10 conversion).
CASTABLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2}
# dtypes safetensors 0.8 cannot hold at all (no dtype name in its format).
SAFETENSORS_CANNOT = {torch.complex32, torch.complex128}
# dtypes safetensors 0.8 holds but dcpctl refuses for safetensors output (reported as a NOTE).
DCPCTL_MAY_REFUSE = {torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.float4_e2m1fn_x2}

DCPCTL = ""
# dtype mode: fixtures also cast into .safetensors (every fixture is cast into .pt --flat)
ST_CAST_FIXTURES = {"all_dtypes", "all_dtypes_sharded", "sample", "zstd"}
# dtype mode: fixtures left out (same dtypes and layouts as others: multi_file, fsdp2_app_state)
DTYPE_SKIP = {"one_file_per_item", "async_save", "torchtitan_style"}
# cross-fs mode: the fixtures it runs on
XDEV_FIXTURES = {"plain_single", "sample", "dtensor_shard0_uneven", "dtensor_2d_mesh", "all_dtypes",
                 "all_dtypes_sharded", "zstd", "multi_file", "odd_keys_values"}
# filters mode: the fixtures it runs on (glob matching does not depend on the fixture)
FILTER_FIXTURES = {"fsdp2_app_state", "torchtitan_style", "sample", "odd_keys_values", "all_dtypes"}


def note(msg: str) -> None:
    if msg not in NOTES:
        NOTES.append(msg)
        print("NOTE: " + msg, file=sys.stderr)


def consolidate(*args: str, timeout: int = 600) -> tuple[int, str, str]:
    """dcpctl consolidate ARGS: (exit code, stdout, stderr); a crash is a failure (testlib.run)."""
    p = run(DCPCTL, "consolidate", *args, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def run_ok(what: str, *args: str) -> dict | None:
    """Runs consolidate with --json; returns the summary, or None (failure recorded)."""
    rc, out, err = consolidate(*args, "--json")
    if not check(rc == 0, f"{what}: dcpctl consolidate {' '.join(args)} exited {rc}: {err.strip()[:600]}"):
        return None
    try:
        return json.loads(out)
    except json.JSONDecodeError as e:
        fail(f"{what}: --json output is not JSON ({e}): {out[:300]}")
        return None


# ------------------------------------------------------------------------------------------------
# the oracle: torch's dcp_to_torch_save


class Oracle:
    def __init__(self, case_dir: Path, tmp: Path):
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        self.case = case_dir.name
        self.ckpt = case_dir / "ckpt"
        out = tmp / f"oracle_{self.case}.pt"
        dcp_to_torch_save(str(self.ckpt), str(out))
        # torch's own output holds BytesIO etc.: trusted, our own file
        self.nested = torch.load(out, weights_only=False)
        out.unlink()
        md = dcp_oracle.read_metadata_raw(self.ckpt)
        self.md = md
        self.planner = {k: tuple(v) for k, v in (md.planner_data or {}).items()}
        self.keys = list(md.state_dict_metadata)  # metadata order
        self.flat = {k: get_path(self.nested, self.path(k)) for k in self.keys}
        self.tensors = {k: v for k, v in self.flat.items() if isinstance(v, torch.Tensor)}
        self.values = {k: v for k, v in self.flat.items() if not isinstance(v, torch.Tensor)}
        # values torch.load(weights_only=True) refuses: dcpctl leaves them out of .pt by default
        self.unsafe = {k for k, v in self.values.items() if not weights_only_loads(v)}

    def path(self, key: str) -> tuple:
        return self.planner.get(key, (key,))


def get_path(root, path):
    cur = root
    for p in path:
        cur = cur[p]
    return cur


def weights_only_loads(v) -> bool:
    buf = io.BytesIO()
    torch.save({"v": v}, buf)
    buf.seek(0)
    try:
        torch.load(buf, weights_only=True)
        return True
    except Exception:
        return False


def compare_tree(got, exp, where: str) -> list[str]:
    """Recursive exact comparison (types, dict key order, tensors bitwise, NaN == NaN)."""
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return [f"{where}: expected a tensor, got {type(got).__name__}"]
        d = same_tensor(got, exp, requires_grad=True)
        return [f"{where}: {d}"] if d else []
    if isinstance(exp, dict):
        if not isinstance(got, dict):
            return [f"{where}: expected a dict, got {type(got).__name__}"]
        msgs = []
        if list(got.keys()) != list(exp.keys()):
            if set(got.keys()) != set(exp.keys()):
                return [f"{where}: keys differ: missing {sorted(map(str, set(exp) - set(got)))[:8]}, "
                        f"unexpected {sorted(map(str, set(got) - set(exp)))[:8]}"]
            msgs.append(f"{where}: same keys, different order")
        for k in exp:
            msgs += compare_tree(got[k], exp[k], f"{where}[{k!r}]")
        return msgs
    if isinstance(exp, list) and isinstance(got, list) and any(isinstance(x, (torch.Tensor, dict, list)) for x in exp):
        if len(got) != len(exp):
            return [f"{where}: list length {len(got)} != {len(exp)}"]
        msgs = []
        for i, (g, e) in enumerate(zip(got, exp)):
            msgs += compare_tree(g, e, f"{where}[{i}]")
        return msgs
    if not dcp_oracle.values_equal(got, exp):
        return [f"{where}: {dcp_oracle.stable_repr(got)[:120]} != expected {dcp_oracle.stable_repr(exp)[:120]}"]
    return []


def without(nested, paths: list[tuple]):
    """A copy of `nested` without the leaves at `paths`; containers emptied by that vanish."""

    def rec(node, here: tuple):
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                p = here + (k,)
                if p in drop:
                    continue
                r = rec(v, p)
                if r is _GONE:
                    continue
                out[k] = r
            return _GONE if not out and node and here else out
        if isinstance(node, list):
            out = []
            for i, v in enumerate(node):
                p = here + (i,)
                if p in drop:
                    out.append(_HOLE)
                    continue
                r = rec(v, p)
                out.append(_HOLE if r is _GONE else r)
            while out and out[-1] is _HOLE:
                out.pop()
            if not out and node:
                return _GONE
            return [None if x is _HOLE else x for x in out]
        return node

    drop = set(paths)
    return rec(nested, ())


_GONE = object()
_HOLE = object()


def glob_escape(key: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", key)


# ------------------------------------------------------------------------------------------------
# safetensors checks


def parse_safetensors_header(path: Path) -> tuple[dict, int]:
    data = path.read_bytes()
    if len(data) < 8:
        raise ValueError("shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n % 8:
        raise ValueError(f"header length {n} is not a multiple of 8")
    text = data[8:8 + n].decode("utf-8")
    if text != text.rstrip(" ") + " " * (len(text) - len(text.rstrip(" "))):
        raise ValueError("header padding is not spaces")
    hdr = json.loads(text)
    # data section fully covered, no gaps, no overlaps
    spans = sorted(tuple(v["data_offsets"]) for k, v in hdr.items() if k != "__metadata__")
    pos = 0
    for b, e in spans:
        if b != pos or e < b:
            raise ValueError(f"data section not contiguous at {pos}: span {b}..{e}")
        pos = e
    if 8 + n + pos != len(data):
        raise ValueError(f"data section {pos} bytes, file holds {len(data) - 8 - n}")
    return hdr, len(data) - 8 - n


def check_safetensors_file(path: Path, expect: dict[str, torch.Tensor], what: str) -> None:
    """`path` holds exactly `expect` (flat key -> tensor), loadable by safetensors, format pt."""
    try:
        hdr, _ = parse_safetensors_header(path)
    except Exception as e:
        fail(f"{what}: {path.name}: malformed safetensors: {e}")
        return
    check(hdr.get("__metadata__") == {"format": "pt"},
          f"{what}: {path.name}: __metadata__ {hdr.get('__metadata__')!r} != {{'format': 'pt'}}")
    try:
        with safe_open(str(path), framework="pt") as f:
            check(f.metadata() == {"format": "pt"}, f"{what}: safe_open metadata {f.metadata()!r}")
            keys = list(f.keys())
        got = st.load_file(str(path))
    except Exception as e:
        fail(f"{what}: {path.name}: safetensors cannot load it: {e}")
        return
    check(set(keys) == set(expect), f"{what}: {path.name}: keys differ: missing {sorted(set(expect) - set(keys))[:8]}, "
             f"unexpected {sorted(set(keys) - set(expect))[:8]}")
    for k in expect:
        if not check(k in got, f"{what}: {path.name}: {k} missing from the output"):
            continue
        d = same_tensor(got[k], expect[k], requires_grad=True)
        check(not d, f"{what}: {path.name}: {k}: {d}")


def check_hf_dir(out: Path, expect: dict[str, torch.Tensor], cap: int | None, what: str,
                 want_shards: str) -> None:
    """HF layout: one model.safetensors (no index) or model-i-of-N + index; cap respected."""
    # dcpctl's manifest (docs/integrity.md) is checked by e2e-manifest: here the HF layout only
    names = sorted(p.name for p in out.iterdir() if p.name != "dcpctl-manifest.json")
    check(not any("dcpctl-tmp" in n for n in names), f"{what}: temporary left in output dir: {names}")
    if names == ["model.safetensors"]:
        check(want_shards != "many", f"{what}: expected several shards, got one model.safetensors")
        check_safetensors_file(out / "model.safetensors", expect, what)
        if cap is not None:
            total = sum(t.numel() * t.element_size() for t in expect.values())
            check(not (total > cap and len([t for t in expect.values() if t.numel()]) > 1),
                  f"{what}: {total} bytes in one shard over the cap {cap}")
        return
    check(want_shards != "one", f"{what}: expected one model.safetensors, got {names[:6]}")
    if not check("model.safetensors.index.json" in names,
                 f"{what}: several files but no model.safetensors.index.json: {names[:6]}"):
        return
    shards = [n for n in names if n != "model.safetensors.index.json"]
    N = len(shards)
    want = [f"model-{i:05d}-of-{N:05d}.safetensors" for i in range(1, N + 1)]
    if not check(shards == want, f"{what}: shard names {shards[:4]}... != {want[:4]}..."):
        return
    try:
        idx = json.loads((out / "model.safetensors.index.json").read_text())
    except Exception as e:
        fail(f"{what}: index is not JSON: {e}")
        return
    check(set(idx) == {"metadata", "weight_map"}, f"{what}: index keys {sorted(idx)}")
    total = sum(t.numel() * t.element_size() for t in expect.values())
    check(idx.get("metadata", {}).get("total_size") == total,
          f"{what}: total_size {idx.get('metadata', {}).get('total_size')} != sum of tensor bytes {total}")
    wm = idx.get("weight_map", {})
    check(set(wm) == set(expect), f"{what}: weight_map keys differ: missing {sorted(set(expect) - set(wm))[:6]}, "
             f"unexpected {sorted(set(wm) - set(expect))[:6]}")
    check(set(wm.values()) == set(shards),
          f"{what}: weight_map names files {sorted(set(wm.values()))[:4]} != shards on disk")
    for s in shards:
        mine = {k: expect[k] for k, f in wm.items() if f == s and k in expect}
        check_safetensors_file(out / s, mine, f"{what} {s}")
        nbytes = sum(t.numel() * t.element_size() for t in mine.values())
        check(not (cap is not None and nbytes > cap and len([t for t in mine.values() if t.numel()]) > 1),
              f"{what}: {s} holds {nbytes} tensor bytes over --max-shard-size {cap} "
                 f"with {len(mine)} tensors (only a lone oversized tensor may exceed it)")


# ------------------------------------------------------------------------------------------------
# modes


def safetensors_exclusions(o: Oracle, tmp: Path) -> list[str]:
    """Runs .safetensors output until it succeeds, collecting the keys dcpctl refuses (exit 5,
    key named). Returns those keys; checks each refusal is a dtype safetensors/dcpctl can't do."""
    excluded: list[str] = []
    for _ in range(len(o.tensors) + 1):
        out = tmp / "probe.safetensors"
        args = [str(o.ckpt), "-o", str(out), "--dry-run"]
        for k in excluded:
            args += ["--exclude", glob_escape(k)]
        rc, _, err = consolidate(*args)
        if rc == 0:
            break
        if not check(rc == 5, f"{o.case}: safetensors dry run exited {rc} (want 0 or 5): {err.strip()[:300]}"):
            break
        named = [k for k in o.tensors if k not in excluded and k in err]
        bad = [k for k in named if o.tensors[k].dtype in SAFETENSORS_CANNOT | DCPCTL_MAY_REFUSE]
        if not check(bad, f"{o.case}: exit 5 without naming a key of an unsupported dtype: {err.strip()[:300]}"):
            break
        k = max(bad, key=len)
        excluded.append(k)
        # the same refusal on a real (non dry) run, with nothing written
        if len(excluded) == 1:
            rc2, _, err2 = consolidate(str(o.ckpt), "-o", str(out))
            check(not (rc2 != 5 or k not in err2 or out.exists()),
                  f"{o.case}: real run: exit {rc2}, key named: {k in err2}, output exists: {out.exists()}")
    must = {k for k, t in o.tensors.items() if t.dtype in SAFETENSORS_CANNOT}
    check(must <= set(excluded), f"{o.case}: dcpctl wrote keys safetensors cannot hold: {sorted(must - set(excluded))}")
    for k in excluded:
        if o.tensors[k].dtype in DCPCTL_MAY_REFUSE:
            note(f"dcpctl refuses {o.tensors[k].dtype} for safetensors output (key {k}), although "
                 f"safetensors 0.8 holds it")
    return excluded


def check_notes_once(err: str, what: str, expect_note: bool) -> None:
    lines = [l for l in err.splitlines() if "left out" in l]
    check(not (expect_note and len(lines) != 1),
          f"{what}: expected one 'left out' line on stderr, got {len(lines)}: {err.strip()[:300]}")
    check(not (not expect_note and lines), f"{what}: unexpected 'left out' note: {lines}")


ONLY: list[str] = []  # the fixtures named on the command line, if any


def named(fixtures: list[Path], names) -> list[Path]:
    """The fixtures of a mode's list (FILTER_FIXTURES, XDEV_FIXTURES); one missing is a failure, but
    where the command line named the fixtures to run."""
    got = [p for p in fixtures if p.name in names]
    check(bool(ONLY) or len(got) == len(set(names)), f"fixtures {sorted(set(names) - {p.name for p in got})} are missing")
    return got


def mode_formats(fixtures: list[Path], tmp: Path) -> None:
    for case in each_case(fixtures, 5):
        o = Oracle(case, tmp)
        what = case.name
        print(f"== {what}: {len(o.tensors)} tensors, {len(o.values)} values, unsafe {sorted(o.unsafe)}", flush=True)
        excl = (safetensors_exclusions(o, tmp)
                if any(t.dtype in SAFETENSORS_CANNOT | DCPCTL_MAY_REFUSE for t in o.tensors.values()) else [])
        xargs = [a for k in excl for a in ("--exclude", glob_escape(k))]
        st_expect = {k: t for k, t in o.tensors.items() if k not in excl}
        total = sum(t.numel() * t.element_size() for t in st_expect.values())

        # single .safetensors (without --json, to see the notes as a user does)
        out = tmp / f"{what}.safetensors"
        rc, _, err = consolidate(str(o.ckpt), "-o", str(out), *xargs)
        if rc != 0:
            fail(f"{what} .safetensors: exit {rc}: {err.strip()[:400]}")
        else:
            check_safetensors_file(out, st_expect, f"{what} .safetensors")
            check_notes_once(err, f"{what} .safetensors", bool(o.values))
            out.unlink()

        # HF directory: small cap -> several shards; default cap -> one model.safetensors;
        # cap 1 -> a shard per non-empty tensor
        nonempty = [t for t in st_expect.values() if t.numel()]
        caps = [(max(1, total // 4), "many" if len(nonempty) > 1 else "any", "small"),
                (None, "one", "default"), (1, "many" if len(nonempty) > 1 else "any", "1")]
        for cap, want, label in caps:
            d = tmp / f"{what}_hf_{label}"
            # --include '*': every key, as this test checks the layout (without a selection an HF
            # folder takes the model beside an optimizer alone: hf_export_test.py)
            args = [str(o.ckpt), "-o", str(d) + "/", "--include", "*", *xargs]
            if cap is not None:
                args += ["--max-shard-size", str(cap)]
            s = run_ok(f"{what} hf cap={label}", *args)
            if s is not None:
                check_hf_dir(d, st_expect, cap if cap is not None else 5_000_000_000, f"{what} hf cap={label}", want)
                check(not (s.get("tensors") != len(st_expect) or s.get("tensor_bytes") != total),
                      f"{what} hf: summary tensors/bytes {s.get('tensors')}/{s.get('tensor_bytes')} "
                         f"!= {len(st_expect)}/{total}")
                subprocess.run(["rm", "-rf", str(d)], check=True)

        # .pt nested (dcp_to_torch_save's structure), unsafe values left out
        out = tmp / f"{what}.pt"
        rc, jout, err = consolidate(str(o.ckpt), "-o", str(out), "--json")
        if rc != 0:
            fail(f"{what} .pt: exit {rc}: {err.strip()[:400]}")
        else:
            s = json.loads(jout)
            skipped = {x.split(" (holds")[0] for x in s.get("non_tensor_skipped", [])}
            check(skipped == o.unsafe,
                  f"{what} .pt: left out {sorted(skipped)}, but torch.load(weights_only=True) refuses "
                     f"exactly {sorted(o.unsafe)}")
            check_notes_once(err, f"{what} .pt", bool(o.unsafe))
            try:
                got = torch.load(out, weights_only=True)
            except Exception as e:
                fail(f"{what} .pt: torch.load(weights_only=True) failed: {e}")
            else:
                exp = without(o.nested, [o.path(k) for k in o.unsafe])
                problems([f"{what} .pt nested: {m}" for m in compare_tree(got, exp, "pt")[:10]])
            out.unlink()

        # .pt nested with --keep-unsafe-values: exactly torch's own output
        rc, _, err = consolidate(str(o.ckpt), "-o", str(out), "--keep-unsafe-values")
        if rc != 0:
            fail(f"{what} .pt --keep-unsafe-values: exit {rc}: {err.strip()[:400]}")
        else:
            got = torch.load(out, weights_only=False)
            problems([f"{what} .pt --keep-unsafe-values: {m}" for m in compare_tree(got, o.nested, "pt")[:10]])
            if not o.unsafe:
                torch.load(out, weights_only=True)
            out.unlink()

        # .pt --flat (and, on one fixture, the .pth / .bin / --format torch spellings)
        flats = [(f"{what}.pt", ["--flat"])]
        if what == "plain_single":
            flats += [(f"{what}.pth", ["--flat"]), (f"{what}.bin", ["--flat"]),
                      (f"{what}.flat", ["--flat", "--format", "torch"])]
        for name, extra in flats:
            out = tmp / name
            rc, _, err = consolidate(str(o.ckpt), "-o", str(out), *extra)
            if not check(rc == 0, f"{what} {name} {extra}: exit {rc}: {err.strip()[:400]}"):
                continue
            try:
                got = torch.load(out, weights_only=True)
            except Exception as e:
                fail(f"{what} {name}: torch.load(weights_only=True) failed: {e}")
                continue
            exp = {k: v for k, v in o.flat.items() if k not in o.unsafe}
            problems([f"{what} {name} --flat: {m}" for m in compare_tree(got, exp, "flat")[:10]])
            out.unlink()
        left = [p.name for p in tmp.iterdir()
                if (p.name.startswith(what) and not p.name.endswith(".dcpctl-manifest.json")) or "dcpctl-tmp" in p.name]
        check(not left, f"{what}: files left behind: {left}")


def mode_select(fixtures: list[Path], tmp: Path) -> None:
    import fixture_models

    by = {p.name: p for p in fixtures}
    # fsdp2_app_state: {"app": {"model", "optim", "epoch"}}
    o = Oracle(by["fsdp2_app_state"], tmp)
    ref = torch.load(by["fsdp2_app_state"] / "model_full.pt", weights_only=True)
    model_keys = list(fixture_models.FsdpMLP().state_dict().keys())
    for fmt, name in (("pt", "sel.pt"), ("pt-flat", "sel_flat.pt"), ("st", "sel.safetensors")):
        out = tmp / name
        args = [str(o.ckpt), "-o", str(out), "--select", "app.model"] + (["--flat"] if fmt == "pt-flat" else [])
        if run_ok(f"--select app.model {fmt}", *args) is None:
            continue
        sd = st.load_file(str(out)) if fmt == "st" else torch.load(out, weights_only=True)
        check(sorted(sd) == sorted(model_keys),
              f"--select app.model {fmt}: keys {sorted(sd)} != model keys {sorted(model_keys)}")
        m = fixture_models.FsdpMLP()
        try:
            res = m.load_state_dict(sd, strict=True)
            check(not (res.missing_keys or res.unexpected_keys), f"--select app.model {fmt}: {res}")
        except Exception as e:
            fail(f"--select app.model {fmt}: strict load_state_dict failed: {e}")
        for k, t in ref.items():
            d = same_tensor(m.state_dict()[k], t, requires_grad=True) if k in m.state_dict() else "missing"
            check(not d, f"--select app.model {fmt}: {k} vs model_full.pt: {d}")
            if k in sd:
                d = same_tensor(sd[k], t, requires_grad=True)
                check(not d, f"--select app.model {fmt}: {k} in output vs model_full.pt: {d}")
        out.unlink()

    # nested --select keeps the subtree's nesting: app.optim -> {"state": {...}, "param_groups": [...]}
    out = tmp / "optim.pt"
    if run_ok("--select app.optim", str(o.ckpt), "-o", str(out), "--select", "app.optim") is not None:
        got = torch.load(out, weights_only=True)
        exp = o.nested["app"]["optim"]
        problems([f"--select app.optim .pt: {m}" for m in compare_tree(got, exp, "optim")[:10]])
        out.unlink()
    # --select of a leaf-level prefix that is not a path boundary, and of nothing
    rc, _, err = consolidate(str(o.ckpt), "-o", str(tmp / "none.pt"), "--select", "app.nothing")
    check(not (rc != 2 or "app.nothing" not in err or (tmp / "none.pt").exists()),
          f"--select app.nothing: exit {rc} (want 2 naming it, usage: nothing selected), err {err.strip()[:200]}")
    rc, _, err = consolidate(str(o.ckpt), "-o", str(tmp / "none.pt"), "--select", "app.mod")
    check(not (rc != 2 or "app.mod" not in err),
          f"--select app.mod (not a whole path element): exit {rc}, want 2 naming it: {err.strip()[:200]}")

    # torchtitan: --select model -> FsdpMLP keys (planner paths are ('model', 'fc1.weight'))
    o2 = Oracle(by["torchtitan_style"], tmp)
    for name in ("tt.pt", "tt.safetensors"):
        out = tmp / name
        if run_ok(f"torchtitan --select model {name}", str(o2.ckpt), "-o", str(out), "--select", "model") is None:
            continue
        sd = st.load_file(str(out)) if name.endswith("safetensors") else torch.load(out, weights_only=True)
        m = fixture_models.FsdpMLP()
        try:
            m.load_state_dict(sd, strict=True)
        except Exception as e:
            fail(f"torchtitan --select model {name}: strict load failed: {e}")
        for k, t in sd.items():
            d = same_tensor(t, o2.flat["model." + k], requires_grad=True)
            check(not d, f"torchtitan --select model {name}: {k}: {d}")
        out.unlink()

    # sample: TinyLM in mixed precision under app.model
    o3 = Oracle(by["sample"], tmp)
    out = tmp / "lm.pt"
    if run_ok("sample --select app.model", str(o3.ckpt), "-o", str(out), "--select", "app.model") is not None:
        sd = torch.load(out, weights_only=True)
        m = fixture_models.TinyLM().to_mixed_precision()
        try:
            m.load_state_dict(sd, strict=True)
        except Exception as e:
            fail(f"sample --select app.model: strict load failed: {e}")
        for k, t in m.state_dict().items():
            d = same_tensor(t, o3.flat["app.model." + k], requires_grad=True)
            check(not d, f"sample --select app.model: {k}: {d}")
        out.unlink()


def mode_filters(fixtures: list[Path], tmp: Path) -> None:
    cases = [
        (["--include", "*.weight"], []),
        (["--include", "*weight*", "--include", "*bias"], []),
        ([], ["--exclude", "*optim*"]),
        (["--include", "app.model.*"], ["--exclude", "*.bias", "--exclude", "*norm*"]),
        (["--include", "*.[0-9].*"], []),
        (["--include", "*WEIGHT"], []),  # case-sensitive: matches nothing on most fixtures
        (["--include", "*"], ["--exclude", "*?_*"]),
    ]
    for case in each_case(named(fixtures, FILTER_FIXTURES), 5):
        o = Oracle(case, tmp)
        excl_dtypes = [k for k, t in o.tensors.items() if t.dtype in SAFETENSORS_CANNOT | DCPCTL_MAY_REFUSE]
        for inc, exc in cases:
            incs = inc[1::2]
            excs = exc[1::2]
            want = [k for k in o.keys
                    if (not incs or any(fnmatch.fnmatchcase(k, g) for g in incs))
                    and not any(fnmatch.fnmatchcase(k, g) for g in excs)]
            out = tmp / "f.pt"
            rc, _, err = consolidate(str(o.ckpt), "-o", str(out), "--flat", "--keep-unsafe-values", *inc, *exc)
            what = f"{case.name} {' '.join(inc + exc)}"
            if not want:
                check(not (rc != 2 or out.exists()),
                      f"{what}: nothing selected: exit {rc} (want 2), output exists {out.exists()}")
                continue
            if not check(rc == 0, f"{what}: exit {rc}: {err.strip()[:300]}"):
                continue
            got = torch.load(out, weights_only=False)
            if list(got) != want:
                fail(f"{what}: keys {list(got)[:8]} != {want[:8]} (fnmatch)")
            else:
                for k in want:
                    problems([f"{what}: {m}" for m in compare_tree(got[k], o.flat[k], k)])
            out.unlink()
            # the same selection into safetensors: tensors only
            st_want = [k for k in want if k in o.tensors and k not in excl_dtypes]
            if not st_want:
                continue
            out = tmp / "f.safetensors"
            xs = [a for k in excl_dtypes for a in ("--exclude", glob_escape(k))]
            rc, _, err = consolidate(str(o.ckpt), "-o", str(out), *inc, *exc, *xs)
            if not check(rc == 0, f"{what} safetensors: exit {rc}: {err.strip()[:300]}"):
                continue
            check_safetensors_file(out, {k: o.tensors[k] for k in st_want}, f"{what} safetensors")
            out.unlink()


# ---- casts ----------------------------------------------------------------------------------------


bits = torch_casts.bits


def cast_compare(got: torch.Tensor, src: torch.Tensor, dst: torch.dtype, what: str) -> None:
    """got must be bit-identical to torch's src.to(dst), NaNs included (tests/interop/torch_casts.py)."""
    problems([f"{what}: {m}" for m in torch_casts.compare(got, src, dst)])


def mode_dtype(fixtures: list[Path], tmp: Path) -> None:
    for case in fixtures:
        if case.name in DTYPE_SKIP:
            continue
        o = Oracle(case, tmp)
        if not any(t.dtype in CASTABLE for t in o.tensors.values()):
            continue
        excl = [k for k, t in o.tensors.items() if t.dtype in SAFETENSORS_CANNOT | DCPCTL_MAY_REFUSE]
        xs = [a for k in excl for a in ("--exclude", glob_escape(k))]
        fmts = ("pt", "safetensors") if case.name in ST_CAST_FIXTURES else ("pt",)
        for name, dst in TARGETS.items():
            for fmt in fmts:
                out = tmp / f"cast.{fmt}"
                args = [str(o.ckpt), "-o", str(out), "--dtype", name]
                args += ["--flat"] if fmt == "pt" else xs
                s = run_ok(f"{case.name} --dtype {name} {fmt}", *args)
                if s is None:
                    continue
                got = torch.load(out, weights_only=True) if fmt == "pt" else st.load_file(str(out))
                ncast = 0
                for k, t in o.tensors.items():
                    if fmt == "safetensors" and k in excl:
                        continue
                    if not check(k in got, f"{case.name} --dtype {name} {fmt}: {k} missing"):
                        continue
                    what = f"{case.name} --dtype {name} {fmt}: {k}"
                    if t.dtype in CASTABLE:
                        ncast += t.dtype != dst
                        cast_compare(got[k], t, dst, what)
                    else:
                        d = same_tensor(got[k], t, requires_grad=True)
                        check(not d, f"{what} ({t.dtype}, must stay untouched): {d}")
                check(s["cast"]["tensors"] == ncast,
                      f"{case.name} --dtype {name} {fmt}: summary says {s['cast']['tensors']} tensors cast, "
                         f"expected {ncast}")
                out.unlink()


def special_tensors() -> dict[str, torch.Tensor]:
    """float32/float64 values at every interesting place, and every narrow bit pattern."""
    f32 = torch.finfo(torch.float32)
    specials = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), -float("nan"),
                f32.max, -f32.max, f32.tiny, -f32.tiny, f32.smallest_normal / 2, 1.401298464324817e-45,
                -1.401298464324817e-45, f32.eps, 65504.0, 65519.99, 65520.0, 65536.0, -65520.0, 1e5, 448.0,
                464.0, 479.99, 480.0, 500.0, -480.0, 57344.0, 61439.0, 61440.0, 61441.0, 1e6, -1e6, 3e38,
                2 ** -14, 2 ** -24, 2 ** -25, 2 ** -25 * 1.0000001, 2 ** -26, 2 ** -133, 2 ** -126 * 0.75,
                2 ** -6, 2 ** -9, 2 ** -10, 2 ** -16, 2 ** -17, 2 ** -18, 1 + 2 ** -8, 1 + 2 ** -9, 1 + 3 * 2 ** -9,
                0.1, 1 / 3, -2.5, 3.14159]
    out: dict[str, torch.Tensor] = {}
    out["f32.special"] = torch.tensor(specials, dtype=torch.float32)
    # NaN payloads and signs: quiet/signalling, both signs, low and high payload bits
    nan_bits = [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA00000,
                0x7FC00001, 0x7FD55555, 0xFFAAAAAA, 0x7F810000, 0x7FE00000, 0x7F800100, 0xFF8FFFFF]
    nb = torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in nan_bits], dtype=torch.int32)
    out["f32.nans"] = nb.view(torch.float32)
    g = torch.Generator().manual_seed(1234)
    rnd = torch.randint(-(2 ** 31), 2 ** 31, (65536 + 13,), dtype=torch.int64, generator=g).to(torch.int32)
    out["f32.random_bits"] = rnd.view(torch.float32)
    # every rounding boundary of every narrow target: midpoints of consecutive representable values
    # (exact in float32) and the float32 neighbours on each side
    for nm, dt in (("bf16", torch.bfloat16), ("f16", torch.float16), ("e4m3", torch.float8_e4m3fn),
                   ("e5m2", torch.float8_e5m2)):
        n = 1 << (8 * torch.empty(0, dtype=dt).element_size())
        allb = torch.arange(n, dtype=torch.int32)
        allb = allb.to(torch.int16 if n == 65536 else torch.uint8)
        vals = allb.view(dt).to(torch.float64)
        vals = vals[torch.isfinite(vals)]
        vals = torch.unique(vals)  # sorted, -0 merged with 0
        mids = ((vals[1:] + vals[:-1]) / 2).to(torch.float32)
        # one past the largest finite: the overflow boundary
        top = vals[-1].item()
        ulp = top - vals[-2].item()
        extra = torch.tensor([top + ulp / 2, -(top + ulp / 2), top + ulp, -(top + ulp)], dtype=torch.float32)
        m = torch.cat([mids, extra])
        up = torch.nextafter(m, torch.tensor(float("inf")))
        dn = torch.nextafter(m, torch.tensor(float("-inf")))
        out[f"f32.boundary_{nm}"] = torch.cat([m, up, dn, vals.to(torch.float32)])
    # float64 sources: double rounding (torch goes through float32) and f64-only ranges
    d = [1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, 1 + 2 ** -4 + 2 ** -40, 1 + 2 ** -3 + 2 ** -40,
         1 + 2 ** -24 + 2 ** -60, 1e-300, -1e-300, 1e300, -1e300, 5e-324, 2 ** -149, 2 ** -150, 2 ** -150 * 1.5,
         3.4028235677973366e38, 3.4028235e38 * 1.0000001, 65520.0 - 1e-9, 65520.0 + 1e-9,
         float("inf"), float("-inf"), float("nan"), 0.0, -0.0]
    f64 = torch.tensor(d, dtype=torch.float64)
    f64_nans = torch.tensor([0x7FF8000000000000, -0x0008000000000000, 0x7FF0000000000001,
                             0x7FF8000000000001, 0x7FFFFFFFFFFFFFFF], dtype=torch.int64).view(torch.float64)
    rnd64 = torch.randint(-(2 ** 62), 2 ** 62, (4099,), dtype=torch.int64, generator=g) * 2
    out["f64.special"] = torch.cat([f64, f64_nans])
    out["f64.random_bits"] = rnd64.view(torch.float64)
    out["f64.near_f32_range"] = (torch.rand(1031, generator=g, dtype=torch.float64) * 2 - 1) * 1e-37
    out["f64.boundaries"] = torch.cat([out[f"f32.boundary_{n}"].to(torch.float64) for n in ("f16", "bf16", "e4m3", "e5m2")]) \
        + torch.tensor(2 ** -45, dtype=torch.float64) * torch.sign(torch.cat([out[f"f32.boundary_{n}"].to(torch.float64) for n in ("f16", "bf16", "e4m3", "e5m2")]))
    # every bit pattern of the narrow sources
    out["f16.all"] = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    out["bf16.all"] = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    out["e4m3.all"] = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    out["e5m2.all"] = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e5m2)
    # a 2-D tensor (a real weight shape) with specials spread over it
    w = torch.randn(37, 129, generator=g, dtype=torch.float32) * 1000
    w.view(-1)[::97] = out["f32.special"].repeat(200)[: w.numel()][::97]
    out["f32.weight_2d"] = w
    return out


def mode_cast_special(tmp: Path) -> None:
    import torch.distributed.checkpoint as dcp

    sd = special_tensors()
    ckpt = tmp / "special_ckpt"
    dcp.save(sd, checkpoint_id=str(ckpt))
    # oracle: torch's own reading of the checkpoint
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(str(ckpt), str(tmp / "special_oracle.pt"))
    oracle = torch.load(tmp / "special_oracle.pt", weights_only=True)
    for k, t in sd.items():
        check(torch.equal(bits(oracle[k]), bits(t)), f"torch's own round trip changed {k}")
    for name, dst in TARGETS.items():
        for fmt in ("safetensors", "pt"):
            out = tmp / f"special.{fmt}"
            args = [str(ckpt), "-o", str(out), "--dtype", name] + (["--flat"] if fmt == "pt" else [])
            s = run_ok(f"special --dtype {name} {fmt}", *args)
            if s is None:
                continue
            got = st.load_file(str(out)) if fmt == "safetensors" else torch.load(out, weights_only=True)
            for k, t in oracle.items():
                if not check(k in got, f"special --dtype {name} {fmt}: {k} missing from the output"):
                    continue
                cast_compare(got[k], t, dst, f"special --dtype {name} {fmt}: {k}")
            out.unlink()


def mode_edge(tmp: Path) -> None:
    """Small checkpoints made here with dcp.save for outputs that must not be silently wrong."""
    import torch.distributed.checkpoint as dcp

    # a tensor named like safetensors' header metadata entry
    ck = tmp / "meta_key"
    dcp.save({"__metadata__": torch.ones(2), "w": torch.arange(3, dtype=torch.float32)}, checkpoint_id=str(ck))
    for name in ("m.safetensors", "mdir/"):
        out = tmp / name
        args = [str(ck), "-o", str(out) + ("/" if name.endswith("/") else "")]
        if name.endswith("/"):
            args += ["--max-shard-size", "8"]
        rc, _, err = consolidate(*args)
        # safetensors keeps the name for its header's metadata entry: always refused (exit 5)
        # naming the key and the ways out, never a header a reader misparses
        check(not (rc != EXIT_UNSUPPORTED or "__metadata__" not in err or "--select" not in err),
              f"key __metadata__ -> {name}: exit {rc}, want a refusal (5, unsupported) naming the key and "
                 f"--select: {err.strip()[:200]}")
        check(not out.exists(), f"key __metadata__ -> {name}: exit {rc} and an output was left")
        subprocess.run(["rm", "-rf", str(out)], check=True)

    # --max-shard-size with a file name that says .pt: never a directory called x.pt
    ck2 = tmp / "small"
    dcp.save({"a": torch.ones(4), "b": torch.zeros(4)}, checkpoint_id=str(ck2))
    out = tmp / "x.pt"
    rc, _, err = consolidate(str(ck2), "-o", str(out), "--max-shard-size", "1GB")
    check(not (rc != 2 or "--max-shard-size" not in err or out.exists()),
          f"-o x.pt --max-shard-size 1GB: exit {rc}, output exists {out.exists()} (want a usage error, exit 2, "
             f"naming --max-shard-size, nothing written): {err.strip()[:200]}")
    subprocess.run(["rm", "-rf", str(out)], check=True)


def other_filesystem_dir(than: Path) -> Path | None:
    """A writable directory on another filesystem than `than` ($DCPCTL_XDEV_DIR, else /dev/shm)."""
    for c in (os.environ.get("DCPCTL_XDEV_DIR"), "/dev/shm"):
        if c and os.path.isdir(c) and os.access(c, os.W_OK) and os.stat(c).st_dev != os.stat(than).st_dev:
            return Path(c)
    return None


def mode_cross_fs(fixtures: list[Path], tmp: Path) -> int:
    """Outputs on another filesystem than the checkpoint (copy_file_range gives EXDEV there, so
    the buffered path runs): same checks as `formats` for safetensors, HF dir and .pt."""
    base = other_filesystem_dir(fixtures[0])
    if base is None:
        # Every Linux machine CI runs on has a tmpfs /dev/shm: under CI its absence is a failure.
        return skip_or_fail_code("no writable directory on another filesystem than the fixtures "
                                 "(set DCPCTL_XDEV_DIR, or provide /dev/shm)")
    with tempfile.TemporaryDirectory(prefix="dcpctl-xdev-", dir=base) as t:
        x = Path(t)
        for case in each_case(named(fixtures, XDEV_FIXTURES), 4):
            o = Oracle(case, tmp)
            excl = [k for k, v in o.tensors.items() if v.dtype in SAFETENSORS_CANNOT | DCPCTL_MAY_REFUSE]
            xargs = [a for k in excl for a in ("--exclude", glob_escape(k))]
            st_expect = {k: v for k, v in o.tensors.items() if k not in excl}
            what = f"{case.name} (output on {base})"
            for threads in ("1", "4"):
                out = x / "m.safetensors"
                if run_ok(f"{what} .safetensors", str(o.ckpt), "-o", str(out), "--threads", threads, *xargs) is not None:
                    check_safetensors_file(out, st_expect, f"{what} .safetensors")
                    out.unlink()
                d = x / "hf"
                if run_ok(f"{what} hf", str(o.ckpt), "-o", str(d) + "/", "--max-shard-size", "1000", "--include", "*",
                          "--threads", threads, *xargs) is not None:
                    check_hf_dir(d, st_expect, 1000, f"{what} hf", "any")
                    subprocess.run(["rm", "-rf", str(d)], check=True)
                out = x / "m.pt"
                if run_ok(f"{what} .pt", str(o.ckpt), "-o", str(out), "--threads", threads) is not None:
                    got = torch.load(out, weights_only=True)
                    exp = without(o.nested, [o.path(k) for k in o.unsafe])
                    problems([f"{what} .pt: {m}" for m in compare_tree(got, exp, "pt")[:10]])
                    out.unlink()
                # with a cast (the windowed cast path)
                out = x / "c.safetensors"
                if run_ok(f"{what} --dtype bf16", str(o.ckpt), "-o", str(out), "--dtype", "bf16", *xargs) is not None:
                    got = st.load_file(str(out))
                    for k, v in st_expect.items():
                        if k not in got:
                            fail(f"{what} --dtype bf16: {k} missing from the output")
                        elif v.dtype in CASTABLE:
                            cast_compare(got[k], v, torch.bfloat16, f"{what} --dtype bf16: {k}")
                        elif d := same_tensor(got[k], v, requires_grad=True):
                            fail(f"{what} --dtype bf16: {k} ({v.dtype}, must stay untouched): {d}")
                    check(set(got) == set(st_expect),
                          f"{what} --dtype bf16: unexpected keys {sorted(set(got) - set(st_expect))[:6]}")
                    out.unlink()
            left = [n for n in os.listdir(x) if not n.endswith("dcpctl-manifest.json")]
            check(not left, f"{what}: left behind: {left}")
    return 0


# What a full run of each mode always makes, a little under what one made (2026-11-29: formats 4545,
# select 130, filters 1474, dtype 4669, cast-special 413, cross-fs 2602, edge 6), so that a fixture or
# a comparison lost fails (docs/testing.md#no-test-passes-on-nothing).
MIN_CHECKS = {"formats": 4300, "select": 120, "filters": 1400, "dtype": 4400, "cast-special": 390,
              "cross-fs": 2400, "edge": 6}

def main() -> int:
    global DCPCTL
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    mode, DCPCTL = sys.argv[1], sys.argv[2]
    fixtures_root = Path(sys.argv[3]) if len(sys.argv) > 3 else HERE.parent / "fixtures"
    only = sys.argv[4:]
    fixtures = sorted(p for p in fixtures_root.iterdir() if (p / "ckpt" / ".metadata").is_file())
    if not fixtures:
        print(f"no fixture with ckpt/.metadata under {fixtures_root}", file=sys.stderr)
        return 2
    unknown = sorted(set(only) - {p.name for p in fixtures})
    if unknown:
        print(f"no fixture {unknown} under {fixtures_root}", file=sys.stderr)
        return 2
    if not only and len(fixtures) < 14:  # the committed fixtures: one lost fails, never a smaller run
        print(f"{len(fixtures)} fixtures with ckpt/.metadata under {fixtures_root}, fewer than the 14 committed",
              file=sys.stderr)
        return 1
    if only:
        fixtures = [p for p in fixtures if p.name in only]
        ONLY.extend(only)
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest()
              for f in fixtures for p in sorted((f / "ckpt").iterdir())}
    with tempfile.TemporaryDirectory(prefix="dcpctl-consolidate-") as t:
        tmp = Path(t)
        if mode == "formats":
            mode_formats(fixtures, tmp)
        elif mode == "select":
            mode_select(fixtures, tmp)
        elif mode == "filters":
            mode_filters(fixtures, tmp)
        elif mode == "dtype":
            mode_dtype(fixtures, tmp)
        elif mode == "cast-special":
            mode_cast_special(tmp)
        elif mode == "edge":
            mode_edge(tmp)
        elif mode == "cross-fs":
            rc = mode_cross_fs(fixtures, tmp)
            if rc != 0:
                return rc
        else:
            print(f"unknown mode {mode}", file=sys.stderr)
            return 2
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest()
             for f in fixtures for p in sorted((f / "ckpt").iterdir())}
    check(after == before,
          f"the fixtures' checkpoint files changed: {sorted(str(p) for p in set(before) | set(after) if before.get(p) != after.get(p))[:5]}")
    print(f"{mode}: {len(NOTES)} note(s)")
    return summary(f"consolidate_test {mode}", min_checks=MIN_CHECKS[mode])


if __name__ == "__main__":
    sys.exit(main())
