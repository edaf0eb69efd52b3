#!/usr/bin/env python3
"""verify and exports against the model schema (check/hf_schema.h), on folders transformers saved.

    hf_schema_verify_test.py DCPCTL

For each of glm4_moe, deepseek_v3, gpt_oss and t5, a tiny float32 model saved by transformers'
save_pretrained (tools/hf_schema.py's tiny_config, seed 0), then damaged the three ways
from_pretrained reports (its loading info names each damaged key: checked here too):
  - a key renamed to a near name (a layer norm's `weight` to `weigth`): `verify` exits 3 with
    schema-key-unexpected naming the key and the nearest the schema defines, and schema-key-missing
    for the layer that lost it;
  - one layer's norm dropped: schema-key-missing naming the layer;
  - one key of a layer's MoE group dropped, the group's others kept (GLM-4.5's and DeepSeek-V3's
    mlp.gate.e_score_correction_bias, GPT-OSS's router bias; T5's wo): schema-key-missing naming it;
  - an extra `mlp.shared_expert_gate.weight` in a layer: schema-key-unexpected;
and one way it does not (its loader reports a size mismatch): a norm of the wrong length,
schema-shape-mismatch naming the config field. The undamaged folder verifies clean with the schema
checked (`hf.schema.checked`); a config whose model_type the schema does not hold gives the note
schema-not-checked and exit 0 (saved by a newer transformers: the note names that version, and a
`--dtype bf16` export is refused, exit 5, naming the type and the version); Dory as transformers
5.24 saves it (its config.json counts two blocks a layer) verifies clean, and its release layout
(LayerPairCollapse's two blocks a layer, which transformers loads to the same tensors) is refused,
exit 5, by verify and consolidate, nothing left; longcat_flash as transformers saves it (zero experts numbered past
n_routed_experts) verifies clean. `consolidate` of a damaged folder to an HF folder exits 3 with the
schema's code and leaves nothing; `--map` with a map that renames a tensor to a name the model does
not define exits 5 and leaves nothing; a trainer's checkpoint (the bundled sample) exported under a
config.json that does not describe it exits 5 naming config.json and the ways out, and leaves
nothing, while the same tensors as an HF folder beside that config.json are damaged: verify and its
export exit 3.
Keys and rows that come from more than one config field: tiny folders of opt (project_in/out:
word_embed_proj_dim != hidden_size), roformer (embeddings_project: embedding_size != hidden_size),
marian (decoder_vocab_size rows), moshi (vocab_size+1), mllama (text_config.vocab_size+8) and
bigbird_pegasus (a head its class never ties) verify clean; OPT's project_in with the two fields
made equal is schema-key-unexpected naming the condition, Marian's decoder embedding a row short is
vocab-size-mismatch naming decoder_vocab_size.
Keys and shapes that sub-config fields bring: a tiny BLT (encoder_config.hidden_size x cross_attn_k
differs from global_config.hidden_size, so BltConfig derives global_config.encoder_cross_output_size
and the model has model.global_transformer.token_embedding_projection, as BLT-7B) verifies clean and
exports with --dtype bf16 to a folder from_pretrained loads without missing or unexpected keys; a
global-transformer norm of the wrong length is schema-shape-mismatch naming global_config.hidden_size.
Keys a config flag brings are required where config.json sets it: a tiny Qwen3 with
attention_bias=true verifies clean; with every layer's o_proj.bias dropped (transformers reports them
missing) verify exits 3 with schema-key-missing naming the pattern and the flag, and consolidate to
an HF folder exits 3 and leaves nothing.
transformers' own bfloat16 XLNet folder (config.json dtype float32: save_pretrained writes the first
parameter's dtype, and XLNet's mask_emb stays float32) verifies clean and consolidates; with
lm_loss.bias made float32 it is dtype-mismatch (the folder is then checked as float32).
Indices numbered in names: a tiny Inkling with 12 vision layers (the schema was built with 8; its
layers are model.visual.layers.linear_N and norm_N, vision_config.n_layers and one fewer) and a tiny
Switch Transformer with 16 experts (experts.expert_N; the schema's build has 8) verify clean; Inkling
with vision layer 5's norm dropped is schema-key-missing counted from vision_config.n_layers-1, with a
norm for its last layer schema-key-unexpected; Switch with one block's expert 15 dropped is
schema-key-missing naming it (transformers reports each).

Exit status: 0 pass, 1 failure, 77 skip (torch/transformers missing; a failure under CI).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from testlib import EXIT_INVALID, EXIT_OK, EXIT_UNSUPPORTED, check, expect_rc, run, summary, verify_json  # noqa: E402

TYPES = {  # model type -> a layer norm key of layer 1
    "glm4_moe": "model.layers.1.post_attention_layernorm.weight",
    "deepseek_v3": "model.layers.1.input_layernorm.weight",
    "gpt_oss": "model.layers.1.post_attention_layernorm.weight",
    "t5": "encoder.block.1.layer.0.layer_norm.weight",
}

GROUP_KEY = {  # model type -> a key of an MoE (or MLP) layer that the layer's other MLP keys come with,
    # and the key verify names (T5's: the pattern every block holds, named by the per-layer check)
    "glm4_moe": ("model.layers.1.mlp.gate.e_score_correction_bias",) * 2,
    "deepseek_v3": ("model.layers.3.mlp.gate.e_score_correction_bias",) * 2,
    "gpt_oss": ("model.layers.1.mlp.router.bias",) * 2,
    "t5": ("encoder.block.1.layer.1.DenseReluDense.wo.weight", "encoder.block.#.layer.#.DenseReluDense.wo.weight"),
}


def save_tiny(t: str, d: Path, cfg=None):
    """A float32 model of type t (of cfg, default tools/hf_schema.py's tiny_config), seed 0, saved by
    transformers' save_pretrained to d; returns its class."""
    import torch
    import transformers
    import hf_schema
    cls = getattr(transformers, hf_schema.primary_class(t))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.manual_seed(0)
        cls._from_config(cfg or hf_schema.tiny_config(t), dtype=torch.float32).save_pretrained(d)
    return cls


def transformers_class(t: str):
    import transformers
    import hf_schema
    return getattr(transformers, hf_schema.primary_class(t))


def rewrite(d: Path, edit) -> None:
    from safetensors.torch import load_file, save_file
    f = d / "model.safetensors"
    sd = load_file(f)
    edit(sd)
    save_file(sd, f, metadata={"format": "pt"})


def loading_info(cls, d: Path) -> dict:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        _, info = cls.from_pretrained(d, output_loading_info=True)
    return info


def codes(doc: dict, key: str = "problems") -> list:
    return [(p["code"], p["key"]) for p in doc.get(key, [])]


def main() -> int:
    dcpctl = sys.argv[1]
    import torch
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="dcpctl-schema-") as tmp:
        tmp = Path(tmp)
        for t, norm in TYPES.items():
            base = tmp / t / "base"
            cls = save_tiny(t, base)
            doc = verify_json(dcpctl, base, EXIT_OK, f"{t}: verify of transformers' folder")
            check(doc.get("hf", {}).get("schema", {}).get("checked") is True, f"{t}: the schema checked: {doc.get('hf')}")

            # A near name.
            near = tmp / t / "near"
            shutil.copytree(base, near)
            rewrite(near, lambda sd: sd.__setitem__(norm[:-len("weight")] + "weigth", sd.pop(norm)))
            info = loading_info(cls, near)
            check(norm in info["missing_keys"], f"{t}: from_pretrained reports {norm} missing: {info['missing_keys']}")
            doc = verify_json(dcpctl, near, EXIT_INVALID, f"{t}: verify of a key renamed to a near name")
            got = codes(doc)
            check(("schema-key-unexpected", norm[:-len("weight")] + "weigth") in got, f"{t}: near name unexpected: {got}")
            msg = " ".join(p["message"] for p in doc.get("problems", []) if p["code"] == "schema-key-unexpected")
            check("nearest it defines" in msg, f"{t}: the nearest key named: {msg}")
            check(any(c == "schema-key-missing" for c, _ in got), f"{t}: the renamed norm missing: {got}")

            # A layer's norm dropped.
            drop = tmp / t / "drop"
            shutil.copytree(base, drop)
            rewrite(drop, lambda sd: sd.pop(norm))
            info = loading_info(cls, drop)
            check(norm in info["missing_keys"], f"{t}: from_pretrained reports the dropped norm missing")
            doc = verify_json(dcpctl, drop, EXIT_INVALID, f"{t}: verify of a dropped norm")
            msg = [p["message"] for p in doc.get("problems", []) if p["code"] == "schema-key-missing"]
            check(len(msg) == 1 and re.search(r"layer 1(\.0)? here does not", msg[0]) is not None, f"{t}: the dropped norm's layer named: {codes(doc)} {msg}")

            # A key of a layer's MoE group dropped, the rest of the group kept (the router's expert bias
            # an --exclude '*.expert_bias' leaves out): schema-key-missing naming it (the schema's
            # "together" groups: per-layer MLP keys are optional, since the config decides which
            # layers are MoE, but a layer with the router's weight has its bias).
            part = tmp / t / "part"
            shutil.copytree(base, part)
            key, named = GROUP_KEY[t]
            rewrite(part, lambda sd: sd.pop(key))
            info = loading_info(cls, part)
            check(key in info["missing_keys"], f"{t}: from_pretrained reports {key} missing: {info['missing_keys']}")
            doc = verify_json(dcpctl, part, EXIT_INVALID, f"{t}: verify of a layer without {key}")
            check(codes(doc) == [("schema-key-missing", named)], f"{t}: {named} named missing, once: {codes(doc)}")

            # An extra shared_expert_gate.
            extra = tmp / t / "extra"
            shutil.copytree(base, extra)
            layer = norm.split(".layer.")[0] if t == "t5" else norm.rsplit(".", 2)[0]
            gate = layer + ".mlp.shared_expert_gate.weight"
            rewrite(extra, lambda sd: sd.__setitem__(gate, torch.zeros(1, 64)))
            info = loading_info(cls, extra)
            check(gate in info["unexpected_keys"], f"{t}: from_pretrained reports {gate} unexpected")
            doc = verify_json(dcpctl, extra, EXIT_INVALID, f"{t}: verify of an extra shared_expert_gate")
            check(("schema-key-unexpected", gate) in codes(doc), f"{t}: the extra gate named: {codes(doc)}")

            # A norm of the wrong length.
            short = tmp / t / "short"
            shutil.copytree(base, short)
            rewrite(short, lambda sd: sd.__setitem__(norm, sd[norm][:-1].clone()))
            doc = verify_json(dcpctl, short, EXIT_INVALID, f"{t}: verify of a norm one short")
            msg = [p["message"] for p in doc.get("problems", []) if p["code"] == "schema-shape-mismatch"]
            check(len(msg) == 1 and ("hidden_size" in msg[0] or "d_model" in msg[0]),
                  f"{t}: the shape's config field named: {codes(doc)} {msg}")

            # An export of the damaged folder: exit 3, nothing left.
            out = tmp / t / "out"
            r = run(dcpctl, "consolidate", str(extra), "-o", str(out) + "/")
            expect_rc(r, EXIT_INVALID, f"{t}: consolidate of a folder with an extra key", "schema-key-unexpected", gate)
            check(not out.exists(), f"{t}: nothing left at {out}")

        # A model type the schema does not hold: a note.
        odd = tmp / "odd"
        shutil.copytree(tmp / "glm4_moe" / "base", odd)
        c = json.loads((odd / "config.json").read_text())
        c["model_type"], c["architectures"] = "not_a_model_type", ["NotAModel"]
        (odd / "config.json").write_text(json.dumps(c))
        doc = verify_json(dcpctl, odd, EXIT_OK, "verify of a model type the schema does not hold")
        check(("schema-not-checked", "") in [(n["code"], n["key"] or "") for n in doc.get("notes", [])],
              f"the note schema-not-checked: {doc.get('notes')}")
        # Saved by a transformers newer than the schema's: the note and a --dtype export's refusal
        # (exit 5, nothing written) name the type and that version, which defines it.
        c["transformers_version"] = "99.0.0"
        (odd / "config.json").write_text(json.dumps(c))
        doc = verify_json(dcpctl, odd, EXIT_OK, "verify of a model type a newer transformers saved")
        why = (doc.get("hf", {}).get("schema") or {}).get("why") or ""
        check("not_a_model_type" in why and "saved by transformers 99.0.0" in why,
              f"hf.schema.why names the type and the version that saved it: {why}")
        out = tmp / "odd_out"
        r = run(dcpctl, "consolidate", str(odd), "-o", str(out) + "/", "--dtype", "bf16")
        expect_rc(r, EXIT_UNSUPPORTED, "consolidate --dtype bf16 of a model type a newer transformers saved",
                  "model_type not_a_model_type", "saved by transformers 99.0.0")
        check(not out.exists(), f"nothing left at {out}")

        # A map that renames a tensor to a name the model does not define (the Megatron GLM-4.5 case:
        # glm4_moe's shared_experts written under Qwen2-MoE's shared_expert): exit 5, nothing left.

        from safetensors import safe_open
        with safe_open(str(tmp / "glm4_moe" / "base" / "model.safetensors"), "pt") as f:
            keys = list(f.keys())
        pats = sorted({re.sub(r"\.(\d+)\.", ".{N}.", re.sub(r"\.(\d+)\.(.*)\.(\d+)\.", r".{L}.\2.{E}.", k)) for k in keys})
        pats = sorted({p.replace("{N}", "{L}") for p in pats})
        rules = [{"src": p, "hf": p.replace(".shared_experts.", ".shared_expert.")} for p in pats]
        mp = tmp / "bad_map.json"
        mp.write_text(json.dumps({"schema": "dcpctl-map/1", "name": "rename-shared-experts",
                                  "sides": ["src", "hf"], "rules": rules}))
        out = tmp / "mapped"
        r = run(dcpctl, "consolidate", str(tmp / "glm4_moe" / "base"), "--map", str(mp), "-o", str(out) + "/")
        expect_rc(r, EXIT_UNSUPPORTED, "consolidate --map that renames shared_experts to shared_expert",
                  "schema-key-unexpected", "mlp.shared_expert.")
        check(not out.exists(), f"nothing left at {out}")

        # Exit codes by what is wrong (issue 68): a trainer's checkpoint (the bundled FSDP2 sample, real
        # torch's dcp.save) exported to an HF folder under a config.json that does not describe it
        # (a tiny glm4_moe's): the checkpoint is intact, so exit 5 naming config.json and the ways
        # out, nothing left; the same tensors as a Hugging Face folder beside that config.json are
        # a damaged folder: verify and an export of it exit 3.
        sample = HERE.parent / "fixtures" / "sample" / "ckpt"
        glm_assets = tmp / "glm_assets"
        glm_assets.mkdir()
        shutil.copy(tmp / "glm4_moe" / "base" / "config.json", glm_assets / "config.json")
        out = tmp / "undescribed"
        r = run(dcpctl, "consolidate", str(sample), "--select", "app.model", "-o", str(out) + "/", "--assets", str(glm_assets))
        expect_rc(r, EXIT_UNSUPPORTED, "consolidate of a trainer's checkpoint under a config.json that does not describe it",
                  "config.json does not describe the checkpoint's tensors", "--map", "--no-assets")
        check(not out.exists(), f"nothing left at {out}")
        plain = tmp / "plain"
        r = run(dcpctl, "consolidate", str(sample), "--select", "app.model", "-o", str(plain) + "/", "--no-assets")
        expect_rc(r, EXIT_OK, "consolidate --no-assets (tensors as they are)")
        shutil.copy(glm_assets / "config.json", plain / "config.json")
        verify_json(dcpctl, plain, EXIT_INVALID, "verify of an HF folder whose tensors its config.json does not describe")
        out = tmp / "from_plain"
        r = run(dcpctl, "consolidate", str(plain), "-o", str(out) + "/")
        expect_rc(r, EXIT_INVALID, "consolidate of that HF folder", "fails the checks of `dcpctl verify`")
        check(not out.exists(), f"nothing left at {out}")

        # Folders transformers saves whose keys or rows come from more than one config field: verify
        # passes each (from_pretrained loads each clean: the oracle), and the field the schema
        # derives them from is the one checked.
        for t in ("opt", "roformer", "marian", "moshi", "mllama", "bigbird_pegasus"):
            d = tmp / "fields" / t
            cls = save_tiny(t, d)
            info = loading_info(cls, d)
            check(not info["missing_keys"] and not info["unexpected_keys"], f"{t}: transformers reloads its folder: {info}")
            doc = verify_json(dcpctl, d, EXIT_OK, f"{t}: verify of transformers' folder")
            check(doc.get("hf", {}).get("schema", {}).get("checked") is True, f"{t}: the schema checked: {doc.get('hf')}")
        cfg = json.loads((tmp / "fields" / "opt" / "config.json").read_text())
        check(cfg["word_embed_proj_dim"] != cfg["hidden_size"], f"opt: word_embed_proj_dim != hidden_size: {cfg}")
        # OPT's project_in/project_out exist when word_embed_proj_dim != hidden_size: with the two
        # made equal they are keys the model does not have (from_pretrained: unexpected).
        same = tmp / "fields" / "opt-same"
        shutil.copytree(tmp / "fields" / "opt", same)
        cfg["word_embed_proj_dim"] = cfg["hidden_size"]
        (same / "config.json").write_text(json.dumps(cfg))
        rewrite(same, lambda sd: sd.__setitem__("model.decoder.embed_tokens.weight",
                                                sd["model.decoder.embed_tokens.weight"].new_zeros(cfg["vocab_size"], cfg["hidden_size"])))
        info = loading_info(transformers_class("opt"), same)
        check("model.decoder.project_in.weight" in info["unexpected_keys"], f"opt: from_pretrained: project_in unexpected: {info}")
        doc = verify_json(dcpctl, same, EXIT_INVALID, "opt: verify of project_in with word_embed_proj_dim == hidden_size")
        msg = [p["message"] for p in doc.get("problems", []) if p["key"] == "model.decoder.project_in.weight"]
        check(("schema-key-unexpected", "model.decoder.project_in.weight") in codes(doc)
              and "hidden_size!=word_embed_proj_dim" in " ".join(msg), f"opt: project_in unexpected, the condition named: {msg}")
        # Marian's decoder embedding has decoder_vocab_size rows (not vocab_size): one row fewer is named.
        short = tmp / "fields" / "marian-short"
        shutil.copytree(tmp / "fields" / "marian", short)
        k = "model.decoder.embed_tokens.weight"
        rewrite(short, lambda sd: sd.__setitem__(k, sd[k][:-1].clone()))
        doc = verify_json(dcpctl, short, EXIT_INVALID, "marian: verify of a decoder embedding one row short")
        msg = [p["message"] for p in doc.get("problems", []) if p["code"] == "vocab-size-mismatch"]
        check(len(msg) == 1 and "decoder_vocab_size" in msg[0], f"marian: the rows against decoder_vocab_size: {codes(doc)} {msg}")
        # BigBirdPegasusForCausalLM never ties its head (tie_word_embeddings true, _tied_weights_keys
        # none): from_pretrained loads the folder's lm_head.weight, unlike the embedding.
        bb = tmp / "fields" / "bigbird_pegasus"
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            m = transformers_class("bigbird_pegasus").from_pretrained(bb)
        from safetensors.torch import load_file
        sd = load_file(bb / "model.safetensors")
        check(json.loads((bb / "config.json").read_text()).get("tie_word_embeddings") is True
              and torch.equal(m.lm_head.weight.detach(), sd["lm_head.weight"])
              and not torch.equal(sd["lm_head.weight"], sd["model.decoder.embed_tokens.weight"]),
              "bigbird_pegasus: tie_word_embeddings true, and from_pretrained holds the folder's own lm_head")

        # BLT: a key and shapes from sub-config fields (the schema's generator varies every sub-config).
        blt = tmp / "blt"
        cls = save_tiny("blt", blt)
        cfg = json.loads((blt / "config.json").read_text())
        proj = "model.global_transformer.token_embedding_projection.weight"
        from safetensors.torch import load_file
        check(proj in load_file(blt / "model.safetensors") and cfg["global_config"].get("encoder_cross_output_size"),
              f"blt: the tiny model has the projection (global_config {cfg['global_config'].get('encoder_cross_output_size')})")
        info = loading_info(cls, blt)
        check(not info["missing_keys"] and not info["unexpected_keys"], f"blt: transformers reloads its folder: {info}")
        doc = verify_json(dcpctl, blt, EXIT_OK, "blt: verify of transformers' folder with the projection")
        check(doc.get("hf", {}).get("schema", {}).get("checked") is True, f"blt: the schema checked: {doc.get('hf')}")
        out = tmp / "blt-bf16"
        r = run(dcpctl, "consolidate", str(blt), "-o", f"{out}/", "--dtype", "bf16")
        if expect_rc(r, EXIT_OK, "blt: consolidate --dtype bf16 -o DIR/"):
            info = loading_info(cls, out)
            check(not info["missing_keys"] and not info["unexpected_keys"], f"blt: from_pretrained of the export: {info}")
        short = tmp / "blt-short"
        shutil.copytree(blt, short)
        k = "model.global_transformer.layers.0.input_layernorm.weight"
        rewrite(short, lambda sd: sd.__setitem__(k, sd[k][:-1].clone()))
        doc = verify_json(dcpctl, short, EXIT_INVALID, "blt: verify of a global-transformer norm one short")
        msg = [p["message"] for p in doc.get("problems", []) if p["code"] == "schema-shape-mismatch" and p["key"] == k]
        check(len(msg) == 1 and "global_config.hidden_size" in msg[0], f"blt: the norm against global_config.hidden_size: {codes(doc)} {msg}")

        # A key a flag brings is required where config.json sets the flag: Qwen3 with attention_bias=true
        # (megatron-core's add_qkv_bias exported under such a config has no o_proj.bias).
        import hf_schema
        import transformers
        qb = tmp / "qwen3-bias"
        cfg = hf_schema.tiny_config("qwen3")
        cfg.attention_bias = True
        save_tiny("qwen3", qb, cfg)
        verify_json(dcpctl, qb, EXIT_OK, "qwen3 attention_bias=true: verify of transformers' folder")
        nb = tmp / "qwen3-bias-o-lost"
        shutil.copytree(qb, nb)
        rewrite(nb, lambda sd: [sd.pop(k) for k in list(sd) if k.endswith("o_proj.bias")])
        info = loading_info(transformers.Qwen3ForCausalLM, nb)
        check(any(k.endswith("o_proj.bias") for k in info["missing_keys"]), f"qwen3: transformers reports o_proj.bias missing: {info}")
        doc = verify_json(dcpctl, nb, EXIT_INVALID, "qwen3 attention_bias=true: verify with no layer's o_proj.bias")
        msg = [p["message"] for p in doc.get("problems", [])
               if p["code"] == "schema-key-missing" and p["key"] == "model.layers.#.self_attn.o_proj.bias"]
        check(len(msg) == 1 and "attention_bias=true" in msg[0], f"qwen3: o_proj.bias missing under attention_bias=true: {codes(doc)} {msg}")
        out = tmp / "qwen3-bias-out"
        r = run(dcpctl, "consolidate", str(nb), "-o", f"{out}/", "--dtype", "bf16")
        expect_rc(r, EXIT_INVALID, "qwen3 attention_bias=true, o_proj.bias lost: consolidate -o DIR/")
        check(not out.exists(), "qwen3: the refused export left nothing")

        # longcat_flash as transformers saves it (zero experts numbered past n_routed_experts).
        lc = tmp / "longcat"
        save_tiny("longcat_flash", lc)
        cfg = json.loads((lc / "config.json").read_text())
        check(cfg.get("zero_expert_num", 0) > 0, f"longcat_flash has zero experts: {cfg.get('zero_expert_num')}")
        verify_json(dcpctl, lc, EXIT_OK, "verify of longcat_flash as transformers saves it")

        # transformers' own bfloat16 XLNet folder says dtype float32: save_pretrained writes model.dtype,
        # the first floating parameter's, and XLNet's mask_emb (torch.FloatTensor) stays float32 under
        # from_pretrained(dtype=bfloat16), as do its attention's q/k/v/o/r (37 float32, 34 bfloat16).
        # verify and a plain consolidate take it (they refused it [dtype-mismatch] exit 3); one tensor
        # transformers does not keep float32 made float32 in it is still dtype-mismatch.
        xs, xb = tmp / "xlnet-src", tmp / "xlnet-bf16"
        xcls = save_tiny("xlnet", xs)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            xcls.from_pretrained(xs, dtype=torch.bfloat16).save_pretrained(xb)
        from safetensors.torch import load_file
        held = load_file(xb / "model.safetensors")
        check(json.loads((xb / "config.json").read_text()).get("dtype") == "float32" and
              {v.dtype for v in held.values()} == {torch.float32, torch.bfloat16},
              f"xlnet: transformers' bf16 folder says float32 over mixed tensors: {sorted({str(v.dtype) for v in held.values()})}")
        verify_json(dcpctl, xb, EXIT_OK, "xlnet: verify of transformers' own bf16 folder (config dtype float32)")
        out = tmp / "xlnet-out"
        r = run(dcpctl, "consolidate", str(xb), "-o", f"{out}/")
        if expect_rc(r, EXIT_OK, "xlnet: consolidate of transformers' own bf16 folder -o DIR/"):
            info = loading_info(xcls, out)
            check(not info["missing_keys"] and not info["unexpected_keys"], f"xlnet: from_pretrained of the export: {info}")
        xw = tmp / "xlnet-bias-f32"
        shutil.copytree(xb, xw)
        rewrite(xw, lambda sd: sd.__setitem__("lm_loss.bias", sd["lm_loss.bias"].float()))
        doc = verify_json(dcpctl, xw, EXIT_INVALID, "xlnet bf16 folder with lm_loss.bias float32")
        check([c for c, _ in codes(doc)] == ["dtype-mismatch"], f"xlnet: the mixed folder is dtype-mismatch: {codes(doc)}")
        # Indices numbered in names (the schema's "named"): Inkling's vision layers
        # model.visual.layers.linear_N / norm_N, as many as vision_config.n_layers and one fewer (the
        # schema was built with 8, its default is 24: 12 here, with patch_size 2, as the tower's
        # widths grow with the layers past its plan of scales), and Switch's experts.expert_N (8 by
        # default, switch-base-128's 128).
        ink = tmp / "inkling-12"
        cfg = hf_schema.tiny_config("inkling_mm_model")
        cfg.vision_config.n_layers = 12
        cfg.vision_config.patch_size = 2
        icls = save_tiny("inkling_mm_model", ink, cfg)
        info = loading_info(icls, ink)
        check(not info["missing_keys"] and not info["unexpected_keys"], f"inkling 12 vision layers: transformers reloads it clean: {info}")
        doc = verify_json(dcpctl, ink, EXIT_OK, "inkling_mm_model with 12 vision layers: verify of transformers' folder")
        check(doc.get("hf", {}).get("schema", {}).get("checked") is True, f"inkling: the schema checked: {doc.get('hf')}")
        lost = tmp / "inkling-12-norm-lost"  # the norm of vision layer 5 dropped
        shutil.copytree(ink, lost)
        rewrite(lost, lambda sd: sd.pop("model.visual.layers.norm_5.weight"))
        info = loading_info(icls, lost)
        check(any("encoder_layers.5.layer_norm" in k for k in info["missing_keys"]), f"inkling: transformers reports norm 5 missing: {info}")
        doc = verify_json(dcpctl, lost, EXIT_INVALID, "inkling: verify with vision layer 5's norm dropped")
        msg = [p["message"] for p in doc.get("problems", [])
               if p["code"] == "schema-key-missing" and p["key"] == "model.visual.layers.norm_5.weight"]
        check(codes(doc) == [("schema-key-missing", "model.visual.layers.norm_5.weight")] and
              "vision_config.n_layers-1 = 11" in msg[0], f"inkling: norm 5 missing, counted from the config: {codes(doc)} {msg}")
        past = tmp / "inkling-12-norm-past"  # a norm for the last vision layer, which has none
        shutil.copytree(ink, past)
        rewrite(past, lambda sd: sd.__setitem__("model.visual.layers.norm_11.weight", sd["model.visual.layers.norm_10.weight"].clone()))
        info = loading_info(icls, past)
        check(any("encoder_layers.11.layer_norm" in k for k in info["unexpected_keys"]), f"inkling: transformers reports norm 11 unexpected: {info}")
        doc = verify_json(dcpctl, past, EXIT_INVALID, "inkling: verify with a norm past the count")
        check(codes(doc) == [("schema-key-unexpected", "model.visual.layers.norm_11.weight")],
              f"inkling: norm 11 past the count: {codes(doc)}")
        sw = tmp / "switch-16"
        cfg = hf_schema.tiny_config("switch_transformers")
        cfg.num_experts = 16
        scls = save_tiny("switch_transformers", sw, cfg)
        info = loading_info(scls, sw)
        check(not info["missing_keys"] and not info["unexpected_keys"], f"switch 16 experts: transformers reloads it clean: {info}")
        verify_json(dcpctl, sw, EXIT_OK, "switch_transformers with 16 experts (the schema built with 8): verify")
        rewrite(sw, lambda sd: [sd.pop(k) for k in list(sd) if k.startswith("encoder.block.1.layer.1.mlp.experts.expert_15.")])
        doc = verify_json(dcpctl, sw, EXIT_INVALID, "switch: verify with one layer's expert 15 dropped")
        check(("schema-key-missing", "encoder.block.1.layer.1.mlp.experts.expert_15.wi.weight") in codes(doc),
              f"switch: expert 15 of block 1 missing: {codes(doc)}")

        # transformers 5.24's Dory: its save_pretrained folder (a config.json counting two blocks a
        # layer, the schema's saved_config) verifies clean; the release layout its LayerPairCollapse
        # folds on load (layer i as blocks layers.{2i}.mixer / layers.{2i+1}.mixer, attn_alpha and
        # mlp_alpha for lambda_1/2, g_proj for gate_proj), which transformers loads to the same
        # tensors and dcpctl does not map, is refused (exit 5 naming the conversion), not exit 3.
        dy = tmp / "dory"
        dcls = save_tiny("dory", dy)
        verify_json(dcpctl, dy, EXIT_OK, "dory as transformers saves it: verify")
        rel = tmp / "dory-release"
        shutil.copytree(dy, rel)

        def two_blocks(sd):
            for k in list(sd):
                m = re.match(r"backbone\.layers\.(\d+)\.(self_attn|mlp|lambda_1|lambda_2)(.*)", k)
                if m:
                    i, part, rest = int(m[1]), m[2], m[3]
                    block, name = {"self_attn": (2 * i, "mixer"), "mlp": (2 * i + 1, "mixer"),
                                   "lambda_1": (2 * i, "attn_alpha"), "lambda_2": (2 * i + 1, "mlp_alpha")}[part]
                    rest = rest.replace(".gate_proj.", ".g_proj.") if part == "self_attn" else rest
                    sd[f"backbone.layers.{block}.{name}{rest}"] = sd.pop(k)
        rewrite(rel, two_blocks)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            a, info = dcls.from_pretrained(rel, output_loading_info=True)
            b = dcls.from_pretrained(dy)
        check(not info["missing_keys"] and not info["unexpected_keys"] and
              all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values())),
              f"dory: transformers loads the two-block release layout to the same tensors: {info}")
        r = run(dcpctl, "verify", str(rel))
        expect_rc(r, EXIT_UNSUPPORTED, "dory: verify of the two-block release layout", "LayerPairCollapse",
                  "model_type dory")
        out = tmp / "dory-out"
        r = run(dcpctl, "consolidate", str(rel), "-o", str(out) + "/", "--dtype", "bf16")
        expect_rc(r, EXIT_UNSUPPORTED, "dory: consolidate of the two-block release layout", "LayerPairCollapse")
        check(not out.exists() and not list(tmp.glob(".dory-out*")), f"dory: nothing left at {out}")
    return summary("hf-schema-verify")


if __name__ == "__main__":
    sys.exit(main())
