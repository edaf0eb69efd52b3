#!/usr/bin/env python3
"""`--map NAME|FILE` (issue 27): dcpctl's key maps against torchtitan's own StateDictAdapters,
Megatron-Bridge's export and transformers, on checkpoints real torchtitan and megatron-core wrote
(tests/fixtures/layouts/titan_*, made by make_titan_maps.py: titan_llama3 and titan_qwen3 (tied),
titan_qwen3_moe (grouped experts; hidden 48 != heads x head_dim 64), titan_deepseek_v3 (MoE),
titan_deepseek_v3_mtp (MTP block: HF layer num_hidden_layers + M) and
titan_kimi_k2_7 (q LoRA) from torchtitan 0.3.0, titan_gpt_oss (experts transposed, biases, sinks) and
titan_qwen3_5 (Gated DeltaNet fused, release prefix; make_titan_qwen3_5.py) from 0.3.0 against
transformers' own layout (their adapters are wrong, see src/maps/README.md), titan_llama3_v02 from
0.2.2; megatron_llama and
megatron_qwen (TP2 torch_dist, layers stacked, linear_qkv grouped per query group), made by
make_megatron_hf.py). The oracle and its checks are tests/interop/map_oracle.py, shared with
map_reference_test.py, which shows the maps' semantics give the adapters' output.

    maps_test.py DCPCTL FIXTURES_DIR

Checks:
  - `dcpctl maps` / `maps --json`: every built-in map (src/maps/*.json) with its sides, description
    and models;
  - per case, `consolidate CKPT -o out/ --map M --assets hf/` of the whole checkpoint: every tensor
    bit-equal to the adapter's to_hf / Megatron-Bridge's export (expected_hf), key sets equal (the
    tied lm_head.weight of Qwen 3 kept, equal to the embedding, and reported in --json
    tie_word_embeddings, not dropped); --json `map` = {name, direction "torchtitan->hf" /
    "megatron->hf", mapped, left_out = exactly the optimizer / lr_scheduler / dataloader /
    train_state keys (Megatron: _extra_state, common_state), dropped []}; from_pretrained(out/)
    loads with no missing keys, no unexpected keys but the MTP block's (DeepseekV3ForCausalLM has no
    MTP layers; expected.json lists them), and gives the recorded logits (float32);
  - `-o x.safetensors --config config.json` (the same tensors), `--map FILE.json` (byte-identical to
    the built-in name), `--max-memory 16KiB` (byte-identical), `--dry-run --json` (a probe key planned
    from its source: the rope transforms of Llama, the MTP block's HF layer 2 from mtp_layers.0, a
    grouped k_proj from the stacked linear_qkv in more than one piece; writes nothing);
  - (torchtitan-qwen3: titan_qwen3, titan_qwen3_moe) `consolidate CKPT -o OUT/ --map torchtitan-qwen3
    --config config.json` (no --assets) exit 0, the adapter's to_hf tensor for tensor, `verify OUT/`
    exit 0 (the model schema, issue 68: Qwen3-MoE's attention width is not its hidden size),
    from_pretrained(OUT/) with nothing missing or unexpected and the recorded logits;
  - (Llama, Megatron) config.json lookup: --config, else --assets DIR's, else the checkpoint's own;
    --config wins;
  - (Llama, Megatron) refusals, exit 2, nothing written: an unknown map name, a param the config
    lacks (named), a map matching none of the input's keys; the other Llama map (0.2 names on 0.3,
    and back) would leave the model's attention weights out: exit 5 naming them, nothing written;
  - `reshard hf/ -o DCP/ --world-size 2 --map M` (convert_from_hf for an initial load): torch's
    reader of DCP/ gives the adapter's from_hf (expected_titan; the tied lm_head.weight, which hf/
    does not hold, copied from the embedding as from_hf does; the MTP block, which hf/ does not
    hold, not invented) or the Megatron
    checkpoint's own tensors, split over 2 ranks; `consolidate DCP/ -o back/ --map M` gives hf/'s
    tensors back; (MTP) the same from expected_hf plus the release's extra MTP keys
    (embed_tokens, shared_head.head: dropped and reported): the whole expected_titan;
  - `cast DCP/ --dtype bf16 --map M`: HF names, expected_hf cast with Tensor.to(bfloat16), but what
    transformers keeps in float32 for the model (DeepSeek-V3's e_score_correction_bias) as saved;
  - `diff DCP/ hf/ --map M` exit 0 (without the map: exit 1), a changed q_proj: exit 1 naming it;
    `stats CKPT --map M`: the tensors under HF names, numel/min/max as torch's of expected_hf;
  - under torchrun (2 ranks, gloo): `consolidate --map` byte-identical to one process.

These fail until the engine lands (`dcpctl maps` is an unknown subcommand before it).

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure under CI).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from skip import skip_or_fail  # noqa: E402

try:
    import torch
    import transformers  # noqa: F401
    from safetensors.torch import load_file
except ImportError as e:
    skip_or_fail(f"torch, safetensors and transformers are needed ({e}); tools/requirements.txt pins them")

import dcp_oracle  # noqa: E402
import map_oracle as mo  # noqa: E402
import map_reference as mr  # noqa: E402
from testlib import EXIT_USAGE, check, hf_loaded, problems, run, summary  # noqa: E402  (tests/testlib.py)

MAPS_DIR = Path(__file__).resolve().parents[2] / "src" / "maps"
DCPCTL = ""


def dcpctl(*args, env=None, timeout=600, hf_partial: str | None = None) -> subprocess.CompletedProcess:
    """dcpctl ARGS with env added to this environment; a crash is a failure (testlib.run); hf_partial:
    why an HF folder it writes is not a whole model (testlib.run: no from_pretrained check)."""
    return run(DCPCTL, *args, timeout=timeout, env=dict(os.environ, **(env or {})), hf_partial=hf_partial)


def ok(r: subprocess.CompletedProcess, what: str) -> bool:
    return check(r.returncode == 0, f"{what}: exit {r.returncode}, stderr {r.stderr.strip()[-800:]!r}")


def jdoc(r: subprocess.CompletedProcess, what: str) -> dict:
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        check(False, f"{what}: --json printed no JSON: {r.stdout[:300]!r}")
        return {}


def hf_tensors(path: Path) -> dict:
    if path.is_file():
        return load_file(str(path))
    sd = {}
    for p in sorted(path.glob("*.safetensors")):
        sd.update(load_file(str(p)))
    return sd


def logits_diff(model, lg: dict) -> float:
    """The largest |transformers' logits - the reference's| on the reference's tokens (a fixture's
    logits.safetensors: `tokens`, `logits`)."""
    with torch.no_grad():
        return (model.eval()(lg["tokens"]).logits.float() - lg["logits"]).abs().max().item()


def moved_and_logits(out: Path, want: dict, lg: dict) -> tuple[list, float]:
    """A control export's tensors that differ from `want` (sorted), and how far from_pretrained of it
    moves the logits."""
    from transformers import AutoModelForCausalLM
    got = hf_tensors(out)
    moved = sorted(k for k in want if not torch.equal(got[k], want[k]))
    return moved, logits_diff(AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32), lg)


def refused(r: subprocess.CompletedProcess, out: Path, needle: str, what: str) -> None:
    check(r.returncode == 2, f"{what}: exit {r.returncode} (want 2), stderr {r.stderr.strip()[-500:]!r}")
    check(needle in r.stderr, f"{what}: stderr does not name {needle!r}: {r.stderr.strip()[-500:]!r}")
    check(not out.exists(), f"{what}: {out} written")
    check(not any("dcpctl-tmp" in p.name for p in out.parent.iterdir()), f"{what}: a temporary left")


def check_map_summary(doc: dict, case: mo.Case, direction: str, left_out: set, what: str,
                      extra_dropped: list | None = None) -> None:
    m = doc.get("map") or {}
    check(m.get("name") == case.map and m.get("direction") == direction,
          f"{what}: --json map name/direction {m.get('name')!r} {m.get('direction')!r}")
    check(set(m.get("left_out", [None])) == left_out,
          f"{what}: --json map.left_out differs from the non-model keys: "
          f"{sorted(set(m.get('left_out') or []) ^ left_out)[:8]}")
    want = sorted((case.dropped_keys if direction == case.export_direction else []) + (extra_dropped or []))
    check(sorted(m.get("dropped") or []) == want, f"{what}: --json map.dropped {m.get('dropped')} (want {want})")


# ----------------------------------------------------------------------------------------- tests


def test_maps_listing() -> None:
    r = dcpctl("maps", "--json")
    if not ok(r, "maps --json"):
        return
    doc = jdoc(r, "maps --json")
    maps = doc.get("maps", doc) if isinstance(doc, dict) else doc
    # a family file (dcpctl-map/2) is listed as the family and each alias, expanded
    files = {n: mr.load_map(n) for n in mr.builtin_names()}
    listed = {m.get("name"): m for m in maps} if isinstance(maps, list) else {}
    for name, f in files.items():
        m = listed.get(name, {})
        check(m.get("family") == f.get("family") and [v.get("name") for v in m.get("variants", [])] == sorted(f.get("variants", {}))
              and m.get("rules") == len(f["rules"]),
              f"maps --json: {name}: family {m.get('family')}, variants {m.get('variants')}, {m.get('rules')} rules "
              f"(the reference's expansion: {f.get('family')}, {sorted(f.get('variants', {}))}, {len(f['rules'])})")
    check(set(listed) == set(files), f"maps --json lists {sorted(listed)}, src/maps has {sorted(files)}")
    for name, f in files.items():
        m = listed.get(name, {})
        check(m.get("sides") == f["sides"] and m.get("description") == f["description"],
              f"maps --json: {name}: {m}")
        if "models" in f:
            check(m.get("models") == f["models"], f"maps --json: {name}: models {m.get('models')} != {f['models']}")
    r = dcpctl("maps")
    if ok(r, "maps"):
        check(all(n in r.stdout for n in files), f"maps: table lacks some of {sorted(files)}")


def test_export(case: mo.Case, work: Path) -> None:
    """The whole training checkpoint to an HF folder: the adapter's to_hf, transformers' logits."""
    out = work / f"{case.name}-hf"
    r = dcpctl("consolidate", case.ckpt, "-o", f"{out}/", "--map", case.map, "--assets", case.hf_dir, "--json")
    if not ok(r, f"{case.name}: consolidate --map"):
        return
    doc = jdoc(r, f"{case.name}: consolidate --map --json")
    # A tied model's folder leaves out the head (equal to the embedding): its input is dropped by name.
    head = [k for k in case.model_keys if k in ("output.weight", "output_layer.weight", "lm_head.weight")] if case.tied else []
    check_map_summary(doc, case, case.export_direction, set(case.other_keys), f"{case.name}: consolidate", extra_dropped=head)
    # mapped counts input keys, as left_out and dropped list them: mapped + left out + dropped = the
    # checkpoint's keys (DeepSeek-V3: 28 model keys, 37 output keys once the experts are unstacked)
    mapped = (doc.get("map") or {}).get("mapped")
    check(mapped == len(case.model_keys) - len(case.dropped_keys) - len(head),
          f"{case.name}: --json map.mapped {mapped} != {len(case.model_keys) - len(case.dropped_keys)} input keys mapped "
          f"(mapped + left_out + dropped must be the {len(case.model_keys) + len(case.other_keys)} "
          "input keys)")
    problems(mo.check_hf_tensors(case, hf_tensors(out), f"{case.name}: consolidate --map -o DIR/", folder=True))
    tie = doc.get("tie_word_embeddings") or {}
    if case.tied:
        check(tie.get("config") is True and tie.get("lm_head_weight") is False
              and tie.get("left_out") == {"key": "lm_head.weight", "equal_to": "model.embed_tokens.weight"},
              f"{case.name}: the tied head not left out: tie_word_embeddings {tie}")
    else:
        check(tie.get("config") is False and tie.get("lm_head_weight") is True,
              f"{case.name}: tie_word_embeddings {tie}")
    check((out / "config.json").read_bytes() == (case.hf_dir / "config.json").read_bytes(),
          f"{case.name}: config.json not copied from --assets")
    problems(mo.check_from_pretrained(case, out, f"{case.name}: from_pretrained(consolidate --map)"))


def test_file_and_options(case: mo.Case, work: Path) -> None:
    base = work / f"{case.name}.safetensors"
    r = dcpctl("consolidate", case.ckpt, "-o", base, "--map", case.map, "--config", case.config_path)
    if not ok(r, f"{case.name}: consolidate --map -o x.safetensors --config"):
        return
    problems(mo.check_hf_tensors(case, hf_tensors(base), f"{case.name}: -o x.safetensors"))
    f = work / f"{case.name}-file.safetensors"
    # an alias's file is its family's (megatron-gpt: megatron.json, whose variant the config chooses alike)
    path = MAPS_DIR / f"{case.map}.json"
    if not path.exists():
        path = next(p for p in MAPS_DIR.glob("*.json") if case.map in json.loads(p.read_text()).get("aliases", {}))
    r = dcpctl("consolidate", case.ckpt, "-o", f, "--map", path, "--config", case.config_path)
    if ok(r, f"{case.name}: --map FILE.json"):
        check(f.read_bytes() == base.read_bytes(), f"{case.name}: --map FILE.json differs from --map {case.map}")
    small = work / f"{case.name}-small.safetensors"
    # a budget well under the checkpoint's model tensors (titan: 4 KiB the largest; megatron: stacked
    # [2, 64, 128] float32 Megatron tensors of 64 KiB, which consolidate without --map reads whole;
    # titan_qwen3_moe: grouped experts [6, 24, 48] of 27 KiB, saved as two [3, 24, 48] FSDP chunks, one
    # expert's slab written from its 13.5 KiB chunk plus its own 4.5 KiB: 18 KiB at once)
    budget = "96KiB" if case.kind == "megatron" else "24KiB" if case.name == "titan_qwen3_moe" else "16KiB"
    r = dcpctl("consolidate", case.ckpt, "-o", small, "--map", case.map, "--config", case.config_path,
            "--max-memory", budget, "--threads", "2")
    if ok(r, f"{case.name}: --max-memory {budget}"):
        check(small.read_bytes() == base.read_bytes(), f"{case.name}: --max-memory {budget} output differs")
    dry = work / f"{case.name}-dry.safetensors"
    r = dcpctl("consolidate", case.ckpt, "-o", dry, "--map", case.map, "--config", case.config_path, "--dry-run", "--json")
    if ok(r, f"{case.name}: --map --dry-run --json"):
        check(not dry.exists(), f"{case.name}: --dry-run wrote {dry}")
        doc = jdoc(r, f"{case.name}: --dry-run --json")
        q, source = case.probe
        rec = next((p for p in doc.get("plan", []) if isinstance(p, dict) and p.get("key") == q), None)
        if check(rec is not None and rec.get("pieces"), f"{case.name}: --dry-run --json plan has no record for {q}"):
            srcs = {p.get("tensor") for p in rec["pieces"]}
            check(srcs and all(str(t).endswith(source) for t in srcs), f"{case.name}: {q} planned from {srcs}")
            if case.kind == "megatron":  # per query group: the k rows of 2 groups are 2 runs of rows
                check(len(rec["pieces"]) >= case.config["num_key_value_heads"],
                      f"{case.name}: --dry-run --json: {q} in {len(rec['pieces'])} piece(s), grouped rows "
                      f"of {case.config['num_key_value_heads']} query groups: {rec['pieces']}")
            if case.family == "llama3":  # the RoPE permutation, in the plan: rows taken out of order
                rows = [int(str(p.get("box", "[0:")).strip("[").split(":")[0]) for p in rec["pieces"]]
                check(rows != sorted(rows), f"{case.name}: --dry-run --json: {q}'s pieces take rows {rows} "
                      "in order: no RoPE permutation shown")


def test_config_folder_verify(case: mo.Case, work: Path) -> None:
    """Issue 68: an export whose model's attention width (heads x head_dim) is not its hidden size,
    torchtitan 0.3.0's Qwen3-MoE (titan_qwen3_moe: 64 vs 48), was refused, exit 5, by a model schema
    that took the one for the other. Into a folder with --config alone: exit 0, the adapter's to_hf,
    `verify` of the folder exit 0, and transformers loads it with torchtitan's logits."""
    out = work / f"{case.name}-config-folder"
    r = dcpctl("consolidate", case.ckpt, "--map", case.map, "-o", f"{out}/", "--config", case.config_path, "--json")
    if not ok(r, f"{case.name}: consolidate --map {case.map} -o DIR/ --config"):
        return
    problems(mo.check_hf_tensors(case, hf_tensors(out), f"{case.name}: -o DIR/ --config", folder=True))
    if case.family == "qwen3_moe":  # config.json's num_local_experts, through Qwen3MoeConfig's alias
        p = ((jdoc(r, f"{case.name}: -o DIR/ --config --json").get("map") or {}).get("params") or {}).get("n_experts") or {}
        check(p.get("value") == case.doc["dims"]["experts"],
              f"{case.name}: --json map.params.n_experts {p} (want {case.doc['dims']['experts']} from config.json)")
    r = dcpctl("verify", f"{out}/")
    check(r.returncode == 0, f"{case.name}: verify of the exported folder: exit {r.returncode} (want 0), "
          f"{(r.stdout + r.stderr).strip()[-800:]!r}")
    problems(mo.check_from_pretrained(case, out, f"{case.name}: from_pretrained(-o DIR/ --config)"))


