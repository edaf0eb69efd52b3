#!/usr/bin/env python3
"""Under torchrun, the zstd chunks a rank sends are decoded inside its --max-memory (run with the venv).

    torchrun_zstd_test.py DCPCTL [WORK_DIR]

Real torch writes (dcp.save, ZStandard) float32 tensors a, b, c, d of 64, 32, 64 and 64 MiB. Two
ranks, launched by hand (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, each under /usr/bin/time),
consolidate them into one safetensors file with --threads 2: rank 0 writes (lanes 0 and 1 take
a, c and b, d), and chunks are dealt by load, so b (lane 1) and c (lane 0) travel from rank 1.
Rank 1 decodes each chunk it sends whole (a zstd frame cannot be read in windows): per pushing
lane the decoded item (the chunk and up to 1 MiB of zip around it, the reader's cap) and the dense
chunk, 64 + 128 MiB + 2 MiB at once (src/plan/memory.h). That memory must come out of rank 1's budget;
rank 0's largest buffer is 128 MiB (a decoded 64 MiB chunk and its copy):
  --max-memory 160MiB  every rank refuses up front with exit 2, naming rank 1 and the zstd chunks
                       (before: the run went ahead and rank 1 held 194 MiB for a 160 MiB budget);
  --max-memory 200MiB  exit 0 on both ranks, the file equals torch's tensors bit for bit, and
                       each rank's peak RSS (VmHWM) stays below 200 MiB + four 16 MiB transfer
                       windows (a push and a receive window per lane) + BASELINE_MIB (LibTorch and
                       Gloo resident: about 110 MiB here).
Exit status: 0 pass, 1 failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import testlib  # noqa: E402

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from safetensors.torch import load_file
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint._extension import ZStandard

BASELINE_MIB = 128
WINDOWS_MIB = 4 * 16


def launch(dcpctl: str, args: list[str], world: int = 2) -> list[tuple[int, float, str]]:
    """Runs every rank at once; returns (exit code, peak MiB, stderr) per rank."""
    port = testlib.free_port()  # for rank 0's store, released just before use
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(["/usr/bin/time", "-f", "%M", dcpctl, *args, "--timeout", "300"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        _, err = p.communicate(timeout=600)
        lines = err.strip().splitlines()
        peak = int(lines[-1]) / 1024 if lines and lines[-1].isdigit() else float("nan")
        out.append((p.returncode, peak, err))
    return out


def main() -> int:
    dcpctl = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="dcpctl-memory-", dir=sys.argv[2] if len(sys.argv) > 2 else None) as t:
        tmp = Path(t)
        # Values that compress (zstd has work to do) but are not all alike.
        state = {k: (torch.arange(mib << 18, dtype=torch.float32) % (1009 + i)).reshape(-1, 1024)
                 for i, (k, mib) in enumerate(zip("abcd", (64, 32, 64, 64)))}
        ck = tmp / "ck"
        dcp.save(state, storage_writer=FileSystemWriter(str(ck), _extensions=[ZStandard()]), no_dist=True)
        check = testlib.check_labelled

        out = tmp / "model.safetensors"
        common = ["consolidate", str(ck), "-o", str(out), "--threads", "2", "-q"]
        ranks = launch(dcpctl, [*common, "--max-memory", "160MiB"])
        for r, (rc, _, err) in enumerate(ranks):
            check("--max-memory 160MiB", rc == 2, f"rank {r} exits 2 (got {rc}): {err.strip()[-300:]}")
            check("--max-memory 160MiB", "rank 1 decodes the zstd chunks it sends whole, 2 lane(s) at once: it needs 203423744 bytes" in err,
                  f"rank {r} names rank 1's zstd decodes (194 MiB)")
        check("--max-memory 160MiB", not out.exists(), "no output")

        ranks = launch(dcpctl, [*common, "--max-memory", "200MiB"])
        limit = 200 + WINDOWS_MIB + BASELINE_MIB
        for r, (rc, peak, err) in enumerate(ranks):
            check("--max-memory 200MiB", rc == 0, f"rank {r} exits 0 (got {rc}): {err.strip()[-300:]}")
            check("--max-memory 200MiB", peak < limit, f"rank {r} peak {peak:.0f} MiB < {limit} MiB")
        if out.exists():
            got = load_file(str(out))
            same = sorted(got) == sorted(state) and all(
                got[k].dtype == v.dtype and torch.equal(got[k].view(torch.int32), v.view(torch.int32)) for k, v in state.items())
            check("--max-memory 200MiB", same, "the file holds torch's four tensors, bit for bit")
        return testlib.summary("torchrun_zstd_test")


if __name__ == "__main__":
    sys.exit(main())
