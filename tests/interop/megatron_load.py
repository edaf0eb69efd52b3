#!/usr/bin/env python3
"""megatron-core's own load of a torch_dist checkpoint (what `dcpctl reshard --format megatron`
writes) into fresh GPTModels of another parallelism, on 2 gloo CPU ranks, and their logits against
the fixture's (megatron's own forward of the weights it saved):

    PYTHON megatron_load.py CKPT_DIR CASE_DIR

CASE_DIR is tests/fixtures/layouts/megatron_qwen3 or megatron_qwen3_moe (make_megatron_qwen3.py's
cases: the model's dimensions, its logits.safetensors). The dense case loads with tensor
parallelism 2, the MoE case with tensor parallelism 2 x expert parallelism 2 (expert tensor
parallelism 1), each model first built with other weights (seed + 999). Checked: the load returns
no error (every ShardedTensor and ShardedObject the model asks for is there), the model's
load_state_dict has no missing key but the `_extra_state`s and no unexpected key, the common state
holds checkpoint_version 3.0 and an iteration, and the logits (gathered over the tensor-parallel
vocabulary shards) equal the fixture's within its atol (1e-5). Prints one JSON line on success.

PYTHON needs megatron-core 0.19.2 (README.md beside the fixtures, recipe 14: /tmp/v-h6meg) and
the fixtures' shims (make_megatron_hf._shim_cuda: torch.cuda.synchronize and current_device on CPU).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAYOUTS = HERE.parent / "fixtures" / "layouts"
sys.path.insert(0, str(LAYOUTS))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def worker(ckpt: str, case_dir: str, result: str) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import make_megatron_hf as mh
    import make_megatron_qwen3 as mq

    mh._shim_cuda()
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import initialize_rng_tracker

    case = Path(case_dir).name
    moe = mq.CASES[case]["moe"]
    tp, ep = 2, 2 if moe else 1
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, expert_model_parallel_size=ep,
                                 expert_tensor_parallel_size=1 if moe else None)
    initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    model = mq.build_model(case, mq.SEED + 999, tp, ep)
    loaded = dist_checkpointing.load(model.sharded_state_dict(), ckpt)
    common = {k: loaded.pop(k) for k in ("iteration", "checkpoint_version") if k in loaded}
    missing, unexpected = model.load_state_dict(loaded, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    lg = load_file(str(Path(case_dir) / "logits.safetensors"))
    logits = mh.megatron_logits(model.eval(), lg["tokens"]).contiguous()
    parts = [torch.empty_like(logits) for _ in range(tp)]
    dist.all_gather(parts, logits, group=ps.get_tensor_model_parallel_group())
    full = torch.cat(parts, dim=-1)
    diff = (full - lg["logits"]).abs().max().item() if full.shape == lg["logits"].shape else float("inf")
    if dist.get_rank() == 0:
        Path(result).write_text(json.dumps({
            "case": case, "checkpoint": ckpt, "tensor_parallel": tp, "expert_parallel": ep, "common": common,
            "missing": missing, "unexpected": list(unexpected), "max_abs_logit_diff": diff,
            "logits_shape": list(full.shape)}))
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ckpt, case_dir = str(Path(sys.argv[1]).resolve()), str(Path(sys.argv[2]).resolve())
    from testlib import free_port

    result = Path(ckpt).parent / f".megatron-load-{Path(ckpt).name}.json"
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={free_port()}",
                        __file__, "--worker", ckpt, case_dir, str(result)], env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-6000:], file=sys.stderr)
        print(f"megatron_load: megatron-core's load of {ckpt} failed (torchrun exit {r.returncode})", file=sys.stderr)
        return 1
    doc = json.loads(result.read_text())
    result.unlink()
    atol = json.loads((Path(case_dir) / "expected.json").read_text())["logits"]["atol"]
    bad = []
    if doc["missing"] or doc["unexpected"]:
        bad.append(f"missing {doc['missing']}, unexpected {doc['unexpected']}")
    if doc["common"].get("checkpoint_version") != 3.0 or not isinstance(doc["common"].get("iteration"), int):
        bad.append(f"common state {doc['common']}")
    if not doc["max_abs_logit_diff"] <= atol:
        bad.append(f"logits differ from megatron's by {doc['max_abs_logit_diff']} (atol {atol})")
    if bad:
        print(f"megatron_load: {doc['case']} from {ckpt}: " + "; ".join(bad), file=sys.stderr)
        return 1
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