def test_config_lookup(case: mo.Case, work: Path) -> None:
    """--config, else --assets DIR's config.json, else the checkpoint's own; --config wins."""
    cfg = case.config  # head_dim kept (its default, hidden_size / heads, would halve with the heads)
    bad = dict(cfg, num_attention_heads=cfg["num_attention_heads"] * 2, num_key_value_heads=cfg["num_key_value_heads"] * 2,
               head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    bad_dir = work / f"{case.name}-badcfg"
    bad_dir.mkdir()
    (bad_dir / "config.json").write_text(json.dumps(bad))
    out = work / f"{case.name}-cfgwins"
    # --config wins, the config.json written beside the weights included: the weights follow its heads,
    # and --assets' (twice the heads) would make from_pretrained report every q/k/v/o_proj mismatched
    # (the harness loads the folder: testlib's HF load check).
    r = dcpctl("consolidate", case.ckpt, "-o", f"{out}/", "--map", case.map, "--config", case.config_path, "--assets", bad_dir)
    if ok(r, f"{case.name}: --config beside a wrong --assets config"):
        problems(mo.check_hf_tensors(case, hf_tensors(out), f"{case.name}: --config wins over --assets"))
        check(json.loads((out / "config.json").read_text()) == json.loads(Path(case.config_path).read_text()),
              f"{case.name}: the config.json written beside the weights is --config's, not --assets' (twice the heads)")
    # --config alone into a folder (no --assets): its config.json is written beside the weights, as
    # from_pretrained needs one (the harness loads the folder); main before this wrote none
    out = work / f"{case.name}-cfgonly"
    r = dcpctl("consolidate", case.ckpt, "-o", f"{out}/", "--map", case.map, "--config", case.config_path)
    if ok(r, f"{case.name}: --config alone into a folder"):
        check((out / "config.json").exists() and (out / "config.json").read_bytes() == Path(case.config_path).read_bytes(),
              f"{case.name}: --config's config.json written beside the weights: {sorted(p.name for p in out.iterdir())}")
    out = work / f"{case.name}-assetscfg"
    r = dcpctl("consolidate", case.ckpt, "-o", f"{out}/", "--map", case.map, "--assets", case.hf_dir)
    if ok(r, f"{case.name}: --assets DIR's config.json"):
        problems(mo.check_hf_tensors(case, hf_tensors(out), f"{case.name}: --assets DIR's config.json"))
    out = work / f"{case.name}-badassets"
    r = dcpctl("consolidate", case.ckpt, "-o", f"{out}/", "--map", case.map, "--assets", bad_dir)
    check(r.returncode == EXIT_USAGE and str(bad_dir / "config.json") in r.stderr and not out.exists(),
          f"{case.name}: --assets' config.json (twice the heads: the q/k rows do not add up) must be used and "
          f"refused (exit 2 naming it, nothing written): exit {r.returncode}: {r.stderr.strip()[-400:]}")
    own = work / f"{case.name}-own"
    shutil.copytree(case.ckpt, own)
    shutil.copyfile(case.config_path, own / "config.json")
    out = work / f"{case.name}-own.safetensors"
    r = dcpctl("consolidate", own, "-o", out, "--map", case.map)
    if ok(r, f"{case.name}: the checkpoint's own config.json"):
        problems(mo.check_hf_tensors(case, hf_tensors(out), f"{case.name}: own config.json"))


def test_refusals(case: mo.Case, work: Path, fixtures: Path) -> None:
    out = work / "refused.safetensors"
    r = dcpctl("consolidate", case.ckpt, "-o", out, "--map", "no-such-map", "--config", case.config_path)
    refused(r, out, "no-such-map", f"{case.name}: unknown map")
    cfg = dict(case.config)
    del cfg["num_attention_heads"]
    p = work / f"{case.name}-noheads.json"
    p.write_text(json.dumps(cfg))
    r = dcpctl("consolidate", case.ckpt, "-o", out, "--map", case.map, "--config", p)
    refused(r, out, "n_heads", f"{case.name}: config without num_attention_heads")
    r = dcpctl("consolidate", fixtures / "sample" / "ckpt", "-o", out, "--map", case.map, "--config", case.config_path)
    refused(r, out, case.map, f"{case.name}: a map matching none of the keys")
    if case.kind == "megatron":  # a torchtitan map on a Megatron checkpoint: no key matches
        r = dcpctl("consolidate", case.ckpt, "-o", out, "--map", "torchtitan-llama3", "--config", case.config_path)
        refused(r, out, "torchtitan-llama3", f"{case.name}: --map torchtitan-llama3")
        return
    # The other torchtitan version's Llama map covers only some of the model's keys (issue 49): the
    # rest are model weights it would lose, refused with exit 5 naming them, nothing written.
    other = "torchtitan-llama3-0.2" if case.map == "torchtitan-llama3" else "torchtitan-llama3"
    out2 = work / f"{case.name}-other.safetensors"
    r = dcpctl("consolidate", case.ckpt, "-o", out2, "--map", other, "--config", case.config_path, "--json")
    wq = [k for k in case.model_keys if k.endswith("wq.weight")]
    check(r.returncode == 5 and wq and all(k in r.stderr for k in wq) and f"map {other} " in r.stderr,
          f"{case.name}: --map {other}: exit {r.returncode} (want 5 naming {wq}): {r.stderr.strip()[-500:]!r}")
    check(not out2.exists(), f"{case.name}: --map {other}: {out2} written")


def test_wrong_way(fixtures: Path, work: Path) -> None:
    """Issue 50 item 2: every built-in map on every map fixture of another framework (a torchtitan
    map on a Megatron checkpoint, megatron-gpt or gpt-oss-mxfp4 on a torchtitan one, ...) is refused
    with nothing written: exit 5 naming the map and the direction it tried when some rule matched by
    accident (megatron-gpt's `lm_head.weight` is torchtitan's name too), exit 2 when none did.
    Before the refusal megatron-gpt on a torchtitan checkpoint wrote `output_layer.weight` alone, exit 0."""
    files = {p.stem: json.loads(p.read_text()) for p in MAPS_DIR.glob("*.json")}
    ckpts = {c.dir.name: (c.ckpt, c.side) for c in mo.cases(fixtures)}
    for name in ("megatron_qwen3", "megatron_qwen3_moe", "megatron_qwen2_moe", "megatron_mixtral"):
        ckpts[name] = (fixtures / "layouts" / name / "ckpt", "megatron")
    refused_5 = 0
    for fixture, (ckpt, side) in sorted(ckpts.items()):
        for name, m in sorted(files.items()):
            if side in m["sides"]:
                continue  # its own framework's map: the other tests
            out = work / f"wrong-{fixture}-{name}.safetensors"
            r = dcpctl("consolidate", ckpt, "-o", out, "--map", name, "--config", fixtures / "layouts" / fixture / "config.json")
            what = f"--map {name} on {fixture} ({side})"
            check(r.returncode in (2, 5) and f"map {name}" in r.stderr and not out.exists(),
                  f"{what}: exit {r.returncode} (want 5, or 2 when no key matches): {r.stderr.strip()[-400:]!r}")
            if r.returncode == 5:
                refused_5 += 1
                check("->" in r.stderr, f"{what}: the refusal does not say the direction it tried: {r.stderr.strip()[-300:]!r}")
    check(refused_5 > 0, "no wrong-way map matched a key by accident: the exit-5 refusal went untested")


def titan_load(case: mo.Case, dcp: Path, keys: set, what: str) -> None:
    """torchtitan's own load of a DCP checkpoint (its checkpointer's dcp_load: dcp.load(state_dict,
    checkpoint_id=...) with the default planner, which fails on a key of the model's state dict the
    checkpoint lacks) into the state dict of the model real torchtitan saved (run/step-2's model keys,
    shapes and dtypes; less the MTP block when the HF input has none). The load-balancing expert_bias_E
    (GPT-OSS, Qwen 3.5 MoE), which from_hf leaves out, must be there: the zeros the model starts from."""
    import torch.distributed.checkpoint as tdcp
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception

    real = dcp_oracle.flat_state_from_dcp(case.ckpt)
    left = [k for k in case.model_keys if k not in keys]
    check(all(k.startswith("mtp_layers.") for k in left), f"{what}: model keys the import need not hold: {left[:6]}")
    sd = {k: torch.full_like(real[k], float("nan")) if real[k].is_floating_point() else torch.empty_like(real[k])
          for k in case.model_keys if k in keys}
    try:
        tdcp.load(sd, checkpoint_id=str(dcp))
    except (Exception, CheckpointException) as e:  # noqa: BLE001  (torch's planner: "Missing key in checkpoint state_dict: ...")
        why = "; ".join(str(x) for x in getattr(e, "failures", {}).values()) or str(e)
        check(False, f"{what}: torchtitan's dcp.load of its model's state dict: {type(e).__name__}: {why[:300]}")
        return
    zeros = case.dropped_keys  # the expert_bias_E the HF model has no tensor for
    check(set(zeros) <= set(sd) and all(sd[k].dtype == torch.float32 and bool(sd[k].eq(0).all()) for k in zeros),
          f"{what}: expert_bias_E loaded as float32 zeros: {[(k, sd.get(k)) for k in zeros]}")


def test_import(case: mo.Case, work: Path) -> tuple[Path | None, Path | None]:
    """reshard hf/ -> DCP with torchtitan names (convert_from_hf), and back."""
    dcp = work / f"{case.name}-dcp"
    r = dcpctl("reshard", case.hf_dir, "-o", dcp, "--world-size", "2", "--map", case.map, "--json")
    if not ok(r, f"{case.name}: reshard hf/ --map"):
        return None, None
    doc = jdoc(r, f"{case.name}: reshard --json")
    check_map_summary(doc, case, case.import_direction, set(), f"{case.name}: reshard")
    zeros = sorted((doc.get("map") or {}).get("zeros") or [])
    check(zeros == case.dropped_keys, f"{case.name}: reshard --json map.zeros {zeros} (want {case.dropped_keys})")
    got = {k: v for k, v in dcp_oracle.flat_state_from_dcp(dcp).items()}
    hf_in = case.hf_input()
    problems(mo.check_side_tensors(case, got, hf_in.keys(), f"{case.name}: reshard hf/ --map (torch's reader)"))
    if case.kind == "titan":
        titan_load(case, dcp, case.expected_side_keys(hf_in.keys()), f"{case.name}: reshard hf/ --map")
    md = dcp_oracle.read_metadata(dcp)
    big = [k for k, v in md.state_dict_metadata.items() if hasattr(v, "chunks") and v.size[0] >= 2]
    check(big and all(len(md.state_dict_metadata[k].chunks) == 2 for k in big),
          f"{case.name}: reshard --world-size 2 did not split the tensors over 2 ranks")
    back = work / f"{case.name}-back"
    r = dcpctl("consolidate", dcp, "-o", f"{back}/", "--map", case.map, "--config", case.config_path, "--no-assets")
    if ok(r, f"{case.name}: consolidate of the resharded DCP --map"):
        round_trip = mo.with_tied_head(case, hf_in)
        problems(mo.compare_tensors(hf_tensors(back), round_trip, set(round_trip), f"{case.name}: hf -> DCP -> hf"))
    return dcp, back


def test_import_mtp(case: mo.Case, work: Path) -> None:
    """reshard of expected_hf (hf/ lacks the MTP block) plus the DeepSeek release's extra MTP keys
    (the block's own copies of the embedding and head): the whole from_hf, MTP block included
    (mtp_layers.0 <- model.layers.(num_hidden_layers + 0)), the extras dropped and reported."""
    src = work / f"{case.name}-hf-mtp"
    src.mkdir()
    shutil.copyfile(case.config_path, src / "config.json")
    sd = case.expected_hf()
    extras = mo.mtp_release_extras(case)
    for k in extras:
        sd[k] = sd["model.embed_tokens.weight" if "embed_tokens" in k else "lm_head.weight"].clone()
    from safetensors.torch import save_file

    save_file(sd, str(src / "model.safetensors"), metadata={"format": "pt"})
    dcp = work / f"{case.name}-dcp-mtp"
    r = dcpctl("reshard", src, "-o", dcp, "--world-size", "2", "--map", case.map, "--json")
    if not ok(r, f"{case.name}: reshard expected_hf + the release's MTP extras --map"):
        return
    m = jdoc(r, f"{case.name}: reshard (MTP) --json").get("map") or {}
    check(m.get("direction") == case.import_direction and sorted(m.get("dropped") or []) == sorted(extras)
          and m.get("left_out") == [],
          f"{case.name}: reshard (MTP) --json map: direction {m.get('direction')}, dropped {m.get('dropped')} "
          f"(want {extras}), left_out {m.get('left_out')}")
    got = dcp_oracle.flat_state_from_dcp(dcp)
    problems(mo.check_side_tensors(case, got, case.expected_hf().keys(),
                                   f"{case.name}: reshard expected_hf --map, MTP block included (torch's reader)"))
    back = work / f"{case.name}-back-mtp"
    r = dcpctl("consolidate", dcp, "-o", f"{back}/", "--map", case.map, "--config", case.config_path, "--no-assets")
    if ok(r, f"{case.name}: consolidate of the resharded DCP (MTP) --map"):
        problems(mo.check_hf_tensors(case, hf_tensors(back), f"{case.name}: expected_hf -> DCP -> hf (MTP)"))


def kept_in_fp32(case: mo.Case):
    """What transformers keeps in float32 when it loads the case's model in bfloat16 (its
    _keep_in_fp32_modules_strict, searched in each key as its loader's dtype plan does), which
    --dtype bf16 keeps in the saved dtype too (plan/precision.h): DeepSeek-V3's router bias."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
    return kept_in_fp32_by(MODEL_FOR_CAUSAL_LM_MAPPING.get(CONFIG_MAPPING[case.config["model_type"]], None))


def kept_in_fp32_by(cls):
    """A model class's _keep_in_fp32_modules_strict as a pattern searched in each key (none: matches nothing)."""
    import re
    pats = sorted(getattr(cls, "_keep_in_fp32_modules_strict", None) or [])
    return re.compile("|".join(p.replace("*", ".*") for p in pats) if pats else r"(?!)")


def test_cast_diff_stats(case: mo.Case, work: Path, dcp: Path) -> None:
    cast = work / f"{case.name}-bf16"
    r = dcpctl("cast", dcp, "-o", cast, "--dtype", "bf16", "--map", case.map, "--config", case.config_path)
    if ok(r, f"{case.name}: cast --map"):
        got = dcp_oracle.flat_state_from_dcp(cast)
        keep = kept_in_fp32(case)
        want = {k: v if keep.search(k) else v.to(torch.bfloat16) for k, v in mo.with_tied_head(case, case.hf_input()).items()}
        problems(mo.compare_tensors(got, want, set(want), f"{case.name}: cast --dtype bf16 --map"))
    # A tied model's import holds lm_head.weight (copied from the embedding, as from_hf does) and
    # hf/ does not: the audit (diff --map) compares it with hf/'s embedding, as hf/'s config ties
    # them, and reports it `tied`; with --exclude it is left out.
    tied = ["--exclude", "lm_head.weight"] if case.tied else []
    r = dcpctl("diff", dcp, case.hf_dir, "--map", case.map, "--config", case.config_path, *tied)
    check(r.returncode == 0, f"{case.name}: diff DCP hf/ --map {' '.join(tied)}: exit {r.returncode} (want 0), "
          f"{(r.stdout + r.stderr).strip()[-600:]!r}")
    if case.tied:
        r = dcpctl("diff", dcp, case.hf_dir, "--map", case.map, "--config", case.config_path, "--json")
        keys = [k for k in jdoc(r, "diff --json (tied)").get("keys", []) if k.get("status") != "identical"]
        check(r.returncode == 0 and [(k.get("key"), k.get("status")) for k in keys] == [("lm_head.weight", "tied")]
              and keys[0].get("b_key", "").endswith("embed_tokens.weight"),
              f"{case.name}: diff DCP hf/ --map of a tied model: exit {r.returncode}, {keys}")
    r = dcpctl("diff", dcp, case.hf_dir, "--quiet")
    check(r.returncode == 1, f"{case.name}: diff DCP hf/ without --map: exit {r.returncode} (want 1)")
    changed = work / f"{case.name}-changed"
    shutil.copytree(case.hf_dir, changed)
    sd = hf_tensors(changed)
    # GPT-OSS: a transposed expert weight; Qwen 3.5: q_proj under model.language_model.
    probed = case.family in ("gpt_oss", "qwen3_5")
    q = case.probe[0] if probed else next(
        k for k in ("model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.q_b_proj.weight") if k in sd)
    sd[q] = sd[q].clone()
    sd[q][3, 5] += 1.0
    from safetensors.torch import save_file

    for p in changed.glob("*.safetensors"):
        p.unlink()
    save_file(sd, str(changed / "model.safetensors"), metadata={"format": "pt"})
    r = dcpctl("diff", dcp, changed, "--map", case.map, "--config", case.config_path, "--json")
    if check(r.returncode == 1, f"{case.name}: diff against a changed q_proj: exit {r.returncode} (want 1)"):
        doc = jdoc(r, "diff --json")
        diffs = [k for k in doc.get("keys", []) if k.get("status", "") not in ("identical",)]
        names = json.dumps(diffs)
        source = "linear_qkv" if case.kind == "megatron" else case.probe[1] if probed else "layers.1.attention"
        check(doc.get("counts", {}).get("values_changed") == 1 and (q in names or source in names),
              f"{case.name}: diff --map --json: counts {doc.get('counts')}")
    r = dcpctl("stats", case.ckpt, "--map", case.map, "--config", case.config_path, "--json")
    if ok(r, f"{case.name}: stats --map"):
        rows = {t["key"]: t for t in jdoc(r, "stats --json").get("tensors", [])}
        want = case.expected_hf()
        check(set(rows) == case.expected_hf_keys(),
              f"{case.name}: stats --map keys differ: {sorted(set(rows) ^ case.expected_hf_keys())[:8]}")
        for k, t in want.items():
            s = rows.get(k)
            if s is None:
                continue
            check(s["numel"] == t.numel() and s["min"] == t.min().item() and s["max"] == t.max().item(),
                  f"{case.name}: stats --map {k}: {s['numel']} {s['min']} {s['max']}")


def test_torchrun(case: mo.Case, work: Path) -> None:
    single = work / f"{case.name}-single.safetensors"
    r = dcpctl("consolidate", case.ckpt, "-o", single, "--map", case.map, "--config", case.config_path)
    if not ok(r, f"{case.name}: consolidate --map (one process)"):
        return
    out = work / f"{case.name}-torchrun.safetensors"
    for attempt in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        args = [DCPCTL, "consolidate", str(case.ckpt), "-o", str(out), "--map", case.map, "--config",
                str(case.config_path), "--timeout", "300"]
        procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, RANK=str(rk), WORLD_SIZE="2", LOCAL_RANK=str(rk),
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
                 for rk in range(2)]
        res = [pr.communicate(timeout=600) + (pr.returncode,) for pr in procs]
        if attempt == 0 and any("ddress already in use" in err for _, err, _ in res):
            continue
        break
    detail = "; ".join(f"rank {rk}: exit {rc}, {err.strip()[-300:]!r}" for rk, (_, err, rc) in enumerate(res))
    if check(all(rc == 0 for _, _, rc in res), f"{case.name}: torchrun consolidate --map: {detail}"):
        check(out.read_bytes() == single.read_bytes(), f"{case.name}: torchrun output differs from one process's")


