#!/usr/bin/env python3
"""The precision policy of --dtype (plan/precision.h), checked by transformers 5.24 itself.

    precision_test.py DCPCTL FIXTURES

Fixtures (tests/fixtures/layouts): titan_deepseek_v3/hf (a float32 DeepseekV3ForCausalLM saved by
transformers, its router's `mlp.gate.e_score_correction_bias` among the keys), its torchtitan DCP
run (titan_deepseek_v3/run/step-2, `moe.expert_bias_E`), and hf_fp8_deepseek/ckpt (the same model
quantized to FP8 blocks by transformers).

Checked:
  - `consolidate hf/ -o OUT/ --dtype bf16`: every tensor equal, dtype and bits, to what transformers
    writes when it loads the float32 folder in bfloat16 and saves it (from_pretrained(dtype=bfloat16)
    then save_pretrained: the peers' way), so the bias stays float32 bit for bit; the keys --json
    lists as kept (each with its reason: the model schema's, src/check/hf_schema.json) are exactly those transformers' own
    `_keep_in_fp32_modules_strict` matches in the model's parameter names (re.search, as its
    loader does); config.json says bfloat16; from_pretrained(OUT, dtype="auto") builds a bfloat16
    model with no missing or unexpected keys whose bias is float32 and the source's bits; the
    summary on stderr names the kept key and the reason;
  - `--cast-all`: the bias is cast to bfloat16 and --json and stderr list it as cast despite the
    policy; `--keep-dtype GLOB` keeps more; `--dtype fp32` keeps nothing (nothing narrows);
  - `--keep-dtype model.norm.*` to a sharded DIR/: every shard's __metadata__ records the globs
    (`dcpctl.keep_dtype`, read by safetensors' safe_open), `verify OUT/` exits 0 with the warning
    dtype-kept-by-user naming the key and the glob (exit 3 [dtype-mismatch] before), from_pretrained
    loads it (the norm cast to bfloat16, as the warning says); the same folder with the entry removed
    by hand is exit 3 [dtype-mismatch]; a garbled, oversized or over-long entry is ignored with
    keep-dtype-entry-invalid (exit 3 [dtype-mismatch]); no --keep-dtype, `{"format": "pt"}` alone; an
    upcast (`--dtype fp32`) keeping a bf16 norm verifies with the warning too;
  - the FP8 folder dequantized with `--dtype bf16`: the bias float32, config.json bfloat16 without
    quantization_config, loaded by from_pretrained(dtype="auto") with the bias float32;
  - reshard (HF folder to DCP) and cast (the torchtitan DCP, no --map: the built-in map's
    keep_dtype declaration keeps `expert_bias_E`), read back by torch's DCP reader; consolidate of
    the torchtitan DCP with --map torchtitan-deepseek-v3: HF names, the bias float32;
  - a folder saved in bfloat16 (GPT-OSS, cast to fp16; the DeepSeek-V3 folder re-saved in bf16, cast to
    bf16): what transformers keeps in float32 is upcast to float32, tensor for tensor transformers'
    own from_pretrained(dtype=...) + save_pretrained, --json listing each as kept in float32;
  - refusals (exit 2, nothing written): --keep-dtype or --cast-all without --dtype, both together;
  - a model_type the schema lacks: the fixture's tensors (transformers' DeepseekV3 save_pretrained)
    under Kimi-K2's config (model_type kimi_k2, remote code, architectures DeepseekV3ForCausalLM):
    `--dtype bf16 -o DIR/` gets deepseek_v3's schema by the class (tensor for tensor transformers'
    own bf16 round trip, the bias float32; --json `cast.policy.schema.found_by` architectures, the
    summary says so), verify checks its keys against that schema; a config whose model_type and
    class are both unknown is refused, exit 5, nothing written, naming the type, --keep-dtype and
    --cast-all, and either option ends the refusal; a .safetensors output (no config.json of its
    own) is written, its policy saying why no schema decided;
  - LFM2-MoE (its class defaults leave layer_types null; the schema completes them): `--dtype bf16
    -o DIR/` equals transformers' own bf16 round trip, its router expert_bias float32 by the schema's
    policy (no list names it); a type the schema could not build (perception_lm) and no class of
    which declares a keep-in-float32 list is refused, exit 5, naming it, nothing written;
  - Pop2Piano (the schema's "skipped", its classes' _keep_in_fp32_modules `wo`): `--dtype fp16 -o
    DIR/` is not refused; it equals transformers' own fp16 round trip, schema_why saying no schema
    decided.

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure under CI).
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from testlib import EXIT_USAGE, check, expect_rc, hf_loaded, run, same_tensor, summary  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

BIAS = "e_score_correction_bias"


def folder_tensors(d: Path) -> dict:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def dcp_tensors(d: Path) -> dict:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    sd: dict = {}
    _load_state_dict(sd, storage_reader=dcp.FileSystemReader(str(d)), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    return sd


def jdoc(r, what: str) -> dict:
    try:
        return json.loads(r.stdout)
    except ValueError:
        check(False, f"{what}: --json is not JSON: {r.stdout[-300:]!r}")
        return {}


def rewrite_metadata(folder: Path, edit) -> None:
    """Rewrites each .safetensors header of `folder` by hand with edit(metadata) as its __metadata__
    (the tensors' bytes as they were), and drops dcpctl's manifest, which digests the old bytes."""
    import struct
    for f in sorted(folder.glob("*.safetensors")):
        raw = f.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        header["__metadata__"] = edit(dict(header.get("__metadata__", {})))
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        f.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    (folder / "dcpctl-manifest.json").unlink(missing_ok=True)

def transformers_kept(model, keys) -> set:
    """The keys transformers keeps in float32 when it loads `model`'s class in bfloat16: its
    _keep_in_fp32_modules_strict searched in each name, as core_model_loading's dtype plan does."""
    pats = set(model._keep_in_fp32_modules_strict or [])
    alt = re.compile("|".join(p.replace("*", ".*") for p in pats)) if pats else None
    return {k for k in keys if alt is not None and alt.search(k)}


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    layouts = fixtures / "layouts"
    hf = layouts / "titan_deepseek_v3" / "hf"
    run_dcp = layouts / "titan_deepseek_v3" / "run" / "step-2"
    fp8 = layouts / "hf_fp8_deepseek" / "ckpt"
    from transformers import AutoModelForCausalLM

    src = folder_tensors(hf)
    biases = sorted(k for k in src if k.endswith(BIAS))
    check(biases and all(src[k].dtype == torch.float32 for k in biases), f"the fixture holds float32 router biases: {biases}")

    with tempfile.TemporaryDirectory(prefix="dcpctl-precision-") as t:
        tmp = Path(t)

        # ---- the peers' way: transformers loads the float32 folder in bf16 and saves it ----
        peer = tmp / "peer"
        model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.bfloat16)
        model.save_pretrained(peer)
        want = folder_tensors(peer)
        kept_by_transformers = transformers_kept(model, src.keys())
        # transformers 5.24 keeps the router's bias and, new in 5.24, its weight (mlp.gate.weight:
        # _keep_in_fp32_modules_strict gained gate.weight; 5.23 cast it).
        gates = sorted(k for k in src if k.endswith(".mlp.gate.weight"))
        kept_all = sorted(set(biases) | set(gates))
        check(gates and kept_by_transformers == set(kept_all),
              f"transformers keeps {sorted(kept_by_transformers)} (want the router biases and weights {kept_all})")
        check(all(want[k].dtype == torch.float32 for k in kept_all), "transformers' bf16 save keeps the router float32")
        del model

        # ---- consolidate --dtype bf16 to an HF folder ----
        out = tmp / "bf16"
        r = run(dcpctl, "consolidate", hf, "-o", f"{out}/", "--dtype", "bf16", "--json")
        if expect_rc(r, 0, "consolidate hf/ -o OUT/ --dtype bf16 --json"):
            got = folder_tensors(out)
            check(sorted(got) == sorted(want), f"keys differ from transformers' save: {sorted(set(got) ^ set(want))}")
            bad = {k: d for k in want if k in got and (d := same_tensor(got[k], want[k]))}
            check(not bad, f"--dtype bf16 differs from transformers' from_pretrained(bf16) + save_pretrained: {dict(list(bad.items())[:3])}")
            for k in biases:
                check(got[k].dtype == torch.float32 and same_tensor(got[k], src[k]) is None, f"{k}: float32, the source's bits")
            cast = jdoc(r, "consolidate --json").get("cast", {})
            kept = {k["key"]: k for k in cast.get("kept", [])}
            check(set(kept) == kept_by_transformers, f"--json kept {sorted(kept)}; transformers keeps {sorted(kept_by_transformers)}")
            check(all(k["dtype"] == "float32" and "transformers 5.24.0 DeepseekV3ForCausalLM (model_type deepseek_v3) keeps "
                      + re.sub(r"\.\d+\.", ".#.", key) + " in float32 when it loads in bfloat16 (model schema)"
                      in k["reason"] for key, k in kept.items()), f"--json kept: dtype and reason: {list(kept.values())[:2]}")
            check(cast.get("tensors") == len(src) - len(kept_all) and cast.get("cast_anyway") == [],
                  f"--json cast: {cast.get('tensors')} cast (want {len(src) - len(kept_all)}), cast_anyway {cast.get('cast_anyway')}")
            pol = cast.get("policy") or {}
            check(pol.get("model_types") == ["deepseek_v3"] and pol.get("transformers") == "5.24.0"
                  and (pol.get("schema") or {}).get("class") == "DeepseekV3ForCausalLM"
                  and str(pol.get("config", "")).endswith("config.json"), f"--json policy: {pol}")
            cfg = json.loads((out / "config.json").read_text())
            check(cfg.get("dtype") == "bfloat16", f"config.json dtype: {cfg.get('dtype')} (want bfloat16)")
            loaded, info = AutoModelForCausalLM.from_pretrained(out, dtype="auto", output_loading_info=True)
            check(not info["missing_keys"] and not info["unexpected_keys"], f"from_pretrained(OUT): {info}")
            hf_loaded(out)
            check(loaded.dtype == torch.bfloat16, f"from_pretrained(dtype='auto'): a {loaded.dtype} model (want bfloat16)")
            params = dict(loaded.named_parameters()) | dict(loaded.named_buffers())
            for k in biases:
                p = params.get(k)
                check(p is not None and p.dtype == torch.float32 and same_tensor(p.detach(), src[k]) is None,
                      f"from_pretrained: {k} is {None if p is None else p.dtype}, the source's float32 bits")
            del loaded

        # The human summary names the kept key and why.
        r = run(dcpctl, "consolidate", hf, "-o", f"{tmp / 'bf16-text'}/", "--dtype", "bf16")
        if expect_rc(r, 0, "consolidate --dtype bf16 (summary)"):
            check(f"kept {len(kept_all)} tensor(s) in their saved dtype" in r.stderr and f"{biases[0]}  float32" in r.stderr
                  and "keeps model.layers.#.mlp.gate.e_score_correction_bias in float32 when it loads in bfloat16 (model schema)"
                  in r.stderr, f"stderr: {r.stderr!r}")

        # ---- --cast-all, --keep-dtype, --dtype fp32 ----
        r = run(dcpctl, "consolidate", hf, "-o", f"{tmp / 'all'}/", "--dtype", "bf16", "--cast-all", "--json")
        if expect_rc(r, 0, "--cast-all"):
            got = folder_tensors(tmp / "all")
            check(all(same_tensor(got[k], src[k].to(torch.bfloat16)) is None for k in biases), "--cast-all: the bias is cast to bfloat16")
            cast = jdoc(r, "--cast-all --json").get("cast", {})
            check(sorted(k["key"] for k in cast.get("cast_anyway", [])) == kept_all and cast.get("kept") == [],
                  f"--cast-all --json: cast_anyway {cast.get('cast_anyway')}, kept {cast.get('kept')}")
        r = run(dcpctl, "consolidate", hf, "-o", tmp / "all.safetensors", "--dtype", "bf16", "--cast-all")
        if expect_rc(r, 0, "--cast-all (summary)"):
            check("that the precision policy keeps in their dtype, as --cast-all asks" in r.stderr and biases[0] in r.stderr,
                  f"--cast-all stderr: {r.stderr!r}")
        r = run(dcpctl, "consolidate", hf, "-o", tmp / "keep.safetensors", "--dtype", "bf16", "--keep-dtype", "model.norm.*", "--json")
        if expect_rc(r, 0, "--keep-dtype model.norm.*"):
            got = load_file(tmp / "keep.safetensors")
            check(got["model.norm.weight"].dtype == torch.float32 and all(got[k].dtype == torch.float32 for k in biases)
                  and got["model.embed_tokens.weight"].dtype == torch.bfloat16, "--keep-dtype keeps model.norm.weight and the biases")
            reasons = {k["key"]: k["reason"] for k in jdoc(r, "--keep-dtype --json").get("cast", {}).get("kept", [])}
            check(reasons.get("model.norm.weight") == "--keep-dtype 'model.norm.*'", f"--keep-dtype reason: {reasons}")

        # ---- --keep-dtype to a DIR/: each file's __metadata__ records the globs ("dcpctl.keep_dtype"), so a
        # later `verify OUT/` accepts what the user kept as the export's own check did: a warning
        # (dtype-kept-by-user, naming the key and the glob), exit 0. Before, that verify was exit 3
        # [dtype-mismatch] on the tool's own export. The same folder without the entry is that mismatch
        # again: the entry decides. A garbled entry is ignored with a warning.
        out_kd = tmp / "keep-dir"
        r = run(dcpctl, "consolidate", hf, "-o", f"{out_kd}/", "--dtype", "bf16", "--keep-dtype", "model.norm.*",
                "--keep-dtype", "*.no_such_tensor", "--max-shard-size", "8000")
        if expect_rc(r, 0, "consolidate -o DIR/ --dtype bf16 --keep-dtype model.norm.*"):
            from safetensors import safe_open
            shards = sorted(out_kd.glob("*.safetensors"))
            got = {}
            for f in shards:
                with safe_open(f, "pt") as so:
                    check(so.metadata() == {"format": "pt", "dcpctl.keep_dtype": '["model.norm.*","*.no_such_tensor"]'},
                          f"{f.name}: __metadata__ {so.metadata()}")
                    got.update({k: so.get_tensor(k) for k in so.keys()})
            check(len(shards) > 1 and sorted(got) == sorted(src), f"safe_open: {len(shards)} shards, keys {len(got)} of {len(src)}")
            check(got["model.norm.weight"].dtype == torch.float32 and same_tensor(got["model.norm.weight"], src["model.norm.weight"]) is None
                  and got["model.embed_tokens.weight"].dtype == torch.bfloat16, "--keep-dtype DIR/: model.norm.weight float32, as saved")
            r = run(dcpctl, "verify", out_kd, "--json")
            if expect_rc(r, 0, "verify of the --keep-dtype export"):
                doc = jdoc(r, "verify --keep-dtype export --json")
                kept = [w for w in doc.get("warnings", []) if w.get("code") == "dtype-kept-by-user"]
                check(len(kept) == 1 and kept[0].get("key") == "model.norm.weight"
                      and all(w in kept[0].get("message", "") for w in ("--keep-dtype 'model.norm.*'", "model.norm.weight",
                                                                        "from_pretrained loads them in bfloat16"))
                      and doc.get("problems") == [], f"verify --json: warnings {kept}, problems {doc.get('problems')}")
            expect_rc(run(dcpctl, "verify", out_kd), 0, "verify of the --keep-dtype export (text)", "[dtype-kept-by-user]", "model.norm.weight")
            # transformers reads only `format`, and casts the kept tensor to the config's dtype, as the warning says.
            loaded, info = AutoModelForCausalLM.from_pretrained(out_kd, dtype="auto", output_loading_info=True)
            check(not info["missing_keys"] and not info["unexpected_keys"], f"from_pretrained(--keep-dtype export): {info}")
            check(loaded.dtype == torch.bfloat16 and dict(loaded.named_parameters())["model.norm.weight"].dtype == torch.bfloat16,
                  "from_pretrained(dtype='auto') loads the user-kept norm in bfloat16")
            del loaded
            bare = tmp / "keep-dir-no-entry"
            shutil.copytree(out_kd, bare)
            rewrite_metadata(bare, lambda m: {k: v for k, v in m.items() if k != "dcpctl.keep_dtype"})
            r = run(dcpctl, "verify", bare)
            expect_rc(r, 3, "verify of the export without its dcpctl.keep_dtype entry", "[dtype-mismatch]", "model.norm.weight")
            check("dtype-kept-by-user" not in r.stdout + r.stderr, "no entry, no user-kept warning")
            for bad, what in (("model.norm.*", "not JSON"), ('{"glob": "model.norm.*"}', "not a JSON list"),
                              (json.dumps(["x"] * 5000), "over the 1024"),
                              (json.dumps(["x" * 70000]), "over the 65536")):
                garbled = tmp / "keep-dir-garbled"
                shutil.rmtree(garbled, ignore_errors=True)
                shutil.copytree(out_kd, garbled)
                rewrite_metadata(garbled, lambda m: m | {"dcpctl.keep_dtype": bad})
                expect_rc(run(dcpctl, "verify", garbled), 3, f"verify with a garbled entry ({what})", "[keep-dtype-entry-invalid]",
                          what, "[dtype-mismatch]")
        # Without --keep-dtype the header is today's.
        out_nk = tmp / "no-keep-dir"
        if expect_rc(run(dcpctl, "consolidate", hf, "-o", f"{out_nk}/", "--dtype", "bf16"), 0, "consolidate -o DIR/ --dtype bf16"):
            from safetensors import safe_open
            with safe_open(out_nk / "model.safetensors", "pt") as so:
                check(so.metadata() == {"format": "pt"}, f"no --keep-dtype: __metadata__ {so.metadata()}")
        # Casting up keeps what --keep-dtype names too (a bf16 norm beside a float32 config): recorded alike.
        all_bf16, up = tmp / "all-bf16", tmp / "keep-up"
        if expect_rc(run(dcpctl, "consolidate", hf, "-o", f"{all_bf16}/", "--dtype", "bf16", "--cast-all"), 0, "--cast-all DIR/") and \
                expect_rc(run(dcpctl, "consolidate", all_bf16, "-o", f"{up}/", "--dtype", "fp32", "--keep-dtype", "model.norm.*"),
                          0, "--dtype fp32 --keep-dtype model.norm.*"):
            expect_rc(run(dcpctl, "verify", up), 0, "verify of the upcast --keep-dtype export", "[dtype-kept-by-user]",
                      "bfloat16 but the config's dtype is float32")

        r = run(dcpctl, "consolidate", hf, "-o", tmp / "fp32.safetensors", "--dtype", "fp32", "--json")
        if expect_rc(r, 0, "--dtype fp32"):
            check(jdoc(r, "--dtype fp32").get("cast", {}).get("kept") == [], "--dtype fp32 keeps nothing")

        # ---- the FP8 folder, dequantized to bf16 ----
        out8 = tmp / "fp8-bf16"
        r = run(dcpctl, "consolidate", fp8, "-o", f"{out8}/", "--dtype", "bf16", "--json")
        if expect_rc(r, 0, "consolidate FP8 folder --dtype bf16"):
            got = folder_tensors(out8)
            fp8_src = folder_tensors(fp8)
            for k in biases:
                check(got[k].dtype == torch.float32 and same_tensor(got[k], fp8_src[k]) is None, f"FP8 export: {k} float32, as saved")
            check(got["model.embed_tokens.weight"].dtype == torch.bfloat16, "FP8 export: the rest bfloat16")
            cfg = json.loads((out8 / "config.json").read_text())
            check(cfg.get("dtype") == "bfloat16" and "quantization_config" not in cfg, f"FP8 export config.json: {cfg.get('dtype')}")
            loaded, info = AutoModelForCausalLM.from_pretrained(out8, dtype="auto", output_loading_info=True)
            check(not info["missing_keys"] and not info["unexpected_keys"] and loaded.dtype == torch.bfloat16, f"from_pretrained(FP8 export): {info}")
            hf_loaded(out8)
            params = dict(loaded.named_parameters()) | dict(loaded.named_buffers())
            check(all(params[k].dtype == torch.float32 for k in biases), "from_pretrained(FP8 export): the bias float32")
            del loaded

        # ---- reshard and cast: DCP outputs read back by torch ----
        r = run(dcpctl, "reshard", hf, "-o", tmp / "rs", "--world-size", "2", "--dtype", "bf16")
        if expect_rc(r, 0, "reshard hf/ --world-size 2 --dtype bf16"):
            got = dcp_tensors(tmp / "rs")
            check(all(got[k].dtype == torch.float32 and same_tensor(got[k], src[k]) is None for k in biases), "reshard: the bias float32")
            check(got["model.embed_tokens.weight"].dtype == torch.bfloat16, "reshard: the rest bfloat16")
        titan = dcp_tensors(run_dcp)
        titan_bias = sorted(k for k in titan if k.endswith("expert_bias_E"))
        check(titan_bias and all(titan[k].dtype == torch.float32 for k in titan_bias), f"the torchtitan run holds float32 expert biases: {titan_bias}")
        r = run(dcpctl, "cast", run_dcp, "-o", tmp / "titan-bf16", "--dtype", "bf16", "--json")
        if expect_rc(r, 0, "cast the torchtitan DCP --dtype bf16 (no --map)"):
            got = dcp_tensors(tmp / "titan-bf16")
            check(all(got[k].dtype == torch.float32 and same_tensor(got[k], titan[k]) is None for k in titan_bias),
                  "cast: torchtitan's expert_bias_E stays float32")
            floats = [k for k, v in titan.items() if torch.is_tensor(v) and v.dtype == torch.float32 and k not in titan_bias]
            check(floats and all(got[k].dtype == torch.bfloat16 for k in floats), "cast: the other float32 tensors bfloat16")
            reasons = {k["key"]: k["reason"] for k in jdoc(r, "cast --json").get("cast", {}).get("kept", [])}
            check(sorted(reasons) == titan_bias and all(v.startswith("key map torchtitan-deepseek-v3 rule ") for v in reasons.values()),
                  f"cast --json kept: {reasons}")
        out_t = tmp / "titan-hf"
        r = run(dcpctl, "consolidate", run_dcp, "-o", f"{out_t}/", "--map", "torchtitan-deepseek-v3", "--config",
                layouts / "titan_deepseek_v3" / "config.json", "--dtype", "bf16", "--no-assets")
        if expect_rc(r, 0, "consolidate the torchtitan DCP --map torchtitan-deepseek-v3 --dtype bf16"):
            got = folder_tensors(out_t)
            check(all(got[k].dtype == torch.float32 for k in biases), "--map: the HF bias float32")
            check(got["model.embed_tokens.weight"].dtype == torch.bfloat16, "--map: the rest bfloat16")

        # ---- a model_type the schema lacks: found by its architectures, else refused for DIR/ ----
        def with_config(name: str, **fields) -> Path:
            d = tmp / name
            shutil.copytree(hf, d)
            cfg = json.loads((d / "config.json").read_text())
            cfg.update(fields)
            (d / "config.json").write_text(json.dumps(cfg, indent=2))
            return d
        # Kimi-K2's config.json names its own model_type and remote code, and transformers' class.
        kimi = with_config("kimi", model_type="kimi_k2", architectures=["DeepseekV3ForCausalLM"],
                           auto_map={"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                                     "AutoModel": "modeling_deepseek.DeepseekV3Model",
                                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"})
        out_k = tmp / "kimi-bf16"
        r = run(dcpctl, "consolidate", kimi, "-o", f"{out_k}/", "--dtype", "bf16", "--json")
        if expect_rc(r, 0, "consolidate a kimi_k2 folder --dtype bf16 -o DIR/"):
            got = folder_tensors(out_k)
            bad = {k: d for k in want if k in got and (d := same_tensor(got[k], want[k]))}
            check(sorted(got) == sorted(want) and not bad,
                  f"kimi_k2 --dtype bf16 differs from transformers' DeepseekV3 bf16 round trip: {dict(list(bad.items())[:3])}")
            cast = jdoc(r, "kimi_k2 --json").get("cast", {})
            check(sorted(k["key"] for k in cast.get("kept", [])) == kept_all, f"kimi_k2 kept: {cast.get('kept')}")
            pol = cast.get("policy") or {}
            check(pol.get("schema") == {"model_type": "deepseek_v3", "class": "DeepseekV3ForCausalLM",
                                        "transformers": "5.24.0", "found_by": "architectures"}
                  and pol.get("schema_why") is None and pol.get("model_types") == ["kimi_k2"], f"kimi_k2 policy: {pol}")
        r = run(dcpctl, "consolidate", kimi, "-o", f"{tmp / 'kimi-text'}/", "--dtype", "bf16")
        if expect_rc(r, 0, "consolidate the kimi_k2 folder (summary)"):
            check("precision policy: the model schema of DeepseekV3ForCausalLM (model_type deepseek_v3, transformers "
                  "5.24.0), found by config.json's architectures (its model_type kimi_k2 is not in the schema)" in r.stderr,
                  f"kimi_k2 summary: {r.stderr!r}")
        r = run(dcpctl, "verify", kimi, "--json")
        if expect_rc(r, 0, "verify the kimi_k2 folder"):
            sch = jdoc(r, "verify kimi_k2 --json").get("hf", {}).get("schema", {})
            check(sch.get("checked") is True and sch.get("found_by") == "architectures"
                  and sch.get("schema_model_type") == "deepseek_v3" and sch.get("model_type") == "kimi_k2",
                  f"verify kimi_k2: hf.schema {sch}")
        # Neither the type nor the class is known: an HF folder is refused until the user decides.
        unknown = with_config("unknown", model_type="no_such_moe", architectures=["NoSuchMoeForCausalLM"])
        out_u = tmp / "unknown-bf16"
        r = run(dcpctl, "consolidate", unknown, "-o", f"{out_u}/", "--dtype", "bf16")
        expect_rc(r, 5, "an unknown model_type and class --dtype bf16 -o DIR/", "model_type no_such_moe",
                  "NoSuchMoeForCausalLM", "--keep-dtype", "--cast-all")
        check(not out_u.exists() and not any(tmp.glob("unknown-bf16*")), "the refusal leaves nothing")
        r = run(dcpctl, "consolidate", unknown, "-o", f"{out_u}/", "--dtype", "bf16", "--keep-dtype", f"*{BIAS}", "--json")
        if expect_rc(r, 0, "the unknown model with --keep-dtype"):
            got = folder_tensors(out_u)
            check(all(got[k].dtype == torch.float32 for k in biases) and got["model.embed_tokens.weight"].dtype == torch.bfloat16,
                  "--keep-dtype: the biases float32, the rest bfloat16")
            pol = jdoc(r, "unknown --keep-dtype --json").get("cast", {}).get("policy") or {}
            check(pol.get("schema") is None and "no_such_moe" in str(pol.get("schema_why")), f"unknown policy: {pol}")
        r = run(dcpctl, "consolidate", unknown, "-o", f"{tmp / 'unknown-all'}/", "--dtype", "bf16", "--cast-all")
        if expect_rc(r, 0, "the unknown model with --cast-all"):
            check(all(v.dtype == torch.bfloat16 for v in folder_tensors(tmp / "unknown-all").values()), "--cast-all: all bfloat16")
        r = run(dcpctl, "consolidate", unknown, "-o", tmp / "unknown.safetensors", "--dtype", "bf16", "--json")
        if expect_rc(r, 0, "the unknown model to one .safetensors (no config.json of its own)"):
            pol = jdoc(r, "unknown .safetensors --json").get("cast", {}).get("policy") or {}
            check(pol.get("schema") is None and "no_such_moe" in str(pol.get("schema_why")), f"unknown .safetensors policy: {pol}")

        # ---- LFM2-MoE (LiquidAI's LFM2-8B-A1B), whose class defaults leave layer_types null: the schema
        # holds it since real_config completes them from its conv and attention kinds (before, it was in
        # the schema's "failed" and this export was refused, exit 5). No class of it declares
        # keep-in-float32 modules, yet its router expert_bias is a buffer made float32 that transformers'
        # own bf16 round trip keeps float32: the schema's policy keeps it, so the export equals that round
        # trip with no flag. A type the schema could not build (perception_lm: its timm vision tower's
        # default architecture is no release's), no class of which declares a keep list, is refused.
        from transformers import Lfm2MoeConfig, Lfm2MoeForCausalLM
        torch.manual_seed(0)
        lfm, lfm_ref = tmp / "lfm2_moe", tmp / "lfm2_moe-ref"
        Lfm2MoeForCausalLM(Lfm2MoeConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, num_dense_layers=1,
            layer_types=["conv", "full_attention"],
        )).to(torch.float32).save_pretrained(lfm)
        Lfm2MoeForCausalLM.from_pretrained(lfm, dtype=torch.bfloat16).save_pretrained(lfm_ref)
        want = folder_tensors(lfm_ref)
        check([k for k, v in want.items() if v.dtype == torch.float32] == ["model.layers.1.feed_forward.expert_bias"],
              f"transformers' bf16 round trip of LFM2-MoE keeps its expert_bias float32: "
              f"{ {k: v.dtype for k, v in want.items() if v.dtype != torch.bfloat16} }")
        out_l = tmp / "lfm2_moe-bf16"
        r = run(dcpctl, "consolidate", lfm, "-o", f"{out_l}/", "--dtype", "bf16", "--json")
        if expect_rc(r, 0, "an LFM2-MoE folder --dtype bf16 -o DIR/ (the schema's lfm2_moe)"):
            got = folder_tensors(out_l)
            bad = {k: same_tensor(got.get(k), v) for k, v in want.items() if same_tensor(got.get(k), v)}
            check(set(got) == set(want) and not bad, f"LFM2-MoE --dtype bf16 against transformers' bf16 round trip: {bad}")
            pol = jdoc(r, "lfm2_moe --json").get("cast", {}).get("policy") or {}
            check("lfm2_moe" in json.dumps(pol.get("schema")), f"lfm2_moe policy is the schema's: {pol}")
            # verify of that export, and of transformers' own bf16 folder (its float32 expert_bias beside a
            # bfloat16 config): clean, not dtype-mismatch.
            expect_rc(run(dcpctl, "verify", out_l), 0, "verify of the LFM2-MoE export")
        expect_rc(run(dcpctl, "verify", lfm_ref), 0, "verify of transformers' own bf16 LFM2-MoE folder")
        failed = with_config("perception", model_type="perception_lm",
                             architectures=["PerceptionLMForConditionalGeneration"])
        out_p = tmp / "perception-bf16"
        r = run(dcpctl, "consolidate", failed, "-o", f"{out_p}/", "--dtype", "bf16")
        expect_rc(r, 5, "a perception_lm folder --dtype bf16 -o DIR/ (a type the schema could not build)",
                  "model_type perception_lm", "could not be built", "--keep-dtype", "--cast-all")
        check(not out_p.exists(), "the perception_lm refusal leaves nothing")
        part = with_config("ernie_text", model_type="ernie4_5_vl_moe_text", architectures=["Ernie4_5_VLMoeTextModel"])
        # A part of a composite whose classes keep tensors in float32 (its router's gate.weight): cast by
        # those lists, not refused (it was, exit 5); --dry-run (the folder is another model's, relabelled).
        r = run(dcpctl, "consolidate", part, "-o", f"{tmp / 'ernie_text-bf16'}/", "--dtype", "bf16", "--dry-run", "--json")
        if expect_rc(r, 0, "an ernie4_5_vl_moe_text folder --dtype bf16 -o DIR/ (a part of a composite, keep lists)"):
            pol = jdoc(r, "ernie_text --json").get("cast", {}).get("policy") or {}
            check("ernie4_5_vl_moe_text" in str(pol.get("schema_why")), f"the note says no schema decided: {pol}")

        # ---- Pop2Piano: a type transformers defines whose classes keep tensors in float32 (its T5 `wo`
        # under float16: _keep_in_fp32_modules) but which the schema did not build (its "skipped": no
        # language-model class). It was refused, exit 5; its classes' lists decide now, with a note
        # (schema_why), and `--dtype fp16` equals transformers' own float16 round trip tensor for tensor.
        from transformers import Pop2PianoConfig, Pop2PianoForConditionalGeneration
        torch.manual_seed(0)
        p2p, p2p_ref = tmp / "pop2piano", tmp / "pop2piano-ref"
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            Pop2PianoForConditionalGeneration(Pop2PianoConfig(
                vocab_size=256, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_decoder_layers=2, num_heads=4,
                composer_vocab_size=4)).save_pretrained(p2p)
            Pop2PianoForConditionalGeneration.from_pretrained(p2p, dtype=torch.float16).save_pretrained(p2p_ref)
        want = folder_tensors(p2p_ref)
        check(any(v.dtype == torch.float32 for v in want.values()),
              "transformers' float16 round trip of Pop2Piano keeps its wo float32")
        out_pp = tmp / "pop2piano-fp16"
        r = run(dcpctl, "consolidate", p2p, "-o", f"{out_pp}/", "--dtype", "fp16", "--json")
        if expect_rc(r, 0, "a Pop2Piano folder --dtype fp16 -o DIR/ (a type the schema did not build, with keep lists)"):
            got = folder_tensors(out_pp)
            bad = {k: same_tensor(got.get(k), v) for k, v in want.items() if same_tensor(got.get(k), v)}
            check(set(got) == set(want) and not bad, f"Pop2Piano --dtype fp16 against transformers' fp16 round trip: {bad}")
            pol = jdoc(r, "pop2piano --json").get("cast", {}).get("policy") or {}
            check(pol.get("schema") is None and "pop2piano" in str(pol.get("schema_why")),
                  f"the note says no schema decided: {pol}")

        # ---- a folder saved in bfloat16 (a release's own dtype): what transformers keeps in float32 is
        # upcast, as its from_pretrained(dtype=...) + save_pretrained write it. GPT-OSS's norms under fp16
        # (its _keep_in_fp32_modules): they were written bf16 beside a float16 config, and dcpctl's own
        # post-write check refused the folder, exit 3; DeepSeek-V3's router bias under bf16 stayed bf16.
        from transformers import AutoModelForCausalLM, GptOssConfig, GptOssForCausalLM
        torch.manual_seed(0)
        oss, oss_ref = tmp / "gpt-oss-bf16", tmp / "gpt-oss-ref-fp16"
        GptOssForCausalLM(GptOssConfig(
            vocab_size=64, hidden_size=32, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2,
            layer_types=["sliding_attention", "full_attention"])).to(torch.bfloat16).save_pretrained(oss)
        GptOssForCausalLM.from_pretrained(oss, dtype=torch.float16).save_pretrained(oss_ref)
        ds_bf16, ds_ref = tmp / "deepseek-bf16", tmp / "deepseek-bf16-ref"
        AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).to(torch.bfloat16).save_pretrained(ds_bf16)
        AutoModelForCausalLM.from_pretrained(ds_bf16, dtype=torch.bfloat16).save_pretrained(ds_ref)
        for src_dir, ref_dir, dt, what in ((oss, oss_ref, "fp16", "a bf16 GPT-OSS folder --dtype fp16"),
                                          (ds_bf16, ds_ref, "bf16", "a bf16 DeepSeek-V3 folder --dtype bf16")):
            out_b = tmp / (src_dir.name + "-" + dt)
            r = run(dcpctl, "consolidate", src_dir, "-o", f"{out_b}/", "--dtype", dt, "--json")
            if expect_rc(r, 0, what):
                got, want = folder_tensors(out_b), folder_tensors(ref_dir)
                bad = {k: same_tensor(got.get(k), v) for k, v in want.items() if same_tensor(got.get(k), v)}
                up = sorted(k for k, v in want.items() if v.dtype == torch.float32)
                check(set(got) == set(want) and not bad and up, f"{what} against transformers' round trip: {bad}")
                kept = {k["key"]: k for k in jdoc(r, f"{what} --json").get("cast", {}).get("kept", [])}
                check(sorted(kept) == up and all(k["dtype"] == "float32" and "saved bfloat16" in k["reason"] for k in kept.values()),
                      f"{what}: --json kept {kept}")

        # ---- refusals ----
        for args, what, names in ((["--keep-dtype", "*.bias"], "--keep-dtype without --dtype", ["--keep-dtype", "needs --dtype"]),
                                  (["--cast-all"], "--cast-all without --dtype", ["--cast-all", "needs --dtype"]),
                                  (["--dtype", "bf16", "--cast-all", "--keep-dtype", "x"], "--cast-all with --keep-dtype",
                                   ["--cast-all", "--keep-dtype"])):
            o = tmp / "refused.safetensors"
            r = run(dcpctl, "consolidate", hf, "-o", o, *args)
            expect_rc(r, EXIT_USAGE, what, *names)
            check(not o.exists(), f"{what}: nothing written")
    return summary("precision")


if __name__ == "__main__":
    sys.exit(main())
