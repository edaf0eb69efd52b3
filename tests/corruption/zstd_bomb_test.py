#!/usr/bin/env python3
"""A zstd bomb in a DCP checkpoint must be refused before it costs memory (run with the venv).

    zstd_bomb_test.py DCPCTL FIXTURES_DIR

A copy of the zstd fixture (written by real torch with the ZStandard extension) gets one item
replaced by a hand-made hostile frame of about 130 KB that inflates to 4 GiB of zeros: first a
tensor chunk's item, then a non-tensor item. The frame is appended to the item's .distcp file and
the item's _StorageInfo pointed at it (the .metadata is rewritten with torch's own pickle). Each of
`verify --deep`, `consolidate` and `reshard` must exit 3 naming the file and key, leave no output,
and keep its peak RSS (measured by /usr/bin/time, whose own small process is what the child
inherits, so the number is dcpctl's) far below the 4 GiB the frame claims.
Exit status: 0 pass, 1 failure.
"""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ledger  # noqa: E402

BOMB_BYTES = 4 << 30
PEAK_LIMIT_MIB = 640  # LibTorch's baseline is ~150 MiB; a bytes item may decode up to 256 MiB + 64x


def make_bomb() -> bytes:
    cctx = zstandard.ZstdCompressor(level=19)
    comp = cctx.compressobj(size=BOMB_BYTES)
    zeros = bytes(64 << 20)
    out = [comp.compress(zeros) for _ in range(BOMB_BYTES // len(zeros))]
    out.append(comp.flush())
    return b"".join(out)


def plant(src: Path, dst: Path, bomb: bytes, want_tensor: bool) -> str:
    """Copies src to dst with one item of the wanted kind replaced by the bomb; returns its key."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    shutil.copytree(src, dst)
    with open(dst / ".metadata", "rb") as f:
        md = pickle.load(f)  # a fixture written by real torch: trusted here
    for index, info in md.storage_data.items():
        is_tensor = isinstance(md.state_dict_metadata[index.fqn], TensorStorageMetadata)
        if is_tensor == want_tensor:
            path = dst / info.relative_path
            info.offset = path.stat().st_size
            info.length = len(bomb)
            with open(path, "ab") as f:
                f.write(bomb)
            with open(dst / ".metadata", "wb") as f:
                pickle.dump(md, f)
            return index.fqn
    raise SystemExit(f"no {'tensor' if want_tensor else 'bytes'} item in {src}")


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    failures, checks = [], 0
    bomb = make_bomb()
    print(f"bomb: {len(bomb)} bytes inflating to {BOMB_BYTES} bytes")
    with tempfile.TemporaryDirectory(prefix="dcpctl-zstd-bomb-") as t:
        tmp = Path(t)
        for kind in ("tensor", "bytes"):
            ck = tmp / f"bomb_{kind}"
            key = plant(fixtures / "zstd" / "ckpt", ck, bomb, kind == "tensor")
            for args in (["verify", "--deep", str(ck)], ["consolidate", str(ck), "-o", str(tmp / "out.pt")],
                         ["reshard", str(ck), "-o", str(tmp / "out"), "-w", "2"]):
                r = subprocess.run(["/usr/bin/time", "-f", "%M", dcpctl, *args], capture_output=True, text=True, timeout=300)
                peak_mib = int(r.stderr.strip().splitlines()[-1]) / 1024
                text = r.stdout + r.stderr
                label = f"{kind} item bomb, {args[0]}"
                print(f"{label:32s} exit {r.returncode}  peak {peak_mib:6.0f} MiB")
                # reshard copies non-tensor items byte for byte, but decodes each first to check
                # the CRC-32 of the records inside (README): the bomb is refused as everywhere.
                for ok, what in ((r.returncode == 3, f"exit {r.returncode}, wanted 3"),
                                 (key in text and "__" in text and "decodes to more than" in text,
                                  f"message does not name key {key!r}, the file and the cap: {text[-600:]}"),
                                 (peak_mib < PEAK_LIMIT_MIB, f"peak RSS {peak_mib:.0f} MiB >= {PEAK_LIMIT_MIB} MiB"),
                                 (not (tmp / "out.pt").exists() and not (tmp / "out").exists(), "an output was left")):
                    checks += 1
                    if not ok:
                        failures.append(f"{label}: {what}")
                        print(f"FAIL {label}: {what}")
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    ledger.record(checks, "zstd bomb runs judged")
    if checks < 24:  # 2 kinds x 3 commands x 4 checks
        print(f"FAIL {checks} checks, fewer than the 24 a run makes")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