def test_composite_config(case: mo.Case, work: Path) -> None:
    """A text model (torchtitan's Qwen 3.5) exported under its release's composite config.json
    (transformers' own Qwen3_5MoeConfig with this text_config: the vision tower the checkpoint does
    not hold): refused, exit 5, nothing left, the missing vision keys named and the way out (a config
    of the text_config alone, its model_type) said."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    text = json.loads(Path(case.config_path).read_text())
    composite_type = text["model_type"].removesuffix("_text")
    cfg = CONFIG_MAPPING[composite_type](text_config={k: v for k, v in text.items() if k != "architectures"})
    d = work / f"{case.name}-composite-config"
    d.mkdir()
    cfg.architectures = [text["architectures"][0].replace("ForCausalLM", "ForConditionalGeneration")]
    cfg.save_pretrained(d)
    out = work / f"{case.name}-composite"
    r = dcpctl("consolidate", case.ckpt, "-o", f"{out}/", "--map", case.map, "--config", d / "config.json")
    err = r.stdout + r.stderr
    check(r.returncode == 5 and "schema-key-missing" in err and "model.visual." in err
          and f"made of its text_config (model_type {text['model_type']})" in err,
          f"{case.name}: a text model under the composite {composite_type} config: exit {r.returncode} (want 5, "
          f"the vision keys missing and the text_config named): {err.strip()[-500:]!r}")
    check(not out.exists(), f"{case.name}: the refused composite export left nothing")


def same_tensors(got: dict, want: dict, what: str) -> None:
    check(set(got) == set(want), f"{what}: keys differ: {sorted(set(got) ^ set(want))[:8]}")
    bad = [k for k in set(got) & set(want) if got[k].dtype != want[k].dtype or not torch.equal(got[k], want[k])]
    check(not bad, f"{what}: tensors differ: {sorted(bad)[:8]}")


def test_config_aliases(work: Path) -> None:
    """Issue 50 item 4: a map's parameters read as transformers reads config.json. A Qwen3-MoE model
    written by transformers' own save_pretrained (its config says num_local_experts; Qwen3MoeConfig's
    attribute_map aliases num_experts, the name the torchtitan-qwen3 map asks for, to it) goes
    hf -> torchtitan -> hf through `--map torchtitan-qwen3` bit for bit; so does a release-style
    config that says num_experts, one that keeps it under text_config, and one without the count
    (read from the stacked experts' shape, and --json map.params says so)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(50)
    cfg = Qwen3MoeConfig(vocab_size=32, hidden_size=16, intermediate_size=24, moe_intermediate_size=8, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_experts=4, num_experts_per_tok=2,
                         decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)
    hf = work / "q3moe-hf"
    Qwen3MoeForCausalLM(cfg).save_pretrained(hf)
    written = json.loads((hf / "config.json").read_text())
    check(written.get("num_local_experts") == 4 and "num_experts" not in written,
          f"transformers {transformers.__version__} writes Qwen3-MoE's expert count as num_local_experts: {sorted(written)}")
    want = hf_tensors(hf)
    titan = work / "q3moe-titan"
    r = dcpctl("reshard", hf, "-o", titan, "-w", "2", "--map", "torchtitan-qwen3", "--json")
    if not ok(r, "qwen3-moe hf->torchtitan on transformers' own config.json"):
        return
    p = (jdoc(r, "qwen3-moe import").get("map") or {}).get("params") or {}
    check(p.get("n_experts", {}).get("value") == 4 and "num_local_experts" in p.get("n_experts", {}).get("from", ""),
          f"qwen3-moe import: --json map.params.n_experts says where it came from: {p}")
    # torchtitan's Qwen3 MoE (load_balance_coeff 1e-3 by default) holds moe.expert_bias_E, float32 zeros of
    # [num_experts] from MoE.__init__; Qwen3MoeForCausalLM has none: the import writes those zeros
    bias = {k: v for k, v in dcp_oracle.flat_state_from_dcp(titan).items() if k.endswith("expert_bias_E")}
    zeros = ["layers.0.moe.expert_bias_E", "layers.1.moe.expert_bias_E"]
    check(sorted(bias) == zeros and all(v.dtype == torch.float32 and v.shape == (4,) and bool(v.eq(0).all()) for v in bias.values())
          and sorted((jdoc(r, "qwen3-moe import").get("map") or {}).get("zeros") or []) == zeros,
          f"qwen3-moe import: expert_bias_E as float32 zeros [4] in each MoE layer: {bias}")
    variants = {"transformers": written,
                "release (num_experts)": {**{k: v for k, v in written.items() if k != "num_local_experts"}, "num_experts": 4},
                "nested text_config": {"model_type": "qwen3_vl_moe", "text_config": written},
                "no expert count": {k: v for k, v in written.items() if k != "num_local_experts"}}
    for label, c in variants.items():
        cpath = work / f"q3moe-{label.split()[0]}.json"
        cpath.write_text(json.dumps(c))
        out = work / f"q3moe-back-{label.split()[0]}"
        r = dcpctl("consolidate", titan, "-o", f"{out}/", "--map", "torchtitan-qwen3", "--config", cpath, "--no-assets", "--json")
        if not ok(r, f"qwen3-moe torchtitan->hf, config {label}"):
            continue
        same_tensors(hf_tensors(out), want, f"qwen3-moe torchtitan->hf, config {label}")
        frm = ((jdoc(r, label).get("map") or {}).get("params") or {}).get("n_experts", {}).get("from", "")
        expect = "w1_EFD" if label == "no expert count" else "text_config." if label == "nested text_config" else "config.json"
        check(expect in frm, f"qwen3-moe, config {label}: map.params.n_experts.from {frm!r} (want {expect!r} in it)")


def test_megatron_qwen3(fixtures: Path, work: Path) -> None:
    """Issue 50 items 1 and 3: megatron-gpt on megatron-core 0.19.2 checkpoints of a Qwen3 model
    (q_layernorm/k_layernorm, TP2) and a Qwen3-MoE model (router [L, E, D], experts stacked over
    layer x expert [L, E, 2F, D] / [L, E, D, F], TP2 x EP2), made by make_megatron_qwen3.py: the
    export equals the plain-torch conversion whose transformers logits equal megatron's own forward,
    transformers loads it with no missing or unexpected key and gives megatron's logits; and
    hf/ (transformers' save_pretrained) goes back to the checkpoint's own tensors bit for bit."""
    from transformers import AutoModelForCausalLM

    for name in ("megatron_qwen3", "megatron_qwen3_moe", "megatron_qwen2_moe", "megatron_qwen3_moe_mixed", "megatron_qwen3_mtp",
                 "megatron_glm4_moe", "megatron_glm4_moe_mtp", "megatron_deepseek_v3", "megatron_deepseek_v3_moe"):
        d = fixtures / "layouts" / name
        doc = json.loads((d / "expected.json").read_text())
        out = work / f"{name}-hf"
        r = dcpctl("consolidate", d / "ckpt", "-o", f"{out}/", "--map", "megatron-gpt", "--assets", d / "hf", "--json")
        if not ok(r, f"{name}: megatron->hf"):
            continue
        want = load_file(str(d / "expected_hf.safetensors"))
        same_tensors(hf_tensors(out), want, f"{name}: megatron->hf vs the conversion megatron's logits confirm")
        model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
        # an MTP layer (DeepSeek-V3's names, model.layers.<num_hidden_layers + i>.*): no transformers model
        # loads one, Qwen3ForCausalLM reports exactly its keys as unexpected
        mtp = {k for k in want if k.startswith(tuple(f"model.layers.{doc['dims']['layers'] + i}." for i in range(4)))}
        # (an MoE MTP layer's experts as transformers 5 reports them: fused in memory, gate_up_proj / down_proj)
        mtp = {re.sub(r"mlp\.experts\.\d+\.(gate_proj|up_proj|down_proj)\.weight",
                      lambda m_: "mlp.experts." + ("down_proj" if m_[1] == "down_proj" else "gate_up_proj"), k) for k in mtp}
        check(bool(doc["dims"].get("mtp_layers") or name.endswith("_mtp")) == bool(mtp) and set(info.get("unexpected_keys") or ()) == mtp
              and not any(info.get(k) for k in ("missing_keys", "mismatched_keys")), f"{name}: from_pretrained of the export: {info}")
        hf_loaded(out)
        lg = load_file(str(d / "logits.safetensors"))
        diff = logits_diff(model, lg)
        check(diff <= doc["logits"]["atol"], f"{name}: transformers on the export vs megatron's logits: {diff}")
        back = work / f"{name}-back"
        # a model mixing dense and MoE layers is keyed per layer: megatron-gpt-layers (megatron-gpt stacks
        # the layers, and refuses what it cannot stack rather than drop it)
        m = "megatron-gpt-layers" if any(k.startswith("decoder.layers.0.") for k in doc["model_keys"]) else "megatron-gpt"
        if m != "megatron-gpt":
            r = dcpctl("reshard", d / "hf", "-o", work / f"{name}-stacked", "-w", "1", "--map", "megatron-gpt")
            check(r.returncode == 5 and "model.layers.0.mlp.gate_proj.weight" in r.stderr and not (work / f"{name}-stacked").exists()
                  and "the built-in map megatron-gpt-layers maps every model key of this checkpoint: --map megatron-gpt-layers" in r.stderr,
                  f"{name}: hf->megatron with megatron-gpt: exit {r.returncode} (want 5): {r.stderr.strip()[-300:]!r}")
        r = dcpctl("reshard", d / "hf", "-o", back, "-w", "2", "--map", m)
        if not ok(r, f"{name}: hf->megatron"):
            continue
        got = {k: v for k, v in dcp_oracle.flat_state_from_dcp(back).items() if isinstance(v, torch.Tensor)}
        ref = {k: v for k, v in dcp_oracle.flat_state_from_dcp(d / "ckpt").items() if isinstance(v, torch.Tensor)}
        same_tensors(got, ref, f"{name}: hf->megatron vs the checkpoint megatron-core wrote")


def test_megatron_glm(fixtures: Path, work: Path) -> None:
    """Issue 58 item 4: GLM-4.5 on Megatron (megatron_glm4_moe: megatron-core 0.19.2, TP2 x EP2, layer 0
    dense, a sigmoid router with its expert bias, a gate-less shared expert, partial RoPE, q/k norms, QKV
    bias; make_megatron_qwen3.py). test_megatron_qwen3 checks the export and the way back bit for bit and
    transformers' Glm4MoeForCausalLM logits; here what the glm4_moe variant adds: the variant chosen by
    config.json's model_type (and by the checkpoint's keys without one), the router's bias (and, with
    transformers 5.24, its gate.weight) float32 under --dtype bf16, as transformers keeps them, and the failure of issue 58 gone: the
    family without its glm4_moe variant (a map file) must refuse, exit 5, not write Qwen2-MoE's names."""
    d = fixtures / "layouts" / "megatron_glm4_moe"
    out = work / "glm-hf"
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{out}/", "--map", "megatron", "--assets", d / "hf", "--json")
    if ok(r, "megatron_glm4_moe: --map megatron"):
        mdoc = jdoc(r, "megatron_glm4_moe").get("map") or {}
        check(mdoc.get("variant") == "glm4_moe", f"megatron_glm4_moe: map.variant {mdoc.get('variant')}")
        same_tensors(hf_tensors(out), load_file(str(d / "expected_hf.safetensors")), "megatron_glm4_moe: --map megatron")
    # config.json without a model_type: the expert bias (a key only glm4_moe's rules name) chooses the variant
    nocfg = dict(json.loads((d / "hf" / "config.json").read_text()))
    del nocfg["model_type"]
    (work / "glm-config-no-type.json").write_text(json.dumps(nocfg))
    r = dcpctl("consolidate", d / "ckpt", "-o", work / "glm-notype.safetensors", "--map", "megatron", "--config",
               work / "glm-config-no-type.json", "--json")
    if ok(r, "megatron_glm4_moe: config.json without a model_type"):
        check((jdoc(r, "glm no type").get("map") or {}).get("variant") == "glm4_moe", "megatron_glm4_moe: the keys chose no glm4_moe")
        got = load_file(str(work / "glm-notype.safetensors"))
        check(any(k.endswith("mlp.shared_experts.down_proj.weight") for k in got)
              and not any(".shared_expert." in k for k in got), "megatron_glm4_moe: without a model_type, not GLM's names")
    bf = work / "glm-bf16"
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{bf}/", "--map", "megatron-gpt", "--assets", d / "hf", "--dtype", "bf16")
    if ok(r, "megatron_glm4_moe: --dtype bf16"):
        from transformers import Glm4MoeForCausalLM
        # what transformers keeps float32 when it loads the model in bfloat16 (5.24: the router's
        # e_score_correction_bias and gate.weight); everything else bfloat16
        keep = kept_in_fp32_by(Glm4MoeForCausalLM)
        t = hf_tensors(bf)
        bias = [k for k in t if k.endswith("e_score_correction_bias")]
        wrong = [(k, t[k].dtype) for k in t
                 if t[k].is_floating_point() and t[k].dtype != (torch.float32 if keep.search(k) else torch.bfloat16)]
        check(bias and all(keep.search(k) for k in bias) and not wrong,
              f"megatron_glm4_moe: --dtype bf16: {len(bias)} router biases, kept float32 by {keep.pattern}; "
              f"wrong dtypes {wrong[:6]}")
    # the family without its glm4_moe variant: GLM's config names no variant it has, so its MoE keys are
    # uncovered (exit 5), never exported under Qwen2-MoE's names with exit 0
    fam = json.loads((MAPS_DIR / "megatron.json").read_text())
    fam["name"] = "megatron-without-glm"
    del fam["variants"]["glm4_moe"], fam["aliases"]
    for r_ in fam["layer_rules"]:
        if "variants" in r_:
            r_["variants"] = [v for v in r_["variants"] if v != "glm4_moe"] or ["mixtral"]
    (work / "no-glm.json").write_text(json.dumps(fam))
    for m in ("megatron-gpt", work / "no-glm.json"):
        for extra in ([], ["--exclude", "*.expert_bias"]):
            o = work / f"glm-{len(extra)}-{Path(str(m)).stem}"
            # --exclude '*.expert_bias' would leave GLM's model.layers.1.mlp.gate.e_score_correction_bias out,
            # which from_pretrained reports missing: the schema's "together" group of glm4_moe's MoE layer (the
            # router's weight, its bias, the experts) refuses it, exit 5 (the map does not cover the model),
            # naming the key, nothing written (issue 56)
            r = dcpctl("consolidate", d / "ckpt", "-o", f"{o}/", "--map", m, "--assets", d / "hf", *extra)
            if m == "megatron-gpt" and extra:
                check(r.returncode == 5 and "[schema-key-missing]" in r.stderr
                      and "model.layers.1.mlp.gate.e_score_correction_bias" in r.stderr and not o.exists()
                      and not any("dcpctl-tmp" in p.name for p in o.parent.iterdir()),
                      f"megatron_glm4_moe: --map megatron-gpt --exclude '*.expert_bias': exit {r.returncode} (want 5 "
                      f"naming the router's bias): {r.stderr.strip()[-400:]!r}")
            elif m == "megatron-gpt":  # the built-in: GLM's names
                check(r.returncode == 0 and not any(".shared_expert." in k for k in (hf_tensors(o) if o.exists() else {"none.shared_expert.": 0})),
                      f"megatron_glm4_moe: --map megatron-gpt {extra}: exit {r.returncode} {r.stderr[-300:]}")
            else:
                check(r.returncode == 5 and "shared_experts" in r.stderr and "model_type glm4_moe" in r.stderr
                      and "has no variant for it" in r.stderr and not o.exists(),
                      f"megatron_glm4_moe: a map without the glm4_moe variant {extra}: exit {r.returncode} (want 5): "
                      f"{r.stderr.strip()[-400:]!r}")


def test_megatron_glm_no_expert_bias(fixtures: Path, work: Path) -> None:
    """Issue 68 item 4: a GLM-4.5-style Megatron MoE trained without the router's expert bias
    (megatron_glm4_moe_nobias: megatron-core 0.19.2, TP2 x EP2, moe_router_enable_expert_bias off, so no
    router.expert_bias; make_megatron_qwen3.py). Glm4MoeForCausalLM has mlp.gate.e_score_correction_bias;
    the export writes it as float32 zeros (the bias only shifts the top-k choice: zeros shift nothing), says
    so (map.zeros, map.zero_reasons, the summary line), and transformers loads it with nothing missing and
    megatron's own logits. Was exit 5 (schema-key-missing). A checkpoint that holds the bias gets no zeros,
    and one whose bias --exclude leaves out is still refused (zeros never stand in for a trained bias)."""
    from transformers import AutoModelForCausalLM

    d = fixtures / "layouts" / "megatron_glm4_moe_nobias"
    doc = json.loads((d / "expected.json").read_text())
    key = "model.layers.1.mlp.gate.e_score_correction_bias"
    out = work / "glm-nobias-hf"
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{out}/", "--map", "megatron", "--assets", d / "hf", "--json")
    if ok(r, "megatron_glm4_moe_nobias: --map megatron"):
        m = jdoc(r, "glm nobias").get("map") or {}
        check(m.get("zeros") == [key] and "shift" in (m.get("zero_reasons") or {}).get(key, ""),
              f"megatron_glm4_moe_nobias: map.zeros / zero_reasons name the router bias: {m.get('zeros')} {m.get('zero_reasons')}")
        got = hf_tensors(out)
        check(key in got and got[key].dtype == torch.float32 and list(got[key].shape) == [doc["dims"]["experts"]]
              and not bool(got[key].ne(0).any()), f"megatron_glm4_moe_nobias: {key} float32 zeros [E]")
        same_tensors(got, load_file(str(d / "expected_hf.safetensors")), "megatron_glm4_moe_nobias: --map megatron")
        model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
        check(not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")),
              f"megatron_glm4_moe_nobias: from_pretrained of the export: {info}")
        hf_loaded(out)
        diff = logits_diff(model, load_file(str(d / "logits.safetensors")))
        print(f"  megatron_glm4_moe_nobias: transformers on the export vs megatron's logits: {diff:.3g}")
        check(diff <= doc["logits"]["atol"], f"megatron_glm4_moe_nobias: transformers on the export vs megatron's logits: {diff}")
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{work / 'glm-nobias-text'}/", "--map", "megatron", "--assets", d / "hf")
    check(r.returncode == 0 and "wrote 1 as zeros" in r.stderr and key in r.stderr,
          f"megatron_glm4_moe_nobias: the summary says the zeros: {r.stderr.strip()[-400:]!r}")
    bf = work / "glm-nobias-bf16"
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{bf}/", "--map", "megatron", "--assets", d / "hf", "--dtype", "bf16")
    if ok(r, "megatron_glm4_moe_nobias: --dtype bf16"):
        check(hf_tensors(bf)[key].dtype == torch.float32, "megatron_glm4_moe_nobias: --dtype bf16 keeps the zeros float32")
    # the checkpoint with its trained bias: mapped, no zeros
    b = fixtures / "layouts" / "megatron_glm4_moe"
    r = dcpctl("consolidate", b / "ckpt", "-o", f"{work / 'glm-bias-hf'}/", "--map", "megatron", "--assets", b / "hf", "--json")
    if ok(r, "megatron_glm4_moe: --map megatron"):
        check((jdoc(r, "glm bias").get("map") or {}).get("zeros") == [], "megatron_glm4_moe: a trained bias is mapped, no zeros")


def test_megatron_deepseek(fixtures: Path, work: Path) -> None:
    """Issue 58 item 5: DeepSeek-V3 on Megatron (megatron_deepseek_v3: megatron-core 0.19.2, TP2 x EP2,
    multi-latent attention with a q LoRA, YaRN RoPE, layer 0 dense, layer 1 MoE with expert bias and a
    shared expert, one MTP layer; make_megatron_qwen3.py). test_megatron_qwen3 checks the export and the
    way back bit for bit and transformers' DeepseekV3ForCausalLM logits; here what the deepseek_v3 variant
    adds: chosen by config.json's model_type, and by the checkpoint's keys (the MLA names only its rules
    have) without one; a model_type no variant lists (DeepSeek-V2's, whose router and RoPE differ) and the
    family without the variant (a map file) refuse the MLA keys, exit 5, naming them, nothing written; and
    the Transformer-Engine names of the MLA norms (linear_q_up_proj / linear_kv_up_proj.layer_norm_weight,
    Megatron-Bridge 0.6.2's DeepSeek mapping) are the same tensors as the local spec's q/kv_layernorm."""
    d = fixtures / "layouts" / "megatron_deepseek_v3"
    want = load_file(str(d / "expected_hf.safetensors"))
    out = work / "ds-hf"
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{out}/", "--map", "megatron", "--assets", d / "hf", "--json")
    if ok(r, "megatron_deepseek_v3: --map megatron"):
        check((jdoc(r, "deepseek").get("map") or {}).get("variant") == "deepseek_v3", "megatron_deepseek_v3: map.variant")
        same_tensors(hf_tensors(out), want, "megatron_deepseek_v3: --map megatron")
    cfg = json.loads((d / "hf" / "config.json").read_text())
    del cfg["model_type"]
    (work / "ds-no-type.json").write_text(json.dumps(cfg))
    r = dcpctl("consolidate", d / "ckpt", "-o", work / "ds-notype.safetensors", "--map", "megatron-gpt", "--config",
               work / "ds-no-type.json", "--json")
    if ok(r, "megatron_deepseek_v3: config.json without a model_type"):
        check((jdoc(r, "ds no type").get("map") or {}).get("variant") == "deepseek_v3", "megatron_deepseek_v3: the keys chose no deepseek_v3")
        same_tensors(load_file(str(work / "ds-notype.safetensors")), want, "megatron_deepseek_v3: without a model_type")
    # a model_type no variant lists: the MLA keys are uncovered, exit 5, named with the model_type
    (work / "ds-v2.json").write_text(json.dumps({**cfg, "model_type": "deepseek_v2"}))
    o = work / "ds-v2"
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{o}/", "--map", "megatron-gpt", "--config", work / "ds-v2.json")
    check(r.returncode == 5 and "linear_q_down_proj" in r.stderr and "linear_kv_up_proj" in r.stderr
          and "model_type deepseek_v2" in r.stderr and not o.exists(),
          f"megatron_deepseek_v3 under model_type deepseek_v2: exit {r.returncode} (want 5): {r.stderr.strip()[-400:]!r}")
    # Kimi-K2's config.json (remote code: model_type kimi_k2, auto_map, architectures DeepseekV3ForCausalLM): the
    # variant of the class it names, as the model schema finds it; without auto_map the model_type alone decides
    kimi = {**cfg, "model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"],
            "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                         "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}}
    (work / "ds-kimi.json").write_text(json.dumps(kimi))
    o = work / "ds-kimi"
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{o}/", "--map", "megatron", "--config", work / "ds-kimi.json", "--json")
    if ok(r, "megatron_deepseek_v3 under Kimi-K2's config (kimi_k2, remote code)"):
        check((jdoc(r, "ds kimi").get("map") or {}).get("variant") == "deepseek_v3", "megatron_deepseek_v3 under kimi_k2: map.variant")
        same_tensors(hf_tensors(o), want, "megatron_deepseek_v3 under kimi_k2")
    (work / "ds-kimi-noauto.json").write_text(json.dumps({k: v for k, v in kimi.items() if k != "auto_map"}))
    o = work / "ds-kimi-noauto"
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{o}/", "--map", "megatron", "--config", work / "ds-kimi-noauto.json")
    check(r.returncode == 5 and "model_type kimi_k2" in r.stderr and not o.exists(),
          f"megatron_deepseek_v3 under kimi_k2 without auto_map: exit {r.returncode} (want 5): {r.stderr.strip()[-300:]!r}")
    # the family without its deepseek_v3 variant (a map file): the same refusal, for DeepSeek-V3's own config
    fam = json.loads((MAPS_DIR / "megatron.json").read_text())
    fam["name"] = "megatron-without-deepseek"
    del fam["variants"]["deepseek_v3"], fam["aliases"]
    fam["layer_rules"] = [r_ for r_ in fam["layer_rules"] if r_.get("variants") != ["deepseek_v3"]]
    for r_ in fam["layer_rules"]:
        if "variants" in r_:
            r_["variants"] = [v for v in r_["variants"] if v != "deepseek_v3"]
    (work / "no-ds.json").write_text(json.dumps(fam))
    o = work / "ds-nomap"
    r = dcpctl("consolidate", d / "ckpt", "-o", f"{o}/", "--map", work / "no-ds.json", "--assets", d / "hf")
    check(r.returncode == 5 and "linear_q_down_proj" in r.stderr and "model_type deepseek_v3" in r.stderr and not o.exists(),
          f"megatron_deepseek_v3: a map without the deepseek_v3 variant: exit {r.returncode} (want 5): {r.stderr.strip()[-400:]!r}")
    # Transformer Engine's names for the MLA norms (TELayerNormColumnParallelLinear: the norm fused into the
    # up projection): the checkpoint's tensors re-saved by torch's dcp.save under those names, as the TE spec
    # keys them (dense layers: mlp.linear_fc1.layer_norm_weight), map to the same Hugging Face tensors
    import torch.distributed.checkpoint as dcp

    te = {"self_attention.q_layernorm.weight": "self_attention.linear_q_up_proj.layer_norm_weight",
          "self_attention.kv_layernorm.weight": "self_attention.linear_kv_up_proj.layer_norm_weight"}
    sd = {}
    for k, v in dcp_oracle.flat_state_from_dcp(d / "ckpt").items():
        if not isinstance(v, torch.Tensor):
            continue
        for a, b in te.items():
            k = k[: -len(a)] + b if k.endswith(a) else k
        if k == "decoder.layers.0.pre_mlp_layernorm.weight":  # the dense layer: TE fuses it into linear_fc1
            k = "decoder.layers.0.mlp.linear_fc1.layer_norm_weight"
        sd[k] = v
    check(sum(k.endswith(".layer_norm_weight") for k in sd) == 7, f"megatron_deepseek_v3: TE names: {sorted(sd)}")
    dcp.save(sd, checkpoint_id=str(work / "ds-te"), no_dist=True)
    o = work / "ds-te-hf"
    r = dcpctl("consolidate", work / "ds-te", "-o", f"{o}/", "--map", "megatron-gpt", "--assets", d / "hf")
    if ok(r, "megatron_deepseek_v3: TE names"):
        same_tensors(hf_tensors(o), want, "megatron_deepseek_v3: TE names")


