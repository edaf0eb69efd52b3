#!/usr/bin/env python3
"""LoRA fine-tunes (meta/lora_keys.h, consolidate --lora): checkpoints written by real PEFT 0.21 on FSDP2
(tests/fixtures/layouts/peft_*, make_peft.py), checked against what PEFT itself wrote from the
gathered model: save_pretrained (expected_adapter/) and merge_and_unload (expected_merged/).

    lora_test.py DCPCTL FIXTURES

--lora adapter: adapter_model.safetensors holds exactly PEFT's keys, bit for bit; adapter_config.json
has PEFT's r, lora_alpha, target_modules, modules_to_save, use_rslora / use_dora; the folder loads
in PeftModel.from_pretrained over the base model with no missing or unexpected adapter keys and
gives PEFT's logits. --lora merge: every tensor of merge_and_unload's model under the same names;
those without an adapter bit for bit, the merged ones within the bound of float rounding
(meta/lora_keys.h: B·A summed in another order than torch's sgemm), the folder loads in from_pretrained
and gives the merged logits; .safetensors and .pt outputs hold the same tensors; --dtype casts the
merged values; with --map, the map of PEFT's merged model; on 2 ranks, the one-process bytes; a
bfloat16 and a float16 fine-tune (cast and saved here by dcp.save) merge to merge_and_unload's bits. DoRA
(peft_dora) and lora_bias (peft_lora_bias) merge to merge_and_unload's bits, in float32, bfloat16 and
float16, and DoRA also from a base split along dim 1 (3 ranks' DTensor Shard(1), saved here by
dcp.save); rank_pattern / alpha_pattern entries of the written config each name a module (those
naming none are left out). inspect says which adapters the checkpoint holds; verify and the writers refuse an
adapter saved as one rank's slice (accelerate #4206) with exit 3 naming the key; the refusals
(no alpha, several adapters without --lora-name, merging an adapter-only save, a config that says DoRA
over plain LoRA keys) each with
its exit code and nothing written. --lora keep (the default) writes the keys as they are.
Megatron-Bridge's LoRA keys (saved here by dcp.save): inspect names the layout, --lora adapter/merge exit 5.
peft_moe (PEFT target_parameters on a Qwen3-MoE's fused experts): inspect's peft-parameter layout and
rank r (not r*E), the adapter bit for bit with target_parameters and no rank_pattern (also from the
adapter alone, r from its config; without r: exit 2), the merge per expert equal to merge_and_unload's
(unfused as save_pretrained writes it) bit for bit and loading with its logits. torchtune_lora /
torchtune_dora (torchtune 0.6.1's DistributedCheckpointer save): the PEFT folder its converters write
(bit for bit; PEFT's logits over it), get_merged_lora_ckpt's merge bit for bit, and with --map torchtune-llama3
get_merged_lora_ckpt + tune_to_hf's bit for bit, loading in from_pretrained with the torchtune model's logits; no
config: exit 5; the base's heads from --config FILE when no config.json is found (no --map needed). peft_moe --lora-layout: the merge written per expert by default (save_pretrained's names and bits),
fused as an option; --lora adapter --lora-layout per-expert as vLLM loads MoE LoRA (its own 3-D -> 2-D split of
PEFT's adapter, bit for bit; r per expert in the config and the summary); per-expert without experts: exit 2.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from testlib import EXIT_INVALID, EXIT_UNSUPPORTED, EXIT_USAGE, check, expect_rc, hf_loaded, run, same_tensor, summary  # noqa: E402

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

DCPCTL, FIXTURES = sys.argv[1], Path(sys.argv[2]) / "layouts"
WORK = Path(tempfile.mkdtemp(prefix="dcpctl-lora-"))


def dcpctl(*args):
    return run(DCPCTL, *[str(a) for a in args])


def ok(r, what) -> bool:
    return check(r.returncode == 0, f"{what}: exit {r.returncode}: {(r.stderr or '')[-800:]}")


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def lora_bound(w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float, transposed: bool) -> torch.Tensor:
    """What float32 rounding allows between two merges of one adapter: each element's B·A is a sum
    of r products that torch's sgemm and dcpctl round in different orders (each within r·u of the
    sum of |products|, u = 2^-24), then scaled and added to W (one rounding each)."""
    u = 2.0 ** -24
    ab = b.abs().double() @ a.abs().double()
    if transposed:
        ab = ab.T
    r = a.shape[0]
    return (2 * r + 4) * u * (w.abs().double() + abs(scale) * ab) + 1e-30


def adapter_checks(case: str, ckpt: Path, expected: Path, extra=(), name="default", experts=0):
    out = WORK / f"{case}-{name}-adapter"
    r = dcpctl("consolidate", ckpt, "--lora", "adapter", "-o", f"{out}/", "--json", "-q", *extra)
    if not ok(r, f"{case}: consolidate --lora adapter {' '.join(map(str, extra))}"):
        return None
    summary_json = json.loads(r.stdout)
    check(summary_json.get("format") == "peft-adapter" and summary_json.get("lora", {}).get("mode") == "adapter",
          f"{case}: the summary says peft-adapter / lora adapter: {summary_json.get('format')}, {summary_json.get('lora')}")
    check(sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "dcpctl-manifest.json"],
          f"{case}: the folder holds adapter_model.safetensors and adapter_config.json: {sorted(p.name for p in out.iterdir())}")
    ours, theirs = load_file(out / "adapter_model.safetensors"), load_file(expected / "adapter_model.safetensors")
    check(sorted(ours) == sorted(theirs), f"{case}: PEFT's keys: extra {sorted(set(ours) - set(theirs))[:4]}, missing {sorted(set(theirs) - set(ours))[:4]}")
    for k in sorted(set(ours) & set(theirs)):
        d = same_tensor(ours[k], theirs[k])
        check(d is None, f"{case}: {k} equals PEFT's save_pretrained bit for bit: {d}")
    with safe_open(out / "adapter_model.safetensors", "pt") as f:
        check(f.metadata() == {"format": "pt"}, f"{case}: __metadata__ as PEFT writes it: {f.metadata()}")
    cfg, want = json.loads((out / "adapter_config.json").read_text()), json.loads((expected / "adapter_config.json").read_text())
    for key in ("peft_type", "r", "lora_alpha", "use_rslora", "use_dora", "fan_in_fan_out"):
        check(cfg.get(key) == want.get(key), f"{case}: adapter_config.json {key} = {cfg.get(key)!r}, PEFT's {want.get(key)!r}")
    for key in ("target_modules", "modules_to_save"):
        check(sorted(cfg.get(key) or []) == sorted(want.get(key) or []),
              f"{case}: adapter_config.json {key} = {cfg.get(key)!r}, PEFT's {want.get(key)!r}")
    pattern_checks(case, cfg, ours, experts)
    return out


def pattern_checks(case: str, cfg: dict, tensors: dict, experts: int = 0):
    """Every rank_pattern / alpha_pattern entry names a module the adapter has (PEFT's rule: the key, or
    a regex matching the end of the module's name), and every module gets the rank lora_A has: a config
    entry that names no module, or a rank taken from a fused shape, is a bug."""
    import re
    prefix = "base_model.model."
    ranks = {k[len(prefix):k.index(".lora_A")]: v.shape[0] for k, v in tensors.items() if ".lora_A." in k and k.startswith(prefix)}
    ranks.update({k[len(prefix):k.index(".lora_embedding_A")]: v.shape[0] for k, v in tensors.items() if k.endswith(".lora_embedding_A")})
    if experts:  # target_parameters' wrappers of fused experts: lora_A [r*E, in], rank r
        ranks = {m: (v // experts if re.search(r"\.experts(\.base_layer)*$", m) else v) for m, v in ranks.items()}

    def matches(pattern, module):
        return pattern == module or re.fullmatch(rf"(.*\.)?({pattern})", module) is not None
    for field in ("rank_pattern", "alpha_pattern"):
        for pattern in cfg.get(field) or {}:
            check(any(matches(pattern, m) for m in ranks), f"{case}: {field} entry {pattern!r} names a module of the adapter")
    for module, rank in ranks.items():
        r = next((v for p, v in (cfg.get("rank_pattern") or {}).items() if matches(p, module)), cfg.get("r"))
        check(r == rank, f"{case}: adapter_config.json gives {module} rank {r}; its lora_A has {rank}")


def peft_load_checks(case: str, folder: Path, base: Path, ids, want_logits):
    """PeftModel.from_pretrained over the base model: no missing or unexpected adapter keys, PEFT's logits."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = PeftModel.from_pretrained(model, folder)
        res = pm.load_adapter(folder, adapter_name="again")
    unexpected = list(res.unexpected_keys)
    missing = [k for k in res.missing_keys if ".again" in k or "lora_" in k and "again" in k]
    check(not unexpected and not missing, f"{case}: PeftModel loads the adapter: unexpected {unexpected[:3]}, missing {missing[:3]}")
    hf_loaded(folder)
    pm.set_adapter("default")
    pm.eval()
    got = logits_of(pm, ids)
    diff = (got - want_logits).abs().max().item()
    check(diff <= 1e-5, f"{case}: PeftModel over dcpctl's adapter gives PEFT's logits (max diff {diff:.3g})")


def merged_folder_checks(case: str, out: Path, ids, want_logits):
    """from_pretrained of a merged folder: no missing or unexpected keys, merge_and_unload's logits."""
    from transformers import AutoModelForCausalLM
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
    check(not info["missing_keys"] and not info["unexpected_keys"],
          f"{case}: from_pretrained of the merged folder: missing {sorted(info['missing_keys'])[:3]}, unexpected {sorted(info['unexpected_keys'])[:3]}")
    hf_loaded(out)
    model.eval()
    diff = (logits_of(model, ids) - want_logits).abs().max().item()
    check(diff <= 1e-5, f"{case}: the merged folder gives merge_and_unload's logits (max diff {diff:.3g})")


def merge_checks(case: str, ckpt: Path, fixture: Path, expected_adapter: Path, ids, want_logits, extra=()):
    out = WORK / f"{case}-merged"
    r = dcpctl("consolidate", ckpt, "--lora", "merge", "-o", f"{out}/", "--assets", fixture / "base", "--json", "-q", *extra)
    if not ok(r, f"{case}: consolidate --lora merge"):
        return
    s = json.loads(r.stdout)
    theirs = load_file(fixture / "expected_merged" / "model.safetensors")
    ours = {}
    for f in sorted(out.glob("*.safetensors")):
        ours.update(load_file(f))
    check(sorted(ours) == sorted(theirs), f"{case}: merge_and_unload's keys: extra {sorted(set(ours) - set(theirs))[:4]}, missing {sorted(set(theirs) - set(ours))[:4]}")
    adapter = load_file(expected_adapter / "adapter_model.safetensors")
    cfg = json.loads((expected_adapter / "adapter_config.json").read_text())
    merged, worst = 0, 0.0
    for k in sorted(set(ours) & set(theirs)):
        module = "base_model.model." + k[: -len(".weight")] if k.endswith(".weight") else None
        a = adapter.get(f"{module}.lora_A.weight", adapter.get(f"{module}.lora_embedding_A"))
        b = adapter.get(f"{module}.lora_B.weight", adapter.get(f"{module}.lora_embedding_B"))
        if a is None or f"{module}.weight" in adapter:  # no adapter here (or a module trained whole): a copy
            # (a bias with lora_bias: bias + s·lora_B.bias, one float32 multiply and add, as PEFT's)
            d = same_tensor(ours[k], theirs[k])
            check(d is None, f"{case}: {k} ({'lora_bias merged' if k.endswith('.bias') and 'base_model.model.' + k[:-5] + '.lora_B.bias' in adapter else 'no adapter'}) is merge_and_unload's bit for bit: {d}")
            continue
        merged += 1
        rank = a.shape[0]
        scale = cfg["lora_alpha"] / (math.sqrt(rank) if cfg.get("use_rslora") else rank)
        base = load_file(fixture / "base" / "model.safetensors").get(k)
        bound = lora_bound(base if base is not None else theirs[k], a, b, scale, f"{module}.lora_embedding_A" in adapter)
        if f"{module}.lora_magnitude_vector" in adapter:
            # DoRA: magnitude / norm(row) times the row; a norm summed in another order (another
            # torch build's vector width) moves each element by a few ulps of the row's sum of squares.
            bound = bound * (adapter[f"{module}.lora_magnitude_vector"].abs().double().max() + 1) \
                + (a.shape[1] + 8) * 2.0 ** -24 * theirs[k].abs().double()
        diff = (ours[k].double() - theirs[k].double()).abs()
        worst = max(worst, diff.max().item())
        check(ours[k].dtype == theirs[k].dtype and bool((diff <= bound).all()),
              f"{case}: {k} merged within float rounding of PEFT's (max diff {diff.max().item():.3g}, "
              f"largest allowed {bound.max().item():.3g}; bit-identical elements {int((diff == 0).sum())}/{diff.numel()})")
    check(merged > 0 and s.get("lora", {}).get("merged") == merged,
          f"{case}: {merged} weights merged, the summary says {s.get('lora', {}).get('merged')}")
    print(f"     {case}: {merged} merged weights, max |dcpctl - PEFT| = {worst:.3g}")
    biases = [k for k in ours if k.endswith(".bias") and "base_model.model." + k[:-5] + ".lora_B.bias" in adapter]
    check(s.get("lora", {}).get("merged_biases", 0) == len(biases) and all(same_tensor(ours[k], theirs[k]) is None for k in biases),
          f"{case}: {len(biases)} lora_bias biases merged bit for bit, the summary says {s.get('lora', {}).get('merged_biases')}")
    merged_folder_checks(case, out, ids, want_logits)
    # The same merge to the other formats, and cast.
    st, pt, bf = WORK / f"{case}-merged.safetensors", WORK / f"{case}-merged.pt", WORK / f"{case}-merged-bf16.safetensors"
    for path in (st, pt):
        ok(dcpctl("consolidate", ckpt, "--lora", "merge", "-o", path, "-q", *extra), f"{case}: --lora merge -o {path.suffix}")
    if st.exists():
        other = load_file(st)
        check(sorted(other) == sorted(ours) and all(same_tensor(other[k], ours[k]) is None for k in ours),
              f"{case}: the .safetensors output holds the folder's tensors")
    if pt.exists():
        other = torch.load(pt, weights_only=True)
        check(sorted(other) == sorted(ours) and all(same_tensor(other[k], ours[k]) is None for k in ours),
              f"{case}: the .pt output (flat, torch.load(weights_only=True)) holds the folder's tensors")
    if ok(dcpctl("consolidate", ckpt, "--lora", "merge", "-o", bf, "--dtype", "bf16", "-q", *extra), f"{case}: --lora merge --dtype bf16"):
        other = load_file(bf)
        bad = [k for k in ours if same_tensor(other[k], ours[k].to(torch.bfloat16)) is not None]
        check(not bad, f"{case}: --dtype bf16 is the merged float32 values cast as torch's .to() casts: {bad[:3]}")


EXPERT_KEY = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


def unfused(fused: dict) -> dict:
    """transformers 5.23's save_pretrained of fused experts (checked by make_peft.py against its output):
    experts.gate_up_proj [E, 2F, D] -> experts.E.gate_proj.weight = [E, :F], up_proj = [E, F:];
    experts.down_proj [E, D, F] -> experts.E.down_proj.weight."""
    out = {}
    for k, v in fused.items():
        if k.endswith(".mlp.experts.gate_up_proj"):
            f = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{k[:-len('gate_up_proj')]}{e}.gate_proj.weight"] = v[e, :f]
                out[f"{k[:-len('gate_up_proj')]}{e}.up_proj.weight"] = v[e, f:]
        elif k.endswith(".mlp.experts.down_proj"):
            for e in range(v.shape[0]):
                out[f"{k[:-len('down_proj')]}{e}.down_proj.weight"] = v[e]
        else:
            out[k] = v
    return out


def per_expert_adapter_checks(fx: Path):
    """--lora adapter --lora-layout per-expert: one adapter per expert as vLLM loads MoE LoRA. Each tensor
    is what vLLM's own 3-D -> 2-D conversion of PEFT's fused adapter gives (model_manager.py
    _convert_3d_to_2d_moe_lora: A.reshape(E, r, in), B.reshape(out, r, E).permute(2, 0, 1), gate_proj =
    B's first F rows, up_proj the rest, both with A_e), so each expert's B_e @ A_e is the fused adapter's slice."""
    out = WORK / "moe-per-expert"
    r = dcpctl("consolidate", fx / "ckpt", "--lora", "adapter", "--lora-layout", "per-expert", "-o", f"{out}/", "--json", "-q")
    if not ok(r, "peft_moe: --lora adapter --lora-layout per-expert"):
        return
    s = json.loads(r.stdout).get("lora", {})
    check(s.get("layout") == "per-expert" and s.get("expert_rank") == 4 and s.get("r") == 4,
          f"peft_moe: the summary states the rank each expert gets (r = 4, not r*E): {s}")
    ours, fused = load_file(out / "adapter_model.safetensors"), load_file(fx / "expected_adapter" / "adapter_model.safetensors")
    E, want = 4, {}
    for k, v in fused.items():
        if ".mlp.experts." not in k:
            want[k] = v
            continue
        if not k.endswith("lora_A.weight"):
            continue
        m = k[: -len(".lora_A.weight")]
        a, b = v, fused[m + ".lora_B.weight"]
        stack = m.removesuffix(".base_layer")
        a3 = a.reshape(E, -1, a.shape[-1]).contiguous()
        b3 = b.reshape(b.shape[0], -1, E).permute(2, 0, 1).contiguous()
        parts = {"down_proj": b3} if not m.endswith(".base_layer") else {"gate_proj": b3[:, : b3.shape[1] // 2], "up_proj": b3[:, b3.shape[1] // 2 :]}
        for e in range(E):
            for proj, bs in parts.items():
                want[f"{stack}.{e}.{proj}.lora_A.weight"] = a3[e]
                want[f"{stack}.{e}.{proj}.lora_B.weight"] = bs[e].contiguous()
        # Each expert's delta from the per-expert tensors is the fused adapter's (PEFT's einsum), exactly.
        delta = torch.einsum("o r e, e r i -> e o i", b.reshape(b.shape[0], -1, E), a3)
        for e in range(E):
            mine = torch.cat([ours[f"{stack}.{e}.{p}.lora_B.weight"] @ ours[f"{stack}.{e}.{p}.lora_A.weight"] for p in parts])
            d = (mine - delta[e]).abs().max().item() if all(f"{stack}.{e}.{p}.lora_A.weight" in ours for p in parts) else None
            check(d is not None and d <= 1e-6 * max(1.0, delta[e].abs().max().item()),
                  f"peft_moe: expert {e} of {stack}: B_e @ A_e from the per-expert files is the fused adapter's slice (diff {d})")
    check(sorted(ours) == sorted(want), f"peft_moe: vLLM's per-expert keys: extra {sorted(set(ours) - set(want))[:4]}, missing {sorted(set(want) - set(ours))[:4]}")
    bad = [k for k in sorted(set(ours) & set(want)) if same_tensor(ours[k], want[k]) is not None]
    check(not bad, f"peft_moe: every per-expert A_e / B_e is vLLM's split of PEFT's fused adapter, bit for bit: {bad[:4]}")
    cfg, peft_cfg = json.loads((out / "adapter_config.json").read_text()), json.loads((fx / "expected_adapter" / "adapter_config.json").read_text())
    check(cfg.get("r") == 4 and cfg.get("lora_alpha") == peft_cfg.get("lora_alpha") and cfg.get("rank_pattern") == {}
          and "target_parameters" not in cfg
          and sorted(cfg.get("target_modules") or []) == sorted(set(peft_cfg["target_modules"]) | {"gate_proj", "up_proj", "down_proj"}),
          f"peft_moe: the per-expert config vLLM's PEFTHelper reads (r = 4, alpha, experts as modules): {cfg}")
    # Refusals: per-expert of an adapter without experts (exit 2).
    r = dcpctl("consolidate", FIXTURES / "peft_lora" / "ckpt", "--lora", "adapter", "--lora-layout", "per-expert", "-o", f"{WORK / 'no-experts'}/")
    expect_rc(r, EXIT_USAGE, "peft_lora: --lora-layout per-expert without experts", "target_parameters")
    r = dcpctl("consolidate", FIXTURES / "peft_lora" / "ckpt", "--lora-layout", "per-expert", "-o", WORK / "keep.safetensors")
    expect_rc(r, EXIT_USAGE, "--lora-layout without --lora adapter|merge", "--lora-layout")


def moe_checks():
    """peft_moe: PEFT 0.21 target_parameters on a transformers 5.23 Qwen3MoeForCausalLM's fused experts
    (nested ParamWrappers: experts.base_layer.base_layer.{gate_up_proj,down_proj}, lora_A [r*E, in],
    lora_B [out, r*E]), q_proj/v_proj by target_modules; FSDP2 on 2 gloo ranks."""
    fx = FIXTURES / "peft_moe"
    ids = load_file(fx / "logits.safetensors")
    r = dcpctl("inspect", fx / "ckpt", "--json")
    if ok(r, "peft_moe: inspect --json"):
        lora = json.loads(r.stdout).get("lora") or {}
        a = (lora.get("adapters") or [{}])[0]
        check(a.get("layout") == "peft-parameter" and a.get("targets") == ["q_proj", "v_proj"]
              and a.get("target_parameters") == ["experts.down_proj", "experts.gate_up_proj"]
              and a.get("ranks") == [4] and a.get("experts") == [4] and a.get("modules") == 8
              and lora.get("base_model") is True,
              f"peft_moe: inspect names the expert parameters, rank r (not r*E = 16) and the experts: {a}, {lora.get('base_model')}")
    out = adapter_checks("peft_moe", fx / "ckpt", fx / "expected_adapter", experts=4)
    if out:
        cfg = json.loads((out / "adapter_config.json").read_text())
        want = json.loads((fx / "expected_adapter" / "adapter_config.json").read_text())
        check(cfg.get("rank_pattern") == {} and cfg.get("alpha_pattern") == {} and cfg.get("r") == 4,
              f"peft_moe: r = 4 and no rank_pattern for the experts (r*E is no rank): {cfg.get('r')}, {cfg.get('rank_pattern')}")
        check(cfg.get("target_parameters") == want.get("target_parameters"),
              f"peft_moe: target_parameters kept: {cfg.get('target_parameters')}, PEFT's {want.get('target_parameters')}")
        peft_load_checks("peft_moe", out, fx / "base", ids["input_ids"], ids["logits_peft"])
    # The same export from the config given, built without target_parameters: dcpctl fills them in.
    bare = WORK / "moe-config-bare.json"
    bare.write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}))
    r = dcpctl("consolidate", fx / "ckpt", "--lora", "adapter", "--lora-config", bare, "-o", f"{WORK / 'moe-bare'}/", "-q")
    if ok(r, "peft_moe: --lora adapter with a config without target_parameters"):
        cfg = json.loads((WORK / "moe-bare" / "adapter_config.json").read_text())
        check(cfg.get("target_parameters") == ["experts.down_proj", "experts.gate_up_proj"] and cfg.get("rank_pattern") == {},
              f"peft_moe: target_parameters from the keys, no rank_pattern: {cfg.get('target_parameters')}, {cfg.get('rank_pattern')}")
        peft_load_checks("peft_moe (built config)", WORK / "moe-bare", fx / "base", ids["input_ids"], ids["logits_peft"])
    # --lora merge: each expert's W_e + s*B_e*A_e, written as transformers 5.23's save_pretrained of
    # merge_and_unload's model writes it (expected_merged/: experts.E.{gate,up,down}_proj.weight): the default.
    theirs = load_file(fx / "expected_merged" / "model.safetensors")
    merged = WORK / "moe-merged"
    r = dcpctl("consolidate", fx / "ckpt", "--lora", "merge", "-o", f"{merged}/", "--assets", fx / "base", "--json", "-q")
    if ok(r, "peft_moe: consolidate --lora merge"):
        s = json.loads(r.stdout).get("lora", {})
        check(s.get("merged") == 8 and s.get("layout") == "per-expert" and s.get("expert_rank") == 4,
              f"peft_moe: 8 weights merged (4 attention, 4 expert stacks), written per expert: {s}")
        ours = {}
        for f in sorted(merged.glob("*.safetensors")):
            ours.update(load_file(f))
        check(sorted(ours) == sorted(theirs), f"peft_moe: save_pretrained's names: extra {sorted(set(ours) - set(theirs))[:4]}, missing {sorted(set(theirs) - set(ours))[:4]}")
        bad = [k for k in sorted(set(ours) & set(theirs)) if same_tensor(ours[k], theirs[k]) is not None]
        check(not bad, f"peft_moe: every tensor (each expert's gate/up/down) is save_pretrained's bit for bit, dtype included: {bad[:4]}")
        merged_folder_checks("peft_moe", merged, ids["input_ids"], ids["logits_merged"])
    # --lora-layout fused: transformers' in-memory layout ([E, 2F, D]), which from_pretrained loads too.
    fused = WORK / "moe-merged-fused"
    r = dcpctl("consolidate", fx / "ckpt", "--lora", "merge", "--lora-layout", "fused", "-o", f"{fused}/", "--assets", fx / "base", "--json", "-q")
    if ok(r, "peft_moe: consolidate --lora merge --lora-layout fused"):
        check(json.loads(r.stdout).get("lora", {}).get("layout") == "fused", f"peft_moe: the summary says fused: {r.stdout[-300:]}")
        ours = {}
        for f in sorted(fused.glob("*.safetensors")):
            ours.update(load_file(f))
        check("model.layers.0.mlp.experts.gate_up_proj" in ours and list(ours["model.layers.0.mlp.experts.gate_up_proj"].shape) == [4, 32, 64],
              f"peft_moe: --lora-layout fused keeps [E, 2F, D]: {sorted(k for k in ours if 'experts' in k)[:4]}")
        mine = unfused(ours)
        check(sorted(mine) == sorted(theirs), f"peft_moe (fused): merge_and_unload's tensors: extra {sorted(set(mine) - set(theirs))[:4]}, missing {sorted(set(theirs) - set(mine))[:4]}")
        bad = [k for k in sorted(set(mine) & set(theirs)) if same_tensor(mine[k].contiguous(), theirs[k]) is not None]
        check(not bad, f"peft_moe (fused): every merged tensor is merge_and_unload's bit for bit: {bad[:4]}")
        merged_folder_checks("peft_moe (fused)", fused, ids["input_ids"], ids["logits_merged"])
    per_expert_adapter_checks(fx)
    # Two processes (a launcher's RANK/WORLD_SIZE): the per-expert tensors (each lies where its expert's chunk
    # does) written with the one-process bytes.
    from testlib import launch_ranks, ranks_text
    for extra, name in ((("--lora", "merge"), "moe-m.safetensors"), (("--lora", "adapter", "--lora-layout", "per-expert"), "moe-ad/")):
        single, dist = WORK / f"single-{name}", WORK / f"dist-{name}"
        ok(dcpctl("consolidate", fx / "ckpt", *extra, "-o", single, "-q"), f"peft_moe: {' '.join(extra)}, one process")
        rcs, outs = launch_ranks(lambda r: [DCPCTL, "consolidate", fx / "ckpt", *extra, "-o", dist, "-q", "--timeout", "300"], 2)
        files = [name] if name.endswith(".safetensors") else [name + "adapter_model.safetensors", name + "adapter_config.json"]
        same = all(rc == 0 for rc in rcs) and all(
            (WORK / f"single-{f}").read_bytes() == (WORK / f"dist-{f}").read_bytes() for f in files)
        check(same, f"peft_moe: {' '.join(extra)} on 2 ranks writes the one-process bytes: {ranks_text(rcs, outs)}")
    # The adapter alone (what ignore_frozen_params=True saves: the LoRA tensors, no base), saved here by
    # torch's dcp.save from the fixture's tensors: E is not in it, so r comes from the config, never from r*E.
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    sd: dict = {}
    _load_state_dict(sd, storage_reader=dcp.FileSystemReader(str(fx / "ckpt")), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    alone = WORK / "moe-adapter-alone"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": {k: v for k, v in sd["model"].items() if ".lora_" in k}}, checkpoint_id=str(alone), no_dist=True)
    r = dcpctl("consolidate", alone, "--lora", "adapter", "--lora-alpha", "8", "-o", f"{WORK / 'moe-no-r'}/")
    expect_rc(r, EXIT_USAGE, "peft_moe: a target_parameters adapter without its base and without r", "r*E", "--lora-config")
    check(not (WORK / "moe-no-r").exists(), "peft_moe: without r, nothing written")
    out = adapter_checks("peft_moe (adapter alone)", alone, fx / "expected_adapter",
                         extra=("--lora-config", fx / "expected_adapter" / "adapter_config.json"), experts=4)
    if out:
        cfg = json.loads((out / "adapter_config.json").read_text())
        check(cfg.get("r") == 4 and cfg.get("rank_pattern") == {}, f"peft_moe (adapter alone): r from the config, no rank_pattern: {cfg.get('r')}, {cfg.get('rank_pattern')}")
    r = dcpctl("consolidate", alone, "--lora", "merge", "--lora-config", fx / "expected_adapter" / "adapter_config.json", "-o", WORK / "moe-alone.safetensors")
    expect_rc(r, EXIT_USAGE, "peft_moe: merging the adapter alone", "holds the adapter only")


def megatron_bridge_checks():
    """Megatron-Bridge's LoRA (megatron.bridge.peft LoRA / CanonicalLoRA; verl's Megatron backend trains through
    it): no fixture from the real writer (it needs Transformer Engine and a GPU), so a checkpoint saved here by
    torch's dcp.save with its real key names (LoRALinear's adapter.linear_in [r, in] / linear_out [out, r] beside
    the base weight, CanonicalLoRA's adapter_q / adapter_k ...): inspect names the layout, the writes refuse it."""
    import torch.distributed.checkpoint as dcp
    ck = WORK / "bridge-lora"
    g = torch.Generator().manual_seed(7)
    sd = {"decoder.layers.0.self_attention.linear_qkv.weight": torch.randn(96, 64, generator=g),
          "decoder.layers.0.self_attention.linear_qkv.adapter.linear_in.weight": torch.randn(4, 64, generator=g),
          "decoder.layers.0.self_attention.linear_qkv.adapter.linear_out.weight": torch.randn(96, 4, generator=g),
          "decoder.layers.0.mlp.linear_fc1.weight": torch.randn(256, 64, generator=g),
          "decoder.layers.0.mlp.linear_fc1.adapter_up.linear_in.weight": torch.randn(4, 64, generator=g),
          "decoder.layers.0.mlp.linear_fc1.adapter_up.linear_out.weight": torch.randn(128, 4, generator=g)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": sd}, checkpoint_id=str(ck), no_dist=True)
    r = dcpctl("inspect", ck, "--json")
    if ok(r, "megatron-bridge: inspect --json"):
        lora = json.loads(r.stdout).get("lora") or {}
        a = (lora.get("adapters") or [{}])[0]
        check(a.get("layout") == "megatron-bridge" and a.get("ranks") == [4] and a.get("modules") == 2
              and a.get("targets") == ["linear_fc1", "linear_qkv"] and "Megatron-Bridge" in lora.get("hint", ""),
              f"megatron-bridge: inspect names the layout, its modules and rank: {lora}")
    for mode in ("adapter", "merge"):
        out = WORK / f"bridge-{mode}"
        r = dcpctl("consolidate", ck, "--lora", mode, "--lora-alpha", "8", "-o", f"{out}/")
        expect_rc(r, EXIT_UNSUPPORTED, f"megatron-bridge: --lora {mode} refused naming the layout", "Megatron-Bridge", "adapter.linear_in")
        check(not out.exists(), f"megatron-bridge: --lora {mode}: nothing written")
    r = dcpctl("consolidate", ck, "-o", WORK / "bridge-keep.safetensors", "-q")
    check(r.returncode == 0, f"megatron-bridge: --lora keep writes the keys as they are: {r.stderr[-300:]}")


def torchtune_checks():
    """torchtune 0.6.1's LoRA / DoRA (make_torchtune.py): its DistributedCheckpointer's intermediate save
    (dist_epoch_0/: {"model": lora_a/lora_b/magnitude over M.weight, "optimizer", progress}) against what
    torchtune itself writes: tune_to_peft_adapter_weights / _config (the PEFT folder, HF names, q/k lora_B
    permuted) and get_merged_lora_ckpt (torchtune's names)."""
    for case, dora in (("torchtune_lora", False), ("torchtune_dora", True)):
        fx = FIXTURES / case
        ckpt = fx / "dist_epoch_0"
        if not ckpt.exists():
            check(False, f"{case}: fixture missing")
            continue
        r = dcpctl("inspect", ckpt, "--json")
        if ok(r, f"{case}: inspect --json"):
            a = ((json.loads(r.stdout).get("lora") or {}).get("adapters") or [{}])[0]
            check(a.get("layout") == "torchtune" and a.get("ranks") == [4] and a.get("dora") is dora and "q_proj" in a.get("targets", []),
                  f"{case}: inspect says torchtune, rank 4, DoRA {dora}: {a}")
        ids = load_file(fx / "logits.safetensors")
        if not dora:
            out = adapter_checks(case, ckpt, fx / "expected_adapter")
            if out:
                peft_load_checks(case, out, fx / "base", ids["input_ids"], ids["logits_tune"])
        else:
            out = WORK / f"{case}-adapter"
            if ok(dcpctl("consolidate", ckpt, "--lora", "adapter", "-o", f"{out}/", "-q"), f"{case}: --lora adapter"):
                ours, theirs = load_file(out / "adapter_model.safetensors"), load_file(fx / "expected_adapter" / "adapter_model.safetensors")
                check(sorted(ours) == sorted(theirs) and all(same_tensor(ours[k], theirs[k]) is None for k in theirs),
                      f"{case}: tune_to_peft_adapter_weights' tensors bit for bit: {sorted(set(ours) ^ set(theirs))[:4]}")
                cfg = json.loads((out / "adapter_config.json").read_text())
                check(cfg.get("use_dora") is True and cfg.get("r") == 4, f"{case}: the config says use_dora (PEFT needs it): {cfg}")
        merged = WORK / f"{case}-merged.safetensors"
        if ok(dcpctl("consolidate", ckpt, "--lora", "merge", "-o", merged, "-q"), f"{case}: --lora merge"):
            ours, theirs = load_file(merged), load_file(fx / "expected_merged_tune.safetensors")
            check(sorted(ours) == sorted(theirs), f"{case}: get_merged_lora_ckpt's keys: {sorted(set(ours) ^ set(theirs))[:4]}")
            bad = [k for k in sorted(set(ours) & set(theirs)) if same_tensor(ours[k], theirs[k]) is not None]
            check(not bad, f"{case}: the merge is get_merged_lora_ckpt's bit for bit: {bad[:4]}")
        # With --map torchtune-llama3: HF's names, q/k rows RoPE-permuted: get_merged_lora_ckpt then tune_to_hf
        # (expected_merged_hf.safetensors), loading in from_pretrained with the torchtune model's logits.
        hf_out = WORK / f"{case}-merged-hf"
        r = dcpctl("consolidate", ckpt, "--lora", "merge", "--map", "torchtune-llama3", "--assets", fx / "base", "-o", f"{hf_out}/", "-q")
        if ok(r, f"{case}: --lora merge --map torchtune-llama3"):
            ours = {}
            for f in sorted(hf_out.glob("*.safetensors")):
                ours.update(load_file(f))
            theirs = load_file(fx / "expected_merged_hf.safetensors")
            check(sorted(ours) == sorted(theirs), f"{case}: tune_to_hf's keys: {sorted(set(ours) ^ set(theirs))[:4]}")
            bad = [k for k in sorted(set(ours) & set(theirs)) if same_tensor(ours[k], theirs[k]) is not None]
            check(not bad, f"{case}: the merge through the map is get_merged_lora_ckpt + tune_to_hf bit for bit: {bad[:4]}")
            from transformers import AutoModelForCausalLM
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, info = AutoModelForCausalLM.from_pretrained(hf_out, dtype=torch.float32, output_loading_info=True)
            check(not info["missing_keys"] and not info["unexpected_keys"], f"{case}: from_pretrained loads the HF merge: {info}")
            hf_loaded(hf_out)
            model.eval()
            diff = (logits_of(model, ids["input_ids"]) - ids["logits_tune"]).abs().max().item()
            check(diff <= 1e-4, f"{case}: from_pretrained of the HF merge gives the torchtune model's logits (max diff {diff:.3g})")
        # Without --map, an HF folder of torchtune's names is no Hugging Face model: exit 5 (valid input no map
        # was given for), naming the map that covers it, nothing written (issue 68: it was exit 3, "damaged").
        nomap = WORK / f"{case}-merged-nomap"
        r = dcpctl("consolidate", ckpt, "--lora", "merge", "--assets", fx / "base", "-o", f"{nomap}/")
        expect_rc(r, EXIT_UNSUPPORTED, f"{case}: --lora merge to an HF folder without --map", "torchtune", "--map torchtune-llama3")
        check(not nomap.exists(), f"{case}: --lora merge without --map: nothing written")
        r = dcpctl("consolidate", ckpt, "--assets", fx / "base", "-o", f"{nomap}/")
        expect_rc(r, EXIT_UNSUPPORTED, f"{case}: its adapters kept, to an HF folder without --map", "--lora merge --map torchtune-llama3",
                  "--lora adapter")
        check(not nomap.exists(), f"{case}: an HF folder without --map: nothing written")
    # Without the adapter_config.json torchtune writes beside its adapter, r and alpha are not known: exit 5.
    import shutil
    alone = WORK / "tt-alone" / "dist_epoch_0"
    shutil.copytree(FIXTURES / "torchtune_lora" / "dist_epoch_0", alone)
    r = dcpctl("consolidate", alone, "--lora", "merge", "-o", WORK / "tt-alone.safetensors")
    expect_rc(r, EXIT_UNSUPPORTED, "torchtune LoRA without its adapter_config.json", "torchtune", "lora_alpha")
    check(not (WORK / "tt-alone.safetensors").exists(), "torchtune LoRA without its config: nothing written")
    # The base's heads from --config (issue 58 item 2): an adapter whose config names no base folder
    # there is, with no config.json beside it, is refused (exit 5, no heads); with --config the base's
    # config.json it writes tune_to_peft_adapter_weights' folder bit for bit (with --lora, --config
    # needs no --map).
    headless = WORK / "tt-headless"
    shutil.copytree(FIXTURES / "torchtune_lora" / "dist_epoch_0", headless / "dist_epoch_0")
    cfg = json.loads((FIXTURES / "torchtune_lora" / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "no-such-base"
    (headless / "adapter_config.json").write_text(json.dumps(cfg))
    r = dcpctl("consolidate", headless / "dist_epoch_0", "--lora", "adapter", "-o", f"{WORK / 'tt-headless-out'}/")
    expect_rc(r, EXIT_UNSUPPORTED, "torchtune --lora adapter without the base's config.json", "num_attention_heads")
    out = adapter_checks("torchtune_lora --config", headless / "dist_epoch_0", FIXTURES / "torchtune_lora" / "expected_adapter",
                         extra=("--config", FIXTURES / "torchtune_lora" / "base" / "config.json"))
    if out:
        cfg = json.loads((out / "adapter_config.json").read_text())
        check(cfg.get("r") == 4, f"torchtune --lora adapter --config: the adapter's config is written: {cfg}")


def torchtune_family_checks():
    """The other families torchtune 0.6.1's checkpointer converts (make_torchtune_maps.py): Qwen2 (qwen2_tune_to_hf:
    names only, q/k/v biases, tied embeddings) under --map torchtune-qwen2, with --lora merge; Mistral and Gemma
    (convert_weights.tune_to_hf, as Llama's: q/k rows RoPE-permuted; Gemma's head_dim 24 != hidden / heads, tied)
    under --map torchtune-llama3; Phi-3 (phi3_tune_to_hf: q/k/v fused into qkv_proj, w1/w3 into gate_up_proj) under
    --map torchtune-phi3, with --lora merge; Gemma 2 under --map torchtune-gemma2, against the conversion that
    computes what torchtune's forward computes (gemma2_tune_to_hf with its two feed-forward norms swapped back:
    torchtune's own output is shown to give other logits). Each bit for bit against the truth, loading in
    from_pretrained with nothing missing or unexpected and the torchtune model's logits; without --map, exit 5
    naming the map; HF -> torchtune (Qwen2, Phi-3) bit for bit against torchtune's hf_to_tune."""
    from transformers import AutoModelForCausalLM

    cases = (("torchtune_qwen2_lora", "torchtune-qwen2", True, "expected_merged_hf.safetensors"),
             ("torchtune_mistral", "torchtune-llama3", False, "expected_hf.safetensors"),
             ("torchtune_gemma", "torchtune-llama3", False, "expected_hf.safetensors"),
             ("torchtune_gemma2", "torchtune-gemma2", False, "expected_hf.safetensors"),
             ("torchtune_phi3_lora", "torchtune-phi3", True, "expected_merged_hf.safetensors"))
    tune_maps = ("torchtune-llama3", "torchtune-qwen2", "torchtune-gemma2", "torchtune-phi3")
    for case, name, lora, truth in cases:
        fx = FIXTURES / case
        ckpt = fx / "dist_epoch_0"
        if not ckpt.exists():
            check(False, f"{case}: fixture missing")
            continue
        how = ("--lora", "merge") if lora else ("--select", "model")
        out = WORK / f"{case}-hf"
        r = dcpctl("consolidate", ckpt, *how, "--map", name, "--assets", fx / "hf", "-o", f"{out}/", "--json", "-q")
        if ok(r, f"{case}: {' '.join(how)} --map {name}"):
            m = json.loads(r.stdout).get("map") or {}
            check(m.get("direction") == "torchtune->hf" and not m.get("missing"), f"{case}: the map's summary: {m.get('direction')}, {m.get('missing')}")
            ours = {}
            for f in sorted(out.glob("*.safetensors")):
                ours.update(load_file(f))
            theirs = load_file(fx / truth)
            check(sorted(ours) == sorted(theirs), f"{case}: torchtune's tune_to_hf keys: {sorted(set(ours) ^ set(theirs))[:4]}")
            bad = [k for k in sorted(set(ours) & set(theirs)) if same_tensor(ours[k], theirs[k]) is not None]
            check(not bad, f"{case}: --map {name} is {truth} (torchtune's conversion{', norms as its forward' if case == 'torchtune_gemma2' else ''}) bit for bit: {bad[:4]}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
            check(not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"],
                  f"{case}: from_pretrained loads the export: {info}")
            hf_loaded(out)
            model.eval()
            ids = load_file(fx / "logits.safetensors")
            diff = (logits_of(model, ids["input_ids"]) - ids["logits_tune"]).abs().max().item()
            print(f"  {case}: transformers' logits of the export vs torchtune's forward: {diff:.3g}")
            check(diff <= 1e-4, f"{case}: from_pretrained of the export gives the torchtune model's logits (max diff {diff:.3g})")
        # the wrong torchtune map: Llama's RoPE permutation on a Qwen2 (whose rotary embedding rotates halves) moves
        # the logits; the Qwen2 map on a Gemma writes q/k unpermuted and moves them too
            if case == "torchtune_gemma2":
                gemma2_swap_checks(fx, out)
        if (fx / "expected_tune_from_hf.safetensors").exists():
            reverse_checks(case, name, fx, truth)
        wrong = "torchtune-llama3" if name == "torchtune-qwen2" else "torchtune-qwen2"
        bad_out = WORK / f"{case}-wrong-hf"
        r = dcpctl("consolidate", ckpt, *how, "--map", wrong, "--assets", fx / "hf", "-o", f"{bad_out}/", "-q")
        if r.returncode == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = AutoModelForCausalLM.from_pretrained(bad_out, dtype=torch.float32)
            model.eval()
            ids = load_file(fx / "logits.safetensors")
            diff = (logits_of(model, ids["input_ids"]) - ids["logits_tune"]).abs().max().item()
            check(diff > 1e-3, f"{case}: the wrong map ({wrong}) moves the logits (max diff {diff:.3g})")
        else:
            check(r.returncode == EXIT_UNSUPPORTED, f"{case}: the wrong map ({wrong}) exports or refuses (exit 5): exit {r.returncode}")
        # without --map: exit 5 naming the map for the model config.json names, nothing written
        nomap = WORK / f"{case}-nomap"
        r = dcpctl("consolidate", ckpt, *(how if lora else ()), "--assets", fx / "hf", "-o", f"{nomap}/")
        expect_rc(r, EXIT_UNSUPPORTED, f"{case}: to an HF folder without --map", "torchtune", f"--map {name}")
        others = [o for o in tune_maps if o != name and o in r.stderr]
        check(not others, f"{case}: only the map of config.json's class is named: {r.stderr[-300:]}")
        check(not nomap.exists(), f"{case}: without --map: nothing written")


def hf_folder_of(fx: Path, tensors: Path, name: str) -> Path:
    """An HF folder of the fixture's config.json and a truth's tensors (what torchtune's HF checkpointer writes)."""
    import shutil
    from safetensors.torch import save_file
    folder = WORK / name
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(fx / "hf" / "config.json", folder / "config.json")
    save_file(load_file(tensors), str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def hf_logits_of(folder: Path, ids) -> torch.Tensor:
    from transformers import AutoModelForCausalLM
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    return logits_of(model, ids)


def gemma2_swap_checks(fx: Path, out: Path):
    """torchtune 0.6.1's gemma2_tune_to_hf names mlp_norm (applied before the MLP in TransformerSelfAttentionLayer)
    post_feedforward_layernorm and mlp_scale (after it) pre_feedforward_layernorm. The map follows the forward: its
    export is torchtune's own conversion bit for bit but for those two norms, exchanged; and torchtune's own
    conversion, loaded the same way, does not give the torchtune model's logits (the choice proven, not asserted)."""
    ours = {}
    for f in sorted(out.glob("*.safetensors")):
        ours.update(load_file(f))
    own_file = fx / "torchtune_gemma2_tune_to_hf.safetensors"
    own = load_file(own_file)
    check(sorted(ours) == sorted(own), f"torchtune_gemma2: gemma2_tune_to_hf's keys: {sorted(set(ours) ^ set(own))[:4]}")
    differ = sorted(k for k in set(ours) & set(own) if same_tensor(ours[k], own[k]) is not None)
    norms = sorted(k for k in own if k.endswith("_feedforward_layernorm.weight"))
    check(differ == norms and len(norms) == 4,
          f"torchtune_gemma2: only the pre/post feed-forward norms differ from gemma2_tune_to_hf: {differ[:6]}")
    swap = {".pre_feedforward_layernorm.": ".post_feedforward_layernorm.", ".post_feedforward_layernorm.": ".pre_feedforward_layernorm."}
    exchanged = [k for k in norms if k in ours and same_tensor(ours[k], own[next(k.replace(a, b) for a, b in swap.items() if a in k)]) is None]
    check(exchanged == norms, f"torchtune_gemma2: each of ours is gemma2_tune_to_hf's other norm: {sorted(set(norms) - set(exchanged))[:4]}")
    ids = load_file(fx / "logits.safetensors")
    theirs = hf_logits_of(hf_folder_of(fx, own_file, "gemma2-torchtune-own"), ids["input_ids"])
    diff = (theirs - ids["logits_tune"]).abs().max().item()
    print(f"  torchtune_gemma2: transformers' logits of torchtune's own gemma2_tune_to_hf vs torchtune's forward: {diff:.3g}")
    check(diff > 1e-2, f"torchtune_gemma2: torchtune's own conversion (norms swapped) gives other logits (max diff {diff:.3g})")
    # HF -> torchtune: the export back under the same map is the model state torchtune saved (torch's reader of
    # dist_epoch_0), bit for bit: the map is its own inverse, norms included (gemma2_hf_to_tune swaps them again).
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    sd: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _load_state_dict(sd, storage_reader=dcp.FileSystemReader(str(fx / "dist_epoch_0")), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    want = sd["model"]
    back = WORK / "torchtune_gemma2-back.safetensors"
    r = dcpctl("consolidate", out, "-o", back, "--map", "torchtune-gemma2", "-q")
    if ok(r, "torchtune_gemma2: consolidate the HF export --map torchtune-gemma2 (HF -> torchtune)"):
        got = load_file(back)
        check(sorted(got) == sorted(want), f"torchtune_gemma2: HF -> torchtune keys are the saved model's: {sorted(set(got) ^ set(want))[:4]}")
        bad = [k for k in sorted(set(got) & set(want)) if same_tensor(got[k], want[k]) is not None]
        check(not bad, f"torchtune_gemma2: HF -> torchtune of the export is the saved model bit for bit: {bad[:4]}")


def reverse_checks(case: str, name: str, fx: Path, truth: str):
    """HF -> torchtune: an HF folder of the truth's tensors under --map NAME is torchtune's hf_to_tune of them
    (expected_tune_from_hf.safetensors, written by torchtune 0.6.1) bit for bit: consolidate to one file, and
    reshard to a 2-rank DCP checkpoint read back by torch's own reader."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    hf = hf_folder_of(fx, fx / truth, f"{case}-hf-in")
    want = load_file(fx / "expected_tune_from_hf.safetensors")
    got_file = WORK / f"{case}-tune.safetensors"
    r = dcpctl("consolidate", hf, "-o", got_file, "--map", name, "--json", "-q")
    if ok(r, f"{case}: consolidate HF --map {name} (HF -> torchtune)"):
        m = json.loads(r.stdout).get("map") or {}
        check(m.get("direction") == "hf->torchtune", f"{case}: HF -> torchtune direction: {m.get('direction')}")
        got = load_file(got_file)
        check(sorted(got) == sorted(want), f"{case}: hf_to_tune's keys: {sorted(set(got) ^ set(want))[:4]}")
        bad = [k for k in sorted(set(got) & set(want)) if same_tensor(got[k], want[k]) is not None]
        check(not bad, f"{case}: --map {name} HF -> torchtune is torchtune's hf_to_tune bit for bit: {bad[:4]}")
    out = WORK / f"{case}-tune-dcp"
    r = dcpctl("reshard", hf, "-o", out, "-w", "2", "--map", name, "-q")
    if ok(r, f"{case}: reshard HF -w 2 --map {name}"):
        sd: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _load_state_dict(sd, storage_reader=dcp.FileSystemReader(str(out)), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
        check(sorted(sd) == sorted(want), f"{case}: reshard's DCP holds hf_to_tune's keys: {sorted(set(sd) ^ set(want))[:4]}")
        bad = [k for k in sorted(set(sd) & set(want)) if same_tensor(sd[k], want[k]) is not None]
        check(not bad, f"{case}: reshard --map {name}'s DCP (torch's reader) is hf_to_tune bit for bit: {bad[:4]}")


def main() -> int:
    # ---- peft_lora: model + optimizer, adapter_config.json beside the checkpoint ----
    fx = FIXTURES / "peft_lora"
    ids = load_file(fx / "logits.safetensors")
    inp = ids["input_ids"]
    r = dcpctl("inspect", fx / "ckpt", "--json")
    if ok(r, "peft_lora: inspect --json"):
        lora = json.loads(r.stdout).get("lora") or {}
        a = (lora.get("adapters") or [{}])[0]
        check(a.get("name") == "default" and a.get("targets") == ["down_proj", "q_proj", "v_proj"] and a.get("ranks") == [4]
              and a.get("modules") == 6 and lora.get("base_model") is True and "--lora adapter" in lora.get("hint", ""),
              f"peft_lora: inspect names the adapter, its targets, rank and modules: {lora}")
        check(a.get("modules_to_save") == ["model.base_model.model.lm_head"], f"peft_lora: inspect lists the module trained whole: {a.get('modules_to_save')}")
    r = dcpctl("inspect", fx / "ckpt")
    check(r.returncode == 0 and "LoRA        adapter default: 6 modules (down_proj, q_proj, v_proj), rank 4" in r.stdout,
          f"peft_lora: inspect's text says it: {r.stdout[-600:]}")
    out = adapter_checks("peft_lora", fx / "ckpt", fx / "expected_adapter")
    if out:
        cfg = json.loads((out / "adapter_config.json").read_text())
        check(cfg.get("base_model_name_or_path") == "base", f"peft_lora: the config found beside the checkpoint gives base_model_name_or_path: {cfg.get('base_model_name_or_path')}")
        peft_load_checks("peft_lora", out, fx / "base", inp, ids["logits_peft"])
    # --select given, and the config named: the same folder.
    out2 = adapter_checks("peft_lora", fx / "ckpt", fx / "expected_adapter",
                          extra=("--select", "model", "--lora-config", fx / "expected_adapter" / "adapter_config.json"), name="select")
    merge_checks("peft_lora", fx / "ckpt", fx, fx / "expected_adapter", inp, ids["logits_merged"])
    # --lora merge composes with --map: the merged model under torchtitan's names (RoPE rows
    # permuted, hf -> torchtitan) is the map applied to merge_and_unload's own folder.
    cfg = fx / "base" / "config.json"
    mapped, ref = WORK / "merged-titan.safetensors", WORK / "peft-merged-titan.safetensors"
    r1 = dcpctl("consolidate", fx / "ckpt", "--lora", "merge", "--map", "torchtitan-llama3", "--config", cfg, "-o", mapped, "-q")
    r2 = dcpctl("consolidate", fx / "expected_merged", "--map", "torchtitan-llama3", "--config", cfg, "-o", ref, "-q")
    if ok(r1, "peft_lora: --lora merge --map torchtitan-llama3") and ok(r2, "peft_lora: --map torchtitan-llama3 of PEFT's merged folder"):
        a, b = load_file(mapped), load_file(ref)
        check(sorted(a) == sorted(b) and "layers.0.attention.qkv_linear.wq.weight" in a and all(same_tensor(a[k], b[k]) is None for k in a),
              f"peft_lora: --lora merge --map gives the map of merge_and_unload's model, bit for bit: {sorted(a)[:3]}")
    # Two processes (a launcher's RANK/WORLD_SIZE; the chunks move to rank 0): the same bytes.
    from testlib import launch_ranks, ranks_text
    for mode, name in (("merge", "m.safetensors"), ("adapter", "ad/")):
        single, dist = WORK / f"single-{name}", WORK / f"dist-{name}"
        ok(dcpctl("consolidate", fx / "ckpt", "--lora", mode, "-o", single, "-q"), f"peft_lora: --lora {mode}, one process")
        rcs, outs = launch_ranks(lambda r: [DCPCTL, "consolidate", fx / "ckpt", "--lora", mode, "-o", dist, "-q", "--timeout", "300"], 2)
        files = ["m.safetensors"] if mode == "merge" else ["ad/adapter_model.safetensors", "ad/adapter_config.json"]
        same = all(rc == 0 for rc in rcs) and all(
            (WORK / f"single-{f}").read_bytes() == (WORK / f"dist-{f}").read_bytes() for f in files)
        check(same, f"peft_lora: --lora {mode} on 2 ranks writes the one-process bytes: {ranks_text(rcs, outs)}")
    # --lora keep (the default): the keys as saved.
    keep = WORK / "keep.safetensors"
    if ok(dcpctl("consolidate", fx / "ckpt", "--select", "model", "-o", keep, "-q"), "peft_lora: consolidate (--lora keep)"):
        keys = load_file(keep)
        check("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight" in keys
              and "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight" in keys,
              "peft_lora: --lora keep writes the keys as they are")
    # The adapter and the merge, dry-run: the plan, nothing written.
    dry = WORK / "dry-adapter"
    r = dcpctl("consolidate", fx / "ckpt", "--lora", "adapter", "-o", f"{dry}/", "--dry-run", "--json")
    if ok(r, "peft_lora: --lora adapter --dry-run"):
        files = [f["path"] for f in json.loads(r.stdout)["files"]]
        check(files == [f"{dry}/adapter_model.safetensors", f"{dry}/adapter_config.json"] and not dry.exists(),
              f"peft_lora: the dry run names the two files and writes nothing: {files}")

    # A bfloat16 and a float16 fine-tune (the fixture's model and adapter cast, saved here by
    # dcp.save of the PeftModel's get_model_state_dict): the merge in the base's dtype is
    # merge_and_unload's (delta computed in float32 on the CPU, rounded to lora_B's dtype, added).
    import shutil
    import torch.distributed.checkpoint as dcp
    from peft import PeftModel
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from transformers import AutoModelForCausalLM
    # The same for DoRA (each step of dora.py rounded in the half dtype) and a LoRA bias.
    for case in ("peft_lora", "peft_dora", "peft_lora_bias"):
        cfx = FIXTURES / case
        for dt in (torch.bfloat16, torch.float16):
            half = WORK / f"half-{case}-{dt}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pm = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(cfx / "base", dtype=dt), cfx / "expected_adapter").to(dt)
                dcp.save({"model": get_model_state_dict(pm)}, checkpoint_id=str(half / "ckpt"), no_dist=True)
                truth = {k: v.detach().clone() for k, v in pm.merge_and_unload().state_dict().items()}
            shutil.copy(cfx / "expected_adapter" / "adapter_config.json", half / "adapter_config.json")
            out = half / "merged.safetensors"
            if ok(dcpctl("consolidate", half / "ckpt", "--lora", "merge", "-o", out, "-q"), f"{case}: --lora merge of a {dt} fine-tune"):
                ours = load_file(out)
                bad = [k for k in truth if k not in ours or same_tensor(ours[k], truth[k]) is not None]
                check(sorted(ours) == sorted(truth) and not bad, f"{case}: --lora merge of a {dt} fine-tune is merge_and_unload's, bit for bit: {bad[:3]}")

    # alpha_pattern as PEFT reads it: the first pattern that matches, in the file's order (here
    # "q_proj" before the longer "model.layers.0.self_attn.q_proj", which sorts first); the oracle is
    # PEFT's own merge_and_unload of the same adapter under that config.
    pat = WORK / "alpha-pattern"
    pat.mkdir()
    cfg = json.loads((fx / "expected_adapter" / "adapter_config.json").read_text())
    cfg["alpha_pattern"] = {"q_proj": 4, "model.layers.0.self_attn.q_proj": 16, "v_proj": 12}
    (pat / "adapter_config.json").write_text(json.dumps(cfg))
    shutil.copy(fx / "expected_adapter" / "adapter_model.safetensors", pat / "adapter_model.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(fx / "base", dtype=torch.float32), pat)
        truth = {k: v.detach().clone() for k, v in pm.merge_and_unload().state_dict().items()}
    out = pat / "merged.safetensors"
    r = dcpctl("consolidate", fx / "ckpt", "--lora", "merge", "--lora-config", pat / "adapter_config.json", "-o", out, "--json", "-q")
    if ok(r, "--lora merge with an alpha_pattern"):
        ours = load_file(out)
        bad = [k for k in truth if k not in ours or same_tensor(ours[k], truth[k]) is not None]
        check(not bad and json.loads(r.stdout)["lora"]["scale"] == {"min": 1.0, "max": 3.0},
              f"--lora merge with an alpha_pattern is PEFT's merge under it, bit for bit: {bad[:3]}, scale {json.loads(r.stdout)['lora'].get('scale')}")
    # rank_pattern / alpha_pattern entries that name no module of the adapter (a config written for
    # another model) are left out of the folder's config; those that name one are kept.
    bogus = WORK / "bogus-patterns.json"
    bogus.write_text(json.dumps(dict(json.loads((fx / "expected_adapter" / "adapter_config.json").read_text()),
                                     rank_pattern={"no_such_proj": 16, "q_proj": 4}, alpha_pattern={"mlp.experts.gate_up_proj": 64})))
    out = adapter_checks("peft_lora", fx / "ckpt", fx / "expected_adapter", extra=("--lora-config", bogus), name="bogus-patterns")
    if out:
        cfg = json.loads((out / "adapter_config.json").read_text())
        check(cfg.get("rank_pattern") == {"q_proj": 4} and cfg.get("alpha_pattern") == {},
              f"peft_lora: config entries naming no module are left out: {cfg.get('rank_pattern')}, {cfg.get('alpha_pattern')}")
    # A config that turns on a LoRA variant whose merge is not W + s·B·A: refused, named, nothing written.
    for field, value, name in (("use_qalora", True, "QA-LoRA"), ("alora_invocation_tokens", [1, 2], "aLoRA"),
                               ("init_lora_weights", "mica", "MiCA"), ("lora_bias", True, "a LoRA bias")):
        variant = WORK / f"variant-{field}.json"
        variant.write_text(json.dumps(dict(json.loads((fx / "expected_adapter" / "adapter_config.json").read_text()), **{field: value})))
        target = WORK / f"variant-{field}.safetensors"
        r = dcpctl("consolidate", fx / "ckpt", "--lora", "merge", "--lora-config", variant, "-o", target)
        expect_rc(r, EXIT_UNSUPPORTED, f"merging a {name} adapter", name, field)
        check(not target.exists(), f"merging a {name} adapter: nothing written")

    # ---- peft_lora_adapter_only: the trainable parameters only, no config beside it ----
    ao = FIXTURES / "peft_lora_adapter_only"
    target = WORK / "ao-refused"
    r = dcpctl("consolidate", ao / "ckpt", "--lora", "adapter", "-o", f"{target}/")
    expect_rc(r, EXIT_USAGE, "adapter-only without lora_alpha", "--lora-alpha", "--lora-config", "adapter_config.json")
    check(not target.exists(), "adapter-only without lora_alpha: nothing written")
    out = adapter_checks("peft_lora_adapter_only", ao / "ckpt", fx / "expected_adapter", extra=("--lora-alpha", "8"))
    if out:
        ao_ids = load_file(ao / "logits.safetensors") if (ao / "logits.safetensors").exists() else ids
        peft_load_checks("peft_lora_adapter_only", out, ao / "base" if (ao / "base").exists() else fx / "base", ao_ids["input_ids"], ao_ids["logits_peft"])
    for args, names in ((("--lora-alpha", "8"), ("--lora-alpha", "--lora adapter")), (("--lora", "merge", "--lora-base", "b"), ("--lora-base",))):
        r = dcpctl("consolidate", ao / "ckpt", *args, "-o", WORK / "ao-misused.safetensors")
        expect_rc(r, EXIT_USAGE, f"--lora options where they do not apply: {' '.join(args)}", *names)
    r = dcpctl("consolidate", ao / "ckpt", "--lora", "merge", "--lora-alpha", "8", "-o", WORK / "ao-merged.safetensors")
    expect_rc(r, EXIT_USAGE, "merging an adapter-only checkpoint", "base_layer", "--lora adapter")
    r = dcpctl("inspect", ao / "ckpt", "--json")
    if ok(r, "adapter-only: inspect"):
        check((json.loads(r.stdout).get("lora") or {}).get("base_model") is False, "adapter-only: inspect says there is no base model")

    # ---- peft_lora_variants: rsLoRA, an Embedding's adapter, two adapters ----
    va = FIXTURES / "peft_lora_variants"
    vids = load_file(va / "logits.safetensors")
    r = dcpctl("consolidate", va / "ckpt", "--lora", "adapter", "-o", f"{WORK / 'va-refused'}/", "--lora-alpha", "16")
    expect_rc(r, EXIT_USAGE, "two adapters without --lora-name", "default", "other", "--lora-name")
    r = dcpctl("consolidate", va / "ckpt", "--lora", "adapter", "--lora-name", "nope", "--lora-alpha", "16", "-o", f"{WORK / 'va-nope'}/")
    expect_rc(r, EXIT_USAGE, "--lora-name of no adapter", "nope", "default", "other")
    cfg_default = va / "expected_adapter" / "adapter_config.json"
    out = adapter_checks("peft_lora_variants", va / "ckpt", va / "expected_adapter", extra=("--lora-name", "default", "--lora-config", cfg_default))
    # logits_peft has both adapters active; each adapter alone has its own.
    if out:
        peft_load_checks("peft_lora_variants", out, va / "base", vids["input_ids"], vids["logits_peft_default"])
    out = adapter_checks("peft_lora_variants", va / "ckpt", va / "expected_adapter" / "other",
                         extra=("--lora-name", "other", "--lora-config", va / "expected_adapter" / "other" / "adapter_config.json"), name="other")
    if out:
        peft_load_checks("peft_lora_variants (other)", out, va / "base", vids["input_ids"], vids["logits_peft_other"])
    # Beside the checkpoint, PEFT's layout: the default adapter's config above, other's in other/.
    # Exporting "other" never takes the default's alpha: refused until other/ holds its own.
    beside = WORK / "va-beside"
    shutil.copytree(va / "ckpt", beside / "ckpt")
    shutil.copy(cfg_default, beside / "adapter_config.json")
    r = dcpctl("consolidate", beside / "ckpt", "--lora", "adapter", "--lora-name", "other", "-o", f"{WORK / 'va-other-refused'}/")
    expect_rc(r, EXIT_USAGE, "adapter 'other' with only the default adapter's config beside it", "other/adapter_config.json")
    (beside / "other").mkdir()
    shutil.copy(va / "expected_adapter" / "other" / "adapter_config.json", beside / "other" / "adapter_config.json")
    adapter_checks("peft_lora_variants", beside / "ckpt", va / "expected_adapter" / "other", extra=("--lora-name", "other"), name="other-beside")
    merge_checks("peft_lora_variants", va / "ckpt", va, va / "expected_adapter", vids["input_ids"], vids["logits_merged"],
                 extra=("--lora-name", "default", "--lora-config", cfg_default))

    # ---- peft_dora: exported and merged (DoRA's row norms) ----
    do = FIXTURES / "peft_dora"
    dids = load_file(do / "logits.safetensors")
    dcfg = do / "expected_adapter" / "adapter_config.json"
    adapter_checks("peft_dora", do / "ckpt", do / "expected_adapter", extra=("--lora-config", dcfg))
    merge_checks("peft_dora", do / "ckpt", do, do / "expected_adapter", dids["input_ids"], dids["logits_merged"],
                 extra=("--lora-config", dcfg))
    # Without its config (only --lora-alpha, which says nothing of DoRA): the magnitude vectors tell,
    # and the merge is the same.
    a_out, b_out = WORK / "dora-alpha.safetensors", WORK / "dora-config.safetensors"
    r1 = dcpctl("consolidate", do / "ckpt", "--lora", "merge", "--lora-alpha", "8", "-o", a_out, "--json", "-q")
    r2 = dcpctl("consolidate", do / "ckpt", "--lora", "merge", "--lora-config", dcfg, "-o", b_out, "-q")
    if ok(r1, "peft_dora: --lora merge --lora-alpha 8") and ok(r2, "peft_dora: --lora merge --lora-config"):
        x, y = load_file(a_out), load_file(b_out)
        check(sorted(x) == sorted(y) and all(same_tensor(x[k], y[k]) is None for k in x) and json.loads(r1.stdout)["lora"].get("dora") is True,
              "peft_dora: DoRA known by its magnitude vectors merges as with its config, and the summary says dora")
    # The base weights split along dim 1 (tensor parallel: DTensor Shard(1) over 3 gloo ranks, 32
    # columns as 11 + 11 + 10, saved by torch's dcp.save): each chunk's rows need the other chunks'
    # columns for DoRA's norm; the merge is the same bits as from whole rows.
    from testlib import launch_ranks, ranks_text
    tp = WORK / "dora-tp3"
    worker = (
        "import sys, torch, torch.distributed as dist, torch.distributed.checkpoint as dcp\n"
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "from torch.distributed.tensor import distribute_tensor, Shard, Replicate\n"
        "from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner\n"
        "from torch.distributed.checkpoint.state_dict_loader import _load_state_dict\n"
        "dist.init_process_group('gloo')\n"
        "sd = {}\n"
        "_load_state_dict(sd, storage_reader=dcp.FileSystemReader(sys.argv[1]), planner=_EmptyStateDictLoadPlanner(), no_dist=True)\n"
        "mesh = init_device_mesh('cpu', (dist.get_world_size(),))\n"
        "m = {k: distribute_tensor(v, mesh, [Shard(1) if v.ndim == 2 and 'base_layer' in k else Replicate()]) for k, v in sd['model'].items()}\n"
        "dcp.save({'model': m}, checkpoint_id=sys.argv[2])\n"
        "dist.barrier()\n"
        "dist.destroy_process_group()\n"
        # Past the save every rank has nothing left to do; the interpreter's own teardown once
        # aborted a rank ('terminate called without an active exception', a gloo thread not
        # joined: clean-clone CI), so a rank leaves at once.
        "sys.stdout.flush(); sys.stderr.flush()\n"
        "import os; os._exit(0)\n")
    rcs, outs = launch_ranks(lambda r: [sys.executable, "-c", worker, do / "ckpt", tp], 3)
    if check(all(rc == 0 for rc in rcs), f"peft_dora: torch saves the base split along dim 1 on 3 ranks: {ranks_text(rcs, outs)}"):
        r = dcpctl("inspect", tp, "--json")
        split = ok(r, "peft_dora (dim 1): inspect") and any(
            it.get("key", "").endswith("q_proj.base_layer.weight") and it.get("chunks") == 3 and it.get("sharding") == "Shard(1) over 3"
            for it in json.loads(r.stdout).get("items", []))
        check(split, "peft_dora (dim 1): the base weights are in 3 chunks")
        tp_out = WORK / "dora-tp3-merged.safetensors"
        if ok(dcpctl("consolidate", tp, "--lora", "merge", "--lora-config", dcfg, "-o", tp_out, "-q"), "peft_dora (dim 1): --lora merge"):
            x, theirs = load_file(tp_out), load_file(do / "expected_merged" / "model.safetensors")
            bad = [k for k in theirs if k not in x or same_tensor(x[k], theirs[k]) is not None]
            check(sorted(x) == sorted(theirs) and not bad,
                  f"peft_dora (dim 1): the merge of a base split along dim 1 is merge_and_unload's bit for bit: {bad[:3]}")
    # A config that says DoRA over a checkpoint without magnitude vectors is not that checkpoint's.
    variant = WORK / "dora-config-on-plain.json"
    variant.write_text(json.dumps(dict(json.loads((fx / "expected_adapter" / "adapter_config.json").read_text()), use_dora=True)))
    target = WORK / "dora-on-plain.safetensors"
    r = dcpctl("consolidate", fx / "ckpt", "--lora", "merge", "--lora-config", variant, "-o", target)
    expect_rc(r, EXIT_UNSUPPORTED, "a DoRA config over a plain LoRA checkpoint", "DoRA", "lora_magnitude_vector")
    check(not target.exists(), "a DoRA config over a plain LoRA checkpoint: nothing written")

    # ---- peft_lora_bias: lora_B's bias merged into the base bias ----
    lb = FIXTURES / "peft_lora_bias"
    lids = load_file(lb / "logits.safetensors")
    lcfg = lb / "expected_adapter" / "adapter_config.json"
    r = dcpctl("inspect", lb / "ckpt", "--json")
    if ok(r, "peft_lora_bias: inspect --json"):
        a = ((json.loads(r.stdout).get("lora") or {}).get("adapters") or [{}])[0]
        check(a.get("lora_bias") is True and a.get("layout") == "peft-linear", f"peft_lora_bias: inspect says lora_bias: {a}")
    out = adapter_checks("peft_lora_bias", lb / "ckpt", lb / "expected_adapter", extra=("--lora-config", lcfg))
    if out:
        peft_load_checks("peft_lora_bias", out, lb / "base", lids["input_ids"], lids["logits_peft"])
    merge_checks("peft_lora_bias", lb / "ckpt", lb, lb / "expected_adapter", lids["input_ids"], lids["logits_merged"],
                 extra=("--lora-config", lcfg))

    moe_checks()
    torchtune_checks()
    torchtune_family_checks()
    megatron_bridge_checks()

    # ---- accelerate's FSDP2 save_state ----
    ac = FIXTURES / "peft_accelerate"
    model_dir = ac / "state" / "pytorch_model_fsdp_0"
    if model_dir.exists():
        acfg = ac / "expected_adapter" / "adapter_config.json"
        adapter_checks("peft_accelerate", model_dir, ac / "expected_adapter", extra=("--lora-config", acfg))
        aids = load_file(ac / "logits.safetensors")
        merge_checks("peft_accelerate", model_dir, ac, ac / "expected_adapter", aids["input_ids"], aids["logits_merged"], extra=("--lora-config", acfg))

    # ---- an adapter saved as one rank's slice (accelerate #4206), written by torch's dcp.save ----
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    sd: dict = {}
    _load_state_dict(sd, storage_reader=dcp.FileSystemReader(str(ao / "ckpt")), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"
    model = sd["model"]
    model[key] = model[key][: model[key].shape[0] // 2].clone()  # rank 0's rows of an FSDP2 Shard(0)
    sliced = WORK / "sliced"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, checkpoint_id=str(sliced), no_dist=True)
    r = dcpctl("verify", sliced)
    expect_rc(r, EXIT_INVALID, "verify of an adapter saved as one rank's slice", "lora-shape" if "--json" in r.args else "q_proj", "rank")
    r = dcpctl("verify", sliced, "--json")
    probs = json.loads(r.stdout).get("problems", []) if r.stdout else []
    check(r.returncode == EXIT_INVALID and any(p.get("code") == "lora-shape" and "q_proj" in p.get("key", "") for p in probs),
          f"verify --json names the sliced adapter (lora-shape): {probs[:2]}")
    target = WORK / "sliced-adapter"
    r = dcpctl("consolidate", sliced, "--lora", "adapter", "--lora-alpha", "8", "-o", f"{target}/")
    expect_rc(r, EXIT_INVALID, "--lora adapter of a sliced adapter", "q_proj", "slice")
    check(not target.exists(), "a sliced adapter: nothing written")
    return summary("lora_test", min_checks=40)


if __name__ == "__main__":
    sys.exit(main())
