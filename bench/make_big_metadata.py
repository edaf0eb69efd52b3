#!/usr/bin/env python3
"""Write a `.metadata` as a 512-rank save of a large model would, with real torch classes: for
benchmarks of `dcpctl inspect` against `pickle.load`. Only `.metadata` is written (no .distcp
files: inspect reads only the pickle, and reports the data files as missing).

    .venv/bin/python bench/make_big_metadata.py [OUT_DIR] [--tensors N] [--ranks R]

Defaults: OUT_DIR /tmp/dcpctl-bench/meta5m (replaced), 10,000 tensors, 512 ranks: every tensor is
Shard(0) over all ranks (one chunk per rank), so 5,120,000 chunks and as many storage_data
entries. Keys follow a Llama-style model plus Adam state, flattened as DefaultSavePlanner does
(`model.layers.{i}.attention.wq.weight`, `optim.state.model.layers.{i}.feed_forward.w1.weight.exp_avg`):
model weights bfloat16, norms and optimizer state float32. storage_data points at
`__{rank}_0.distcp` with offsets growing per file by each item's length (its bytes plus
torch.save's ~1.5 KB of zip framing); planner_data holds the flatten mapping; storage_meta and
version are set as torch 2.4+ sets them. The default file is 722 MB; making it takes ~10 GB of
RAM (Python objects) and 10-20 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import pickle
import shutil
import sys
import time
import uuid

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

HIDDEN, FFN, VOCAB = 4096, 14336, 128256
ZIP_OVERHEAD = 1536  # torch.save framing of one item (data.pkl, records, central directory)


def model_params():
    """(planner path, shape, dtype) of a Llama-style model, layer after layer, endlessly."""
    yield ("model", "tok_embeddings.weight"), (VOCAB, HIDDEN), torch.bfloat16
    yield ("model", "norm.weight"), (HIDDEN,), torch.float32
    yield ("model", "output.weight"), (VOCAB, HIDDEN), torch.bfloat16
    layer = 0
    while True:
        p = f"layers.{layer}."
        yield ("model", p + "attention.wq.weight"), (HIDDEN, HIDDEN), torch.bfloat16
        yield ("model", p + "attention.wk.weight"), (1024, HIDDEN), torch.bfloat16
        yield ("model", p + "attention.wv.weight"), (1024, HIDDEN), torch.bfloat16
        yield ("model", p + "attention.wo.weight"), (HIDDEN, HIDDEN), torch.bfloat16
        yield ("model", p + "feed_forward.w1.weight"), (FFN, HIDDEN), torch.bfloat16
        yield ("model", p + "feed_forward.w2.weight"), (HIDDEN, FFN), torch.bfloat16
        yield ("model", p + "feed_forward.w3.weight"), (FFN, HIDDEN), torch.bfloat16
        yield ("model", p + "attention_norm.weight"), (HIDDEN,), torch.float32
        yield ("model", p + "ffn_norm.weight"), (HIDDEN,), torch.float32
        layer += 1


def tensors(n):
    """n (flat key, planner path, shape, dtype): each parameter, then its exp_avg and exp_avg_sq."""
    out = []
    for path, shape, dtype in model_params():
        fqn = ".".join(path)
        out.append((fqn, path, shape, dtype))
        for state in ("exp_avg", "exp_avg_sq"):
            out.append((f"optim.state.{fqn}.{state}", ("optim", "state", fqn, state), shape, torch.float32))
        if len(out) >= n:
            return out[:n]


def shard0(shape, ranks):
    """torch.chunk semantics along dim 0: (offsets, sizes) per rank; empty shards sit at the end."""
    rows = shape[0]
    step = -(-rows // ranks)
    out = []
    for r in range(ranks):
        start = min(r * step, rows)
        n = max(0, min(step, rows - start))
        out.append(((start,) + (0,) * (len(shape) - 1), (n,) + tuple(shape[1:])))
    return out


def build(n_tensors, ranks, checkpoint_id):
    sdm, storage, planner = {}, {}, {}
    file_pos = [0] * ranks
    for fqn, path, shape, dtype in tensors(n_tensors):
        chunks = []
        itemsize = torch.empty((), dtype=dtype).element_size()
        for rank, (offsets, sizes) in enumerate(shard0(shape, ranks)):
            # Fresh Size objects, as the writer's chunks hold (each pickled on its own).
            chunks.append(ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes)))
            numel = 1
            for s in sizes:
                numel *= s
            length = numel * itemsize + ZIP_OVERHEAD
            storage[MetadataIndex(fqn, torch.Size(offsets), len(chunks) - 1)] = _StorageInfo(
                f"__{rank}_0.distcp", file_pos[rank], length)
            file_pos[rank] += length
        sdm[fqn] = TensorStorageMetadata(properties=TensorProperties(dtype=dtype), size=torch.Size(shape),
                                         chunks=chunks)
        planner[fqn] = path
    # A few non-tensor items, saved by rank 0 (optimizer hyperparameters, the step counter).
    for key, path in (("optim.param_groups.0.lr", ("optim", "param_groups", 0, "lr")),
                      ("optim.param_groups.0.betas", ("optim", "param_groups", 0, "betas")),
                      ("train.step", ("train", "step"))):
        sdm[key] = BytesStorageMetadata()
        storage[MetadataIndex(key)] = _StorageInfo("__0_0.distcp", file_pos[0], 1200)
        file_pos[0] += 1200
        planner[key] = path
    meta = StorageMeta(checkpoint_id=pathlib.Path(checkpoint_id), save_id=str(uuid.uuid4()), load_id=None)
    return Metadata(state_dict_metadata=sdm, planner_data=planner, storage_data=storage, storage_meta=meta,
                    version="1.0.0")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default="/tmp/dcpctl-bench/meta5m")
    ap.add_argument("--tensors", type=int, default=10_000)
    ap.add_argument("--ranks", type=int, default=512)
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    t0 = time.time()
    md = build(a.tensors, a.ranks, a.out)
    t1 = time.time()
    # As torch's _FileSystemWriter.finish: pickle.dump at the default protocol, via a temp name.
    tmp = os.path.join(a.out, ".metadata.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(md, f)
    os.rename(tmp, os.path.join(a.out, ".metadata"))
    t2 = time.time()
    chunks = sum(len(t.chunks) for t in md.state_dict_metadata.values() if isinstance(t, TensorStorageMetadata))
    size = os.path.getsize(os.path.join(a.out, ".metadata"))
    print(f"{a.out}/.metadata: {size} bytes ({size / 2**20:.1f} MiB), {a.tensors} tensors, {chunks} chunks, "
          f"{len(md.storage_data)} storage entries; built in {t1 - t0:.1f} s, pickled in {t2 - t1:.1f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
