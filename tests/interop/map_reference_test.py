#!/usr/bin/env python3
"""The key-map schema expresses torchtitan's StateDictAdapters: the reference implementation of the
maps (tests/interop/map_reference.py) applied with the built-in maps (src/maps/*.json) gives, tensor
for tensor and bit for bit, what torchtitan's own to_hf / from_hf gave on the fixtures
tests/fixtures/layouts/titan_* (real torchtitan 0.3.0 and 0.2.2 checkpoints), and transformers loads
the result with torchtitan's logits. No dcpctl involved: this pins the semantics the engine must have.

    map_reference_test.py FIXTURES_DIR

Checks, per case (titan_llama3, titan_llama3_v02, titan_qwen3 (tied), titan_deepseek_v3 (MoE)):
  - torchtitan -> hf on the whole checkpoint (torch's dcp_to_torch_save view: model, optimizer,
    lr_scheduler, dataloader, train_state): direction torchtitan->hf, the output equals
    expected_hf.safetensors (plus the tied lm_head.weight, equal to the embedding), left_out is
    exactly the non-model keys, nothing dropped; from_pretrained of it: no missing/unexpected keys,
    torchtitan's logits;
  - hf -> torchtitan on hf/ (transformers' save_pretrained): equals expected_titan.safetensors (less
    the tied lm_head.weight from_hf copies from the embedding); and back to hf again: hf/'s tensors;
  - controls that must fail: the other Llama map (0.2 names on a 0.3 checkpoint and the reverse)
    leaves the attention and output weights out; a config.json without num_attention_heads is an
    error naming n_heads; n_kv_heads taken as n_heads is refused (rows do not add up); the
    permutation run the wrong way round (a map with the sides' roles swapped) does not give the
    adapter's tensors; a map matching none of the keys is an error; Qwen 3 dense needs no
    num_experts (params resolve only when a matched rule uses them).

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure under CI).
"""

from __future__ import annotations

import copy
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from skip import skip_or_fail  # noqa: E402

try:
    import torch
    import transformers  # noqa: F401
except ImportError as e:
    skip_or_fail(f"torch and transformers are needed ({e}); tools/requirements.txt pins them")

import dcp_oracle  # noqa: E402
import map_oracle as mo  # noqa: E402
from map_reference import MapError, apply_map, load_map  # noqa: E402
from testlib import check, problems, summary  # noqa: E402  (tests/testlib.py)


def raises(fn, needle: str, what: str) -> None:
    try:
        fn()
    except MapError as e:
        check(needle in str(e), f"{what}: MapError {e!r} does not name {needle!r}")
        return
    check(False, f"{what}: no MapError")


