#!/usr/bin/env python3
"""--format megatron (issue 50 item 3): what dcpctl writes for megatron-core, checked against what
megatron-core 0.19.2 itself wrote for the same model (tests/fixtures/layouts/megatron_llama,
megatron_qwen3{,_moe}, megatron_qwen2_moe, megatron_qwen3_moe_mixed, whose dense and MoE layers
megatron-core keys one by one, `decoder.layers.<i>.`, mapped with megatron-gpt-layers, and
megatron_qwen3_mtp, an MTP layer `mtp.layers.0.*` under DeepSeek-V3's Hugging Face names, and
megatron_mixtral, MixtralForCausalLM's names mapped with megatron-mixtral, and megatron_glm4_moe,
Glm4MoeForCausalLM's names through the megatron family's glm4_moe variant, megatron_glm4_moe_mtp, the
same with an MTP layer, and megatron_deepseek_v3{,_moe}, multi-latent attention with MoE (and an MTP
layer; every layer MoE, stacked) in DeepseekV3ForCausalLM's names through the deepseek_v3 variant, and
megatron_llama_bias, linear biases (add_bias_linear: linear_qkv, linear_proj, linear_fc1, linear_fc2)
from LlamaForCausalLM's attention_bias and mlp_bias:
make_megatron_hf.py, make_megatron_qwen3.py), with torch's own DCP reader:

    megatron_format_test.py DCPCTL FIXTURES_DIR             # the files megatron's loader reads
    megatron_format_test.py DCPCTL FIXTURES_DIR --load      # and megatron-core's own load of them

For each case, `reshard hf/ --map megatron-gpt --format megatron` (HF -> Megatron; once with
--iteration 7: Megatron-LM's iter_0000007/ + latest_checkpointed_iteration.txt), `reshard ckpt/
--format megatron -w 1` (Megatron -> Megatron; once with --iteration 9, whose common state must say
9, not the source's 3; and Megatron-LM's own run_megatron iteration 2 with --iteration 5) and
`consolidate hf/ -o DIR/ --format megatron` must
give: metadata.json byte for byte megatron's;
the same .metadata keys as megatron's checkpoint (every tensor with its global shape and dtype, every
ShardedObject: the common state and each parallel linear's `_extra_state/shard_<offsets>_<shape>`);
every tensor bit for bit megatron's; every ShardedObject read back by torch.load(weights_only=True)
as megatron-core reads it (the common state {"iteration": N, "checkpoint_version": 3.0}, each extra
state [None]). A control: without --format megatron (plain dcp) the same checks must fail.
Kimi K2: megatron_deepseek_v3's hf/ under Kimi-K2's config.json (model_type kimi_k2, auto_map,
architectures DeepseekV3ForCausalLM) takes the deepseek_v3 variant by its class and gives the same
checkpoint (and, with --load, megatron-core's load of it, the logits of megatron's forward); without
auto_map the model_type alone decides: exit 5 naming kimi_k2. MLA without a q LoRA (a DeepseekV3ForCausalLM
with q_lora_rank null, saved by transformers): exit 5 naming q_proj, nothing written.

--load runs megatron-core's `dist_checkpointing.load` of the HF -> Megatron and Megatron -> Megatron
outputs of the four cases (dense Llama, Qwen3 qk-norm, Qwen3-MoE, Qwen2-MoE with a shared expert), and the
HF -> Megatron outputs of the fifth (layer 0 dense, layer 1 MoE, keys per layer) and the sixth (Qwen3 with
a multi-token-prediction layer, `mtp.layers.0.*`) and the seventh (Mixtral: MixtralForCausalLM's names,
--map megatron-mixtral) and the eighth (GLM-4.5: Glm4MoeForCausalLM's names, the router's expert bias
`e_score_correction_bias`, gate-less `shared_experts`, partial RoPE, first layer dense), the ninth (the
same with an MTP layer) and the tenth and eleventh (DeepSeek-V3: multi-latent attention, first layer dense
and an MTP layer; every layer MoE, stacked) and the twelfth (Llama with linear biases), into
fresh models (other weights)
of tensor parallelism 2, and 2 x expert parallelism 2 for the MoE case, on 2 gloo CPU ranks, all in
one torchrun launch, and compares their logits with the fixture's (megatron's own forward):
megatron_load.py, under a Python that has megatron-core 0.19.2: $DCPCTL_MEGATRON_PYTHON, else
.venv-megatron (tools/dev.sh setup), else this one if it imports megatron.core. megatron-core >= 0.17
declares Requires-Python >= 3.12 and has no wheel for the project's Python 3.11 (0.19.2 installs only
by building its sdist with --ignore-requires-python: tools/requirements-megatron.txt), so the
project's virtualenv does not have it: without such a Python --load skips (77) on a partial
developer set-up and fails under CI=true or DCPCTL_REQUIRE_VENV=1 (tests/skip.py).
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from skip import skip_or_fail  # noqa: E402

try:
    import torch
    import torch.distributed.checkpoint as dcp
except ImportError as e:
    skip_or_fail(f"torch is not importable ({e})")

import dcp_oracle  # noqa: E402
from testlib import check, run, summary  # noqa: E402

CASES = ("megatron_llama", "megatron_qwen3", "megatron_qwen3_moe", "megatron_qwen2_moe", "megatron_qwen3_moe_mixed",
         "megatron_qwen3_mtp", "megatron_mixtral", "megatron_glm4_moe", "megatron_glm4_moe_mtp", "megatron_deepseek_v3",
         "megatron_deepseek_v3_moe", "megatron_llama_bias")
# The map HF -> Megatron takes: a model mixing dense and MoE layers is keyed per layer (decoder.layers.<i>.)
# a Mixtral (MixtralForCausalLM's names, block_sparse_moe.experts.<e>.w1/w3/w2) is megatron-mixtral's
# and a GLM-4.5 or a DeepSeek-V3 (first layer dense: keyed per layer) is megatron-gpt-layers' with the family's
# glm4_moe or deepseek_v3 variant
MAPS = {"megatron_qwen3_moe_mixed": "megatron-gpt-layers", "megatron_mixtral": "megatron-mixtral", "megatron_glm4_moe": "megatron-gpt-layers",
        "megatron_glm4_moe_mtp": "megatron-gpt-layers", "megatron_deepseek_v3": "megatron-gpt-layers"}
# Loaded by megatron-core in --load: HF -> Megatron and Megatron -> Megatron; for the mixed case the first
# only (the second copies megatron-core's own ShardedObjects; CI's time); Mixtral's Megatron -> Megatron is
# megatron_qwen3_moe's without the q/k norms
ONE_LOAD = ("megatron_qwen3_moe_mixed", "megatron_qwen3_mtp", "megatron_mixtral", "megatron_glm4_moe", "megatron_glm4_moe_mtp",
            "megatron_deepseek_v3", "megatron_deepseek_v3_moe", "megatron_llama_bias")
META_JSON = '{"sharded_backend": "torch_dist", "sharded_backend_version": 1}'


def objects(ckpt: Path, md) -> dict:
    """Every bytes item (megatron's ShardedObjects), read as megatron-core reads its common state:
    dcp.load into a BytesIO, then torch.load(weights_only=True)."""
    keys = [k for k, v in md.state_dict_metadata.items() if type(v).__name__ == "BytesStorageMetadata"]
    sd = {k: io.BytesIO() for k in keys}
    dcp.load(sd, storage_reader=dcp.FileSystemReader(str(ckpt)), no_dist=True)
    out = {}
    for k, v in sd.items():
        if isinstance(v, io.BytesIO):  # as megatron's load_common_state_dict: torch 2.15 hands the object back loaded
            v.seek(0)
            v = torch.load(v, weights_only=True)
        out[k] = v
    return out


def tensors(ckpt: Path) -> dict:
    return {k: v for k, v in dcp_oracle.flat_state_from_dcp(ckpt).items() if isinstance(v, torch.Tensor)}


def layout(md) -> dict:
    """key -> (dtype, global shape) for tensors, "bytes" for ShardedObjects."""
    out = {}
    for k, v in md.state_dict_metadata.items():
        out[k] = (str(v.properties.dtype), tuple(v.size)) if hasattr(v, "size") else "bytes"
    return out


def like_megatron(out: Path, ref: Path, iteration: int | None, what: str, want_common: dict) -> list[str]:
    """The checks the docstring lists: what differs from megatron's checkpoint (empty: nothing)."""
    problems = []

    def want(ok: bool, msg: str) -> None:
        if not ok:
            problems.append(msg)

    ckpt = out / f"iter_{iteration:07d}" if iteration is not None else out
    if iteration is not None:
        tracker = out / "latest_checkpointed_iteration.txt"
        want(tracker.is_file() and tracker.read_text() == str(iteration), f"{what}: latest_checkpointed_iteration.txt")
    mj = ckpt / "metadata.json"
    want(mj.is_file() and mj.read_text() == (ref / "metadata.json").read_text() == META_JSON,
         f"{what}: metadata.json is not megatron's ({mj.read_text() if mj.is_file() else 'missing'!r})")
    if not (ckpt / ".metadata").is_file():
        want(False, f"{what}: no .metadata in {ckpt}")
        return problems
    md, rmd = dcp_oracle.read_metadata_raw(ckpt), dcp_oracle.read_metadata_raw(ref)
    got, exp = layout(md), layout(rmd)
    want(got == exp, f"{what}: .metadata keys/shapes/dtypes differ from megatron's: "
                     f"{sorted(set(got.items()) ^ set(exp.items()), key=str)[:6]}")
    gt, rt = tensors(ckpt), tensors(ref)
    for k in sorted(rt):
        want(k in gt and torch.equal(gt[k], rt[k]), f"{what}: tensor {k} differs from megatron's")
    go, ro = objects(ckpt, md), objects(ref, rmd)
    for k in sorted(ro):
        w = [want_common] if k == "common_state/shard_0_1" else ro[k]
        want(k in go and go[k] == w, f"{what}: {k} reads back as {go.get(k)!r}, want {w!r}")
    return problems


def megatron_python() -> str | None:
    """$DCPCTL_MEGATRON_PYTHON, else tools/dev.sh setup's .venv-megatron, else this Python if it
    imports megatron.core."""
    env = os.environ.get("DCPCTL_MEGATRON_PYTHON")
    if env:
        return env
    venv = HERE.parent.parent / ".venv-megatron" / "bin" / "python"
    if venv.is_file():
        return str(venv)
    try:
        import megatron.core  # noqa: F401
        return sys.executable
    except ImportError:
        return None


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--load"]
    load = "--load" in sys.argv[1:]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dcpctl, fixtures = args[0], Path(args[1]).resolve()
    mpy = megatron_python() if load else None
    if load and not mpy:
        skip_or_fail("megatron-core 0.19.2 is not importable: no .venv-megatron (tools/dev.sh setup makes it; "
                     "it needs Python >= 3.12 or an sdist build) and no DCPCTL_MEGATRON_PYTHON")
    with tempfile.TemporaryDirectory(prefix="dcpctl-megatron-") as tmp:
        work = Path(tmp)
        loads = []
        for case in CASES:
            d = fixtures / "layouts" / case
            ref = d / "ckpt"
            ref_common = objects(ref, dcp_oracle.read_metadata_raw(ref))["common_state/shard_0_1"][0]
            m = MAPS.get(case, "megatron-gpt")
            runs = [("hf->megatron", "reshard", d / "hf", ["--map", m], None, {"iteration": 0, "checkpoint_version": 3.0}),
                    ("hf->megatron --iteration 7", "reshard", d / "hf", ["--map", m, "--iteration", "7"], 7,
                     {"iteration": 7, "checkpoint_version": 3.0}),
                    ("megatron->megatron", "reshard", ref, ["-w", "1"], None, ref_common),
                    # --iteration on a Megatron source: the common state says the new iteration, not the source's
                    ("megatron->megatron --iteration 9", "reshard", ref, ["-w", "1", "--iteration", "9"], 9,
                     {**ref_common, "iteration": 9}),
                    ("consolidate hf -o DIR/ --format megatron", "consolidate", d / "hf", ["--map", m], None,
                     {"iteration": 0, "checkpoint_version": 3.0})]
            for n, (label, command, src, extra, it, common) in enumerate(runs):
                what = f"{case}: {label}"
                out = work / f"{case}-{n}"
                r = run(dcpctl, command, src, "-o", f"{out}/" if command == "consolidate" else out, "--format", "megatron", *extra)
                if not check(r.returncode == 0, f"{what}: exit {r.returncode}: {r.stderr.strip()[-600:]!r}"):
                    continue
                probs = like_megatron(out, ref, it, what, common)
                check(not probs, f"{what}: {len(probs)} differences from megatron-core's checkpoint: " + "; ".join(probs[:6]))
                if label == "hf->megatron" or (label == "megatron->megatron" and case not in ONE_LOAD):  # the others differ only in files checked above
                    loads.append((case, out))
            # the control: a plain DCP checkpoint of the same tensors is not what megatron reads
            plain = work / f"{case}-plain"
            r = run(dcpctl, "reshard", d / "hf", "-o", plain, "-w", "1", "--map", m)
            if check(r.returncode == 0, f"{case}: control: exit {r.returncode}: {r.stderr.strip()[-400:]!r}"):
                found = like_megatron(plain, ref, None, f"{case}: control (plain dcp)", {"iteration": 0, "checkpoint_version": 3.0})
                check(any("metadata.json" in p for p in found) and any(".metadata keys" in p for p in found),
                      f"{case}: control: a plain DCP checkpoint passed the megatron checks ({found[:3]})")
        # Kimi K2 (model_type kimi_k2, remote code: auto_map, architectures DeepseekV3ForCausalLM): the
        # megatron_deepseek_v3 model under Kimi-K2's config takes the deepseek_v3 variant by its class, and
        # HF -> Megatron writes megatron-core's own checkpoint; without auto_map the model_type decides: exit 5
        d = fixtures / "layouts" / "megatron_deepseek_v3"
        kimi = work / "kimi-hf"
        shutil.copytree(d / "hf", kimi)
        cfg = json.loads((kimi / "config.json").read_text())
        cfg.update(model_type="kimi_k2", architectures=["DeepseekV3ForCausalLM"],
                   auto_map={"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                             "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"})
        (kimi / "config.json").write_text(json.dumps(cfg))
        out = work / "kimi-megatron"
        r = run(dcpctl, "reshard", kimi, "-o", out, "--format", "megatron", "--map", "megatron-gpt-layers", "--json")
        if check(r.returncode == 0, f"kimi_k2 hf->megatron: exit {r.returncode}: {r.stderr.strip()[-600:]!r}"):
            check((json.loads(r.stdout).get("map") or {}).get("variant") == "deepseek_v3", "kimi_k2 hf->megatron: map.variant")
            probs = like_megatron(out, d / "ckpt", None, "kimi_k2 hf->megatron", {"iteration": 0, "checkpoint_version": 3.0})
            check(not probs, "kimi_k2 hf->megatron: " + "; ".join(probs[:6]))
            loads.append(("megatron_deepseek_v3", out))
        del cfg["auto_map"]
        (kimi / "config.json").write_text(json.dumps(cfg))
        r = run(dcpctl, "reshard", kimi, "-o", work / "kimi-noauto", "--format", "megatron", "--map", "megatron-gpt-layers")
        check(r.returncode == 5 and "kimi_k2" in r.stderr and not (work / "kimi-noauto").exists(),
              f"kimi_k2 without auto_map hf->megatron: exit {r.returncode} (want 5): {r.stderr.strip()[-300:]!r}")
        # MLA without a q LoRA (q_lora_rank null: DeepSeek-V2-Lite, Moonlight): megatron-core 0.19.2 builds no
        # model of that attention (docs/maps.md), so q_proj has no megatron key: refused, exit 5, naming it,
        # nothing written (the HF side written by transformers' DeepseekV3ForCausalLM.save_pretrained)
        from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

        cfg = json.loads((d / "config.json").read_text())
        cfg = {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "dtype", "model_type")}
        torch.manual_seed(0)
        DeepseekV3ForCausalLM(DeepseekV3Config(**{**cfg, "q_lora_rank": None})).save_pretrained(work / "noqlora-hf")
        r = run(dcpctl, "reshard", work / "noqlora-hf", "-o", work / "noqlora", "--format", "megatron", "--map", "megatron-gpt-layers")
        check(r.returncode == 5 and "model.layers.0.self_attn.q_proj.weight" in r.stderr and not (work / "noqlora").exists(),
              f"MLA without q LoRA hf->megatron: exit {r.returncode} (want 5 naming q_proj): {r.stderr.strip()[-400:]!r}")
        # Megatron-LM's own run (megatron.training's save_checkpoint, run_megatron): --iteration 5 rewrites its
        # common state's iteration (2), every other object and tensor as Megatron-LM wrote them
        src = fixtures / "layouts" / "run_megatron" / "run" / "iter_0000002"
        out = work / "run-it5"
        r = run(dcpctl, "reshard", src, "-o", out, "-w", "1", "--format", "megatron", "--iteration", "5")
        if check(r.returncode == 0, f"run_megatron --iteration 5: exit {r.returncode}: {r.stderr.strip()[-600:]!r}"):
            probs = like_megatron(out, src, 5, "run_megatron --iteration 5", {"iteration": 5, "checkpoint_version": 3.0})
            check(not probs, "run_megatron --iteration 5: " + "; ".join(probs[:6]))
        # Megatron -> Megatron carries the ShardedObjects as they are; a wrong-way map is refused
        r = run(dcpctl, "reshard", fixtures / "layouts" / "megatron_qwen3" / "hf", "-o", work / "no-map", "--format", "megatron")
        check(r.returncode == 5 and "--map megatron-gpt" in r.stderr and not (work / "no-map").exists(),
              f"--format megatron of HF keys without a map: exit {r.returncode} (want 5): {r.stderr.strip()[-300:]!r}")
        r = run(dcpctl, "reshard", fixtures / "layouts" / "megatron_qwen3" / "ckpt", "-o", work / "it", "-w", "1", "--iteration", "3")
        check(r.returncode == 2 and "--format megatron" in r.stderr, f"--iteration without --format megatron: exit {r.returncode} (want 2)")
        if load:
            # one torchrun launch for every load (megatron_load.py): the launch and imports are most of the cost
            args = [str(a) for case, out in loads for a in (out, fixtures / "layouts" / case)]
            r = subprocess.run([mpy, str(HERE / "megatron_load.py"), *args], capture_output=True, text=True, timeout=1500)
            check(r.returncode == 0, f"megatron-core's load of {len(loads)} outputs: exit {r.returncode}: "
                                     f"{(r.stdout + r.stderr).strip()[-3000:]!r}")
            done = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
            wanted = 2 * len(CASES) - len(ONE_LOAD) + 1  # + Kimi K2's
            check(len(done) == len(loads) == wanted, f"{len(done)} loads passed of {len(loads)} ({wanted} wanted)")
            for ln in done:
                print(ln)
    return summary("megatron_format_test")


if __name__ == "__main__":
    sys.exit(main())