def test_drop_by_value(fixtures: Path, work: Path) -> None:
    """Issue 56 item 5: a rule may drop a tensor only when all zeros ("drop_when": "zeros"): torchtitan's
    load-balancing `moe.expert_bias_E`, which the Hugging Face model has no tensor for. On the checkpoint
    real torchtitan 0.3.0 wrote (titan_gpt_oss run/step-2: the bias at its initial zeros) it is dropped,
    with a note (--json map.dropped_zeros, the summary); the same checkpoint with the bias set through
    torch and saved by torch's own dcp.save is refused, exit 5, naming it, nothing written; --exclude
    leaves it out on purpose (exit 0)."""
    import torch.distributed.checkpoint as dcp

    d = fixtures / "layouts" / "titan_gpt_oss"
    src = d / "run" / "step-2"
    r = dcpctl("consolidate", src, "-o", work / "gptoss-zeros.safetensors", "--map", "torchtitan-gpt-oss", "--config",
               d / "config.json", "--json")
    if ok(r, "titan_gpt_oss: expert_bias_E zeros"):
        m = jdoc(r, "drop zeros").get("map") or {}
        want = ["layers.0.moe.expert_bias_E", "layers.1.moe.expert_bias_E"]
        check(sorted(m.get("dropped_zeros") or []) == want and set(want) <= set(m.get("dropped") or []),
              f"titan_gpt_oss: map.dropped_zeros {m.get('dropped_zeros')} (want {want})")
    flat = {k: v for k, v in dcp_oracle.flat_state_from_dcp(src).items()
            if isinstance(v, torch.Tensor) and not k.startswith(("optimizer", "lr_scheduler", "dataloader", "train_state"))}
    check(all(flat[k].eq(0).all() for k in ("layers.0.moe.expert_bias_E", "layers.1.moe.expert_bias_E")),
          "titan_gpt_oss: the fixture's expert_bias_E are not zeros")
    flat["layers.1.moe.expert_bias_E"] = flat["layers.1.moe.expert_bias_E"].clone()
    flat["layers.1.moe.expert_bias_E"][2] = 0.25  # as the load-balancing hook would move it
    biased = work / "gptoss-biased"
    dcp.save(flat, storage_writer=dcp.FileSystemWriter(str(biased)), no_dist=True)
    out = work / "gptoss-biased.safetensors"
    r = dcpctl("consolidate", biased, "-o", out, "--map", "torchtitan-gpt-oss", "--config", d / "config.json")
    check(r.returncode == 5 and "layers.1.moe.expert_bias_E" in r.stderr and "layers.0.moe.expert_bias_E" not in r.stderr
          and "only when all zeros" in r.stderr and not out.exists(),
          f"titan_gpt_oss with a non-zero expert_bias_E: exit {r.returncode} (want 5 naming it): {r.stderr.strip()[-300:]!r}")
    r = dcpctl("consolidate", biased, "-o", out, "--map", "torchtitan-gpt-oss", "--config", d / "config.json",
               "--exclude", "layers.1.moe.expert_bias_E", "--json")
    if ok(r, "titan_gpt_oss non-zero bias --exclude"):
        m = jdoc(r, "drop --exclude").get("map") or {}
        check(m.get("excluded") == ["layers.1.moe.expert_bias_E"] and m.get("dropped_zeros") == ["layers.0.moe.expert_bias_E"],
              f"titan_gpt_oss --exclude: excluded {m.get('excluded')}, dropped_zeros {m.get('dropped_zeros')}")


