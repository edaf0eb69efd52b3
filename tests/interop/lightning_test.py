#!/usr/bin/env python3
"""`dcpctl consolidate -o X.pt` of a Lightning checkpoint against Lightning's own consolidation.

    lightning_test.py DCPCTL FIXTURES_DIR

Fixtures: tests/fixtures/layouts/lightning_{trainer,fabric} (Lightning 2.6.6's Trainer and Fabric,
FSDPStrategy(state_dict_type="sharded"): DCP + meta.pt; make_lightning.py). Their expected.json
holds, as "lightning_consolidated", what Lightning's own consolidation wrote
(python -m lightning.{pytorch,fabric}.utilities.consolidate_checkpoint), loaded with
torch.load(weights_only=True) and described whole by dcp_oracle.describe_tree: key order, nesting,
container and scalar types, every tensor's dtype/shape/stride/storage offset/SHA-256. The CI venv
has no lightning, so that recorded result is the oracle; where `lightning` imports, its tool is
also run here on the fixture and must agree.

Checks:
  - dcpctl's .pt, loaded by torch.load(weights_only=True), describes exactly as Lightning's
    (Trainer form: state_dict/optimizer_states; Fabric: model/optimizer and meta.pt's keys), also
    with --threads 1 and --io buffered; --dry-run --json reports the merge it would do;
  - --no-lightning-meta gives dcp_to_torch_save's nesting of the DCP state alone; --flat, a
    selection and a .safetensors output leave meta.pt out and say so on stderr;
  - hand-made meta.pt files in copies of the fixtures: a global torch.load(weights_only=True)
    refuses (as Lightning's own load of meta.pt does) -> exit 5 naming meta.pt and the key path,
    --dry-run too, nothing written; with --keep-unsafe-values it is kept; a persistent id that is
    not a torch storage, an EXT1 opcode (a copyreg extension the VM does not represent), a
    non-string top-level key -> exit 5 even with --keep-unsafe-values; the Trainer form with an
    optimizer_<i> missing (Lightning's tool raises KeyError) -> exit 5; a flipped byte in
    meta.pt's tensor record -> exit 3 naming meta.pt;
  - under torchrun (2 ranks): the same .pt; a refusal ends both ranks with exit 5 promptly.
Exit status: 0 pass, 1 failure.
"""

from __future__ import annotations

import argparse
import copyreg
import importlib.util
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import dcp_oracle  # noqa: E402
from testlib import check, expect_rc, free_port, run, summary  # noqa: E402
import torch  # noqa: E402

CASES = {"lightning_trainer": ("trainer", "lightning.pytorch.utilities.consolidate_checkpoint"),
         "lightning_fabric": ("fabric", "lightning.fabric.utilities.consolidate_checkpoint")}
def diff_trees(a, b) -> str:
    import difflib

    x = json.dumps(a, indent=1).splitlines()
    y = json.dumps(b, indent=1).splitlines()
    return "\n".join(list(difflib.unified_diff(x, y, "lightning", "dcpctl", lineterm=""))[:40])


def dcp_nested(ckpt: Path):
    return dcp_oracle.describe_tree(dcp_oracle.nested_state_from_dcp(ckpt))


