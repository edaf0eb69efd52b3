#!/usr/bin/env python3
"""A Hugging Face folder in a release layout that transformers converts on load (issue 68, item 2).

    hf_release_layout_test.py DCPCTL

DeepSeek-V4's published layout (`embed.weight`, `head.weight`, `norm.weight`, `hc_head_fn`,
`layers.N.attn.wq_a.weight`, `layers.N.ffn.experts.E.w1.weight`, no `model.` prefix; FP8 weights
beside an `X.scale`) is what conversion_mapping.py's deepseek_v4 renames read; transformers'
save_pretrained writes other names (`model.embed_tokens.weight`, `model.hc_head.hc_fn`,
`model.layers.N.attn.wq_a.weight`). The folders here are written through transformers' own
conversion code, not by hand: a tiny DeepseekV4ForCausalLM (tools/hf_schema.py's tiny_config with
the widths 128, so that FP8's 128x128 blocks fit; float32, seed 0), its state dict less tied
weights with the base model prefix taken off, through revert_weight_conversion (the reverse of the
load-time renames): the release layout. from_pretrained of it loads with nothing missing,
unexpected or mismatched and every parameter equal to the model's (checked). The FP8 variant: each
2-D Linear weight whose blocks fit, of transformers' bfloat16 round trip of the release (its other
tensors as that round trip has them: bfloat16, float32 where transformers keeps float32), quantized
by transformers' own Fp8Quantize (e4m3, scale_fmt ue8m0), its scale stored as `X.scale` in F8_E8M0 as the release stores it, with the release's
quantization_config; from_pretrained(dtype=bfloat16) on a machine without a GPU dequantizes it, with
nothing missing or unexpected (checked).

  - `verify` of transformers' own save_pretrained folder: exit 0, hf.schema.layout "save_pretrained";
  - `verify` of the release folder: exit 0, hf.schema.layout "release (transformers load-time
    renames)" (the old binary: exit 3, 45 schema problems);
  - `consolidate REL -o OUT/ --dtype bf16 --json`: exit 0, the keys written as read (the release
    layout, hf_layout.layout says so), and each tensor equal, dtype and bytes, to transformers'
    from_pretrained(dtype=bfloat16) + save_pretrained of the release folder, key for key through the
    schema's load_renames; from_pretrained of the output loads with nothing missing or unexpected;
  - the release folder damaged: a layer's attn_norm dropped is schema-key-missing named in the
    release layout (`layers.#.attn_norm.weight`), exit 3; `model.embed_tokens.weight` beside
    `embed.weight` is key-loads-twice, exit 3;
  - the FP8 release: `verify` exit 0 (its `.scale`s are the codec's); `consolidate --dtype bf16`
    exit 0, and from_pretrained(dtype=bfloat16) of the output equals from_pretrained(dtype=bfloat16)
    of the release, parameter for parameter (transformers 5.23's save_pretrained of a model it
    dequantized on load fails in revert_weight_conversion, "Undefined Operation encountered!", so the
    loaded models are compared).

The schema data (src/check/hf_schema.json's deepseek_v4 "load_renames") is tools/hf_schema.py's
load_renames, compiled in.

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure under CI).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT / "tools"))
from testlib import EXIT_INVALID, EXIT_OK, check, expect_rc, run, same_tensor, summary, verify_json  # noqa: E402

RELEASE = "release (transformers load-time renames)"
INT = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)")


def quiet():
    return contextlib.ExitStack() if os.environ.get("VERBOSE") else _quiet()


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def tiny_model():
    import torch
    import hf_schema
    from transformers import DeepseekV4ForCausalLM
    cfg = hf_schema.tiny_config("deepseek_v4")
    for f, v in {"hidden_size": 128, "moe_intermediate_size": 128, "q_lora_rank": 128, "head_dim": 128}.items():
        setattr(cfg, f, v)
    cfg = type(cfg).from_dict(cfg.to_dict())
    with quiet():
        torch.manual_seed(0)
        return DeepseekV4ForCausalLM._from_config(cfg, dtype=torch.float32)


def release_state_dict(model) -> dict:
    """The release layout: the state dict (tied weights out) without the base model prefix, through
    transformers' revert_weight_conversion."""
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict
    sd = remove_tied_weights_from_state_dict(model.state_dict(), model)
    dot = model.base_model_prefix + "."
    with quiet():
        rel = revert_weight_conversion(model, {k[len(dot):] if k.startswith(dot) else k: v for k, v in sd.items()})
    return {k: v.detach().contiguous().clone() for k, v in rel.items()}


