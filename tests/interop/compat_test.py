#!/usr/bin/env python3
"""torch 2.15 checkpoints and the torch releases before it (tests/fixtures/layouts/torch_2_15_*,
written by real torch 2.15.0: every TensorProperties a 6-tuple with the strides).

    compat_test.py DCPCTL FIXTURES

Checks, for each torch_2_15_* case:
  - every older torch in DCPCTL_OLD_TORCH_PYTHON (tools/dev.sh: 2.14.1 and 2.6.0) refuses the
    original with "too many values to unpack (expected 5)" (the fixture is what users hit);
  - `inspect --json` counts the strided TensorProperties (every tensor), dates the writer to 2.15
    and says loadable_by.oldest = "2.15"; the text output says so and names `dcpctl compat`;
  - `dcpctl compat CKPT -o OUT`: every file but .metadata taken over (hard-linked or reflinked on
    this filesystem: same bytes, and a hard link the same inode), nothing strided left, and each
    older torch loads OUT with dcp_to_torch_save to exactly what torch 2.15 loads from the original
    (tensors bit for bit, dtype and shape; python values equal); torch 2.15 loads OUT too;
  - `--link copy` copies, `--link hard` into another filesystem (/dev/shm) is exit 5 leaving
    nothing while auto falls back to a copy there, `--link reflink` is exit 0 or 5 as a probe of the
    filesystem (cp --reflink=always) says it must be;
  - refusals: an existing output without --force (2), an output inside the checkpoint (2), a
    layout without a DCP .metadata (5), an incomplete checkpoint (3), nothing left behind by any;
  - the contract of issue 34: `reshard` and `cast` of a 2.15 checkpoint write 5-tuple properties
    that every older torch and 2.15 load, equal to torch 2.15's view.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from testlib import check, old_torch_pythons, run, skip_or_fail, summary  # noqa: E402

import torch  # noqa: E402

CASES = ["torch_2_15_plain", "torch_2_15_dtensor", "torch_2_15_fsdp2"]

# Loads DCP checkpoints with that interpreter's torch (dcp_to_torch_save, the single-process
# reader) into .pt files the pinned torch then compares: one process per interpreter for every
# checkpoint queued (importing torch costs seconds). Prints one JSON line per checkpoint.
LOADER = r"""
import json, sys, torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
for line in sys.stdin:
    ckpt, out = json.loads(line)
    try:
        dcp_to_torch_save(ckpt, out)
        print(json.dumps({"ok": True, "msg": torch.__version__}), flush=True)
    except BaseException as e:  # torch's CheckpointException derives from BaseException
        m = str(e)
        m = "too many values to unpack (expected 5)" if "too many values to unpack (expected 5)" in m else m[-300:]
        print(json.dumps({"ok": False, "msg": "LOAD-FAILED: " + m}), flush=True)