def check_case(dcpctl: str, case: str, fixtures: Path, tmp: Path) -> None:
    layout, tool = CASES[case]
    d = fixtures / "layouts" / case
    ckpt = d / "ckpt"
    expected = json.loads((d / "expected.json").read_text())
    want = expected["lightning_consolidated"]
    meta_keys = expected["meta_pt"]["keys"]

    if importlib.util.find_spec("lightning") is not None:  # the live oracle, where it is installed
        out = tmp / f"{case}-lightning.pt"
        r = subprocess.run([sys.executable, "-m", tool, str(ckpt), "--output_file", str(out)], capture_output=True, text=True,
                           timeout=600)
        if check(r.returncode == 0, f"{case}: Lightning's tool failed: {r.stderr[-1000:]}"):
            live = dcp_oracle.describe_tree(torch.load(out, weights_only=True))
            check(live == want, f"{case}: Lightning's tool today disagrees with the recorded result:\n{diff_trees(want, live)}")
    else:
        print(f"{case}: lightning is not installed here: the result Lightning's tool recorded in expected.json is the oracle")

    for extra in ([], ["--threads", "1", "--io", "buffered"]):
        pt = tmp / f"{case}{len(extra)}.pt"
        r = run(dcpctl, "consolidate", str(ckpt), "-o", str(pt), "--json", "-q", *extra)
        if not expect_rc(r, 0, f"{case}: consolidate .pt {extra}"):
            continue
        s = json.loads(r.stdout)["lightning_meta"]
        check(s == {"path": str(ckpt / "meta.pt"), "merged": True, "layout": layout, "keys": meta_keys,
                    "tensors": s.get("tensors")} and s["tensors"] >= 1, f"{case}: summary {s}")
        got = dcp_oracle.describe_tree(torch.load(pt, weights_only=True))
        check(got == want, f"{case} {extra}: dcpctl's .pt differs from Lightning's consolidation:\n{diff_trees(want, got)}")
    r = run(dcpctl, "consolidate", str(ckpt), "-o", str(tmp / f"{case}-dry.pt"), "--dry-run", "--json")
    if expect_rc(r, 0, f"{case}: --dry-run"):
        check(json.loads(r.stdout)["lightning_meta"]["layout"] == layout and not (tmp / f"{case}-dry.pt").exists(),
              f"{case}: --dry-run summary or output")

    # Without meta.pt: the DCP state nested as dcp_to_torch_save nests it, nothing else.
    pt = tmp / f"{case}-nometa.pt"
    r = run(dcpctl, "consolidate", str(ckpt), "-o", str(pt), "--no-lightning-meta")
    if expect_rc(r, 0, f"{case}: --no-lightning-meta"):
        check("not merged" not in r.stderr, f"{case}: --no-lightning-meta still notes meta.pt: {r.stderr}")
        got = dcp_oracle.describe_tree(torch.load(pt, weights_only=True))
        check(got == dcp_nested(ckpt), f"{case}: --no-lightning-meta differs from dcp_to_torch_save's nesting")
    # Outputs that cannot take it leave it out, and say so.
    for args, why in ((["-o", str(tmp / f"{case}-flat.pt"), "--flat"], "--flat"),
                      (["-o", str(tmp / f"{case}-sel.pt"), "--include", "model*"], "--include"),
                      (["-o", str(tmp / f"{case}.safetensors")], "safetensors")):
        r = run(dcpctl, "consolidate", str(ckpt), *args)
        expect_rc(r, 0, f"{case}: consolidate {args[-1]}", "meta.pt", "not merged", why)


def copy_with_meta(src: Path, tmp: Path, name: str, write) -> Path:
    d = tmp / name
    shutil.copytree(src, d)
    write(d / "meta.pt")
    return d


def raw_meta(path: Path, data_pkl: bytes) -> None:
    """A torch.save archive whose data.pkl is `data_pkl` (torch's own zip writer, nothing else)."""
    w = torch._C.PyTorchFileWriter(str(path))
    w.write_record("data.pkl", data_pkl, len(data_pkl))
    w.write_record(".format_version", b"1", 1)
    w.write_record("byteorder", b"little", 6)
    w.write_end_of_file()


class _Foreign:
    pass


class _ForeignPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ("blob", "k1") if isinstance(obj, _Foreign) else None


