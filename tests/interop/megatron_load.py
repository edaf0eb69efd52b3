#!/usr/bin/env python3
"""megatron-core's own load of torch_dist checkpoints (what `dcpctl reshard --format megatron`
writes) into fresh GPTModels of another parallelism, on 2 gloo CPU ranks, and their logits against
each fixture's (megatron's own forward of the weights it saved):

    PYTHON megatron_load.py CKPT_DIR CASE_DIR [CKPT_DIR CASE_DIR ...]

Every pair is loaded in ONE torchrun launch (two ranks; the imports and the process group once, the
model-parallel state made anew for each pair): a launch costs about a minute on a busy 2-core
machine, a load a few seconds. CASE_DIR is one of tests/fixtures/layouts/megatron_{llama,qwen,
qwen3,qwen3_moe,qwen2_moe,...,glm4_moe_mtp,deepseek_v3} (make_megatron_hf.py's and make_megatron_qwen3.py's
cases, multi-latent attention included: the model's
dimensions, its logits.safetensors). The dense cases load with tensor parallelism 2, the MoE cases with tensor
parallelism 2 x expert parallelism 2 (expert tensor parallelism 1), each model first built with
other weights (seed + 999). Checked for each: the load returns no error (every ShardedTensor and
ShardedObject the model asks for is there), the model's load_state_dict has no missing key but the
`_extra_state`s and no unexpected key, the common state holds checkpoint_version 3.0 and an
iteration, and the logits (gathered over the tensor-parallel vocabulary shards) equal the
fixture's within its atol (1e-5). Prints one JSON line per load; exit 1 if any fails.

PYTHON needs megatron-core 0.19.2 (tools/dev.sh setup's .venv-megatron; the fixtures README's
recipe 14) and the fixtures' shims (make_megatron_hf._shim_cuda: torch.cuda.synchronize and
current_device on CPU).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAYOUTS = HERE.parent / "fixtures" / "layouts"
sys.path.insert(0, str(LAYOUTS))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def build(case: str):
    """The fixture's model, built under the current model-parallel state: (model, tp, ep)."""
    import make_megatron_hf as mh
    import make_megatron_qwen3 as mq
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import initialize_rng_tracker

    moe = case in mq.CASES and mq.CASES[case]["moe"]
    tp, ep = 2, 2 if moe else 1
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, expert_model_parallel_size=ep,
                                 expert_tensor_parallel_size=1 if moe else None)
    initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    if case in mq.CASES:
        return mq.build_model(case, mq.SEED + 999, tp, ep), tp, ep
    return mh.build_model(case, mh.SEED + 999), tp, ep


def load_one(ckpt: str, case_dir: str) -> dict:
    import make_megatron_hf as mh
    import torch
    import torch.distributed as dist
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps
    from safetensors.torch import load_file

    case = Path(case_dir).name
    model, tp, ep = build(case)
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
    dist.barrier()
    ps.destroy_model_parallel()
    return {"case": case, "checkpoint": ckpt, "tensor_parallel": tp, "expert_parallel": ep, "common": common,
            "missing": missing, "unexpected": list(unexpected), "max_abs_logit_diff": diff,
            "logits_shape": list(full.shape)}


def worker(pairs_json: str, result: str) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import make_megatron_hf as mh

    mh._shim_cuda()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    docs = []
    for ckpt, case_dir in json.loads(pairs_json):
        try:
            docs.append(load_one(ckpt, case_dir))
        except Exception as e:  # noqa: BLE001 - reported per load, the next one still runs
            import traceback

            from megatron.core import parallel_state as ps

            docs.append({"case": Path(case_dir).name, "checkpoint": ckpt,
                         "error": f"{type(e).__name__}: {e}"[:2000], "traceback": traceback.format_exc()[-3000:]})
            ps.destroy_model_parallel()
    if dist.get_rank() == 0:
        Path(result).write_text(json.dumps(docs))
    dist.barrier()
    dist.destroy_process_group()


def problems(doc: dict) -> list[str]:
    if "error" in doc:
        return [f"load failed: {doc['error']}\n{doc.get('traceback', '')}"]
    atol = json.loads((LAYOUTS / doc["case"] / "expected.json").read_text())["logits"]["atol"]
    bad = []
    if doc["missing"] or doc["unexpected"]:
        bad.append(f"missing {doc['missing']}, unexpected {doc['unexpected']}")
    if doc["common"].get("checkpoint_version") != 3.0 or not isinstance(doc["common"].get("iteration"), int):
        bad.append(f"common state {doc['common']}")
    if not doc["max_abs_logit_diff"] <= atol:
        bad.append(f"logits differ from megatron's by {doc['max_abs_logit_diff']} (atol {atol})")
    return bad


def main() -> int:
    args = sys.argv[1:]
    if not args or len(args) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    pairs = [(str(Path(args[i]).resolve()), str(Path(args[i + 1]).resolve())) for i in range(0, len(args), 2)]
    from testlib import free_port

    with tempfile.TemporaryDirectory(prefix="dcpctl-megatron-load-") as tmp:
        result = Path(tmp) / "result.json"
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                            f"--master-port={free_port()}", __file__, "--worker", json.dumps(pairs), str(result)],
                           env=env, capture_output=True, text=True, timeout=1500)
        if r.returncode != 0 or not result.is_file():
            print(r.stdout[-3000:], r.stderr[-6000:], file=sys.stderr)
            print(f"megatron_load: torchrun exit {r.returncode}", file=sys.stderr)
            return 1
        docs = json.loads(result.read_text())
    status = 0
    for doc in docs:
        bad = problems(doc)
        if bad:
            print(f"megatron_load: {doc['case']} from {doc['checkpoint']}: " + "; ".join(bad), file=sys.stderr)
            status = 1
        else:
            print(json.dumps(doc))
    if len(docs) != len(pairs):
        print(f"megatron_load: {len(docs)} results for {len(pairs)} loads", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
