#!/usr/bin/env python3
"""A scaled-down Kimi-K2-shaped torchtitan checkpoint, written by real torch: dcp.save over R ranks
(gloo, CPU, torch.multiprocessing), FSDP + expert parallelism, with Adam's state. For
bench/scaling.sh's MODE=kimi; never committed.

    .venv/bin/python bench/make_kimi_ckpt.py OUT_DIR --layers L --experts E [--ranks R] [--ep EP] [--pool MIB]
    .venv/bin/python bench/make_kimi_ckpt.py --estimate --layers L --experts E    (bytes: all, weights)
    .venv/bin/python bench/make_kimi_ckpt.py --check PLAIN_OUT FP8_OUT   (the exports, by transformers and torch)

The shapes are bench/plan_1t.sh's Kimi K2 (make_big_metadata.py's "kimi-k2-titan": DeepSeek-V3's
architecture, hidden 7168, MLA with q_lora 1536 / kv_lora 512, 64 heads of 128 + 64 rope, dense FFN
18432, 384 routed experts of 2048 and one shared, vocab 163840, the first layer dense) with every
width divided by --scale (default 8: hidden 896, q_lora 192, kv_lora 64, 8 heads, FFN 2304, experts
of 256, vocab 20480; the per-head dims 128 / 64 / 128 kept), L layers and E routed experts; the
names are torchtitan 0.3's, from make_big_metadata.titan_moe_params itself (those of the fixture
tests/fixtures/layouts/titan_deepseek_v3, which torchtitan 0.3.0 wrote): the model's keys at the top
level, torchtitan's flattened optimizer under "optimizer" ("state.FQN.exp_avg", "exp_avg_sq",
"step" a 0-d float32, and the param groups' "param_groups.FQN.lr", ... as Python objects) and
"train_state". float32, as FSDP2 keeps the weights.

Placement, as make_big_metadata.py describes for 2,048 ranks: every weight DTensor Shard(0) over the
R ranks (a 1-D mesh); the routed experts [E, ...] a DTensor on a 2-D mesh (EP, R/EP), Shard(0) on
the EP dim and Shard(1) on the FSDP one (torchtitan's apply_fsdp when dp_shard_mod_ep * ep > E), rank
= ep_index * (R/EP) + fsdp_index; expert_bias_E (a buffer: no optimizer state) a plain tensor on
every rank, which DCP saves once. A config.json from transformers' DeepseekV3Config with the same
dimensions is written beside .metadata (what --map and --quantize read).

The bytes come from make_big_ckpt.py's pool (--pool MIB, default 256): each shard a copy-on-write
map of a window of a random pool file, so the ranks hold no shards of their own and a 12 GB
checkpoint is written in a few GB of memory; torch still writes every byte through dcp.save.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ADAM_GROUP = {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "amsgrad": False, "foreach": None,
              "maximize": False, "capturable": False, "differentiable": False, "fused": None,
              "decoupled_weight_decay": True, "initial_lr": 3e-4}


def model(layers: int, experts: int, scale: int = 8) -> dict:
    """make_big_metadata's kimi-k2-titan dimensions, the widths divided by `scale`."""
    from make_big_metadata import MODELS

    m = dict(MODELS["kimi-k2-titan"])
    for k in ("hidden", "ffn", "moe_ffn", "q_lora", "kv_lora", "vocab", "heads"):
        m[k] //= scale
    m.update(layers=layers, experts=experts)
    return m


def params(m: dict):
    """(fqn, shape, dtype, placement) of each model tensor, torchtitan's names."""
    from make_big_metadata import titan_moe_params

    for path, shape, dtype, placement in titan_moe_params(m):
        yield ".".join(path[1:]), tuple(shape), dtype, placement


def nbytes(shape, dtype) -> int:
    import torch

    return torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size()


