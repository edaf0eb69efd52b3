#!/usr/bin/env python3
"""The key-map schema expresses torchtitan's StateDictAdapters and Megatron-Bridge's Megatron -> HF
export: the reference implementation of the maps (tests/interop/map_reference.py) applied with the
built-in maps (src/maps/*.json) gives, tensor for tensor and bit for bit, what torchtitan's own
to_hf / from_hf gave on the fixtures tests/fixtures/layouts/titan_* (real torchtitan 0.3.0 and 0.2.2
checkpoints) and what Megatron-Bridge exported from the megatron-core checkpoints
tests/fixtures/layouts/megatron_*, and transformers loads the result with the training framework's
logits. No dcpctl involved: this pins the semantics the engine must have.

    map_reference_test.py FIXTURES_DIR

Checks, per case (titan_llama3, titan_llama3_v02, titan_qwen3 (tied), titan_qwen3_moe (grouped experts,
hidden 48 != heads x head_dim 64; drops expert_bias_E), titan_deepseek_v3 (MoE),
titan_deepseek_v3_mtp (MTP: offsets in patterns), titan_kimi_k2_7 (q LoRA), titan_gpt_oss (transpose),
titan_qwen3_5 (Gated DeltaNet concatenations; both drop expert_bias_E), megatron_llama,
megatron_qwen (groups, stack + list), megatron_llama_bias (linear biases: linear_fc1.bias a stack + list
like its weight; made by make_megatron_qwen3.py, its expected_hf the plain-torch conversion whose
transformers logits equal megatron's)):
  - side -> hf on the whole checkpoint (torch's dcp_to_torch_save view: titan: model, optimizer,
    lr_scheduler, dataloader, train_state; megatron: the stacked model tensors, _extra_state and
    common_state): the direction, the output equals expected_hf.safetensors (plus the tied
    lm_head.weight, equal to the embedding), left_out is exactly the non-model keys, nothing dropped;
    from_pretrained of it: no missing keys, no unexpected keys but the MTP block's (transformers'
    DeepseekV3ForCausalLM has none; expected.json lists them), the recorded logits;
  - hf -> side on hf/ (transformers' save_pretrained) and on expected_hf: titan: equals
    expected_titan.safetensors (the tied lm_head.weight copied from the embedding as from_hf does; less
    the MTP block for hf/, which lacks it), megatron: the checkpoint's own tensors; and back to hf
    again: the input;
  - controls that must fail: the other Llama map (0.2 names on a 0.3 checkpoint and the reverse)
    leaves the attention and output weights out; a config.json without num_attention_heads is an
    error naming n_heads; n_kv_heads taken as n_heads is refused (rows do not add up); the
    permutation run the wrong way round (a map with the sides' roles swapped) does not give the
    adapter's tensors; a map matching none of the keys is an error; Qwen 3 dense needs no
    num_experts (params resolve only when a matched rule uses them); MTP: a wrong offset, no offset,
    the MTP rules after the main-layer rules each give other tensors or an error, a key below the
    offset does not match, the release's extra MTP keys are dropped; Megatron: groups omitted (the
    [q; k; v] split) gives other tensors and other logits, gate/up swapped other tensors, groups that
    do not divide the sizes, a wrong layer count, a missing part, rope on a grouped part are errors;
    stack + list with the stack and list dims elsewhere (synthetic, from the checkpoint's tensors);
    schema errors (an offset with '-', groups without a list side, stack and experts together).

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure under CI).
"""

from __future__ import annotations

import copy
import json
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
from map_reference import MapError, apply_map, load_map, validate  # noqa: E402
from testlib import check, problems, summary  # noqa: E402  (tests/testlib.py)


def raises(fn, needle: str, what: str) -> None:
    try:
        fn()
    except MapError as e:
        check(needle in str(e), f"{what}: MapError {e!r} does not name {needle!r}")
        return
    check(False, f"{what}: no MapError")


def fails(found: list[str], needles: list[str], what: str) -> None:
    """A control: the checks found problems, and among them ones naming each of needles."""
    check(bool(found) and all(any(n in p for p in found) for n in needles),
          f"{what}: the wrong map was not caught (problems naming {needles} wanted): {found[:4]}")


