#!/usr/bin/env python3
"""Write a large DCP checkpoint with real torch: 8 ranks (gloo, CPU, torch.multiprocessing),
transformer-like DTensor Shard(0) parameters, bfloat16 and float32 mixed. For benchmarks only:
the output is never committed.

    .venv/bin/python bench/make_big_ckpt.py [OUT_DIR] [--layers N] [--ranks R] [--hidden H] [--pool MIB]

OUT_DIR defaults to /tmp/dcpctl-bench/ckpt (it is replaced). With the defaults (hidden 4096,
ffn 11008, vocab 32003, 10 layers) the checkpoint is ~4.6 GB: per layer q/k/v/o 4096x4096 and
gate/up 11008x4096, down 4096x11008 in bf16, two norms in fp32; tok_embeddings 32003x4096 fp32
(the largest tensor, 524 MB, sharded unevenly: vocab is not a multiple of 8), output 32003x4096
bf16, norm fp32. Each rank only ever holds its own shards (~580 MB), never a full tensor.

--pool MIB bounds the generator's memory for checkpoints larger than RAM allows (8 ranks holding
16 GB of shards do not fit in 24 GiB): every shard is then a copy-on-write memory map
(numpy.memmap mode "c") of a window of a random pool file of MIB MiB per dtype, at an offset drawn
from the tensor name and rank, so shards differ but torch reads them from the page cache instead of
holding them. torch still writes every byte of the checkpoint through dcp.save.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shapes(layers: int, hidden: int, ffn: int, vocab: int):
    import torch

    out = [("tok_embeddings.weight", (vocab, hidden), torch.float32)]
    for i in range(layers):
        p = f"layers.{i}."
        out += [(p + "attention_norm.weight", (hidden,), torch.float32)]
        for n in ("wq", "wk", "wv", "wo"):
            out.append((p + f"attention.{n}.weight", (hidden, hidden), torch.bfloat16))
        out += [(p + "ffn_norm.weight", (hidden,), torch.float32),
                (p + "feed_forward.w1.weight", (ffn, hidden), torch.bfloat16),
                (p + "feed_forward.w3.weight", (ffn, hidden), torch.bfloat16),
                (p + "feed_forward.w2.weight", (hidden, ffn), torch.bfloat16)]
    out += [("norm.weight", (hidden,), torch.float32), ("output.weight", (vocab, hidden), torch.bfloat16)]
    return out


def pool_window(path: str, dtype, shape: tuple, key: str):
    """A copy-on-write map of a window of the pool file at `path`, as a tensor of `shape`."""
    import zlib

    import numpy as np
    import torch

    size = torch.empty(0, dtype=dtype).element_size()
    nbytes = torch.Size(shape).numel() * size
    room = os.path.getsize(path) - nbytes
    if room < 0:
        raise SystemExit(f"--pool is too small: {key} needs {nbytes} bytes")
    offset = zlib.crc32(key.encode()) % (room // 64 + 1) * 64
    raw = np.memmap(path, dtype=np.uint8, mode="c", offset=offset, shape=(nbytes,))
    return torch.from_numpy(raw).view(dtype).view(shape)


def make_pools(folder: str, mib: int, pools: dict) -> None:
    """One random pool file of `mib` MiB per dtype (fixed seed), each named in `pools` (dtype ->
    path) before it is written, so that the caller removes whatever was made if this fails."""
    import torch

    for dtype in (torch.float32, torch.bfloat16):
        path = os.path.join(folder, f".pool-{str(dtype).split('.')[-1]}")
        pools[str(dtype)] = path
        n = (mib << 20) // torch.empty(0, dtype=dtype).element_size()
        t = torch.randn(n, generator=torch.Generator().manual_seed(7), dtype=torch.float32).to(dtype)
        t.view(torch.uint8).numpy().tofile(path)


def spawn_ranks(worker, ranks: int, out: str, cfg: dict, pool_mib: int) -> None:
    """`worker(rank, ranks, port, out, cfg)` on `ranks` processes, with cfg["pools"] made beside
    `out` first when pool_mib (make_pools) and removed after, whatever happened."""
    import torch.multiprocessing as mp

    try:
        if pool_mib:
            make_pools(os.path.dirname(os.path.abspath(out)), pool_mib, cfg["pools"])
        mp.spawn(worker, args=(ranks, free_port(), out, cfg), nprocs=ranks, join=True)
    finally:
        for path in cfg["pools"].values():
            if os.path.exists(path):
                os.remove(path)


def worker(rank: int, world: int, port: int, out: str, cfg: dict) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(1000 + rank)
    sd = {}
    for name, shape, dtype in shapes(cfg["layers"], cfg["hidden"], cfg["ffn"], cfg["vocab"]):
        n = shape[0]
        per = -(-n // world)  # torch.chunk semantics, as DTensor's Shard(0)
        start, end = min(rank * per, n), min(rank * per + per, n)
        local_shape = (end - start,) + tuple(shape[1:])
        if cfg["pools"]:
            local = pool_window(cfg["pools"][str(dtype)], dtype, local_shape, f"{name}/{rank}")
        else:
            local = torch.randn(local_shape, generator=g, dtype=torch.float32).to(dtype)
        stride = tuple(int(torch.Size(shape)[i + 1:].numel()) for i in range(len(shape)))
        sd[name] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size(shape), stride=stride)
    sd["step"] = 1000
    dcp.save(sd, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default="/tmp/dcpctl-bench/ckpt")
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--vocab", type=int, default=32003)
    ap.add_argument("--pool", type=int, default=0, metavar="MIB",
                    help="map shards from a random pool of MIB MiB per dtype (bounded memory; 0: fresh randn)")
    a = ap.parse_args()

    import torch

    cfg = {"layers": a.layers, "hidden": a.hidden, "ffn": a.ffn, "vocab": a.vocab, "pools": {}}
    total = sum(torch.Size(s).numel() * torch.empty(0, dtype=d).element_size()
                for _, s, d in shapes(a.layers, a.hidden, a.ffn, a.vocab))
    largest = max(torch.Size(s).numel() * torch.empty(0, dtype=d).element_size()
                  for _, s, d in shapes(a.layers, a.hidden, a.ffn, a.vocab))
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    t = time.time()
    spawn_ranks(worker, a.ranks, a.out, cfg, a.pool)
    cfg["pools"] = f"{a.pool} MiB per dtype" if a.pool else "none (fresh randn)"
    info = {"ranks": a.ranks, **cfg, "tensor_bytes": total, "largest_tensor_bytes": largest,
            "files": sorted(os.listdir(a.out)), "seconds": round(time.time() - t, 1), "torch": torch.__version__}
    with open(os.path.join(os.path.dirname(os.path.abspath(a.out)), "ckpt_info.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