def test_megatron_mixtral(fixtures: Path, work: Path) -> None:
    """Issue 50 item 1, Mixtral: megatron-mixtral on megatron-core 0.19.2's Mixtral-style GPTModel
    (megatron_mixtral: every layer MoE, softmax top-2 router, experts stacked [L, E, ...], TP2 x EP2; made by
    make_megatron_qwen3.py) <-> MixtralForCausalLM's names on disk (block_sparse_moe.gate,
    block_sparse_moe.experts.<e>.w1/w3/w2): the export equals the plain-torch conversion whose transformers
    logits equal megatron's own forward, from_pretrained loads it with no missing or unexpected key and gives
    megatron's logits; hf/ (transformers' save_pretrained) goes back to the checkpoint's own tensors bit for
    bit; megatron-gpt (Qwen's MoE names) refuses the Mixtral export, exit 5, naming a block_sparse_moe key.
    A control: the map with w1 <-> w3 swapped must move the tensors and the logits (by more than 1e-3)."""
    from transformers import AutoModelForCausalLM

    d = fixtures / "layouts" / "megatron_mixtral"
    doc = json.loads((d / "expected.json").read_text())
    want = load_file(str(d / "expected_hf.safetensors"))
    lg = load_file(str(d / "logits.safetensors"))

    def export(m, out: Path):
        """(tensors, logits diff, from_pretrained's loading info) of `consolidate --map m`, or None."""
        r = dcpctl("consolidate", d / "ckpt", "-o", f"{out}/", "--map", m, "--assets", d / "hf", "--json")
        if not ok(r, f"megatron_mixtral: megatron->hf --map {m}"):
            return None
        mdoc = jdoc(r, "megatron_mixtral: megatron->hf").get("map") or {}
        check(mdoc.get("direction") == "megatron->hf" and mdoc.get("mapped") == len(doc["model_keys"])
              and not mdoc.get("dropped") and not mdoc.get("missing"),
              f"megatron_mixtral: map summary {({k: mdoc.get(k) for k in ('direction', 'mapped', 'dropped', 'missing')})}")
        model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
        diff = logits_diff(model, lg)
        return hf_tensors(out), diff, info

    got = export("megatron-mixtral", work / "mixtral-hf")
    if got is not None:
        tensors, diff, info = got
        same_tensors(tensors, want, "megatron_mixtral: megatron->hf vs the conversion megatron's logits confirm")
        check(not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")),
              f"megatron_mixtral: from_pretrained of the export: {info}")
        hf_loaded(work / "mixtral-hf")
        check(diff <= doc["logits"]["atol"], f"megatron_mixtral: transformers on the export vs megatron's logits: {diff}")
        print(f"megatron_mixtral: MixtralForCausalLM on the export vs megatron's logits: max abs diff {diff:.3g}")
    # the control: the same map with w1 <-> w3 swapped is told apart by the checks above
    wrong = json.loads((MAPS_DIR / "megatron.json").read_text().replace(".w1.", ".w@.").replace(".w3.", ".w1.").replace(".w@.", ".w3."))
    wrong["name"] = "megatron-mixtral-w1-w3"  # the family, its variant chosen by the config's model_type: mixtral
    del wrong["aliases"]
    (work / "mixtral-wrong.json").write_text(json.dumps(wrong))
    bad = export(str(work / "mixtral-wrong.json"), work / "mixtral-wrong-hf")
    if bad is not None:
        moved = [k for k in want if k in bad[0] and not torch.equal(bad[0][k], want[k])]
        check(len(moved) == 2 * doc["dims"]["layers"] * doc["dims"]["experts"] and bad[1] > 1e-3,
              f"megatron_mixtral: a map with w1 <-> w3 swapped: {len(moved)} tensors moved, logits diff {bad[1]} "
              "(want every w1 and w3, and more than 1e-3)")
    back = work / "mixtral-back"
    r = dcpctl("reshard", d / "hf", "-o", back, "-w", "2", "--map", "megatron-mixtral")
    if ok(r, "megatron_mixtral: hf->megatron"):
        got = {k: v for k, v in dcp_oracle.flat_state_from_dcp(back).items() if isinstance(v, torch.Tensor)}
        ref = {k: v for k, v in dcp_oracle.flat_state_from_dcp(d / "ckpt").items() if isinstance(v, torch.Tensor)}
        same_tensors(got, ref, "megatron_mixtral: hf->megatron vs the checkpoint megatron-core wrote")
    # the family takes it by the config's model_type (its mixtral variant), as megatron-mixtral does
    fam = export("megatron", work / "mixtral-family")
    if fam is not None:
        same_tensors(fam[0], want, "megatron_mixtral: megatron->hf --map megatron (the family's mixtral variant)")
    r = dcpctl("reshard", d / "hf", "-o", work / "mixtral-gpt", "-w", "1", "--map", "megatron-gpt")
    check(r.returncode == 5 and "block_sparse_moe" in r.stderr and not (work / "mixtral-gpt").exists()
          and "the built-in maps megatron, megatron-mixtral map every model key of this checkpoint: --map megatron" in r.stderr,
          f"megatron_mixtral: hf->megatron with megatron-gpt: exit {r.returncode} (want 5): {r.stderr.strip()[-300:]!r}")


