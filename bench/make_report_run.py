#!/usr/bin/env python3
"""A run folder for bench/report.sh, written by real torch (torch.distributed.checkpoint.save, no
process group; generated on first use, never committed):

    make_report_run.py DIR [--steps N] [--layers L] [--dim D] [--experts E]

DIR/step-1 .. step-N, each {"model": weights, "optimizer": {"state": {param: {"exp_avg",
"exp_avg_sq"}}}}: a Llama-shaped model of L layers (attention D x D four times, an MLP of 3 D x 4D,
or with --experts E an MoE layer of E experts of D x D/2 each, two norms), float32, its "training"
between steps an Adam-like update (W -= 1e-3 * m / sqrt(v), m and v moved with fresh noise), so
every step differs from the one before everywhere, as a real run's do. Default: 4 steps of
~0.53 GB (L 4, D 768: 44 M parameters, each with its two moments): ~2.1 GB.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

warnings.filterwarnings("ignore")


def shapes(layers: int, dim: int, experts: int) -> dict:
    s = {"tok_embeddings.weight": (4096, dim), "norm.weight": (dim,), "output.weight": (4096, dim)}
    for i in range(layers):
        p = f"layers.{i}."
        for w in ("wq", "wk", "wv", "wo"):
            s[p + f"attention.{w}.weight"] = (dim, dim)
        s[p + "attention_norm.weight"] = (dim,)
        s[p + "ffn_norm.weight"] = (dim,)
        if experts:
            for e in range(experts):
                for w in ("w1", "w2", "w3"):
                    s[p + f"moe.experts.{e}.{w}"] = (dim // 2, dim) if w != "w2" else (dim, dim // 2)
        else:
            for w in ("w1", "w2", "w3"):
                s[p + f"feed_forward.{w}.weight"] = (4 * dim, dim) if w != "w2" else (dim, 4 * dim)
    return s


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--experts", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(0)
    w = {k: torch.randn(s) * 0.02 for k, s in shapes(a.layers, a.dim, a.experts).items()}
    m = {k: torch.zeros_like(t) for k, t in w.items()}
    v = {k: torch.zeros_like(t) for k, t in w.items()}
    for step in range(1, a.steps + 1):
        for k in w:
            g = torch.randn_like(w[k]) * 0.01
            m[k].mul_(0.9).add_(g, alpha=0.1)
            v[k].mul_(0.999).addcmul_(g, g, value=0.001)
            w[k].sub_(1e-3 * m[k] / (v[k].sqrt() + 1e-8))
        state = {k: {"exp_avg": m[k], "exp_avg_sq": v[k]} for k in w}
        dcp.save({"model": w, "optimizer": {"state": state}}, checkpoint_id=str(Path(a.dir) / f"step-{step}"),
                 no_dist=True)
        print(f"step-{step} written", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