def edited(m: dict, fn) -> dict:
    """A deep copy of map m with fn(rule) applied to each rule (fn edits in place)."""
    m2 = copy.deepcopy(m)
    for r in m2["rules"]:
        fn(r)
    return m2


def run_case(case: mo.Case, work: Path) -> None:
    m = load_map(case.map)
    config = case.config
    flat = dcp_oracle.flat_state_from_dcp(case.ckpt)
    out, rep = apply_map(m, flat, config)
    check(rep["direction"] == case.export_direction, f"{case.name}: direction {rep['direction']}")
    problems(mo.check_hf_tensors(case, out, f"{case.name} {case.export_direction}"))
    check(sorted(rep["left_out"]) == sorted(case.other_keys),
          f"{case.name}: left_out {sorted(set(rep['left_out']) ^ set(case.other_keys))[:8]} differ "
          "from the non-model keys")
    check(sorted(rep["dropped"]) == case.dropped_keys, f"{case.name}: dropped {rep['dropped']}")
    check(rep["mapped"] == len(case.model_keys) - len(case.dropped_keys), f"{case.name}: mapped {rep['mapped']}")
    if case.kind == "titan":
        for prefix in ("optimizer.", "lr_scheduler.", "dataloader.", "train_state."):
            check(any(k.startswith(prefix) for k in rep["left_out"]), f"{case.name}: nothing of {prefix} left out?")
    else:
        check(rep["left_out"] and all("_extra_state/" in k or k.startswith("common_state/") for k in rep["left_out"]),
              f"{case.name}: left out {rep['left_out']}")
    folder = mo.hf_folder_from_tensors(case, out, work)
    problems(mo.check_from_pretrained(case, folder, f"{case.name} {case.export_direction}"))

    # hf -> side: on hf/ (save_pretrained) and on expected_hf (the export's oracle itself)
    results = {}
    for label, hf_in in (("hf/", case.hf_input()), ("expected_hf", case.expected_hf())):
        back, rep2 = apply_map(m, hf_in, config)
        results[label] = back
        check(rep2["direction"] == case.import_direction, f"{case.name}: {label} reverse direction {rep2['direction']}")
        problems(mo.check_side_tensors(case, back, hf_in.keys(), f"{case.name} {label} {case.import_direction}"))
        check(rep2["left_out"] == [] and rep2["dropped"] == [], f"{case.name}: {label} reverse left {rep2}")
        again, _ = apply_map(m, back, config)
        round_trip = mo.with_tied_head(case, hf_in)
        problems(mo.compare_tensors(again, round_trip, set(round_trip), f"{case.name} {label} hf->{case.side}->hf"))
    if case.mtp_hf_keys:
        check(any(k.startswith("mtp_layers.") for k in results["expected_hf"]) and
              not any(k.startswith("mtp_layers.") for k in results["hf/"]),
              f"{case.name}: the MTP block from expected_hf, not from hf/ (which lacks it)")
    print(f"  {case.name}: {rep['mapped']} mapped, {len(rep['left_out'])} left out, params {rep['params']}",
          flush=True)

    hf_in = case.hf_input()
    back = results["hf/"]
    # controls
    if case.family == "llama3":
        other = load_map("torchtitan-llama3-0.2" if case.map == "torchtitan-llama3" else "torchtitan-llama3")
        o2, r2 = apply_map(other, flat, config)
        wrong = [k for k in case.model_keys if k in r2["left_out"]]
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
        o3, r3 = apply_map(swapped, {k: v for k, v in flat.items() if k in case.model_keys}, config)
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
    if case.family == "qwen3_moe":
        qwen3_moe_controls(case, m, flat, rep)
    if case.map == "torchtitan-deepseek-v3":
        check(rep["params"].get("n_experts") == config["n_routed_experts"], f"{case.name}: params {rep['params']}")
        cfg = dict(config)
        del cfg["n_routed_experts"]
        raises(lambda: apply_map(m, flat, cfg), "n_experts", f"{case.name}: no n_routed_experts")
        part = {k: v for k, v in hf_in.items() if ".experts.3." not in k}
        raises(lambda: apply_map(m, part, config), "missing", f"{case.name}: an expert missing")
        if case.mtp_hf_keys:
            mtp_controls(case, m, flat, rep)
        else:  # the MTP rules' offset param is resolved only to fill an MTP key
            check("n_layers" not in rep["params"], f"{case.name}: no MTP block, yet params {rep['params']}")
    if case.kind == "megatron":
        megatron_controls(case, m, flat, out, work)


