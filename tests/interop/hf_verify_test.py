#!/usr/bin/env python3
"""`verify` of Hugging Face folders damaged the ways exports lose things: each problem code of
check/hf_checks.h (docs/integrity.md) on a folder a real writer wrote, then damaged.

    hf_verify_test.py DCPCTL FIXTURES_DIR

Writers (run here, into a temporary folder; the project virtualenv: torch 2.15.0, safetensors
0.8.0, transformers 5.23.0): transformers' save_pretrained of tiny seeded models (LlamaForCausalLM
untied in bfloat16 in 3 shards with its index, tied in float32; DeepseekV3ForCausalLM with 4 routed
experts in bfloat16, whose e_score_correction_bias transformers keeps in float32), and
safetensors.torch.save_file re-saving a shard with tensors removed or added (a buggy exporter's
output: an MTP layer, an expert, a scale, lm_head). The FP8 folder is the committed
layouts/hf_fp8_deepseek/ckpt (transformers' FineGrainedFP8 quantizer). Header damage (a duplicated
key, overlapping or out-of-bounds offsets, a wrong shape, bad JSON) is made by editing the header
bytes of save_pretrained's output. Each case: the exit code (3, or 0 where it must stay clean) and
the code named in `problems` (or `warnings`).
"""

from __future__ import annotations

import json
import shutil
import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import check, run, summary  # noqa: E402

try:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except ImportError as e:  # the virtualenv is set up by tools/dev.sh: a missing one is a failure under CI
    print(f"SKIP: {e}")
    sys.exit(77)


def verify(dcpctl: str, path: Path, *extra: str) -> tuple[int, dict]:
    r = run(dcpctl, "verify", "--json", *extra, str(path))
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        check(False, f"verify {path}: not JSON (exit {r.returncode}): {r.stderr[-300:]}")
        return r.returncode, {}


def expect(dcpctl: str, what: str, path: Path, rc: int, code: str | None, *extra: str, warning: str | None = None) -> None:
    got, j = verify(dcpctl, path, *extra)
    codes = [p["code"] for p in j.get("problems", [])]
    warns = [w["code"] for w in j.get("warnings", [])]
    ok = got == rc and (code in codes if code else not codes) and (warning is None or warning in warns)
    check(ok, f"{what}: exit {got} (want {rc}), problems {[(p['code'], p['key'], p['message']) for p in j.get('problems', [])][:6]}"
              f" (want {code}), warnings {warns}")


def tiny_llama(out: Path, tie: bool, dtype: torch.dtype, shard: str | None) -> None:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tie)
    m = transformers.LlamaForCausalLM(cfg).to(dtype)
    m.save_pretrained(out, max_shard_size=shard) if shard else m.save_pretrained(out)


def tiny_deepseek(out: Path) -> None:
    torch.manual_seed(0)
    cfg = transformers.DeepseekV3Config(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                                        num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2,
                                        n_group=1, topk_group=1, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=8,
                                        kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=4,
                                        tie_word_embeddings=False)
    cfg.num_nextn_predict_layers = 1
    # Saved in float32, then loaded as bfloat16 and saved again: from_pretrained keeps
    # e_score_correction_bias in float32 (_keep_in_fp32_modules_strict), as DeepSeek's release does.
    transformers.DeepseekV3ForCausalLM(cfg).save_pretrained(out.with_name(out.name + "-fp32"))
    transformers.AutoModelForCausalLM.from_pretrained(out.with_name(out.name + "-fp32"), dtype=torch.bfloat16).save_pretrained(out)


def files_of(folder: Path) -> dict[str, dict[str, torch.Tensor]]:
    return {p.name: load_file(p) for p in sorted(folder.glob("*.safetensors"))}


