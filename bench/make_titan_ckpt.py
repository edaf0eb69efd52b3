#!/usr/bin/env python3
"""A multi-GB torchtitan Llama 3 checkpoint for bench/maps.sh: torchtitan 0.3.0's own Llama3Model
(fused QKV; its state-dict hook writes the split qkv_linear.wq/wk/wv keys), float32, initialised by
its init_states on CPU (no training), saved by dcp.save on one process: the model keys a
CheckpointManager model-only save writes, at the top level.

    /work/venvs/titan03/bin/python bench/make_titan_ckpt.py OUT_DIR [--flavor-file FLAVOR.py]

The model is the flavor "bench3g" that bench/titan_flavor.py registers (dim 2048, 12 layers, 16 heads /
8 KV heads, ffn 8192, vocab 32768, untied: 889 M parameters, 3.56 GB float32); convert_to_hf.py is
given the same flavor. Needs a venv with torchtitan 0.3.0 (tests/fixtures/layouts/README.md, recipe 7).
"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import titan_flavor  # noqa: E402  (registers llama3 flavor "bench3g")

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1])
    if (out / ".metadata").is_file():
        print(f"{out}: already there")
        return 0
    import torchtitan.models.llama3 as L

    t0 = time.monotonic()
    cfg = L.model_registry(titan_flavor.FLAVOR).model
    torch.manual_seed(0)
    with torch.device("meta"):
        model = cfg.build()
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_states(buffer_device=None)
    sd = model.state_dict()
    n = sum(v.numel() for v in sd.values())
    print(f"built and initialised {len(sd)} tensors, {n / 1e6:.0f} M parameters "
          f"({n * 4 / 1e9:.2f} GB float32) in {time.monotonic() - t0:.0f} s", flush=True)
    tmp = out.with_name(out.name + ".tmp")
    dcp.save(sd, checkpoint_id=str(tmp), no_dist=True)
    os.replace(tmp, out)
    print(f"saved {out} in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