def qwen3_moe_controls(case: mo.Case, m: dict, flat: dict, rep: dict) -> None:
    """Grouped experts [E, ...] <-> one key per expert: the count from config.json (transformers 5.23
    writes num_local_experts, which num_experts aliases; the shapes fallback is dcpctl's alone, checked
    by maps_test.py); an expert
    missing on the HF side is an error; gate and up swapped give other tensors and other logits."""
    config = case.config
    n = case.doc["dims"]["experts"]
    check(rep["params"].get("n_experts") == n and config.get("num_local_experts") == n,
          f"{case.name}: n_experts {rep['params'].get('n_experts')} (config.json num_local_experts "
          f"{config.get('num_local_experts')}, want {n})")
    hf_in = case.hf_input()
    part = {k: v for k, v in hf_in.items() if ".experts.5." not in k}
    raises(lambda: apply_map(m, part, config), "missing", f"{case.name}: an expert missing")
    gate, up = "inner_experts.w1_EFD", "inner_experts.w3_EFD"
    swapped = edited(m, lambda r: r.update(torchtitan=r["torchtitan"].replace(gate, "@").replace(up, gate)
                                           .replace("@", up)) if isinstance(r.get("torchtitan"), str) else None)
    o, _ = apply_map(swapped, flat, config)
    bad = mo.check_hf_tensors(case, o, "gate/up swapped")
    fails(bad, ["gate_proj", "up_proj"], f"{case.name}: expert gate/up swapped")
    with tempfile.TemporaryDirectory() as tmp:
        folder = mo.hf_folder_from_tensors(case, o, Path(tmp))
        fails(mo.check_from_pretrained(case, folder, "gate/up swapped"), ["logits differ"],
              f"{case.name}: expert gate/up swapped, logits")


def mtp_controls(case: mo.Case, m: dict, flat: dict, rep: dict) -> None:
    """{M + n_layers}: the MTP block M is HF layer num_hidden_layers + M, and the rules' order."""
    config = case.config
    n = config["num_hidden_layers"]
    check(rep["params"].get("n_layers") == n, f"{case.name}: params {rep['params']}")
    exp_hf = case.expected_hf()
    cfg = dict(config)
    del cfg["num_hidden_layers"]
    raises(lambda: apply_map(m, flat, cfg), "n_layers", f"{case.name}: no num_hidden_layers")

    # the offset one too many: other HF layer numbers one way, MTP keys taken by the main rules the other
    plus1 = edited(m, lambda r: r.update({s: r[s].replace("{M + n_layers}", "{M + n_layers + 1}")
                                          for s in ("hf",) if isinstance(r.get(s), str)}))
    o, _ = apply_map(plus1, flat, config)
    fails(mo.check_hf_tensors(case, o, "offset + 1"), [f"model.layers.{n + 1}.enorm.weight"],
          f"{case.name}: offset n_layers + 1, torchtitan->hf")
    o, _ = apply_map(plus1, exp_hf, config)
    fails(mo.check_side_tensors(case, o, exp_hf.keys(), "offset + 1"), [f"layers.{n}.attention"],
          f"{case.name}: offset n_layers + 1, hf->torchtitan")
    # no offset: MTP block 0 lands on HF layer 0
    none = edited(m, lambda r: r.update({s: r[s].replace("{M + n_layers}", "{M}")
                                         for s in ("hf",) if isinstance(r.get(s), str)}))
    raises(lambda: apply_map(none, flat, config), "two input keys map to", f"{case.name}: no offset")
    # the MTP rules after the main-layer rules: model.layers.N.self_attn... goes to layers.N
    mtp_rules = [r for r in m["rules"] if "{M + n_layers}" in json.dumps(r)]
    late = dict(m, rules=[r for r in m["rules"] if r not in mtp_rules] + mtp_rules)
    o, _ = apply_map(late, exp_hf, config)
    fails(mo.check_side_tensors(case, o, exp_hf.keys(), "MTP rules last"),
          [f"layers.{n}.attention.wq.weight", f"mtp_layers.0.attention.wq.weight"],
          f"{case.name}: MTP rules after the main-layer rules, hf->torchtitan")
    # a number below the offset does not match the MTP rule (no main rule has enorm: left out)
    below = f"model.layers.{n - 1}.enorm.weight"
    main = {k: v for k, v in exp_hf.items() if k not in case.mtp_hf_keys}
    o, r = apply_map(m, dict(main, **{below: torch.ones(16)}), config)
    check(r["left_out"] == [below] and not any(k.startswith("mtp_layers.") for k in o),
          f"{case.name}: {below} (below n_layers) matched: left_out {r['left_out']}")
    # the release's extra MTP keys (shared embedding and head) are dropped, the rest as from_hf
    extras = mo.mtp_release_extras(case)
    with_extras = dict(exp_hf, **{k: exp_hf["model.embed_tokens.weight" if "embed" in k else "lm_head.weight"].clone()
                                  for k in extras})
    o, r = apply_map(m, with_extras, config)
    check(sorted(r["dropped"]) == sorted(extras), f"{case.name}: the release's MTP extras: dropped {r['dropped']}")
    problems(mo.check_side_tensors(case, o, exp_hf.keys(), f"{case.name}: expected_hf + the release's MTP extras"))