def resave(folder: Path, edit) -> None:
    """Loads every shard, lets `edit(name, tensors)` change it, saves it back with safetensors and
    rewrites the index's weight_map (and total_size) to match, as an exporter would."""
    index = folder / "model.safetensors.index.json"
    weight_map, total = {}, 0
    for name, tensors in files_of(folder).items():
        edit(name, tensors)
        save_file(tensors, folder / name, metadata={"format": "pt"})
        for k, t in tensors.items():
            weight_map[k] = name
            total += t.numel() * t.element_size()
    if index.exists():
        j = json.loads(index.read_text())
        j["weight_map"] = dict(sorted(weight_map.items()))
        j.setdefault("metadata", {})["total_size"] = total
        index.write_text(json.dumps(j, indent=2))


def edit_json(path: Path, edit) -> None:
    j = json.loads(path.read_text())
    edit(j)
    path.write_text(json.dumps(j, indent=2))


def edit_header(path: Path, edit) -> None:
    """Rewrites a safetensors header's text through `edit(text) -> text`; the data stay."""
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    text = edit(b[8:8 + n].decode()).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b[8 + n:])


def header_of(path: Path) -> dict:
    b = path.read_bytes()
    return json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    tmp = Path(tempfile.mkdtemp(prefix="hf-verify-"))
    try:
        base = tmp / "llama"
        tiny_llama(base, tie=False, dtype=torch.bfloat16, shard="4KB")
        shards = sorted(base.glob("model-*.safetensors"))
        check(len(shards) >= 3 and (base / "model.safetensors.index.json").exists(), f"save_pretrained wrote {len(shards)} shards")
        expect(dcpctl, "llama as written", base, 0, None)

        def case(name: str) -> Path:
            d = tmp / name
            shutil.copytree(base, d)
            return d

        # The index and its files.
        d = case("shard-removed")
        (d / shards[1].name).unlink()
        expect(dcpctl, "a shard removed", d, 3, "missing-file")
        d = case("index-missing-key")
        edit_json(d / "model.safetensors.index.json", lambda j: j["weight_map"].__setitem__("model.layers.0.mlp.extra.weight", shards[0].name))
        expect(dcpctl, "the index names a key no file holds", d, 3, "missing-key")
        d = case("total-size")
        edit_json(d / "model.safetensors.index.json", lambda j: j["metadata"].__setitem__("total_size", j["metadata"]["total_size"] + 2))
        expect(dcpctl, "a wrong total_size", d, 3, "index-total-size")
        d = case("key-twice")
        first = next(iter(load_file(d / shards[0].name)))
        resave(d, lambda n, t: t.__setitem__(first, load_file(base / shards[0].name)[first]) if n == shards[-1].name else None)
        edit_json(d / "model.safetensors.index.json", lambda j: j["weight_map"].__setitem__(first, shards[0].name))
        expect(dcpctl, "a key in two shards", d, 3, "key-in-several-files")

        # Headers.
        d = case("dup-key")
        def dup(text: str) -> str:
            h = json.loads(text)
            k = next(k for k in h if k != "__metadata__")
            return text.rstrip()[:-1] + ", " + json.dumps(k) + ": " + json.dumps(h[k]) + "}"
        edit_header(d / shards[0].name, dup)
        expect(dcpctl, "a key written twice in a header", d, 3, "duplicate-key")
        d = case("overlap")
        def overlap(text: str) -> str:
            h = json.loads(text)
            ks = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"])
            a, b = h[ks[0]], h[ks[1]]
            if a["data_offsets"][1] - a["data_offsets"][0] == b["data_offsets"][1] - b["data_offsets"][0]:
                b["data_offsets"] = list(a["data_offsets"])
            else:
                b["data_offsets"] = [b["data_offsets"][0] - 2, b["data_offsets"][1] - 2]
            return json.dumps(h)
        edit_header(d / shards[0].name, overlap)
        expect(dcpctl, "overlapping offsets", d, 3, "window-overlap")
        d = case("out-of-bounds")
        def oob(text: str) -> str:
            h = json.loads(text)
            k = max((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][1])
            h[k]["data_offsets"] = [h[k]["data_offsets"][0] + 8, h[k]["data_offsets"][1] + 8]
            return json.dumps(h)
        edit_header(d / shards[0].name, oob)
        expect(dcpctl, "offsets past the data section", d, 3, "window-out-of-file")
        d = case("shape")
        def shape(text: str) -> str:
            h = json.loads(text)
            k = next(k for k in h if k != "__metadata__" and len(h[k]["shape"]) == 2)
            h[k]["shape"][0] += 1
            return json.dumps(h)
        edit_header(d / shards[0].name, shape)
        expect(dcpctl, "a shape that is not its bytes", d, 3, "size-mismatch")
        d = case("bad-json")
        edit_header(d / shards[0].name, lambda t: t.replace("{", "[", 1))
        expect(dcpctl, "a header that is not JSON", d, 3, "header-invalid")
        d = case("gap")
        def gap(text: str) -> str:
            h = json.loads(text)
            ks = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"])
            k = ks[-1]
            h[k]["data_offsets"] = [h[k]["data_offsets"][0], h[k]["data_offsets"][1] - 2]
            h[k]["dtype"] = "U8"
            h[k]["shape"] = [h[k]["data_offsets"][1] - h[k]["data_offsets"][0]]
            return json.dumps(h)
        edit_header(d / shards[0].name, gap)
        expect(dcpctl, "bytes after the last tensor", d, 3, "offsets-gap")
        one = tmp / "one.safetensors"
        shutil.copy(base / shards[0].name, one)
        expect(dcpctl, "a single file as written", one, 0, None)
        edit_header(one, dup)
        expect(dcpctl, "a single file with a duplicated key", one, 3, "duplicate-key")

        # The config against the tensors.
        d = case("layer-dropped")
        resave(d, lambda n, t: [t.pop(k) for k in list(t) if k.startswith("model.layers.1.")])
        expect(dcpctl, "a layer dropped", d, 3, "layer-missing")
        d = case("layers-fewer")
        edit_json(d / "config.json", lambda j: j.__setitem__("num_hidden_layers", 1))
        expect(dcpctl, "config counts fewer layers", d, 3, "layer-unexpected")
        d = case("vocab")
        edit_json(d / "config.json", lambda j: j.__setitem__("vocab_size", 65))
        expect(dcpctl, "vocab_size against the embedding", d, 3, "vocab-size-mismatch")
        d = case("no-head")
        resave(d, lambda n, t: t.pop("lm_head.weight", None))
        expect(dcpctl, "lm_head lost, untied", d, 3, "lm-head-missing")
        d = case("no-embed")
        resave(d, lambda n, t: t.pop("model.embed_tokens.weight", None))
        expect(dcpctl, "the embedding lost", d, 3, "embedding-missing")
        d = case("dtype")
        edit_json(d / "config.json", lambda j: j.__setitem__("dtype", "float32"))
        expect(dcpctl, "config dtype float32, weights bfloat16", d, 3, "dtype-mismatch")
        # exported as it is, the same folder stops at the post-write check, which says how to cast it
        # (a Megatron run's float32 norms beside bf16 weights under a bf16 config); --dtype does
        r = run(dcpctl, "consolidate", d, "-o", f"{tmp / 'dtype-out'}/")
        check(r.returncode == 3 and "[dtype-mismatch]" in r.stderr and "--dtype DTYPE casts them to the config's" in r.stderr
              and not (tmp / "dtype-out").exists(), f"consolidate of the dtype case: exit {r.returncode}: {r.stderr.strip()[-300:]!r}")
        r = run(dcpctl, "consolidate", d, "-o", f"{tmp / 'dtype-out'}/", "--dtype", "fp32")
        check(r.returncode == 0, f"consolidate of the dtype case --dtype fp32: exit {r.returncode}: {r.stderr.strip()[-300:]!r}")
        d = case("sidecar")
        (d / "generation_config.json").unlink()
        expect(dcpctl, "generation_config.json lost, not asked for", d, 0, None)
        expect(dcpctl, "generation_config.json lost, --expect-assets", d, 3, "sidecar-missing", "--expect-assets", str(base))
        d = case("config-bad")
        (d / "config.json").write_text("{not json")
        expect(dcpctl, "a config.json that is not JSON", d, 3, "config-invalid")

        # Tied embeddings.
        tied = tmp / "tied"
        tiny_llama(tied, tie=True, dtype=torch.float32, shard=None)
        check(not any(k.startswith("lm_head") for k in load_file(tied / "model.safetensors")), "save_pretrained leaves a tied head out")
        expect(dcpctl, "tied as written", tied, 0, None)
        t = load_file(tied / "model.safetensors")
        t["lm_head.weight"] = t["model.embed_tokens.weight"].clone()
        save_file(t, tied / "model.safetensors", metadata={"format": "pt"})
        expect(dcpctl, "tied, lm_head equal to the embedding", tied, 0, None)
        t["lm_head.weight"] = t["model.embed_tokens.weight"] + 1
        save_file(t, tied / "model.safetensors", metadata={"format": "pt"})
        expect(dcpctl, "tied, lm_head different", tied, 3, "tied-head-differs")

        # Experts and MTP layers (DeepSeek-V3).
        ds = tmp / "deepseek"
        tiny_deepseek(ds)
        h = header_of(ds / "model.safetensors")
        check(h["model.layers.1.mlp.gate.e_score_correction_bias"]["dtype"] == "F32", "transformers keeps e_score_correction_bias in float32")
        expect(dcpctl, "deepseek as written (no MTP layer)", ds, 0, None, warning="mtp-layers-absent")
        expect(dcpctl, "deepseek, --require-mtp", ds, 3, "mtp-layer-missing", "--require-mtp")

        def ds_case(name: str) -> Path:
            d = tmp / name
            shutil.copytree(ds, d)
            return d
        d = ds_case("expert-dropped")
        resave(d, lambda n, t: [t.pop(k) for k in list(t) if ".experts.3." in k])
        expect(dcpctl, "an expert dropped", d, 3, "expert-missing")
        d = ds_case("experts-fewer")
        edit_json(d / "config.json", lambda j: j.__setitem__("n_routed_experts", 3))
        expect(dcpctl, "config counts fewer experts", d, 3, "expert-count-mismatch")
        # An MTP layer as DeepSeek-V3's release holds it: layer num_hidden_layers, beside the stack.
        mtp = ds_case("mtp")
        resave(mtp, lambda n, t: t.update({k.replace("model.layers.1.", "model.layers.2.", 1): v.clone() for k, v in list(t.items())
                                             if k.startswith("model.layers.1.")}))
        expect(dcpctl, "deepseek with its MTP layer", mtp, 0, None, "--require-mtp")
        d = tmp / "mtp-two"
        shutil.copytree(mtp, d)
        edit_json(d / "config.json", lambda j: j.__setitem__("num_nextn_predict_layers", 2))
        expect(dcpctl, "one MTP layer of 2 dropped", d, 3, "mtp-layer-missing")
        d = tmp / "mtp-none"
        shutil.copytree(mtp, d)
        edit_json(d / "config.json", lambda j: j.__setitem__("num_nextn_predict_layers", 0))
        expect(dcpctl, "an MTP layer the config does not count", d, 3, "layer-unexpected")

        # Quantized (transformers' FP8 quantizer's output).
        fp8 = fixtures / "layouts/hf_fp8_deepseek/ckpt"
        expect(dcpctl, "fp8 as written", fp8, 0, None)
        def fp8_case(name: str) -> Path:
            d = tmp / name
            shutil.copytree(fp8, d)
            return d
        d = fp8_case("scale-removed")
        resave(d, lambda n, t: t.pop("model.layers.0.mlp.down_proj.weight_scale_inv", None))
        expect(dcpctl, "a scale removed", d, 3, "quant-scale-missing")
        d = fp8_case("weight-removed")
        resave(d, lambda n, t: t.pop("model.layers.0.mlp.down_proj.weight", None))
        expect(dcpctl, "a quantized weight removed, its scale left", d, 3, "quant-scale-orphan")
        d = fp8_case("excluded")
        edit_json(d / "config.json", lambda j: j["quantization_config"]["modules_to_not_convert"].append("self_attn.o_proj"))
        expect(dcpctl, "modules_to_not_convert names a quantized module", d, 3, "quant-excluded-quantized")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("hf_verify")


if __name__ == "__main__":
    sys.exit(main())