"""


class Loads:
    """Checkpoints queued for one interpreter, loaded in one process, then each result handed to
    its callback as (ok, message, path of the .pt)."""

    def __init__(self, py: str, tmp: Path) -> None:
        self.py, self.tmp, self.queue = py, tmp, []

    def add(self, ckpt: Path, then) -> None:
        out = self.tmp / f"load-{abs(hash(self.py)) % 10**6}-{len(self.queue)}.pt"
        self.queue.append((str(ckpt), str(out), then))

    def run(self) -> None:
        if not self.queue:
            return
        stdin = "".join(json.dumps([c, o]) + "\n" for c, o, _ in self.queue)
        r = run(self.py, "-c", LOADER, input=stdin, timeout=900)
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        check(len(lines) == len(self.queue), f"{self.py}: {len(lines)} results for {len(self.queue)} loads "
                                            f"(exit {r.returncode}): {r.stderr[-400:]}")
        for (ckpt, out, then), res in zip(self.queue, lines):
            then(res["ok"], res["msg"], Path(out))
            Path(out).unlink(missing_ok=True)
        self.queue = []


def flat(obj, prefix: str = "") -> dict:
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flat(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = obj
    return out


def same_value(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        a, b = a.contiguous(), b.contiguous()
        if a.dtype.is_complex:
            a, b = torch.view_as_real(a), torch.view_as_real(b)
        if a.numel() == 0:
            return True
        ba = a.reshape(-1).view(torch.uint8) if a.dtype != torch.bool else a.reshape(-1).to(torch.uint8)
        bb = b.reshape(-1).view(torch.uint8) if b.dtype != torch.bool else b.reshape(-1).to(torch.uint8)
        return torch.equal(ba, bb)
    return a == b


def same_state(got: dict, want: dict, what: str) -> None:
    g, w = flat(got), flat(want)
    check(sorted(g) == sorted(w), f"{what}: keys differ: {sorted(set(g) ^ set(w))[:5]}")
    bad = [k for k in w if k in g and not same_value(g[k], w[k])]
    check(not bad, f"{what}: values differ for {bad[:5]}")


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def reflink_supported(where: Path) -> bool:
    a, b = where / "probe-a", where / "probe-b"
    a.write_bytes(b"x" * 4096)
    ok = run(["cp", "--reflink=always", str(a), str(b)]).returncode == 0
    a.unlink()
    b.unlink(missing_ok=True)
    return ok


def load_here(ckpt: Path, tmp: Path):
    """The pinned torch's (2.15) view of a checkpoint, in this process."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = tmp / "here.pt"
    dcp_to_torch_save(str(ckpt), str(out))
    state = torch.load(out, weights_only=True)
    out.unlink()
    return state


