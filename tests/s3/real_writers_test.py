#!/usr/bin/env python3
"""Checkpoints written to object storage by the real writers, read by dcpctl, against a real S3
server on 127.0.0.1 (moto's, write_test.Server).

    real_writers_test.py DCPCTL

Writers (recipes and versions: tools/requirements.txt pins them):
  - torch's fsspec writer: dcp.save(state_dict, storage_writer=FsspecWriter("s3://...")) through
    s3fs, as torchtitan saves to s3:// (one process; rank files and .metadata at the prefix);
  - s3torchconnector's S3StorageWriter with its BinaryPrefixStrategy(epoch_num=3): the rank files
    land under `<prefix>/0000000000/epoch_3/__0_0.distcp`, so `relative_path` holds '/'. It takes
    no endpoint of its own: its file system is given an S3Client(endpoint=..., force_path_style).
Checks, for each: the checkpoint downloaded (boto3) and consolidated to a .pt by dcpctl equals
torch's view of the state dict (what was saved, and dcp.load through the writer's own reader);
then dcpctl reads it in place, `consolidate s3://... -o out.pt`, and the .pt is byte-identical to
the one from the downloaded copy.

Exit status: 0 pass, 1 failure, 77 skip (torch, s3fs, s3torchconnector, boto3 or moto missing; a
failure under CI, tests/skip.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from skip import skip_or_fail  # noqa: E402

try:
    import s3fs  # noqa: F401  (FsspecWriter's s3:// file system)
    import torch
    import torch.distributed.checkpoint as dcp
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp import S3StorageReader, S3StorageWriter
    from s3torchconnector.dcp.s3_file_system import S3FileSystem
    from s3torchconnector.dcp.s3_prefix_strategy import BinaryPrefixStrategy
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    import write_test
except ImportError as e:
    skip_or_fail(f"torch, s3fs, s3torchconnector[dcp], boto3 and moto[server] are needed ({e}); tools/requirements.txt pins them")

check = write_test.check


def state_dict() -> dict:
    g = torch.Generator().manual_seed(7)
    return {"model": {"emb": torch.randn(64, 32, generator=g), "layers": {"0": {"w": torch.randn(32, 32, generator=g).to(torch.bfloat16)},
                                                                           "1": {"w": torch.randn(32, 32, generator=g)}},
                      "ids": torch.arange(10, dtype=torch.int32)},
            "step": 42}


def same_as(got: dict, want: dict, what: str) -> None:
    for k, v in want.items():
        if isinstance(v, dict):
            same_as(got.get(k, {}), v, f"{what}.{k}")
        elif isinstance(v, torch.Tensor):
            check(isinstance(got.get(k), torch.Tensor) and got[k].dtype == v.dtype and torch.equal(got[k], v), f"{what}.{k} differs")
        else:
            check(got.get(k) == v, f"{what}.{k}: {got.get(k)!r} != {v!r}")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dcpctl = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="dcpctl-s3rw-") as tmp:
        work = Path(tmp)
        server = write_test.SERVER = write_test.Server(work)
        bucket = write_test.BUCKET
        os.environ.update(server.env)
        try:
            sd = state_dict()
            cfg = S3ClientConfig(force_path_style=True)
            writers = {
                "fsspec": (lambda url: FsspecWriter(url), lambda url: FsspecReader(url)),
                "s3tc": (lambda url: _s3tc_writer(url, server.url, cfg), lambda url: _s3tc_reader(url, server.url, cfg)),
            }
            for name, (make_writer, make_reader) in writers.items():
                url = f"s3://{bucket}/{name}/step-1"
                dcp.save(sd, storage_writer=make_writer(url), no_dist=True)
                keys = sorted(server.keys(f"{name}/step-1/"))
                if name == "s3tc":
                    check(f"{name}/step-1/0000000000/epoch_3/__0_0.distcp" in keys, f"s3torchconnector's prefix strategy: {keys}")
                # torch's own view, through the writer's reader
                back = state_dict()
                for t in _tensors(back):
                    t.zero_()
                back["step"] = 0
                dcp.load(back, storage_reader=make_reader(url), no_dist=True)
                same_as(back, sd, f"{name}: dcp.load")

                # dcpctl on a downloaded copy, and on the checkpoint in place
                local = server.download(f"{name}/step-1/", work / name)
                r = subprocess.run([dcpctl, "consolidate", local, "-o", work / f"{name}-local.pt"], capture_output=True, text=True)
                if check(r.returncode == 0, f"{name}: consolidate of the downloaded copy: {r.stderr}"):
                    same_as(torch.load(work / f"{name}-local.pt", weights_only=True), sd, f"{name}: dcpctl's .pt")
                r = subprocess.run([dcpctl, "consolidate", url, "-o", work / f"{name}-s3.pt"], capture_output=True, text=True,
                                   env=server.env)
                if check(r.returncode == 0, f"{name}: consolidate {url}: exit {r.returncode}: {r.stderr}"):
                    check((work / f"{name}-s3.pt").read_bytes() == (work / f"{name}-local.pt").read_bytes(),
                          f"{name}: the .pt read from s3:// differs from the one read from the downloaded copy")
        finally:
            server.stop()
    print(f"{write_test.PASSED} passed, {len(write_test.FAILURES)} failed")
    return 1 if write_test.FAILURES else 0


def _tensors(d):
    for v in d.values():
        if isinstance(v, dict):
            yield from _tensors(v)
        elif isinstance(v, torch.Tensor):
            yield v


def _s3tc_writer(url, endpoint, cfg):
    w = S3StorageWriter(region="us-east-1", path=url, s3client_config=cfg, prefix_strategy=BinaryPrefixStrategy(epoch_num=3))
    w.fs = S3FileSystem("us-east-1", s3_client=S3Client("us-east-1", endpoint=endpoint, s3client_config=cfg))
    return w


def _s3tc_reader(url, endpoint, cfg):
    r = S3StorageReader(region="us-east-1", path=url, s3client_config=cfg)
    r.fs = S3FileSystem("us-east-1", s3_client=S3Client("us-east-1", endpoint=endpoint, s3client_config=cfg))
    return r


if __name__ == "__main__":
    sys.exit(main())