LINEAR_BIASES = ("self_attention.linear_proj.bias", "mlp.linear_fc1.bias", "mlp.linear_fc2.bias")


def test_megatron_llama_bias(fixtures: Path, work: Path) -> None:
    """megatron-core's linear biases (add_bias_linear=True, megatron's default; megatron_llama_bias: TP2,
    the biases seeded noise; make_megatron_qwen3.py) <-> LlamaForCausalLM with attention_bias and mlp_bias:
    linear_proj.bias = o_proj.bias, linear_fc1.bias = [gate_proj.bias; up_proj.bias], linear_fc2.bias =
    down_proj.bias. The case is map_oracle's (test_export, test_import, ...: the export bit for bit,
    from_pretrained and megatron's logits, the way back to megatron-core's own tensors). Here: the
    export's --json summary maps every model key (the llama_qwen variant); the model schema refuses
    the same tensors under a config without mlp_bias, without attention_bias, and under qwen2 (whose
    o_proj and MLP have no bias), exit 5 naming the unexpected keys, nothing left; controls that the
    checks can fail: the map with fc1's bias halves swapped moves exactly the gate/up biases and the
    logits (more than 1e-3), and the map without the bias rules refuses, exit 5, naming the three
    keys; megatron-gpt-layers writes each layer's biases as the stacked tensor's row."""

    d = fixtures / "layouts" / "megatron_llama_bias"
    doc = json.loads((d / "expected.json").read_text())
    want = load_file(str(d / "expected_hf.safetensors"))
    lg = load_file(str(d / "logits.safetensors"))
    n_layers = doc["dims"]["layers"]
    biases = sorted(k for k in want if k.endswith(("o_proj.bias", "gate_proj.bias", "up_proj.bias", "down_proj.bias")))
    check(len(biases) == 4 * n_layers and all(bool(want[k].ne(0).all()) for k in biases)
          and all(f"decoder.layers.{b}" in doc["model_keys"] for b in LINEAR_BIASES),
          f"megatron_llama_bias: the fixture's linear biases are not all there and non-zero: {biases}")

    def export(m, out: Path, assets: Path):
        r = dcpctl("consolidate", d / "ckpt", "-o", f"{out}/", "--map", m, "--assets", assets, "--json")
        return r

    r = export("megatron-gpt", work / "bias-hf", d / "hf")
    if ok(r, "megatron_llama_bias: megatron->hf"):
        mdoc = jdoc(r, "megatron_llama_bias").get("map") or {}
        check(mdoc.get("direction") == "megatron->hf" and mdoc.get("variant") == "llama_qwen"
              and mdoc.get("mapped") == len(doc["model_keys"]) and not mdoc.get("dropped") and not mdoc.get("missing"),
              f"megatron_llama_bias: map summary {({k: mdoc.get(k) for k in ('direction', 'variant', 'mapped', 'dropped', 'missing')})}")
    # the destination's model schema: a bias key is the config flag's (attention_bias, mlp_bias)
    cfg = json.loads((d / "hf" / "config.json").read_text())
    # (the refusal names each kind's layer-0 key, "and 1 more like it")
    mlp = [f"model.layers.0.mlp.{n}_proj.bias" for n in ("gate", "up", "down")]
    configs = {"without mlp_bias": ({k: v for k, v in cfg.items() if k != "mlp_bias"}, mlp),
               "without attention_bias": ({k: v for k, v in cfg.items() if k != "attention_bias"},
                                          [f"model.layers.0.self_attn.{n}_proj.bias" for n in "qkvo"]),
               "qwen2": ({**{k: v for k, v in cfg.items() if k not in ("attention_bias", "mlp_bias", "head_dim")},
                          "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]},
                         ["model.layers.0.self_attn.o_proj.bias", *mlp])}
    for label, (c, unexpected) in configs.items():
        tag = label.replace(" ", "-")
        assets = work / f"bias-config-{tag}"
        assets.mkdir()
        (assets / "config.json").write_text(json.dumps(c))
        out = work / f"bias-hf-{tag}"
        r = export("megatron-gpt", out, assets)
        check(r.returncode == 5 and "[schema-key-unexpected]" in r.stderr and all(f"key '{k}'" in r.stderr for k in unexpected)
              and not out.exists() and not any("dcpctl-tmp" in p.name for p in out.parent.iterdir()),
              f"megatron_llama_bias: export under a config {label}: exit {r.returncode} (want 5 naming the unexpected "
              f"{unexpected}, nothing written): {r.stderr.strip()[-900:]!r}")
        # a flag config.json leaves out is named as such (the map covers the keys; the config is
        # what disagrees); qwen2 has no o_proj bias under any setting: the map does not cover it
        setting = {"without mlp_bias": "mlp_bias=true", "without attention_bias": "attention_bias=true"}.get(label)
        head = r.stderr.split("\n", 1)[0]
        check(("config.json does not describe this checkpoint" in head and f"only with {setting}:" in head)
              if setting else "does not cover the model its config.json names" in head,
              f"megatron_llama_bias: export under a config {label}: the refusal's first line {head!r}")
    # control: fc1's bias split the wrong way round (up first) is told apart by the tensors and the logits
    fam = json.loads((MAPS_DIR / "megatron.json").read_text())
    del fam["aliases"]
    wrong = copy.deepcopy(fam)
    wrong["name"] = "megatron-bias-gate-up"
    for r_ in wrong["layer_rules"]:
        if r_.get("megatron") == "mlp.linear_fc1.bias":
            r_["hf"] = r_["hf"][::-1]
    (work / "bias-wrong.json").write_text(json.dumps(wrong))
    r = export(str(work / "bias-wrong.json"), work / "bias-wrong-hf", d / "hf")
    if ok(r, "megatron_llama_bias: the gate/up-swapped map"):
        moved, diff = moved_and_logits(work / "bias-wrong-hf", want, lg)
        check(moved == sorted(k for k in want if k.endswith(("gate_proj.bias", "up_proj.bias"))) and diff > 1e-3,
              f"megatron_llama_bias: the map with fc1's bias halves swapped: moved {moved}, logits diff {diff} "
              "(want the gate and up biases, and more than 1e-3)")
        print(f"megatron_llama_bias: fc1's bias halves swapped: logits move by {diff:.3g}")
    # control: the family without the bias rules (the map before them) refuses the checkpoint, naming them
    nobias = copy.deepcopy(fam)
    nobias["name"] = "megatron-no-linear-bias"
    nobias["layer_rules"] = [r_ for r_ in fam["layer_rules"]
                             if not str(r_.get("megatron", "")).startswith(LINEAR_BIASES)]  # fsdp's bias_w / bias_v too
    (work / "no-bias.json").write_text(json.dumps(nobias))
    out = work / "bias-nobias-hf"
    r = export(str(work / "no-bias.json"), out, d / "hf")
    check(r.returncode == 5 and all(f"decoder.layers.{b}" in r.stderr for b in LINEAR_BIASES) and not out.exists(),
          f"megatron_llama_bias: the map without the bias rules: exit {r.returncode} (want 5 naming the three biases): "
          f"{r.stderr.strip()[-400:]!r}")
    # HF -> Megatron keyed per layer: each layer's bias is the stacked tensor's row
    r = dcpctl("reshard", d / "hf", "-o", work / "bias-layers", "-w", "2", "--map", "megatron-gpt-layers")
    if ok(r, "megatron_llama_bias: hf->megatron-gpt-layers"):
        got = dcp_oracle.flat_state_from_dcp(work / "bias-layers")
        ref = dcp_oracle.flat_state_from_dcp(d / "ckpt")
        for b in LINEAR_BIASES:
            for i in range(n_layers):
                k = f"decoder.layers.{i}.{b}"
                check(k in got and torch.equal(got[k], ref[f"decoder.layers.{b}"][i]),
                      f"megatron_llama_bias: hf->megatron-gpt-layers: {k} is not the checkpoint's row {i}")


def test_megatron_fsdp(fixtures: Path, work: Path) -> None:
    """Issue 50 item 2: Megatron-FSDP's fsdp_dtensor checkpoint (run_megatron_fsdp: Megatron-LM's own
    save_checkpoint, keys `model.module.decoder.layers.<i>.*`, SwiGLU fc1 as weight_w / weight_v, the
    optimizer under `optimizer.state.module.module.module.*`) to Hugging Face through megatron-gpt, the
    config.json given with --assets (megatron_fsdp_hf/: transformers' LlamaConfig of the model): equal to the
    conversion whose transformers logits equal megatron's own forward (make_megatron_fsdp_hf.py), loaded by
    from_pretrained with no missing or unexpected key, its logits megatron's; the optimizer, rng and args left
    out; without a config.json the map asks for it (exit 2)."""
    from transformers import AutoModelForCausalLM

    d = fixtures / "layouts" / "megatron_fsdp_hf"
    ckpt = fixtures / "layouts" / "run_megatron_fsdp" / "run" / "iter_0000002"
    doc = json.loads((d / "expected.json").read_text())
    out = work / "fsdp-hf"
    r = dcpctl("consolidate", ckpt, "-o", f"{out}/", "--map", "megatron-gpt", "--assets", d, "--json")
    if not ok(r, "fsdp_dtensor->hf"):
        return
    mdoc = jdoc(r, "fsdp_dtensor->hf").get("map") or {}
    check(mdoc.get("direction") == "megatron->hf" and mdoc.get("mapped") == len(doc["model_keys"]) and not mdoc.get("dropped")
          and not mdoc.get("missing") and not [k for k in mdoc.get("left_out", []) if k.startswith("model.module.")],
          f"fsdp_dtensor->hf: map summary {({k: mdoc.get(k) for k in ('direction', 'mapped', 'dropped', 'missing')})}")
    check(any(k.startswith("optimizer.state.") for k in mdoc.get("left_out", [])), "fsdp_dtensor->hf: the optimizer state is not listed as left out")
    same_tensors(hf_tensors(out), load_file(str(d / "expected_hf.safetensors")), "fsdp_dtensor->hf vs the conversion megatron's logits confirm")
    model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
    check(not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), f"fsdp_dtensor->hf: from_pretrained: {info}")
    hf_loaded(out)
    lg = load_file(str(d / "logits.safetensors"))
    diff = logits_diff(model, lg)
    check(diff <= doc["logits"]["atol"], f"fsdp_dtensor->hf: transformers' logits vs megatron's: {diff}")
    r = dcpctl("consolidate", ckpt, "-o", work / "fsdp-noconfig.safetensors", "--map", "megatron-gpt", "--no-assets")
    check(r.returncode == EXIT_USAGE and "config.json" in r.stderr and "n_kv_heads" in r.stderr,
          f"fsdp_dtensor->hf without a config.json: exit {r.returncode} (want 2, asking for it): {r.stderr.strip()[-300:]!r}")