def refusals(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    fab = fixtures / "layouts" / "lightning_fabric" / "ckpt"
    trn = fixtures / "layouts" / "lightning_trainer" / "ckpt"
    out = tmp / "refused.pt"

    def refused(d: Path, what: str, *names: str, rc: int = 5, keep_unsafe_too: bool = False) -> None:
        for extra in [[], ["--dry-run"]] + ([["--keep-unsafe-values"]] if keep_unsafe_too else []):
            r = run(dcpctl, "consolidate", str(d), "-o", str(out), *extra)
            expect_rc(r, rc, f"{what} {extra}", str(d / "meta.pt"), *names)
            check(not out.exists(), f"{what} {extra}: an output was left")

    # A global torch.load(weights_only=True) refuses, nested: Lightning's load of meta.pt refuses it.
    unsafe = {"step": 1, "callbacks": {"cb": {"args": argparse.Namespace(lr=0.1)}}}
    d = copy_with_meta(fab, tmp, "unsafe", lambda p: torch.save(unsafe, p))
    try:
        torch.load(d / "meta.pt", map_location="cpu")  # what Lightning's consolidation runs
        check(False, "torch.load(meta.pt) accepted argparse.Namespace: the oracle changed")
    except pickle.UnpicklingError:
        pass
    refused(d, "meta.pt holding argparse.Namespace", "key 'callbacks.cb.args'", "argparse.Namespace", "--keep-unsafe-values")
    r = run(dcpctl, "consolidate", str(d), "-o", str(out), "--keep-unsafe-values")
    if expect_rc(r, 0, "argparse.Namespace with --keep-unsafe-values"):
        got = torch.load(out, weights_only=False)
        check(got["callbacks"] == unsafe["callbacks"] and got["step"] == 1 and "model" in got,
              f"--keep-unsafe-values: kept {got.get('callbacks')}")
        out.unlink()

    # What the VM cannot carry over, whatever the options.
    buf = io.BytesIO()
    _ForeignPickler(buf, protocol=2).dump({"epoch": 1, "blob": [_Foreign()]})
    d = copy_with_meta(fab, tmp, "foreign-pid", lambda p: raw_meta(p, buf.getvalue()))
    refused(d, "meta.pt holding a foreign persistent id", "key 'blob.0'", "persistent id", keep_unsafe_too=True)
    copyreg.add_extension("argparse", "Namespace", 201)
    try:
        ext = pickle.dumps({"epoch": 1, "kind": argparse.Namespace}, protocol=2)
    finally:
        copyreg.remove_extension("argparse", "Namespace", 201)
    check(b"\x82\xc9" in ext, "the EXT1 pickle has no EXT1 opcode")
    d = copy_with_meta(fab, tmp, "ext1", lambda p: raw_meta(p, ext))
    refused(d, "meta.pt holding an EXT1 opcode", "key 'kind'", "copyreg extension code 201", keep_unsafe_too=True)
    d = copy_with_meta(fab, tmp, "int-key", lambda p: torch.save({"epoch": 1, 7: "seven"}, p))
    refused(d, "meta.pt with a non-string top-level key", "7", keep_unsafe_too=True)

    # The Trainer form when Lightning's own _format_checkpoint raises KeyError: optimizer_0 and
    # optimizer_2 (2 keys matching optimizer_[0-9]+), no optimizer_1.
    meta = torch.load(trn / "meta.pt", weights_only=True)
    d = copy_with_meta(trn, tmp, "trainer-gap", lambda p: torch.save(dict(meta, optimizer_2={"x": 1}), p))
    refused(d, "Trainer checkpoint with optimizer_2 but no optimizer_1", "optimizer_1")

    # A flipped byte in meta.pt's tensor record (ModelCheckpoint's kth_value): its CRC-32.
    def flip(p: Path) -> None:
        shutil.copy(trn / "meta.pt", p)
        with zipfile.ZipFile(p) as z:
            info = next(i for i in z.infolist() if "/data/" in i.filename)
        with open(p, "r+b") as f:
            f.seek(info.header_offset + 26)
            n, m = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
            at = info.header_offset + 30 + n + m
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x40]))
    d = copy_with_meta(trn, tmp, "flipped", flip)
    r = run(dcpctl, "consolidate", str(d), "-o", str(out))
    expect_rc(r, 3, "meta.pt with a flipped tensor byte", str(d / "meta.pt"), "CRC")
    check(not out.exists(), "flipped meta.pt: an output was left")


def torchrun(dcpctl: str, fixtures: Path, tmp: Path) -> None:
    """Under torchrun (2 ranks, gloo) rank 0 reads meta.pt and writes the .pt; its refusal reaches
    the other rank at the plan agreement, which exits with the same code instead of timing out."""

    def launch(*args: str) -> subprocess.CompletedProcess:
        return run(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={free_port()}",
                   "--no-python", dcpctl, *args, "--timeout", "120", timeout=300)

    case = fixtures / "layouts" / "lightning_trainer"
    pt = tmp / "torchrun.pt"
    r = launch("consolidate", str(case / "ckpt"), "-o", str(pt), "-q")
    if check(r.returncode == 0, f"torchrun consolidate: {r.stderr[-1500:]}"):
        want = json.loads((case / "expected.json").read_text())["lightning_consolidated"]
        got = dcp_oracle.describe_tree(torch.load(pt, weights_only=True))
        check(got == want, f"torchrun: the .pt differs from Lightning's consolidation:\n{diff_trees(want, got)}")
    d = copy_with_meta(case / "ckpt", tmp, "torchrun-unsafe",
                       lambda p: torch.save({"epoch": 1, "args": argparse.Namespace(lr=0.1)}, p))
    out = tmp / "torchrun-refused.pt"
    r = launch("consolidate", str(d), "-o", str(out))
    text = r.stdout + r.stderr
    # torchrun exits 1 when a worker fails; each worker's own exit code is in its report
    check(r.returncode == 1 and text.count("key 'args'") >= 2 and "rank 0 failed: " in text and "exitcode  : 5" in text
          and not out.exists(), f"torchrun refusal: both ranks exit 5 naming the key: {text[-2500:]}")


def main() -> int:
    dcpctl, fixtures = os.path.abspath(sys.argv[1]), Path(sys.argv[2]).resolve()
    with tempfile.TemporaryDirectory(prefix="dcpctl-lightning-") as t:
        for case in CASES:
            check_case(dcpctl, case, fixtures, Path(t))
            print(f"{case}: checked", flush=True)
        refusals(dcpctl, fixtures, Path(t))
        torchrun(dcpctl, fixtures, Path(t))
    return summary("lightning_test")


if __name__ == "__main__":
    sys.exit(main())