def write_folder(d: Path, tensors: dict, config: dict) -> Path:
    from safetensors.torch import save_file
    d.mkdir(parents=True, exist_ok=True)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return d


def fp8_release(rel: dict) -> dict:
    """Each 2-D Linear weight whose 128x128 blocks fit, quantized by transformers' Fp8Quantize
    (ue8m0), its scale as the release names it: X.scale."""
    import torch
    from transformers.integrations.finegrained_fp8 import Fp8Quantize

    class _Q:
        class quantization_config:
            weight_block_size = (128, 128)
            scale_fmt = "ue8m0"
            activation_scheme = "dynamic"
    quantize = Fp8Quantize(_Q())
    out = {}
    for k, v in rel.items():
        linear = k.endswith(".weight") and v.dim() == 2 and k not in ("embed.weight", "head.weight") and ".gate.weight" not in k
        r = quantize.convert({k: v.to(torch.bfloat16)}) if linear else {}
        if k[:-7] + ".weight_scale_inv" in r:
            out[k] = r[k].contiguous()
            out[k[:-7] + ".scale"] = r[k[:-7] + ".weight_scale_inv"].contiguous()
        else:
            out[k] = v
    return out


def load(d: Path, dtype=None):
    from transformers import AutoModelForCausalLM
    with quiet():
        return AutoModelForCausalLM.from_pretrained(d, output_loading_info=True, dtype=dtype)


def clean_load(d: Path, what: str, dtype=None):
    model, info = load(d, dtype)
    bad = {k: sorted(v)[:4] for k, v in info.items() if v and k != "error_msgs"}
    check(not bad, f"{what}: from_pretrained loads it with nothing missing, unexpected or mismatched: {bad}")
    return model


def schema_renames() -> dict:
    """The committed schema's deepseek_v4 load_renames (tools/hf_schema.py's load_renames): the
    release -> save pattern table."""
    committed = json.loads((ROOT / "src" / "check" / "hf_schema.json").read_text())
    renames = committed["types"]["deepseek_v4"].get("load_renames") or []
    check(bool(renames), "the schema holds deepseek_v4's load_renames (tools/hf_schema.py's load_renames)")
    return dict(renames)


def save_name(table: dict, key: str) -> str:
    save = table.get(INT.sub("#", key))
    if save is None:
        return key
    for i in INT.findall(key):
        save = save.replace("#", i, 1)
    return save


def tensors_of(d: Path) -> dict:
    from safetensors.torch import load_file
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def layout_of(doc: dict):
    return ((doc.get("hf") or {}).get("schema") or {}).get("layout")


