#!/usr/bin/env python3
"""Run in megatron-core's Python (.venv-megatron) by megatron_gpt_oss_test.py: megatron-core 0.19.2's own
dist_checkpointing.load of CKPT (dcpctl's Hugging Face -> Megatron output) into the GPT-OSS-style
GPTModel of make_megatron_gpt_oss.py (TP 1, EP 1, one gloo rank, other initial weights), then its
forward on the fixture's tokens; writes OUT.json with the largest difference from the logits megatron
computed from the checkpoint it wrote (LOGITS: the fixture's logits.safetensors).

    .venv-megatron/bin/python tests/e2e/megatron_gpt_oss_load.py CKPT LOGITS OUT.json
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
L = HERE.parent / "fixtures" / "layouts"
sys.path[:0] = [str(L), str(HERE.parent), str(HERE.parent / "interop")]


def main(ckpt: str, logits: str, out: str) -> int:
    import make_megatron_gpt_oss as mg
    import make_megatron_hf as mh

    mg.mq.init_one_rank(threads=1, timeout_s=300)
    mg.shim_sliding_window()
    from megatron.core import dist_checkpointing
    from safetensors.torch import load_file

    model = mg.build_model(mg.SEED + 999, 1, 1)
    loaded = dist_checkpointing.load(model.sharded_state_dict(), ckpt)
    common = {k: loaded.pop(k) for k in ("iteration", "checkpoint_version") if k in loaded}
    missing, unexpected = model.load_state_dict(loaded, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    model.eval()
    want = load_file(logits)
    got = mh.megatron_logits(model, want["tokens"])
    Path(out).write_text(json.dumps({"missing": missing, "unexpected": list(unexpected), "common": common,
                                     "max_abs_diff": (got - want["logits"]).abs().max().item()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