def megatron_controls(case: mo.Case, m: dict, flat: dict, out: dict, work: Path) -> None:
    """groups (linear_qkv per query group), stack + list (linear_fc1 = [gate; up] per layer)."""
    config = case.config
    exp_hf = case.expected_hf()
    hf_in = case.hf_input()
    qkv = "decoder.layers.self_attention.linear_qkv."
    fc1 = "decoder.layers.mlp.linear_fc1.weight"

    # groups omitted: linear_qkv split as [q; k; v] blocks: other q/k/v, other logits
    flatqkv = edited(m, lambda r: r.pop("groups", None))
    o, _ = apply_map(flatqkv, flat, config)
    fails(mo.check_hf_tensors(case, o, "no groups"), ["q_proj", "k_proj", "v_proj"], f"{case.name}: groups omitted")
    folder = mo.hf_folder_from_tensors(case, o, work)
    fails(mo.check_from_pretrained(case, folder, "no groups"), ["logits differ"], f"{case.name}: groups omitted, logits")
    o, _ = apply_map(flatqkv, hf_in, config)
    fails(mo.check_side_tensors(case, o, hf_in.keys(), "no groups"), [qkv + "weight"],
          f"{case.name}: groups omitted, hf->megatron")
    # groups = n_heads: divides the sizes here, and is wrong
    byheads = edited(m, lambda r: r.update(groups="n_heads") if "groups" in r else None)
    o, _ = apply_map(byheads, flat, config)
    fails(mo.check_hf_tensors(case, o, "groups n_heads"), ["q_proj", "k_proj"], f"{case.name}: groups = n_heads")
    # groups that do not divide the sizes
    three = edited(m, lambda r: r.update(groups="3") if "groups" in r else None)
    raises(lambda: apply_map(three, flat, config), "divisible", f"{case.name}: groups 3")
    # gate and up swapped
    swapped = edited(m, lambda r: r.update(hf=r["hf"][::-1]) if r.get("megatron") == fc1 else None)
    o, _ = apply_map(swapped, flat, config)
    fails(mo.check_hf_tensors(case, o, "gate/up swapped"), ["gate_proj", "up_proj"], f"{case.name}: gate/up swapped")
    fc1_bias = "decoder.layers.mlp.linear_fc1.bias"
    if fc1_bias in flat:  # add_bias_linear (megatron_llama_bias): the bias halves swapped, or the biases dropped
        swapped = edited(m, lambda r: r.update(hf=r["hf"][::-1]) if r.get("megatron") == fc1_bias else None)
        o, _ = apply_map(swapped, flat, config)
        fails(mo.check_hf_tensors(case, o, "bias gate/up swapped"), ["gate_proj.bias", "up_proj.bias"],
              f"{case.name}: fc1's bias halves swapped")
        fails(mo.check_from_pretrained(case, mo.hf_folder_from_tensors(case, o, work), "bias gate/up swapped"),
              ["logits differ"], f"{case.name}: fc1's bias halves swapped, logits")
        zeros = {k: torch.zeros_like(v) if k.endswith(".o_proj.bias") or (".mlp." in k and k.endswith(".bias")) else v
                 for k, v in exp_hf.items()}
        fails(mo.check_from_pretrained(case, mo.hf_folder_from_tensors(case, zeros, work), "biases dropped"),
              ["logits differ"], f"{case.name}: the o_proj and MLP biases at zeros (dropped), logits")
    # rope on a part of a grouped rule: a map error
    roped = copy.deepcopy(m)
    for r in roped["rules"]:
        if "groups" in r:
            r["hf"][0]["rope"] = {"heads": "n_heads", "head_dim": "head_dim"}
    raises(lambda: validate(roped, "rope on a grouped part"), "rope", f"{case.name}: rope on a grouped part")
    # a wrong layer count: the stack does not have it (one way), an index is missing (the other)
    cfg = dict(config, num_hidden_layers=config["num_hidden_layers"] + 1)
    raises(lambda: apply_map(m, flat, cfg), "count", f"{case.name}: num_hidden_layers + 1, megatron->hf")
    raises(lambda: apply_map(m, hf_in, cfg), "missing", f"{case.name}: num_hidden_layers + 1, hf->megatron")
    # a missing part of one layer
    gone = "model.layers.1.mlp.up_proj.weight"
    raises(lambda: apply_map(m, {k: v for k, v in hf_in.items() if k != gone}, config), gone,
           f"{case.name}: {gone} missing")
    cfg = dict(config)
    del cfg["num_attention_heads"]
    raises(lambda: apply_map(m, flat, cfg), "n_heads", f"{case.name}: no num_attention_heads")

    # stack + list with the dims elsewhere (synthetic, from the checkpoint's own tensors): the stack on
    # dim 1 (layers in the middle), and a per-layer tensor transposed (the list on its dim 1)
    qkv_rule = next(r for r in m["rules"] if r.get("megatron") == qkv + "weight")
    fc1_rule = next(r for r in m["rules"] if r.get("megatron") == fc1)
    user = {"schema": "dcpctl-map/1", "name": "stack-dims", "sides": ["megatron", "hf"], "params": m["params"],
            "rules": [dict(qkv_rule, megatron="qkv_mid", stack={"dim": 1, "count": "n_layers"}),
                      dict(fc1_rule, megatron="fc1_mid", stack={"dim": 1, "count": "n_layers"}),
                      dict(fc1_rule, megatron="fc1_t", dim=1, stack={"dim": 0, "count": "n_layers"},
                           hf=[dict(p, key=p["key"].replace("model.", "t.")) for p in fc1_rule["hf"]])]}
    src = {"qkv_mid": flat[qkv + "weight"].transpose(0, 1).contiguous(),
           "fc1_mid": flat[fc1].transpose(0, 1).contiguous(),
           "fc1_t": flat[fc1].transpose(1, 2).contiguous()}
    o, r = apply_map(user, src, config)
    want = {k: v for k, v in exp_hf.items() if any(k.endswith(f"{s}.weight") for s in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))}
    want.update({k.replace("model.", "t.", 1): v.t().contiguous() for k, v in exp_hf.items()
                 if k.endswith(("gate_proj.weight", "up_proj.weight"))})
    problems(mo.compare_tensors(o, want, set(want), f"{case.name}: stack dim 1 / list dim 1"))
    o2, r2 = apply_map(user, o, config)
    check(r2["direction"] == "hf->megatron", f"{case.name}: stack dims, back: {r2['direction']}")
    problems(mo.compare_tensors(o2, src, set(src), f"{case.name}: stack dim 1 / list dim 1, back"))


