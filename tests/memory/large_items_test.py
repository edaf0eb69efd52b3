#!/usr/bin/env python3
"""Peak memory of verify --deep [--checksum], consolidate (every format, plain and cast) and reshard
on large items stays within --max-memory plus a constant (run with the venv).

    large_items_test.py DCPCTL [WORK_DIR]

Real torch writes (dcp.save) a checkpoint holding one 320 MiB float32 tensor and a small one, and
another holding the same plus a 160 MiB non-tensor item (a bytes object). With --max-memory 64MiB:
  verify --deep --checksum  (tensors only; --io direct, its default, and buffered) the SHA-256
                            equals hashlib's over torch's bytes of it;
  verify --deep             (tensors only; --io buffered and direct) exit 0;
  consolidate               (tensors only) to .safetensors and .pt (--io direct and buffered) and an
                            HF directory, plain and with --dtype bf16: exit 0, and the tensor equals torch's (Tensor.to for the
                            cast), read back by the safetensors package and torch.load;
  reshard -w 2              (with the bytes; --io direct and buffered) exit 0, and dcp.load of the
                            output gives the same tensor and bytes; both outputs' rank files equal.
verify --deep [--checksum] (--io direct and buffered) of a copy with one flipped bit in the
tensor's data: exit 3 and a crc-mismatch naming the key.
Every --io direct run (the default of verify, consolidate and reshard) starts with the checkpoint dropped from
the page cache. The verify --io direct runs and the uncast .safetensors, .pt and reshard runs must
leave it out of the cache (under a quarter of the
tensor cached; util-linux fincore) and their output too (written past it); the --io buffered runs
right after must bring the checkpoint in (over half). Otherwise a cached checkpoint would be read
through the cache, and the direct paths would not be the ones checked against torch.
Each run's peak RSS (VmHWM of dcpctl itself: /usr/bin/time's %M, whose own small process is what
the child inherits) must stay below 64 MiB + BASELINE_MIB, where BASELINE_MIB covers LibTorch's
libraries (~150 MiB resident) and the 1 MiB copy windows; holding the tensor or the non-tensor
item whole would exceed it. Exit status: 0 pass, 1 failure.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import testlib  # noqa: E402
from testlib import run  # noqa: E402

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

TENSOR_MIB = 320
BYTES_MIB = 160
MAX_MEMORY_MIB = 64
BASELINE_MIB = 224


def timed(dcpctl: str, args: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    """dcpctl ARGS under GNU time: (the run, its peak RSS in MiB); a crash or a hang is a failure
    by itself (testlib.run)."""
    r = run("/usr/bin/time", "-f", "%M", dcpctl, *args, timeout=900)
    lines = r.stderr.strip().splitlines()
    peak_mib = int(lines[-1]) / 1024 if lines and lines[-1].isdigit() else float("inf")
    return r, peak_mib


def evict(ck: Path) -> None:
    """Drops the checkpoint's data files from the page cache (written back first, then dropped)."""
    for f in ck.glob("*.distcp"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cached_bytes(files: list[Path]) -> int:
    """Bytes of `files` in the page cache (util-linux fincore)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files)],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(x) for x in out.split())


def check_cache(check, label: str, ck: Path, out: Path | None, direct: bool) -> None:
    """After a run: past the page cache (direct), the checkpoint and the output (if any) are not
    in it; through it, the checkpoint is."""
    inp = cached_bytes(list(ck.glob("*.distcp"))) / 2**20
    if not direct:
        check(label, inp > TENSOR_MIB / 2, f"{inp:.0f} MiB of the checkpoint cached after the run (read through the cache)")
        return
    check(label, inp < TENSOR_MIB / 4, f"{inp:.0f} MiB of the checkpoint cached after the run (read past the cache)")
    if out is None:
        return
    outs = [p for p in ([out] if out.is_file() else out.glob("*")) if p.name != ".metadata"]
    written = cached_bytes(outs) / 2**20
    check(label, written < TENSOR_MIB / 4, f"{written:.0f} MiB of the output cached after the run (written past the cache)")


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def main() -> int:
    dcpctl = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="dcpctl-memory-", dir=sys.argv[2] if len(sys.argv) > 2 else None) as t:
        tmp = Path(t)
        big = torch.arange(TENSOR_MIB << 18, dtype=torch.float32).reshape(-1, 1024)
        blob = bytes(range(256)) * (BYTES_MIB << 12)
        # verify runs on the tensors alone: decoding a large non-tensor item costs a few times its
        # size (its data.pkl, then the VM's copy of the bytes), which is not what this measures.
        ck_t, ck = tmp / "tensors", tmp / "ck"
        dcp.save({"big": big, "small": torch.ones(3, 5)}, checkpoint_id=str(ck_t), no_dist=True)
        dcp.save({"big": big, "small": torch.ones(3, 5), "blob": blob}, checkpoint_id=str(ck), no_dist=True)
        want = hashlib.sha256(big.numpy().tobytes()).hexdigest()
        limit = MAX_MEMORY_MIB + BASELINE_MIB
        check = testlib.check_labelled

        mm = ["--max-memory", f"{MAX_MEMORY_MIB}MiB", "--threads", "2"]
        # verify --io direct (its default) reads a chunk that is not cached past the page cache,
        # each window while the one before is hashed, and checks its bytes where they land;
        # --io buffered goes through it.
        for label, extra in (("verify --deep --checksum (--io direct, the default)", ["--checksum", "--json"]),
                             ("verify --deep --checksum --io buffered", ["--checksum", "--json", "--io", "buffered"]),
                             ("verify --deep (--io direct, the default)", []), ("verify --deep --io buffered", ["--io", "buffered"])):
            buffered = "buffered" in extra
            if not buffered:
                evict(ck_t)
            r, peak = timed(dcpctl, ["verify", "--deep", *extra, *mm, str(ck_t)])
            check(label, r.returncode == 0, f"exit {r.returncode} {r.stderr[-400:]}")
            if "--checksum" in extra:
                check(label, f'"big": "{want}"' in r.stdout.replace('":"', '": "'), "sha256 of big equals hashlib's")
            check(label, peak < limit, f"peak {peak:.0f} MiB < {limit} MiB")
            if r.returncode == 0:
                check_cache(check, label, ck_t, None, not buffered)
        # One flipped bit in the tensor's data: found by the CRC-32 of its record on every path.
        bad = tmp / "flipped"
        shutil.copytree(ck_t, bad)
        data = max(bad.glob("*.distcp"), key=lambda f: f.stat().st_size)
        with open(data, "r+b") as f:
            f.seek(data.stat().st_size // 2)
            b0 = f.read(1)[0]
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b0 ^ 0x10]))
        for label, extra in (("verify --deep (a flipped bit)", []), ("verify --deep --checksum (a flipped bit)", ["--checksum"]),
                             ("verify --deep --io buffered (a flipped bit)", ["--io", "buffered"]),
                             ("verify --deep --checksum --io buffered (a flipped bit)", ["--checksum", "--io", "buffered"])):
            evict(bad)
            r, _ = timed(dcpctl, ["verify", "--deep", "--json", *extra, *mm, str(bad)])
            check(label, r.returncode == 3, f"exit {r.returncode} (3: problems found) {r.stderr[-300:]}")
            check(label, '"crc-mismatch"' in r.stdout.replace('":"', '": "') and '"big"' in r.stdout,
                  "a crc-mismatch problem naming the key big")
        remove(bad)
        # consolidate, every output format, plain and cast: the tensor is one chunk, copied in
        # place (safetensors) or streamed into its zip record (.pt) through bounded windows.
        from safetensors import safe_open
        # --io direct (the default) reads the chunk past the page cache and writes the output
        # past it; --io buffered goes through it (copy_file_range for safetensors).
        for name, extra in (("model.safetensors", []), ("model-buffered.safetensors", ["--io", "buffered"]),
                            ("model-bf16.safetensors", ["--dtype", "bf16"]), ("model.pt", []),
                            ("model-buffered.pt", ["--io", "buffered"]), ("model-bf16.pt", ["--dtype", "bf16"]),
                            ("hf/", ["--max-shard-size", "200MB"])):
            label = f"consolidate -o {name} {' '.join(extra)}".rstrip()
            buffered = "buffered" in extra
            if not buffered:
                evict(ck_t)
            r, peak = timed(dcpctl, ["consolidate", str(ck_t), "-o", str(tmp / name), *extra, *mm])
            check(label, r.returncode == 0, f"exit {r.returncode} {r.stderr[-400:]}")
            if r.returncode == 0 and name in ("model.safetensors", "model-buffered.safetensors", "model.pt", "model-buffered.pt"):
                check_cache(check, label, ck_t, tmp / name, not buffered)
            check(label, peak < limit, f"peak {peak:.0f} MiB < {limit} MiB")
            if r.returncode != 0:
                continue
            want_big = big.to(torch.bfloat16) if extra[:1] == ["--dtype"] else big
            if name.endswith(".pt"):
                got_big = torch.load(tmp / name, weights_only=True, mmap=True)["big"]
            else:
                path = tmp / name if name.endswith(".safetensors") else next(p for p in (tmp / name).glob("*.safetensors")
                                                                           if "big" in safe_open(str(p), "pt").keys())
                got_big = safe_open(str(path), "pt").get_tensor("big")
            check(label, torch.equal(got_big, want_big), "the tensor equals torch's (cast by Tensor.to)")
            del got_big
            remove(tmp / name)  # seven outputs of 160-320 MiB each need not all be on the disk at once
        for out, extra in ((tmp / "out", []), (tmp / "out-buffered", ["--io", "buffered"])):
            label = f"reshard -w 2 {' '.join(extra)}".rstrip()
            buffered = "buffered" in extra
            if not buffered:
                evict(ck)
            r, peak = timed(dcpctl, ["reshard", str(ck), "-o", str(out), "-w", "2", *extra, *mm])
            check(label, r.returncode == 0, f"exit {r.returncode} {r.stderr[-400:]}")
            check(label, peak < limit, f"peak {peak:.0f} MiB < {limit} MiB")
            if r.returncode != 0:
                continue
            check_cache(check, label, ck, out, not buffered)
            got = {"big": torch.empty_like(big), "small": torch.empty(3, 5), "blob": b""}
            dcp.load(got, checkpoint_id=str(out), no_dist=True)
            check(label, torch.equal(got["big"], big) and got["blob"] == blob, "dcp.load gives the same tensor and bytes")
            del got
        if (tmp / "out-buffered").is_dir() and (tmp / "out").is_dir():
            same = all((tmp / "out" / f).read_bytes() == (tmp / "out-buffered" / f).read_bytes() for f in ("__0_0.distcp", "__1_0.distcp"))
            check("reshard -w 2", same, "--io direct and --io buffered write the same rank files")
        remove(tmp / "out")
        remove(tmp / "out-buffered")
        return testlib.summary("large_items_test")


if __name__ == "__main__":
    sys.exit(main())
