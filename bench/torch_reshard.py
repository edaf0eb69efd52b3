#!/usr/bin/env python3
"""The torch way to reshard a DCP checkpoint (the baseline of bench/reshard.sh): W processes
(torch.multiprocessing spawn, gloo, CPU) each build a state dict of DTensors with Shard(0) on a
1-D CPU DeviceMesh of the checkpoint's global shapes and dtypes (0-d tensors plain, non-tensor
values as placeholders), `dcp.load` it from SRC, then `dcp.save` it to DST.

    .venv/bin/python bench/torch_reshard.py SRC DST [--world-size W]

Prints one JSON line: seconds for setup (spawn, import, process group), load and save (rank 0's
clock, between barriers).

    .venv/bin/python bench/torch_reshard.py --compare A B

Compares two DCP checkpoints with torch alone (single process, no process group): the same keys,
the same chunk lists per tensor, the same file (rank) for every non-empty chunk, and every tensor
bit for bit (read with torch's own reader in batches of about 1 GB, so memory stays bounded), the
non-tensor values equal. Exit 0 when identical, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import warnings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, world: int, port: int, src: str, dst: str, t_start: float) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    warnings.simplefilter("ignore")
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.distributed.tensor as dtt
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard

    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    md = FileSystemReader(src).read_metadata()
    sd = {}
    for key, m in md.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            if len(m.size) == 0:
                sd[key] = torch.empty((), dtype=m.properties.dtype)
            else:
                sd[key] = dtt.empty(tuple(m.size), dtype=m.properties.dtype, device_mesh=mesh, placements=[Shard(0)])
        else:
            sd[key] = None
    dist.barrier()
    t0 = time.time()
    dcp.load(sd, checkpoint_id=src)
    dist.barrier()
    t1 = time.time()
    dcp.save(sd, checkpoint_id=dst)
    dist.barrier()
    t2 = time.time()
    if rank == 0:
        print(json.dumps({"world_size": world, "setup_s": round(t0 - t_start, 2), "load_s": round(t1 - t0, 2),
                          "save_s": round(t2 - t1, 2)}), flush=True)
    dist.destroy_process_group()


def compare(a: str, b: str) -> int:
    warnings.simplefilter("ignore")
    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    ma, mb = FileSystemReader(a).read_metadata(), FileSystemReader(b).read_metadata()
    bad = 0
    if list(ma.state_dict_metadata) != list(mb.state_dict_metadata):
        print("keys differ")
        return 1
    tensors = []
    for k, x in ma.state_dict_metadata.items():
        y = mb.state_dict_metadata[k]
        if isinstance(x, TensorStorageMetadata):
            ca = [(tuple(c.offsets), tuple(c.sizes)) for c in x.chunks]
            cb = [(tuple(c.offsets), tuple(c.sizes)) for c in y.chunks]
            if sorted(ca) != sorted(cb) or x.properties.dtype != y.properties.dtype or x.size != y.size:
                print(f"{k}: chunks/dtype/size differ: {ca} vs {cb}")
                bad += 1
                continue
            for o, s in ca:
                if all(n > 0 for n in s):
                    fa = ma.storage_data[MetadataIndex(k, torch.Size(o))].relative_path
                    fb = mb.storage_data[MetadataIndex(k, torch.Size(o))].relative_path
                    if fa != fb:
                        print(f"{k} chunk {o}: {fa} vs {fb}")
                        bad += 1
            tensors.append((k, x))
    batch: list = []
    nbytes = 0

    def flush() -> int:
        nonlocal batch, nbytes
        errs = 0
        sds = []
        for path in (a, b):
            sd = {k: torch.empty(tuple(x.size), dtype=x.properties.dtype) for k, x in batch}
            _load_state_dict(sd, storage_reader=FileSystemReader(path), planner=DefaultLoadPlanner(), no_dist=True)
            sds.append(sd)
        for k, _ in batch:
            ta, tb = sds[0][k], sds[1][k]
            if not torch.equal(ta.reshape(-1).view(torch.uint8), tb.reshape(-1).view(torch.uint8)):
                print(f"{k}: values differ")
                errs += 1
        batch, nbytes = [], 0
        return errs

    for k, x in tensors:
        batch.append((k, x))
        nbytes += x.size.numel() * torch.empty(0, dtype=x.properties.dtype).element_size()
        if nbytes >= 1 << 30:
            bad += flush()
    if batch:
        bad += flush()
    byte_keys = [k for k, x in ma.state_dict_metadata.items() if not isinstance(x, TensorStorageMetadata)]
    if byte_keys:
        sds = []
        for path in (a, b):
            sd = {k: None for k in byte_keys}
            _load_state_dict(sd, storage_reader=FileSystemReader(path), planner=DefaultLoadPlanner(), no_dist=True)
            sds.append(sd)
        for k in byte_keys:
            if sds[0][k] != sds[1][k]:
                print(f"{k}: {sds[0][k]!r} != {sds[1][k]!r}")
                bad += 1
    print(f"compare: {len(tensors)} tensors, {len(byte_keys)} non-tensor items: "
          + ("identical (chunk lists, chunk files, every byte)" if not bad else f"{bad} difference(s)"))
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("-w", "--world-size", type=int, default=2)
    ap.add_argument("--compare", action="store_true")
    a = ap.parse_args()
    if a.compare:
        return compare(a.src, a.dst)
    t = time.time()
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(a.world_size, free_port(), a.src, a.dst, t), nprocs=a.world_size, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