def estimate(m: dict) -> tuple[int, int]:
    """(bytes of every tensor saved, bytes of the model's weights)."""
    weights = total = 0
    for fqn, shape, dtype, placement in params(m):
        b = nbytes(shape, dtype)
        weights += b
        total += b if fqn.endswith("expert_bias_E") else 3 * b + 4
    return total, weights


def local_block(shape, mesh_shape, coords, dims):
    """(offsets, sizes) of the block at `coords` of a mesh sharding dims[i] over mesh_shape[i],
    torch.chunk semantics as DTensor's Shard."""
    off, size = [0] * len(shape), list(shape)
    for n, c, d in zip(mesh_shape, coords, dims):
        step = -(-size[d] // n)
        start = min(c * step, size[d])
        off[d] += start
        size[d] = max(0, min(step, size[d] - start))
    return off, size


def worker(rank: int, world: int, port: int, out: str, cfg: dict) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    from make_big_ckpt import pool_window

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ep = cfg["ep"]
    flat = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
    grid = init_device_mesh("cpu", (ep, world // ep), mesh_dim_names=("ep", "dp_shard_mod_ep"))
    m = model(cfg["layers"], cfg["experts"], cfg["scale"])
    pool = cfg["pools"][str(torch.float32)]

    def shard(key, shape, dtype, placement):
        if placement == "experts":
            mesh, coords, dims, places = grid, (rank // (world // ep), rank % (world // ep)), (0, 1), [Shard(0), Shard(1)]
        else:
            mesh, coords, dims, places = flat, (rank,), (0,), [Shard(0)]
        _, size = local_block(shape, mesh.shape, coords, dims)
        local = pool_window(pool, dtype, tuple(size), f"{key}/{rank}")
        stride = tuple(int(torch.Size(shape)[i + 1:].numel()) for i in range(len(shape)))
        return DTensor.from_local(local, mesh, places, run_check=False, shape=torch.Size(shape), stride=stride)

    sd, optim = {}, {}
    for fqn, shape, dtype, placement in params(m):
        if placement == "replicated":  # expert_bias_E: a buffer, the same on every rank
            sd[fqn] = pool_window(pool, dtype, shape, fqn).clone()
            continue
        sd[fqn] = shard(fqn, shape, dtype, placement)
        for state in ("exp_avg", "exp_avg_sq"):
            optim[f"state.{fqn}.{state}"] = shard(f"{fqn}.{state}", shape, torch.float32, placement)
        optim[f"state.{fqn}.step"] = torch.tensor(1000.0)
        for k, v in ADAM_GROUP.items():
            optim[f"param_groups.{fqn}.{k}"] = v
    sd["optimizer"] = optim
    sd["train_state"] = {"step": 1000, "ntokens_seen": 1000 * 4096 * 8}
    dcp.save(sd, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def check(plain: str, fp8: str) -> int:
    """The exports' check, by transformers and torch rather than dcpctl: PLAIN (consolidate --map
    torchtitan-deepseek-v3 -o PLAIN/) loads with transformers' from_pretrained with no missing,
    unexpected or mismatched keys and gives finite logits; every tensor of FP8 (the same with
    --quantize fp8-block) is PLAIN's byte for byte, or an float8_e4m3fn weight whose 128x128 blocks
    times its weight_scale_inv are PLAIN's within e4m3's rounding: half a step, |x| / 16 for a
    normal, scale * 2^-10 below e4m3's smallest normal (2^-6)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    m, info = AutoModelForCausalLM.from_pretrained(plain, output_loading_info=True, dtype=torch.float32)
    logits = m(torch.tensor([[1, 2, 3, 4]])).logits
    bad = {k: v for k, v in info.items() if v}
    print(f"from_pretrained({plain}): {type(m).__name__}, {sum(p.numel() for p in m.parameters())} parameters; "
          f"loading info {bad or 'clean'}; logits {tuple(logits.shape)} finite: {bool(torch.isfinite(logits).all())}")
    fails = len(bad) + (not bool(torch.isfinite(logits).all()))
    del m

    def folder(d):
        out = {}
        for f in sorted(os.listdir(d)):
            if f.endswith(".safetensors"):
                out.update(load_file(os.path.join(d, f)))
        return out

    ref, q = folder(plain), folder(fp8)
    quantized = kept = 0
    worst = 0.0
    for k, v in q.items():
        if k.endswith("_scale_inv"):
            continue
        if k not in ref:
            print(f"  {k}: in {fp8}, not in {plain}")
            fails += 1
            continue
        x = ref[k]
        if v.dtype != torch.float8_e4m3fn:
            same = v.dtype == x.dtype and v.shape == x.shape and torch.equal(v.view(torch.uint8), x.view(torch.uint8))
            kept += 1
            if not same:
                print(f"  {k}: kept as {v.dtype} {tuple(v.shape)}, not {plain}'s {x.dtype} {tuple(x.shape)} bytes")
                fails += 1
            continue
        s = q.get(k + "_scale_inv")
        if s is None or v.shape != x.shape:
            print(f"  {k}: fp8 {tuple(v.shape)} without a {k}_scale_inv, or not {plain}'s shape {tuple(x.shape)}")
            fails += 1
            continue
        r, c = x.shape
        scale = s.float().repeat_interleave(128, 0)[:r].repeat_interleave(128, 1)[:, :c]
        err = (v.float() * scale - x.float()).abs()
        bound = torch.maximum(x.float().abs() / 16, scale * 2.0**-10) * (1 + 2.0**-20)
        over = int((err > bound).sum())
        worst = max(worst, float((err / bound).max()))
        quantized += 1
        if over:
            print(f"  {k}: {over} of {x.numel()} elements past e4m3's rounding bound")
            fails += 1
    missing = sorted(set(ref) - set(q))
    for k in missing:
        print(f"  {k}: in {plain}, not in {fp8}")
    fails += len(missing)
    print(f"{fp8}: {quantized} fp8 weights against e4m3's rounding of {plain}'s (worst error {worst:.3f} of the bound), "
          f"{kept} tensors byte for byte; {fails} failure(s)")
    return 1 if fails else 0


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        return check(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--layers", type=int, required=True, help="layers (the first dense, the rest MoE)")
    ap.add_argument("--experts", type=int, required=True, help="routed experts per MoE layer (Kimi K2: 384)")
    ap.add_argument("--scale", type=int, default=8, help="Kimi K2's widths divided by this (default 8)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--ep", type=int, default=4, help="expert-parallel degree (divides --ranks and --experts)")
    ap.add_argument("--pool", type=int, default=256, metavar="MIB", help="random pool per dtype the shards map")
    ap.add_argument("--estimate", action="store_true", help="print the bytes of all tensors and of the weights; write nothing")
    a = ap.parse_args()
    m = model(a.layers, a.experts, a.scale)
    total, weights = estimate(m)
    if a.estimate:
        print(total, weights)
        return 0
    if not a.out:
        ap.error("OUT_DIR is required")
    if a.ranks % a.ep or a.experts % a.ep:
        ap.error(f"--ep {a.ep} must divide --ranks {a.ranks} and --experts {a.experts}")

    import torch

    from make_big_ckpt import spawn_ranks

    cfg = {"layers": a.layers, "experts": a.experts, "scale": a.scale, "ep": a.ep, "pools": {}}
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    t = time.time()
    spawn_ranks(worker, a.ranks, a.out, cfg, a.pool)
    # What --map reads its parameters from and --quantize its carve-outs, as make_big_metadata.py writes it.
    from make_big_metadata import write_titan_config
    write_titan_config(m, a.out, torch_dtype="float32")
    info = {"ranks": a.ranks, "ep": a.ep, "layers": a.layers, "experts": a.experts, "scale": a.scale,
            "pool_mib": a.pool, "tensor_bytes": total, "weight_bytes": weights,
            "seconds": round(time.time() - t, 1), "torch": torch.__version__}
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
