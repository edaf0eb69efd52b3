#!/usr/bin/env python3
"""A multi-GB torchtitan checkpoint for bench/maps.sh: a model of torchtitan 0.3.0's own, in a flavor
that bench/titan_flavor.py registers, float32, initialised by its init_states on CPU (no training),
saved by dcp.save on one process: the model keys a CheckpointManager model-only save writes, at the
top level.

    /work/venvs/titan03/bin/python bench/make_titan_ckpt.py OUT_DIR [FLAVOR]

FLAVOR (default bench3g):
- bench3g: Llama3Model (fused QKV; its state-dict hook writes the split qkv_linear.wq/wk/wv keys),
  dim 2048, 12 layers, 16 heads / 8 KV heads, ffn 8192, vocab 32768, untied: 889 M parameters,
  3.56 GB float32.
- bench_moe: DeepSeekV3Model (MLA with q LoRA, one dense layer, then 7 MoE layers of 32 grouped
  routed experts w1_EFD/w2_EDF/w3_EFD, a shared expert, expert_bias_E): 680 M parameters, 2.72 GB
  float32. Its tensors that init_states leaves constant (RMSNorm weights all 1, expert_bias_E all 0)
  get seeded noise before the save, as training would, so that a tensor exported under another
  layer's or module's name cannot pass the diff against torchtitan's export.
convert_to_hf.py is given the same flavor. Needs a venv with torchtitan 0.3.0
(tests/fixtures/layouts/README.md, recipe 7).
"""
import importlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import titan_flavor  # noqa: E402  (registers the flavors)

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402


def main() -> int:
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] not in titan_flavor.FLAVORS):
        print(f"usage: {sys.argv[0]} OUT_DIR [{'|'.join(titan_flavor.FLAVORS)}]", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    name = sys.argv[2] if len(sys.argv) == 3 else titan_flavor.FLAVOR
    flavor = titan_flavor.FLAVORS[name]
    if (out / ".metadata").is_file():
        print(f"{out}: already there")
        return 0
    module = importlib.import_module(f"torchtitan.models.{flavor.model}")

    t0 = time.monotonic()
    cfg = module.model_registry(name).model
    torch.manual_seed(0)
    with torch.device("meta"):
        model = cfg.build()
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_states(buffer_device=None)
    sd = model.state_dict()
    if flavor.perturb_constants:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for v in sd.values():
                if v.is_floating_point() and v.numel() > 1 and bool((v == v.flatten()[0]).all()):
                    v.add_(torch.randn(v.shape, generator=g, dtype=v.dtype) * 1e-2)
    n = sum(v.numel() for v in sd.values())
    print(f"{name} ({flavor.model}): built and initialised {len(sd)} tensors, {n / 1e6:.0f} M parameters "
          f"({n * 4 / 1e9:.2f} GB float32) in {time.monotonic() - t0:.0f} s", flush=True)
    tmp = out.with_name(out.name + ".tmp")
    dcp.save(sd, checkpoint_id=str(tmp), no_dist=True)
    os.replace(tmp, out)
    print(f"saved {out} in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
