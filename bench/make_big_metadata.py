#!/usr/bin/env python3
"""Write a `.metadata` as a 512-rank save of a large model would, with real torch classes: for
benchmarks of `dcpctl inspect` against `pickle.load`. Only `.metadata` is written (no .distcp
files: inspect reads only the pickle, and reports the data files as missing).

    .venv/bin/python bench/make_big_metadata.py [OUT_DIR] [--tensors N] [--ranks R] [--model M] [--prefix P]
    .venv/bin/python bench/make_big_metadata.py /tmp/dcpctl-bench/llama405b --model llama3-405b --ranks 2048 --prefix app
    .venv/bin/python bench/make_big_metadata.py /tmp/dcpctl-bench/kimi-k2 --model kimi-k2-titan --ranks 2048 --ep 64

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
# kimi-k2-titan: Kimi K2 (DeepSeek-V3's architecture at 1.04 T parameters: 61 layers, the first
# dense, 384 routed experts of 2,048 and one shared, hidden 7168, MLA with q_lora_rank 1536,
# kv_lora_rank 512, 64 heads of 128 + 64 rope), under torchtitan 0.3's names (the names of the
# fixture tests/fixtures/layouts/titan_deepseek_v3, which torchtitan 0.3.0 wrote), float32 with
# Adam, saved by FSDP2 over --ranks with expert parallelism --ep: every weight but the routed
# experts Shard(0) over all ranks; the experts [E, ...] split over EP on dim 0 and, as torchtitan's
# apply_fsdp does when dp_shard_mod_ep * ep > E, FSDP over the other ranks/ep on dim 1; the
# load-balancing expert_bias_E replicated (saved once).
MODELS = {
    "llama-8b-like": dict(hidden=4096, ffn=14336, vocab=128256, kv=1024, layers=None, dtype=torch.bfloat16, step=False),
    "llama3-405b": dict(hidden=16384, ffn=53248, vocab=128256, kv=1024, layers=126, dtype=torch.float32, step=True),
    "kimi-k2-titan": dict(hidden=7168, ffn=18432, moe_ffn=2048, experts=384, shared=1, dense_layers=1, vocab=163840,
                          heads=64, q_lora=1536, kv_lora=512, nope=128, rope=64, v_head=128, layers=61,
                          dtype=torch.float32, step=True, titan_moe=True),
}


def titan_moe_params(m):
    """(planner path, shape, dtype, placement) of a torchtitan DeepSeek-V3-style MoE: placement
    "fsdp" (Shard(0) over all ranks), "experts" (EP on dim 0, FSDP on dim 1) or "replicated"."""
    h, f, mf, E, v, w = m["hidden"], m["ffn"], m["moe_ffn"], m["experts"], m["vocab"], m["dtype"]
    H, qk = m["heads"], m["nope"] + m["rope"]
    yield ("model", "tok_embeddings.weight"), (v, h), w, "fsdp"
    for layer in range(m["layers"]):
        p = f"layers.{layer}."
        yield ("model", p + "attention.wq_a.weight"), (m["q_lora"], h), w, "fsdp"
        yield ("model", p + "attention.q_norm.weight"), (m["q_lora"],), w, "fsdp"
        yield ("model", p + "attention.wq_b.weight"), (H * qk, m["q_lora"]), w, "fsdp"
        yield ("model", p + "attention.wkv_a.weight"), (m["kv_lora"] + m["rope"], h), w, "fsdp"
        yield ("model", p + "attention.kv_norm.weight"), (m["kv_lora"],), w, "fsdp"
        yield ("model", p + "attention.wkv_b.weight"), (H * (m["nope"] + m["v_head"]), m["kv_lora"]), w, "fsdp"
        yield ("model", p + "attention.wo.weight"), (h, H * m["v_head"]), w, "fsdp"
        yield ("model", p + "attention_norm.weight"), (h,), w, "fsdp"
        yield ("model", p + "ffn_norm.weight"), (h,), w, "fsdp"
        if layer < m["dense_layers"]:
            yield ("model", p + "feed_forward.w1.weight"), (f, h), w, "fsdp"
            yield ("model", p + "feed_forward.w2.weight"), (h, f), w, "fsdp"
            yield ("model", p + "feed_forward.w3.weight"), (f, h), w, "fsdp"
            continue
        yield ("model", p + "moe.routed_experts.inner_experts.w1_EFD"), (E, mf, h), w, "experts"
        yield ("model", p + "moe.routed_experts.inner_experts.w2_EDF"), (E, h, mf), w, "experts"
        yield ("model", p + "moe.routed_experts.inner_experts.w3_EFD"), (E, mf, h), w, "experts"
        yield ("model", p + "moe.router.gate.weight"), (E, h), w, "fsdp"
        sf = mf * m["shared"]
        yield ("model", p + "moe.shared_experts.w1.weight"), (sf, h), w, "fsdp"
        yield ("model", p + "moe.shared_experts.w2.weight"), (h, sf), w, "fsdp"
        yield ("model", p + "moe.shared_experts.w3.weight"), (sf, h), w, "fsdp"
        yield ("model", p + "moe.expert_bias_E"), (E,), torch.float32, "replicated"
    yield ("model", "norm.weight"), (h,), w, "fsdp"
    yield ("model", "lm_head.weight"), (v, h), w, "fsdp"


def write_titan_config(m, out, **extra):
    """The Hugging Face config.json --map reads a titan_moe model's parameters from (and --quantize
    its carve-outs), written by transformers' own DeepseekV3Config with the model's dimensions."""
    from transformers import DeepseekV3Config
    DeepseekV3Config(vocab_size=m["vocab"], hidden_size=m["hidden"], intermediate_size=m["ffn"],
                     moe_intermediate_size=m["moe_ffn"], num_hidden_layers=m["layers"], num_attention_heads=m["heads"],
                     num_key_value_heads=m["heads"], n_shared_experts=m["shared"], n_routed_experts=m["experts"],
                     num_experts_per_tok=8, first_k_dense_replace=m["dense_layers"], q_lora_rank=m["q_lora"],
                     kv_lora_rank=m["kv_lora"], qk_nope_head_dim=m["nope"], qk_rope_head_dim=m["rope"],
                     v_head_dim=m["v_head"], n_group=1, topk_group=1, tie_word_embeddings=False,
                     num_nextn_predict_layers=0, **extra).to_json_file(os.path.join(out, "config.json"))


def model_params(m):
    """(planner path, shape, dtype, placement) of a model, layer after layer (a Llama-style one:
    every tensor Shard(0) over all ranks, "fsdp")."""
    if m.get("titan_moe"):
        yield from titan_moe_params(m)
        return
    h, f, v, kv, w = m["hidden"], m["ffn"], m["vocab"], m["kv"], m["dtype"]
    yield ("model", "tok_embeddings.weight"), (v, h), w, "fsdp"
    yield ("model", "norm.weight"), (h,), torch.float32, "fsdp"
    yield ("model", "output.weight"), (v, h), w, "fsdp"
    layer = 0
    while m["layers"] is None or layer < m["layers"]:
        p = f"layers.{layer}."
        yield ("model", p + "attention.wq.weight"), (h, h), w, "fsdp"
        yield ("model", p + "attention.wk.weight"), (kv, h), w, "fsdp"
        yield ("model", p + "attention.wv.weight"), (kv, h), w, "fsdp"
        yield ("model", p + "attention.wo.weight"), (h, h), w, "fsdp"
        yield ("model", p + "feed_forward.w1.weight"), (f, h), w, "fsdp"
        yield ("model", p + "feed_forward.w2.weight"), (h, f), w, "fsdp"
        yield ("model", p + "feed_forward.w3.weight"), (f, h), w, "fsdp"
        yield ("model", p + "attention_norm.weight"), (h,), torch.float32, "fsdp"
        yield ("model", p + "ffn_norm.weight"), (h,), torch.float32, "fsdp"
        layer += 1


def tensors(n, m, prefix):
    """(flat key, planner path, shape, dtype): each parameter, then its exp_avg and exp_avg_sq (and
    step); n of them at most (None: the whole model). Keys under `prefix` (e.g. "app": app.model...,
    app.optim.state..., as a state_dict saved as {"app": AppState})."""
    out = []
    pre = (prefix,) if prefix else ()
    titan = bool(m.get("titan_moe"))  # torchtitan: model keys at the top, "optimizer.state.FQN.exp_avg"
    for path, shape, dtype, placement in model_params(m):
        fqn = ".".join(path)
        if titan:
            path, fqn = path[1:], ".".join(path[1:])
        out.append((".".join(pre + path), pre + path, shape, dtype, placement))
        if fqn.endswith("expert_bias_E"):
            continue  # a buffer (torchtitan's load-balancing bias): no optimizer state
        optim = "optimizer" if titan else "optim"
        for state in ("exp_avg", "exp_avg_sq"):
            p = pre + (optim, "state", fqn, state)
            out.append((".".join(p), p, shape, torch.float32, placement))
        if m["step"]:
            p = pre + (optim, "state", fqn, "step")
            out.append((".".join(p), p, (), torch.float32, "replicated"))
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


def grid(shape, ranks, ep, placement):
    """(rank, offsets, sizes) of each chunk: Shard(0) over all ranks; the experts EP-split on dim 0
    and FSDP-split (ranks / ep) on dim 1, rank = ep_index * (ranks / ep) + fsdp_index; a replicated
    tensor once, by rank 0."""
    if placement == "replicated" or not shape:
        return [(0, (0,) * len(shape), tuple(shape))]
    if placement == "fsdp":
        return [(r, o, z) for r, (o, z) in enumerate(shard0(shape, ranks))]
    fsdp = ranks // ep
    out = []
    for e, (eo, ez) in enumerate(shard0(shape, ep)):
        rows = shard0((shape[1],), fsdp)
        for f, ((ro,), (rz,)) in enumerate(rows):
            out.append((e * fsdp + f, (eo[0], ro) + (0,) * (len(shape) - 2), (ez[0], rz) + tuple(shape[2:])))
    return out


def build(n_tensors, ranks, checkpoint_id, m, prefix, ep=1):
    sdm, storage, planner = {}, {}, {}
    file_pos = [0] * ranks
    pre = (prefix,) if prefix else ()
    for fqn, path, shape, dtype, placement in tensors(n_tensors, m, prefix):
        chunks = []
        itemsize = torch.empty((), dtype=dtype).element_size()
        # A 0-d tensor (Adam's step) is replicated: one chunk, saved by rank 0. The empty shards of
        # ranks past the last row (K/V projections of 1,024 rows over 2,048 ranks) share one
        # MetadataIndex (fqn, offset): DCP's planner keeps one of them (dedup_save_plans), saved by
        # the first rank that holds one.
        seen = set()
        for rank, offsets, sizes in grid(shape, ranks, ep, placement):
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
    extras = ((("optimizer", "param_groups", 0, "lr"), ("optimizer", "param_groups", 0, "betas"), ("train_state", "step"))
              if m.get("titan_moe") else (("optim", "param_groups", 0, "lr"), ("optim", "param_groups", 0, "betas"), ("train", "step")))
    for path in extras:
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
    ap.add_argument("--ep", type=int, default=64, help="expert parallel degree (kimi-k2-titan; divides --ranks)")
    ap.add_argument("--layers", type=int, default=None, help="fewer layers than the model has (a scaled-down file)")
    a = ap.parse_args()
    if a.layers is not None:
        MODELS[a.model]["layers"] = a.layers
    if a.tensors is None and MODELS[a.model]["layers"] is None:
        a.tensors = 10_000
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    t0 = time.time()
    md = build(a.tensors, a.ranks, a.out, MODELS[a.model], a.prefix, a.ep)
    t1 = time.time()
    # As torch's _FileSystemWriter.finish: pickle.dump at the default protocol, via a temp name.
    tmp = os.path.join(a.out, ".metadata.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(md, f)
    os.rename(tmp, os.path.join(a.out, ".metadata"))
    t2 = time.time()
    m = MODELS[a.model]
    if m.get("titan_moe"):
        write_titan_config(m, a.out)
    chunks = sum(len(t.chunks) for t in md.state_dict_metadata.values() if isinstance(t, TensorStorageMetadata))
    size = os.path.getsize(os.path.join(a.out, ".metadata"))
    print(f"{a.out}/.metadata: {size} bytes ({size / 2**20:.1f} MiB), {len(md.state_dict_metadata)} items, {chunks} chunks, "
          f"{len(md.storage_data)} storage entries; built in {t1 - t0:.1f} s, pickled in {t2 - t1:.1f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