def schema_controls() -> None:
    """What the schema refuses, whatever the input."""
    base = {"schema": "dcpctl-map/1", "name": "x", "sides": ["a", "hf"], "params": {}}

    def bad(rules, needle, what):
        raises(lambda: validate(dict(base, rules=rules), what), needle, f"schema: {what}")

    bad([{"a": "x.{M}", "hf": "y.{M - n}"}], "NAME + EXPR", "an offset with '-'")
    bad([{"a": "x.{M}", "hf": "y.{M * 2}"}], "NAME + EXPR", "an offset with '*'")
    bad([{"a": "x.{M}", "hf": "y.{M + }"}], "NAME + EXPR", "an offset without an expression")
    bad([{"a": "x.{M}", "hf": "y.{M}", "groups": "2"}], "list side", "groups without a list side")
    bad([{"a": "x", "hf": "y.{E}", "stack": {"dim": 0, "count": 2}, "experts": {"dim": 0, "count": 2}}],
        "synonyms", "stack and experts")
    bad([{"a": "x.{L}", "hf": "y.{L}", "stack": {"dim": 0, "count": 2}}], "one placeholder more",
        "stack without an index placeholder")
    bad([{"a": "x", "hf": "y.{E}", "stack": {"dim": 0, "count": 2}, "rope": {"heads": 1, "head_dim": 2}}],
        "rope", "rope on a stack rule")
    # an offset below zero does not match; the same name with and without an offset carries over
    m = dict(base, params={"k": {"default": "3"}}, rules=[{"a": "a.{M}", "hf": "h.{M + k}"}])
    validate(m, "offset map")
    o, r = apply_map(m, {"h.2": torch.zeros(1), "h.3": torch.ones(1), "h.10": torch.ones(2)}, {})
    check(sorted(o) == ["a.0", "a.7"] and r["left_out"] == ["h.2"], f"schema: offsets: {sorted(o)}, {r['left_out']}")
    o, r = apply_map(m, {"a.0": torch.ones(1)}, {})
    check(list(o) == ["h.3"], f"schema: offsets filled: {list(o)}")
    # transpose: one to one and fused along the joined tensor's last dim, against plain torch ops
    bad([{"a": "x", "hf": "y", "transpose": "yes"}], "true or false", "transpose not a boolean")
    bad([{"a": "x", "hf": "y", "transpose": True, "rope": {"heads": "1", "head_dim": "2"}}], "transpose", "transpose + rope")
    bad([{"a": "x", "transpose": True}], "one-sided", "transpose on a one-sided rule")
    tm = dict(base, params={"F": {"default": "3"}}, rules=[
        {"a": "l.{L}.w2", "hf": "m.{L}.down_proj", "transpose": True},
        {"a": [{"key": "l.{L}.w1", "size": "F"}, {"key": "l.{L}.w3", "size": "F"}], "hf": "m.{L}.gate_up_proj",
         "dim": 2, "transpose": True}])
    validate(tm, "transpose map")
    g = torch.Generator().manual_seed(5)
    w1, w3, w2 = (torch.randn(2, 3, 4, generator=g) for _ in range(3))
    o, r = apply_map(tm, {"l.0.w1": w1, "l.0.w3": w3, "l.0.w2": w2}, {})
    check(torch.equal(o["m.0.gate_up_proj"], torch.cat([w1.transpose(-2, -1), w3.transpose(-2, -1)], -1))
          and torch.equal(o["m.0.down_proj"], w2.transpose(-2, -1)), "schema: transpose, a->hf")
    back, r = apply_map(tm, o, {})
    check(r["direction"] == "hf->a" and all(torch.equal(back[k], v) for k, v in
                                            {"l.0.w1": w1, "l.0.w3": w3, "l.0.w2": w2}.items()), "schema: transpose, back")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    fixtures = Path(sys.argv[1])
    try:
        schema_controls()
    except Exception as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        check(False, f"schema controls: {type(e).__name__}: {e}")
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
