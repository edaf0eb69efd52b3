#!/usr/bin/env python3
"""Write a `.metadata` as a 512-rank save of a large model would, with real torch classes: for
benchmarks of `dcpctl inspect` against `pickle.load`. Only `.metadata` is written (no .distcp
files: inspect reads only the pickle, and reports the data files as missing).

    .venv/bin/python bench/make_big_metadata.py [OUT_DIR] [--tensors N] [--ranks R] [--model M] [--prefix P]
    .venv/bin/python bench/make_big_metadata.py /tmp/dcpctl-bench/llama405b --model llama3-405b --ranks 2048 --prefix app

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

ZIP_OVERHEAD = 1536  # torch.save framing of one item (data.pkl, records, central directory)

# Llama-style models: (hidden, ffn, vocab, kv width, layers; None: endless), the weights' dtype.
# llama-8b-like: the default, 4096 wide, layers until --tensors is reached, bfloat16 weights.
# llama3-405b: Llama 3.1 405B (16384 wide, FFN 53248, 126 layers, 8 KV heads of 128), float32
# weights as FSDP2 keeps them (bf16 compute), each with Adam's exp_avg, exp_avg_sq and step (a
# 0-d float32 tensor per parameter, replicated: saved once, by rank 0).
MODELS = {
    "llama-8b-like": dict(hidden=4096, ffn=14336, vocab=128256, kv=1024, layers=None, dtype=torch.bfloat16, step=False),
    "llama3-405b": dict(hidden=16384, ffn=53248, vocab=128256, kv=1024, layers=126, dtype=torch.float32, step=True),
}


def model_params(m):
    """(planner path, shape, dtype) of a Llama-style model, layer after layer."""
    h, f, v, kv, w = m["hidden"], m["ffn"], m["vocab"], m["kv"], m["dtype"]
    yield ("model", "tok_embeddings.weight"), (v, h), w
    yield ("model", "norm.weight"), (h,), torch.float32
    yield ("model", "output.weight"), (v, h), w
    layer = 0
    while m["layers"] is None or layer < m["layers"]:
        p = f"layers.{layer}."
        yield ("model", p + "attention.wq.weight"), (h, h), w
        yield ("model", p + "attention.wk.weight"), (kv, h), w
        yield ("model", p + "attention.wv.weight"), (kv, h), w
        yield ("model", p + "attention.wo.weight"), (h, h), w
        yield ("model", p + "feed_forward.w1.weight"), (f, h), w
        yield ("model", p + "feed_forward.w2.weight"), (h, f), w
        yield ("model", p + "feed_forward.w3.weight"), (f, h), w
        yield ("model", p + "attention_norm.weight"), (h,), torch.float32
        yield ("model", p + "ffn_norm.weight"), (h,), torch.float32
        layer += 1


def tensors(n, m, prefix):
    """(flat key, planner path, shape, dtype): each parameter, then its exp_avg and exp_avg_sq (and
    step); n of them at most (None: the whole model). Keys under `prefix` (e.g. "app": app.model...,
    app.optim.state..., as a state_dict saved as {"app": AppState})."""
    out = []
    pre = (prefix,) if prefix else ()
    for path, shape, dtype in model_params(m):
        fqn = ".".join(path)
        out.append((".".join(pre + path), pre + path, shape, dtype))
        for state in ("exp_avg", "exp_avg_sq"):
            p = pre + ("optim", "state", fqn, state)
            out.append((".".join(p), p, shape, torch.float32))
        if m["step"]:
            p = pre + ("optim", "state", fqn, "step")
            out.append((".".join(p), p, (), torch.float32))
        if n is not None and len(out) >= n:
            return out[:n]
    return out


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


def build(n_tensors, ranks, checkpoint_id, m, prefix):
    sdm, storage, planner = {}, {}, {}
    file_pos = [0] * ranks
    pre = (prefix,) if prefix else ()
    for fqn, path, shape, dtype in tensors(n_tensors, m, prefix):
        chunks = []
        itemsize = torch.empty((), dtype=dtype).element_size()
        # A 0-d tensor (Adam's step) is replicated: one chunk, saved by rank 0. The empty shards of
        # ranks past the last row (K/V projections of 1,024 rows over 2,048 ranks) share one
        # MetadataIndex (fqn, offset): DCP's planner keeps one of them (dedup_save_plans), saved by
        # the first rank that holds one.
        layout = shard0(shape, ranks) if shape else [((), ())]
        seen = set()
        for rank, (offsets, sizes) in enumerate(layout):
            if offsets in seen:
                continue
            seen.add(offsets)
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
    for path in (("optim", "param_groups", 0, "lr"), ("optim", "param_groups", 0, "betas"), ("train", "step")):
        path = pre + path
        key = ".".join(str(p) for p in path)
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
    ap.add_argument("--tensors", type=int, default=None, help="default 10,000 (llama-8b-like), the whole model otherwise")
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--model", choices=sorted(MODELS), default="llama-8b-like")
    ap.add_argument("--prefix", default="", help='top-level key of the state_dict (e.g. "app")')
    a = ap.parse_args()
    if a.tensors is None and MODELS[a.model]["layers"] is None:
        a.tensors = 10_000
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    t0 = time.time()
    md = build(a.tensors, a.ranks, a.out, MODELS[a.model], a.prefix)
    t1 = time.time()
    # As torch's _FileSystemWriter.finish: pickle.dump at the default protocol, via a temp name.
    tmp = os.path.join(a.out, ".metadata.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(md, f)
    os.rename(tmp, os.path.join(a.out, ".metadata"))
    t2 = time.time()
    chunks = sum(len(t.chunks) for t in md.state_dict_metadata.values() if isinstance(t, TensorStorageMetadata))
    size = os.path.getsize(os.path.join(a.out, ".metadata"))
    print(f"{a.out}/.metadata: {size} bytes ({size / 2**20:.1f} MiB), {len(md.state_dict_metadata)} items, {chunks} chunks, "
          f"{len(md.storage_data)} storage entries; built in {t1 - t0:.1f} s, pickled in {t2 - t1:.1f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