def run_case(case: mo.Case, work: Path) -> None:
    m = load_map(case.map)
    config = case.config
    flat = dcp_oracle.flat_state_from_dcp(case.ckpt)
    out, rep = apply_map(m, flat, config)
    check(rep["direction"] == "torchtitan->hf", f"{case.name}: direction {rep['direction']}")
    problems(mo.check_hf_tensors(case, out, f"{case.name} torchtitan->hf"))
    check(sorted(rep["left_out"]) == sorted(case.doc["other_keys"]),
          f"{case.name}: left_out {sorted(set(rep['left_out']) ^ set(case.doc['other_keys']))[:8]} differ "
          "from the non-model keys")
    check(rep["dropped"] == [], f"{case.name}: dropped {rep['dropped']}")
    check(rep["mapped"] == len(case.doc["model_keys"]), f"{case.name}: mapped {rep['mapped']}")
    for prefix in ("optimizer.", "lr_scheduler.", "dataloader.", "train_state."):
        check(any(k.startswith(prefix) for k in rep["left_out"]), f"{case.name}: nothing of {prefix} left out?")
    folder = mo.hf_folder_from_tensors(case, out, work)
    problems(mo.check_from_pretrained(case, folder, f"{case.name} torchtitan->hf"))

    hf_in = case.hf_input()
    back, rep2 = apply_map(m, hf_in, config)
    check(rep2["direction"] == "hf->torchtitan", f"{case.name}: reverse direction {rep2['direction']}")
    problems(mo.check_titan_tensors(case, back, f"{case.name} hf->torchtitan"))
    check(rep2["left_out"] == [] and rep2["dropped"] == [], f"{case.name}: reverse left {rep2}")
    again, _ = apply_map(m, back, config)
    problems(mo.compare_tensors(again, hf_in, set(hf_in), f"{case.name} hf->torchtitan->hf"))
    print(f"  {case.name}: {rep['mapped']} mapped, {len(rep['left_out'])} left out, params {rep['params']}",
          flush=True)

    # controls
    if case.family == "llama3":
        other = load_map("torchtitan-llama3-0.2" if case.map == "torchtitan-llama3" else "torchtitan-llama3")
        o2, r2 = apply_map(other, flat, config)
        wrong = [k for k in case.doc["model_keys"] if k in r2["left_out"]]
        check(any(".wq." in k for k in wrong) and ("output.weight" in wrong or "lm_head.weight" in wrong),
              f"{case.name}: the other Llama map left out only {wrong}")
        cfg = dict(config)
        del cfg["num_attention_heads"]
        raises(lambda: apply_map(m, flat, cfg), "n_heads", f"{case.name}: no num_attention_heads")
        cfg = dict(config, num_key_value_heads=config["num_attention_heads"])
        raises(lambda: apply_map(m, flat, cfg), "rows", f"{case.name}: n_kv_heads = n_heads")
        swapped = copy.deepcopy(m)
        for r in swapped["rules"]:  # the same rules with the sides' roles swapped: rope runs backwards
            r["torchtitan"], r["hf"] = r.get("hf"), r.get("torchtitan")
            if r["torchtitan"] is None:
                del r["torchtitan"]
        swapped["rules"] = [r for r in swapped["rules"] if "hf" in r]
        o3, r3 = apply_map(swapped, {k: v for k, v in flat.items() if k in case.doc["model_keys"]}, config)
        check(r3["direction"] == "hf->torchtitan", f"{case.name}: swapped map direction {r3['direction']}")
        bad = mo.check_hf_tensors(case, o3, "swapped")
        check(any("q_proj" in p for p in bad) and any("k_proj" in p for p in bad),
              f"{case.name}: the reverse permutation gave the adapter's q/k (the check cannot fail?) {bad}")
        raises(lambda: apply_map(m, {"something.else": torch.zeros(1)}, config), "matches none",
               f"{case.name}: no key matches")
        # a one-sided rule drops (and reports) what only HF has
        extra = dict(hf_in, **{"model.layers.1.self_attn.rotary_emb.inv_freq": torch.ones(4)})
        o4, r4 = apply_map(m, extra, config)
        check(r4["dropped"] == ["model.layers.1.self_attn.rotary_emb.inv_freq"] and
              set(o4) == set(back), f"{case.name}: dropped {r4['dropped']}, keys {sorted(set(o4) ^ set(back))}")
    if case.map == "torchtitan-llama3":
        # a list side: one tensor = q;k;v along dim 0 (the schema's example), each part with its own
        # rope. Built from the checkpoint's own wq/wk/wv: the split must give the adapter's q/k/v.
        user = {"schema": "dcpctl-map/1", "name": "qkv-cat", "sides": ["torchtitan", "hf"],
                "params": m["params"],
                "rules": [{"torchtitan": "layers.{L}.attention.qkv.weight", "dim": 0, "hf": [
                    {"key": "model.layers.{L}.self_attn.q_proj.weight", "size": "n_heads * head_dim",
                     "rope": {"heads": "n_heads", "head_dim": "head_dim"}},
                    {"key": "model.layers.{L}.self_attn.k_proj.weight", "size": "n_kv_heads * head_dim",
                     "rope": {"heads": "n_kv_heads", "head_dim": "head_dim"}},
                    {"key": "model.layers.{L}.self_attn.v_proj.weight", "size": "n_kv_heads * head_dim"}]}]}
        cat = {f"layers.{i}.attention.qkv.weight": torch.cat([flat[f"layers.{i}.attention.qkv_linear.w{x}.weight"]
                                                               for x in "qkv"]) for i in range(2)}
        o5, r5 = apply_map(user, cat, config)
        want = {k for k in case.doc["expected_hf"] if "_proj" in k and "self_attn" in k and "o_proj" not in k}
        problems(mo.compare_tensors(o5, case.expected_hf(), want, f"{case.name}: list side split"))
        o6, r6 = apply_map(user, o5, config)
        problems(mo.compare_tensors(o6, cat, set(cat), f"{case.name}: list side concatenated back"))
    if case.family == "qwen3":
        check("num_experts" not in config and "n_experts" not in rep["params"],
              f"{case.name}: dense Qwen 3 resolved n_experts? {rep['params']}")
    if case.family == "deepseek_v3":
        check(rep["params"].get("n_experts") == config["n_routed_experts"], f"{case.name}: params {rep['params']}")
        cfg = dict(config)
        del cfg["n_routed_experts"]
        raises(lambda: apply_map(m, flat, cfg), "n_experts", f"{case.name}: no n_routed_experts")
        part = {k: v for k, v in hf_in.items() if ".experts.3." not in k}
        raises(lambda: apply_map(m, part, config), "missing", f"{case.name}: an expert missing")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    fixtures = Path(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="map-ref-") as tmp:
        for case in mo.cases(fixtures):
            try:
                run_case(case, Path(tmp))
            except Exception as e:  # noqa: BLE001
                import traceback

                traceback.print_exc()
                check(False, f"{case.name}: {type(e).__name__}: {e}")
    return summary("map_reference_test")


if __name__ == "__main__":
    sys.exit(main())