def check_case(dcpctl: str, fixtures: Path, case: str, olds: dict, tmp: Path) -> None:
    """Checks what needs no older torch now; queues the older torches' loads on `olds` (one
    Loads per interpreter, run by main once every case is queued)."""
    ckpt = fixtures / "layouts" / case / "ckpt"
    want = load_here(ckpt, tmp)  # torch 2.15's own view of the original
    n_tensors = sum(1 for v in flat(want).values() if isinstance(v, torch.Tensor))

    for py, loads in olds.items():
        def refused(ok, msg, _pt, py=py):
            check(not ok and "too many values to unpack (expected 5)" in msg,
                  f"{case}: {py} refuses the 2.15 original with the 5-tuple error (got: {msg})")
        loads.add(ckpt, refused)

    r = run([dcpctl, "inspect", "--json", str(ckpt)])
    check(r.returncode == 0, f"{case}: inspect --json exit {r.returncode}: {r.stderr[-300:]}")
    if r.returncode == 0:
        m = json.loads(r.stdout)["metadata"]
        check(m["strided_tensors"] == n_tensors, f"{case}: strided_tensors {m['strided_tensors']} != {n_tensors} tensors")
        check(m["loadable_by"]["oldest"] == "2.15", f"{case}: loadable_by {m['loadable_by']}")
        check(m["writer_releases"] == "2.15 or newer", f"{case}: writer_releases {m['writer_releases']!r}")
    r = run([dcpctl, "inspect", str(ckpt)])
    check(r.returncode == 0 and "Loads in    torch 2.15 or newer" in r.stdout and "dcpctl compat" in r.stdout,
          f"{case}: inspect's text names the 2.15 bound and dcpctl compat: {r.stdout[:400]}")

    out = tmp / f"{case}-compat"
    r = run([dcpctl, "compat", str(ckpt), "-o", str(out), "--json"])
    check(r.returncode == 0, f"{case}: compat exit {r.returncode}: {r.stderr[-400:]}")
    if r.returncode != 0:
        return
    j = json.loads(r.stdout)
    src_files = [f for f in files_under(ckpt) if f != ".metadata"]
    taken = j["files"]["reflinked"] + j["files"]["hard_linked"] + j["files"]["copied"]
    check(taken == len(src_files), f"{case}: compat took over {taken} files, the checkpoint has {len(src_files)}")
    check(j["files"]["copied"] == 0, f"{case}: auto copied {j['files']['copied']} files on one filesystem")
    check(j["strided_tensors"] == n_tensors and j["loadable_by"]["oldest"] == "2.4",
          f"{case}: compat --json {j['strided_tensors']} strided, now {j['loadable_by']}")
    check(files_under(out) == files_under(ckpt), f"{case}: output files {files_under(out)} != {files_under(ckpt)}")
    for f in src_files:
        check((out / f).read_bytes() == (ckpt / f).read_bytes(), f"{case}: {f} differs in the output")
        if j["files"]["hard_linked"]:
            check((out / f).stat().st_ino == (ckpt / f).stat().st_ino, f"{case}: {f} is not a hard link")
    check(not any(p.name.startswith(".") and "dcpctl-tmp" in p.name for p in tmp.iterdir()),
          f"{case}: a temporary was left beside the output")
    r = run([dcpctl, "inspect", "--json", str(out)])
    m = json.loads(r.stdout)["metadata"] if r.returncode == 0 else {}
    check(m.get("strided_tensors") == 0 and m.get("loadable_by", {}).get("oldest") == "2.4",
          f"{case}: the output's inspect: exit {r.returncode}, {m.get('strided_tensors')}, {m.get('loadable_by')}")
    r = run([dcpctl, "verify", "--deep", str(out)])
    check(r.returncode == 0, f"{case}: verify --deep of the output exit {r.returncode}: {r.stdout[-300:]}{r.stderr[-300:]}")
    same_state(load_here(out, tmp), want, f"{case}: torch {torch.__version__} on the compat output")
    for py, loads in olds.items():
        def loaded(ok, msg, pt, py=py):
            check(ok, f"{case}: {py} loads the compat output ({msg})")
            if ok:
                same_state(torch.load(pt, weights_only=True), want, f"{case}: torch {msg} on the compat output")
        loads.add(out, loaded)

    # --link copy: the same output, every file copied.
    out_copy = tmp / f"{case}-copy"
    r = run([dcpctl, "compat", str(ckpt), "-o", str(out_copy), "--link", "copy", "--json"])
    check(r.returncode == 0 and json.loads(r.stdout)["files"]["copied"] == len(src_files),
          f"{case}: --link copy exit {r.returncode}: {r.stdout[-300:]}{r.stderr[-300:]}")
    if r.returncode == 0:
        check(files_under(out_copy) == files_under(ckpt), f"{case}: --link copy wrote {files_under(out_copy)}")
        check((out_copy / ".metadata").read_bytes() == (out / ".metadata").read_bytes(),
              f"{case}: --link copy and auto wrote different .metadata")
        for f in src_files:
            check((out_copy / f).stat().st_ino != (ckpt / f).stat().st_ino, f"{case}: --link copy hard-linked {f}")
        shutil.rmtree(out_copy)

    # Every older torch and 2.15 load reshard and cast outputs of the 2.15 checkpoint (5-tuples).
    for cmd, extra in (("reshard", ["--world-size", "3"]), ("cast", ["--dtype", "bf16"])):
        o = tmp / f"{case}-{cmd}"
        r = run([dcpctl, cmd, str(ckpt), "-o", str(o), *extra])
        check(r.returncode == 0, f"{case}: {cmd} exit {r.returncode}: {r.stderr[-300:]}")
        if r.returncode != 0:
            continue
        expect = flat(want)
        if cmd == "cast":
            expect = {k: (v.to(torch.bfloat16) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
                      for k, v in expect.items()}
        same_state(flat(load_here(o, tmp)), expect, f"{case}: torch {torch.__version__} on the {cmd} output")
        for py, loads in olds.items():
            def loaded(ok, msg, pt, py=py, cmd=cmd, expect=expect):
                check(ok, f"{case}: {py} loads the {cmd} output ({msg})")
                if ok:
                    same_state(flat(torch.load(pt, weights_only=True)), expect, f"{case}: torch {msg} on the {cmd} output")
            loads.add(o, loaded)


def check_refusals(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    ckpt = fixtures / "layouts" / "torch_2_15_plain" / "ckpt"

    def refused(args: list[str], code: int, what: str, gone: Path | None) -> None:
        r = run([dcpctl, "compat", *args])
        check(r.returncode == code, f"refusal {what}: exit {r.returncode}, want {code}: {r.stderr[-300:]}")
        check(r.stderr.strip() != "", f"refusal {what}: no message")
        if gone is not None:
            check(not gone.exists(), f"refusal {what}: {gone} was left")
        left = [p.name for p in gone.parent.iterdir() if "dcpctl-tmp" in p.name] if gone is not None else []
        check(not left, f"refusal {what}: temporaries left: {left}")

    exists = tmp / "exists"
    exists.mkdir()
    r = run([dcpctl, "compat", str(ckpt), "-o", str(exists)])
    check(r.returncode == 2 and "--force" in r.stderr, f"existing output without --force: exit {r.returncode}: {r.stderr[-200:]}")
    check(list(exists.iterdir()) == [], "existing output without --force: it was written into")
    r = run([dcpctl, "compat", str(ckpt), "-o", str(exists), "--force"])
    check(r.returncode == 0 and (exists / ".metadata").exists(), f"--force replaces: exit {r.returncode}: {r.stderr[-200:]}")

    inside_src = tmp / "inside-src"
    shutil.copytree(ckpt, inside_src)
    refused([str(inside_src), "-o", str(inside_src / "out")], 2, "output inside the checkpoint", inside_src / "out")
    refused([str(fixtures / "layouts" / "hf_consolidated" / "ckpt"), "-o", str(tmp / "hf-out")], 5,
            "a layout without .metadata", tmp / "hf-out")
    broken = tmp / "broken"
    shutil.copytree(ckpt, broken)
    for f in broken.glob("*.distcp"):
        f.unlink()
        break
    refused([str(broken), "-o", str(tmp / "broken-out")], 3, "an incomplete checkpoint", tmp / "broken-out")
    for f in files_under(broken):
        check((broken / f).read_bytes() == (ckpt / f).read_bytes(), f"the incomplete input's {f} was modified")

    # Link modes against the filesystems at hand.
    want_reflink = 0 if reflink_supported(tmp) else 5
    r = run([dcpctl, "compat", str(ckpt), "-o", str(tmp / "reflink"), "--link", "reflink"])
    check(r.returncode == want_reflink, f"--link reflink: exit {r.returncode}, the filesystem probe says {want_reflink}: {r.stderr[-200:]}")
    check((tmp / "reflink").exists() == (want_reflink == 0), "--link reflink: output presence")
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(ckpt).st_dev:
        skip_or_fail("no second filesystem (/dev/shm, tmpfs) to check the cross-filesystem fallbacks")
    with tempfile.TemporaryDirectory(dir=shm) as other:
        o = Path(other) / "hard"
        refused([str(ckpt), "-o", str(o), "--link", "hard"], 5, "--link hard across filesystems", o)
        o = Path(other) / "auto"
        r = run([dcpctl, "compat", str(ckpt), "-o", str(o), "--json"])
        ok = r.returncode == 0
        check(ok, f"auto across filesystems: exit {r.returncode}: {r.stderr[-200:]}")
        if ok:
            j = json.loads(r.stdout)
            check(j["files"]["copied"] == len(files_under(ckpt)) - 1, f"auto across filesystems copied {j['files']}")


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    if not torch.__version__.startswith("2.15."):
        skip_or_fail(f"the pinned torch is 2.15 (tools/requirements.txt); this venv has {torch.__version__}")
    olds = old_torch_pythons(required=True)
    with tempfile.TemporaryDirectory(prefix="dcpctl-compat-") as t:
        tmp = Path(t)
        loads = {py: Loads(py, tmp) for py in olds}
        for case in CASES:
            check_case(dcpctl, fixtures, case, loads, tmp)
        for l in loads.values():
            l.run()
        check_refusals(dcpctl, fixtures, tmp)
    return summary("compat_test")


if __name__ == "__main__":
    sys.exit(main())