def test_megatron_fsdp_bias(fixtures: Path, work: Path) -> None:
    """Megatron-FSDP with every linear bias (run_megatron_fsdp_bias: Megatron-LM's own training loop
    and save_checkpoint in fsdp_dtensor, add_bias_linear and --add-qkv-bias, one AdamW step so each
    bias is non-zero; make_megatron_fsdp.py) to Hugging Face through megatron-gpt, the config.json of
    megatron_fsdp_bias_hf/ (LlamaConfig with attention_bias and mlp_bias; make_megatron_fsdp_hf.py):
    linear_qkv.bias = q/k/v_proj.bias grouped per query group (the fsdp prefix of the shared rule),
    linear_proj.bias = o_proj.bias, linear_fc1.bias_w / bias_v (Megatron-FSDP's SwiGLU split) =
    gate_proj.bias / up_proj.bias, linear_fc2.bias = down_proj.bias. Every model key mapped, the
    tensors the oracle's bit for bit, from_pretrained with no missing or unexpected key, its logits
    megatron's own; under a config.json without mlp_bias (or attention_bias) exit 5 naming the bias
    keys, nothing written, and under qwen2 exit 5 naming the o_proj and MLP biases (not the q/k/v
    biases Qwen2 has); control: the map with bias_w / bias_v swapped moves exactly the gate and up
    biases and the logits."""
    from transformers import AutoModelForCausalLM

    d = fixtures / "layouts" / "megatron_fsdp_bias_hf"
    ckpt = fixtures / "layouts" / "run_megatron_fsdp_bias" / "run" / "iter_0000001"
    doc = json.loads((d / "expected.json").read_text())
    want = load_file(str(d / "expected_hf.safetensors"))
    lg = load_file(str(d / "logits.safetensors"))
    biases = sorted(k for k in want if k.endswith(".bias"))
    check(len(biases) == 7 * doc["dims"]["layers"] and all(bool(want[k].ne(0).any()) for k in biases)
          and all(f"model.module.decoder.layers.0.{b}" in doc["model_keys"]
                  for b in ("self_attention.linear_qkv.bias", "self_attention.linear_proj.bias", "mlp.linear_fc1.bias_w",
                            "mlp.linear_fc1.bias_v", "mlp.linear_fc2.bias")),
          f"megatron_fsdp_bias: the fixture's linear biases are not all there and non-zero: {biases}")

    def export(m, out: Path, assets: Path):
        return dcpctl("consolidate", ckpt, "-o", f"{out}/", "--map", m, "--assets", assets, "--json")

    out = work / "fsdp-bias-hf"
    r = export("megatron-gpt", out, d)
    if ok(r, "fsdp_dtensor bias->hf"):
        mdoc = jdoc(r, "fsdp_dtensor bias->hf").get("map") or {}
        check(mdoc.get("direction") == "megatron->hf" and mdoc.get("variant") == "llama_qwen"
              and mdoc.get("mapped") == len(doc["model_keys"]) and not mdoc.get("dropped") and not mdoc.get("missing")
              and not [k for k in mdoc.get("left_out", []) if k.startswith("model.module.")],
              f"fsdp_dtensor bias->hf: map summary {({k: mdoc.get(k) for k in ('direction', 'variant', 'mapped', 'dropped', 'missing')})}")
        same_tensors(hf_tensors(out), want, "fsdp_dtensor bias->hf vs the conversion megatron's logits confirm")
        model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
        check(not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")),
              f"fsdp_dtensor bias->hf: from_pretrained: {info}")
        hf_loaded(out)
        diff = logits_diff(model, lg)
        check(diff <= doc["logits"]["atol"], f"fsdp_dtensor bias->hf: transformers' logits vs megatron's: {diff}")
        print(f"megatron_fsdp_bias: transformers' logits vs megatron's: {diff:.3g}")
    # a config.json without the bias settings: the model schema refuses the bias keys, nothing written
    cfg = json.loads((d / "config.json").read_text())
    for flag, names in (("mlp_bias", [f"model.layers.0.mlp.{n}_proj.bias" for n in ("gate", "up", "down")]),
                        ("attention_bias", [f"model.layers.0.self_attn.{n}_proj.bias" for n in "qkvo"])):
        assets = work / f"fsdp-bias-no-{flag}"
        assets.mkdir()
        (assets / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != flag}))
        out = work / f"fsdp-bias-hf-no-{flag}"
        r = export("megatron-gpt", out, assets)
        head = r.stderr.split("\n", 1)[0]
        check(r.returncode == 5 and "[schema-key-unexpected]" in r.stderr and all(f"key '{k}'" in r.stderr for k in names)
              and "config.json does not describe this checkpoint" in head and f"only with {flag}=true:" in head
              and not out.exists() and not any("dcpctl-tmp" in p.name for p in out.parent.iterdir()),
              f"fsdp_dtensor bias->hf under a config without {flag}: exit {r.returncode} (want 5 naming {names}, "
              f"nothing written): {r.stderr.strip()[-900:]!r}")
    # Qwen2 has q/k/v biases but no o_proj or MLP bias: those are refused, the qkv bias is not named
    assets = work / "fsdp-bias-qwen2"
    assets.mkdir()
    (assets / "config.json").write_text(json.dumps({**{k: v for k, v in cfg.items() if k not in ("attention_bias", "mlp_bias", "head_dim")},
                                                    "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    out = work / "fsdp-bias-hf-qwen2"
    r = export("megatron-gpt", out, assets)
    refused = ["model.layers.0.self_attn.o_proj.bias", *[f"model.layers.0.mlp.{n}_proj.bias" for n in ("gate", "up", "down")]]
    check(r.returncode == 5 and all(f"key '{k}'" in r.stderr for k in refused) and "q_proj.bias" not in r.stderr
          and "v_proj.bias" not in r.stderr and not out.exists(),
          f"fsdp_dtensor bias->hf under qwen2: exit {r.returncode} (want 5 naming {refused}, not the q/k/v biases "
          f"Qwen2 has): {r.stderr.strip()[-900:]!r}")
    # control: Megatron-FSDP's fc1 bias halves the wrong way round are told apart by tensors and logits
    fam = json.loads((MAPS_DIR / "megatron.json").read_text())
    del fam["aliases"]
    fam["name"] = "megatron-fsdp-bias-swapped"
    for r_ in fam["layer_rules"]:
        if r_.get("megatron") in ("mlp.linear_fc1.bias_w", "mlp.linear_fc1.bias_v"):
            r_["hf"] = {"mlp.gate_proj.bias": "mlp.up_proj.bias", "mlp.up_proj.bias": "mlp.gate_proj.bias"}[r_["hf"]]
    (work / "fsdp-bias-swapped.json").write_text(json.dumps(fam))
    out = work / "fsdp-bias-swapped-hf"
    r = export(str(work / "fsdp-bias-swapped.json"), out, d)
    if ok(r, "fsdp_dtensor bias->hf, bias_w / bias_v swapped"):
        moved, diff = moved_and_logits(out, want, lg)
        check(moved == sorted(k for k in want if k.endswith(("gate_proj.bias", "up_proj.bias"))) and diff > 1e-4,
              f"megatron_fsdp_bias: the map with bias_w / bias_v swapped: moved {moved}, logits diff {diff} "
              "(want the gate and up biases, and more than 1e-4)")
        print(f"megatron_fsdp_bias: bias_w / bias_v swapped: logits move by {diff:.3g}")


def test_megatron_fsdp_qk(fixtures: Path, work: Path) -> None:
    """Megatron-FSDP with Qwen3's q/k norms (run_megatron_fsdp_qk: Megatron-LM's own training loop and
    save_checkpoint in fsdp_dtensor with --qk-layernorm, one AdamW step so the norms are off their
    ones; make_megatron_fsdp.py) to Hugging Face through megatron-gpt under megatron_fsdp_qk_hf/'s
    Qwen3Config (make_megatron_fsdp_hf.py): model.module.decoder.layers.<i>.self_attention.q_layernorm /
    k_layernorm = self_attn.q_norm / k_norm (the shared rules' fsdp prefix). Every model key mapped,
    the tensors the oracle's bit for bit, from_pretrained with no missing or unexpected key, its logits
    megatron's own; control: the map with the two norms swapped moves exactly them and the logits."""
    from transformers import AutoModelForCausalLM

    d = fixtures / "layouts" / "megatron_fsdp_qk_hf"
    ckpt = fixtures / "layouts" / "run_megatron_fsdp_qk" / "run" / "iter_0000001"
    doc = json.loads((d / "expected.json").read_text())
    want = load_file(str(d / "expected_hf.safetensors"))
    lg = load_file(str(d / "logits.safetensors"))
    norms = sorted(k for k in want if k.endswith(("q_norm.weight", "k_norm.weight")))
    check(len(norms) == 2 * doc["dims"]["layers"] and all(bool(want[k].ne(1).any()) for k in norms),
          f"megatron_fsdp_qk: the fixture's q/k norms are not all there and trained: {norms}")

    def export(m, out: Path):
        return dcpctl("consolidate", ckpt, "-o", f"{out}/", "--map", m, "--assets", d, "--json")

    out = work / "fsdp-qk-hf"
    r = export("megatron-gpt", out)
    if ok(r, "fsdp_dtensor qk->hf"):
        mdoc = jdoc(r, "fsdp_dtensor qk->hf").get("map") or {}
        check(mdoc.get("direction") == "megatron->hf" and mdoc.get("variant") == "llama_qwen"
              and mdoc.get("mapped") == len(doc["model_keys"]) and not mdoc.get("dropped") and not mdoc.get("missing"),
              f"fsdp_dtensor qk->hf: map summary {({k: mdoc.get(k) for k in ('direction', 'variant', 'mapped', 'dropped', 'missing')})}")
        same_tensors(hf_tensors(out), want, "fsdp_dtensor qk->hf vs the conversion megatron's logits confirm")
        model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
        check(not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")),
              f"fsdp_dtensor qk->hf: from_pretrained: {info}")
        hf_loaded(out)
        diff = logits_diff(model, lg)
        check(diff <= doc["logits"]["atol"], f"fsdp_dtensor qk->hf: transformers' logits vs megatron's: {diff}")
        print(f"megatron_fsdp_qk: transformers' logits vs megatron's: {diff:.3g}")
    # control: q_layernorm and k_layernorm the wrong way round are told apart by tensors and logits
    fam = json.loads((MAPS_DIR / "megatron.json").read_text())
    del fam["aliases"]
    fam["name"] = "megatron-fsdp-qk-swapped"
    for r_ in fam["layer_rules"]:
        if r_.get("megatron") in ("self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight") and \
                r_.get("hf") in ("self_attn.q_norm.weight", "self_attn.k_norm.weight"):
            r_["hf"] = {"self_attn.q_norm.weight": "self_attn.k_norm.weight", "self_attn.k_norm.weight": "self_attn.q_norm.weight"}[r_["hf"]]
    (work / "fsdp-qk-swapped.json").write_text(json.dumps(fam))
    out = work / "fsdp-qk-swapped-hf"
    r = export(str(work / "fsdp-qk-swapped.json"), out)
    if ok(r, "fsdp_dtensor qk->hf, q/k norms swapped"):
        moved, diff = moved_and_logits(out, want, lg)
        check(moved == norms and diff > 1e-4,
              f"megatron_fsdp_qk: the map with the q/k norms swapped: moved {moved}, logits diff {diff} "
              "(want the q and k norms, and more than 1e-4)")
        print(f"megatron_fsdp_qk: q/k norms swapped: logits move by {diff:.3g}")


def test_megatron_layers_map() -> None:
    """One megatron family (src/maps/megatron.json, dcpctl-map/2): megatron-gpt, megatron-gpt-layers and
    megatron-mixtral are its aliases, not copies. megatron-gpt-layers is megatron-gpt's per-layer
    rules (decoder.layers.{L}.*) and nothing else of the layers; megatron-mixtral's MoE rules are the
    family's mixtral variant."""
    check(not any((MAPS_DIR / f"{n}.json").exists() for n in ("megatron-gpt", "megatron-gpt-layers", "megatron-mixtral")),
          "src/maps still has a copy of a megatron map")
    gpt = mr.concrete(mr.load_map("megatron-gpt"), {"model_type": "qwen3_moe"})
    layers = mr.concrete(mr.load_map("megatron-gpt-layers"), {"model_type": "qwen3_moe"})
    per = [r for r in gpt["rules"] if str(r.get("megatron", "")).startswith("decoder.layers.{L}.")]
    check(per and per == [r for r in layers["rules"] if str(r.get("megatron", "")).startswith("decoder.layers.")],
          "megatron-gpt-layers' per-layer rules differ from megatron-gpt's")
    check(all(r in gpt["rules"] for r in layers["rules"]), "megatron-gpt-layers has a rule megatron-gpt lacks")
    mix = mr.concrete(mr.load_map("megatron"), {"model_type": "mixtral"})
    check(mix.get("variant") == "mixtral" and any("block_sparse_moe.gate" in str(r.get("hf")) for r in mix["rules"])
          and not any("mlp.gate.weight" in str(r.get("hf")) for r in mix["rules"]),
          f"the family's mixtral variant: {mix.get('variant')}")


def main() -> int:
    global DCPCTL
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    DCPCTL = sys.argv[1]
    fixtures = Path(sys.argv[2]).resolve()
    with tempfile.TemporaryDirectory(prefix="dcpctl-maps-") as tmp:
        work = Path(tmp)
        steps = [("maps listing", test_maps_listing), ("config aliases", lambda: test_config_aliases(work)),
                 ("megatron qwen3", lambda: test_megatron_qwen3(fixtures, work)),
                 ("megatron mixtral", lambda: test_megatron_mixtral(fixtures, work)),
                 ("megatron linear biases", lambda: test_megatron_llama_bias(fixtures, work)),
                 ("megatron glm", lambda: test_megatron_glm(fixtures, work)),
                 ("megatron glm without expert bias", lambda: test_megatron_glm_no_expert_bias(fixtures, work)),
                 ("megatron deepseek", lambda: test_megatron_deepseek(fixtures, work)),
                 ("drop by value", lambda: test_drop_by_value(fixtures, work)),
                 ("megatron-fsdp", lambda: test_megatron_fsdp(fixtures, work)),
                 ("megatron-fsdp biases", lambda: test_megatron_fsdp_bias(fixtures, work)),
                 ("megatron-fsdp q/k norms", lambda: test_megatron_fsdp_qk(fixtures, work)),
                 ("megatron-gpt-layers", test_megatron_layers_map),
                 ("maps the wrong way round", lambda: test_wrong_way(fixtures, work))]
        for case in mo.cases(fixtures):
            steps.append((f"{case.name} export", lambda c=case: test_export(c, work)))
            steps.append((f"{case.name} file/options", lambda c=case: test_file_and_options(c, work)))

            def imp(c=case):
                dcp, _ = test_import(c, work)
                if dcp is not None:
                    test_cast_diff_stats(c, work, dcp)

            steps.append((f"{case.name} import", imp))
            if case.mtp_hf_keys:
                steps.append((f"{case.name} import MTP", lambda c=case: test_import_mtp(c, work)))
            if case.family == "llama3" or case.kind == "megatron":
                steps.append((f"{case.name} config lookup", lambda c=case: test_config_lookup(c, work)))
                steps.append((f"{case.name} refusals", lambda c=case: test_refusals(c, work, fixtures)))
            if case.map == "torchtitan-qwen3":
                steps.append((f"{case.name} --config folder, verify", lambda c=case: test_config_folder_verify(c, work)))
            if case.family == "qwen3_5":
                steps.append((f"{case.name} composite config", lambda c=case: test_composite_config(c, work)))
            if case.name == "titan_llama3":
                steps.append((f"{case.name} torchrun", lambda c=case: test_torchrun(c, work)))
        for label, fn in steps:
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                import traceback

                traceback.print_exc()
                check(False, f"{label}: {type(e).__name__}: {e}")
    return summary("maps_test")


if __name__ == "__main__":
    sys.exit(main())