def main() -> int:
    dcpctl = sys.argv[1]
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e}")
        return 77
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="dcpctl-release-") as tmp:
        tmp = Path(tmp)
        model = tiny_model()
        table = schema_renames()
        config = model.config.to_dict()
        config["architectures"] = ["DeepseekV4ForCausalLM"]

        # transformers' own folder: the save_pretrained layout.
        with quiet():
            model.save_pretrained(tmp / "save")
        doc = verify_json(dcpctl, tmp / "save", EXIT_OK, "verify of transformers' save_pretrained folder")
        check(layout_of(doc) == "save_pretrained", f"its layout is save_pretrained's: {layout_of(doc)}")

        # The release layout, through transformers' conversion code.
        rel_sd = release_state_dict(model)
        check("embed.weight" in rel_sd and "hc_head_fn" in rel_sd and "layers.0.ffn.experts.0.w1.weight" in rel_sd,
              f"the release names: {sorted(rel_sd)[:6]}")
        rel = write_folder(tmp / "rel", rel_sd, config)
        loaded = clean_load(rel, "the release folder")
        want = model.state_dict()
        got = loaded.state_dict()
        check(all(torch.equal(v, got[k]) for k, v in want.items()), "from_pretrained of the release equals the model")
        check(all(save_name(table, k) in tensors_of(tmp / "save") for k in rel_sd),
              "every release name pairs with a save_pretrained key through load_renames")

        doc = verify_json(dcpctl, rel, EXIT_OK, "verify of the release folder")
        check(layout_of(doc) == RELEASE, f"its layout is the release's: {layout_of(doc)}")
        check(not doc.get("problems"), f"no problem: {[p['code'] for p in doc.get('problems', [])][:5]}")

        # transformers' bfloat16 round trip of the release: from_pretrained(dtype=bf16) + save_pretrained.
        ref_model, _ = load(rel, torch.bfloat16)
        with quiet():
            ref_model.save_pretrained(tmp / "ref")
        ref = tensors_of(tmp / "ref")

        # An export keeps the release layout; each tensor is transformers' bf16 round trip's.
        out = tmp / "out"
        r = run(dcpctl, "consolidate", str(rel), "-o", f"{out}/", "--dtype", "bf16", "--json")
        if expect_rc(r, EXIT_OK, "consolidate of the release folder --dtype bf16"):
            summ = json.loads(r.stdout)
            check((summ.get("hf_layout") or {}).get("layout") == RELEASE, f"--json says the layout: {summ.get('hf_layout')}")
            check(not (summ.get("tie_word_embeddings") or {}).get("note"),
                  f"no note of a missing LM head (head.weight is it): {summ.get('tie_word_embeddings')}")
            written = tensors_of(out)
            check(set(written) == set(rel_sd), f"the keys written as read: {sorted(set(written) ^ set(rel_sd))[:6]}")
            mapped = {save_name(table, k): v for k, v in written.items()}
            check(set(mapped) == set(ref), f"the same tensors as transformers' round trip: {sorted(set(mapped) ^ set(ref))[:6]}")
            differ = [k for k in ref if k in mapped and same_tensor(mapped[k], ref[k])]
            check(not differ, f"each equal, dtype and bytes, to transformers' from_pretrained(bf16)+save_pretrained: {differ[:5]}")
            kept = sorted(k for k, v in written.items() if v.dtype == torch.float32)
            check(any("hc_attn_fn" in k for k in kept), f"transformers' float32 tensors kept float32: {kept[:4]}")
            clean_load(out, "the export")
            doc = verify_json(dcpctl, out, EXIT_OK, "verify of the export")
            check(layout_of(doc) == RELEASE, f"the export's layout is the release's: {layout_of(doc)}")

        # Damaged release folders are still refused, named in their own layout.
        drop = write_folder(tmp / "drop", {k: v for k, v in rel_sd.items() if k != "layers.1.attn_norm.weight"}, config)
        info = load(drop)[1]
        check("model.layers.1.input_layernorm.weight" in info["missing_keys"], "from_pretrained reports the norm missing")
        doc = verify_json(dcpctl, drop, EXIT_INVALID, "verify of a release folder without a layer's attn_norm")
        named = [(p["code"], p["key"]) for p in doc.get("problems", [])]
        check(any(c == "schema-key-missing" and k.startswith("layers.") and "attn_norm" in k for c, k in named),
              f"schema-key-missing named in the release layout: {named}")
        twice = write_folder(tmp / "twice", {**rel_sd, "model.embed_tokens.weight": rel_sd["embed.weight"].clone()}, config)
        doc = verify_json(dcpctl, twice, EXIT_INVALID, "verify of a folder with embed.weight and model.embed_tokens.weight")
        named = [(p["code"], p["key"]) for p in doc.get("problems", [])]
        check(any(c == "key-loads-twice" for c, _ in named), f"key-loads-twice: {named}")

        # The FP8 release (X.scale in F8_E8M0), from the bfloat16 round trip's tensors (a release's
        # dtypes: bfloat16, float32 where transformers keeps float32), named as the release names them.
        fp8_sd = fp8_release({k: ref[save_name(table, k)] for k in rel_sd})
        scales = [k for k in fp8_sd if k.endswith(".scale")]
        check(len(scales) >= 8 and fp8_sd[scales[0]].dtype == torch.float8_e8m0fnu, f"FP8 weights with X.scale: {len(scales)}")
        fp8_config = dict(config, dtype="bfloat16", quantization_config={"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                                       "activation_scheme": "dynamic", "weight_block_size": [128, 128]})
        fp8 = write_folder(tmp / "fp8", fp8_sd, fp8_config)
        fp8_ref = clean_load(fp8, "the FP8 release folder", torch.bfloat16)
        doc = verify_json(dcpctl, fp8, EXIT_OK, "verify of the FP8 release folder")
        check(layout_of(doc) == RELEASE, f"the FP8 release's layout: {layout_of(doc)}")
        out8 = tmp / "out8"
        r = run(dcpctl, "consolidate", str(fp8), "-o", f"{out8}/", "--dtype", "bf16", "--json")
        if expect_rc(r, EXIT_OK, "consolidate of the FP8 release folder --dtype bf16"):
            check(not any(k.endswith(".scale") for k in tensors_of(out8)), "the scales are gone")
            got = clean_load(out8, "the FP8 export", torch.bfloat16).state_dict()
            want = fp8_ref.state_dict()
            differ = [k for k, v in want.items() if k not in got or got[k].dtype != v.dtype or not torch.equal(got[k], v)]
            check(not differ, f"from_pretrained(bf16) of the export equals that of the release: {differ[:5]}")
    return summary("hf-release-layout")


if __name__ == "__main__":
    sys.exit(main())
