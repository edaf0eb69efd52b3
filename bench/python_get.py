#!/usr/bin/env python3
"""`import dcpctl` against torch's dcp.load: one tensor out of a large checkpoint, time and peak RSS
side by side, each case in a fresh process; the memory a get_slice of a multi-GB tensor holds; two
threads reading at once against one (the GIL released). Quoted in docs/python.md and
docs/performance.md.

    PYTHONPATH=build/python .venv/bin/python bench/python_get.py [DIR] [--big-gib N] [--keep]

DIR (default /tmp/dcpctl-bench/pyget) gets a checkpoint written by torch's dcp.save (one process,
no process group): "big", a float32 tensor of --big-gib GiB (default 2), and four float32 tensors
of 256 MiB ("w0".."w3"). The files are read once before the cases (the page cache warm: what is
timed is the reader, not the disk). RSS figures are the process's VmRSS before the read and VmHWM
(its peak) after, in MiB; "extra" is their difference less the array returned, what the reader held.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CASE = r'''
import json, os, sys, time, threading
def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
path, case = sys.argv[1], sys.argv[2]
if case.startswith("torch"):
    import torch, torch.distributed.checkpoint as dcp
    import warnings; warnings.simplefilter("ignore")
else:
    import numpy as np, dcpctl
base = rss("VmRSS")
t0 = time.perf_counter()
if case == "torch-get":
    key = sys.argv[3]
    md = dcp.FileSystemReader(path).read_metadata().state_dict_metadata[key]
    sd = {key: torch.empty(md.size, dtype=md.properties.dtype)}
    dcp.load(sd, checkpoint_id=path, no_dist=True)
    out = sd[key].nbytes
elif case == "dcpctl-get":
    with dcpctl.open(path) as ck:
        out = ck.get(sys.argv[3]).nbytes
elif case == "dcpctl-slice":
    with dcpctl.open(path, check_records=sys.argv[5] == "1") as ck:
        out = ck.get_slice(sys.argv[3])[0:int(sys.argv[4])].nbytes
elif case == "dcpctl-threads":
    n = int(sys.argv[3])
    keys = [f"w{i}" for i in range(4)]
    with dcpctl.open(path) as ck:
        arrays = []  # kept: both cases hold the four arrays at the end
        if n == 1:
            arrays = [ck.get(k) for k in keys]
        else:
            ts = [threading.Thread(target=lambda k=k: arrays.append(ck.get(k))) for k in keys]
            [t.start() for t in ts]; [t.join() for t in ts]
        out = sum(a.nbytes for a in arrays)
print(json.dumps({"seconds": time.perf_counter() - t0, "base_mib": base, "peak_mib": rss("VmHWM"),
                  "array_mib": out / 2**20}))
'''


def make(dir: Path, big_gib: float) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    rows = int(big_gib * 2**30) // (4 * 16384)
    g = torch.Generator().manual_seed(0)
    sd = {"big": torch.randn(rows, 16384, generator=g)}
    sd.update({f"w{i}": torch.randn(4096, 16384, generator=g) for i in range(4)})
    dcp.save(sd, checkpoint_id=str(dir), no_dist=True)


def run(path: Path, *args) -> dict:
    r = subprocess.run([sys.executable, "-c", CASE, str(path), *map(str, args)], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{args}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.splitlines()[-1])


def show(name: str, r: dict) -> None:
    extra = r["peak_mib"] - r["base_mib"] - r["array_mib"]
    print(f"{name:46s} {r['seconds']:7.3f} s  array {r['array_mib']:7.0f} MiB  peak RSS {r['peak_mib']:7.0f} MiB"
          f"  (before {r['base_mib']:5.0f}, extra {extra:6.0f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", default="/tmp/dcpctl-bench/pyget")
    ap.add_argument("--big-gib", type=float, default=2)
    ap.add_argument("--keep", action="store_true", help="reuse DIR when it holds a checkpoint")
    a = ap.parse_args()
    path = Path(a.dir)
    if not (a.keep and (path / ".metadata").exists()):
        t0 = time.perf_counter()
        make(path, a.big_gib)
        print(f"wrote {path}: {sum(f.stat().st_size for f in path.iterdir()) / 2**30:.2f} GiB in "
              f"{time.perf_counter() - t0:.1f} s")
    for f in path.iterdir():  # warm the page cache
        with open(f, "rb") as fh:
            while fh.read(64 << 20):
                pass
    show("torch dcp.load of w0 (256 MiB)", run(path, "torch-get", "w0"))
    show("dcpctl get w0 (256 MiB)", run(path, "dcpctl-get", "w0"))
    show(f"torch dcp.load of big ({a.big_gib:g} GiB)", run(path, "torch-get", "big"))
    show(f"dcpctl get big ({a.big_gib:g} GiB)", run(path, "dcpctl-get", "big"))
    show("dcpctl get_slice(big)[0:1024], CRC (whole record)", run(path, "dcpctl-slice", "big", 1024, 1))
    show("dcpctl get_slice(big)[0:1024], check_records=False", run(path, "dcpctl-slice", "big", 1024, 0))
    show("dcpctl get w0..w3, one thread", run(path, "dcpctl-threads", 1))
    show("dcpctl get w0..w3, four threads", run(path, "dcpctl-threads", 4))


if __name__ == "__main__":
    main()
