#!/usr/bin/env python3
"""GPT-OSS on Megatron, both ways (issue 69 item 2: the megatron family's gpt_oss variant), on
megatron_gpt_oss (make_megatron_gpt_oss.py: megatron-core 0.19.2 wrote a GPT-OSS-style GPTModel under
TP 2 x EP 2, expert TP 1: expert, router, QKV and o_proj biases, learnable softmax sinks, clamped SwiGLU,
sliding window, YaRN):

  * Megatron -> HF: `consolidate ckpt --map megatron --assets hf` chooses the gpt_oss variant by
    config.json's model_type and writes the plain-torch conversion whose transformers logits equal
    megatron's forward, bit for bit (gate/up interleaved, experts transposed, softmax_offset -> sinks);
    from_pretrained loads it with no missing or unexpected key and gives megatron's logits (1e-5);
  * the controls: the map without its `interleave` (gate/up left as [gate; up]) moves gate_up_proj and
    its bias and the logits (by more than 1e-3); without the expert-bias or sinks rules the export is
    refused, exit 5, naming the keys no rule covers, nothing written;
  * HF -> Megatron: `reshard hf --map megatron --format megatron` gives the tensors megatron-core wrote,
    bit for bit, and (in .venv-megatron, megatron_gpt_oss_load.py) megatron-core's own
    dist_checkpointing.load of it into a TP1 model computes the fixture's logits (1e-5);
  * `--quantize mxfp4` after the map: the bytes of the two-step path (consolidate --map, then
    consolidate --quantize mxfp4), as for the torchtitan GPT-OSS map.

    .venv/bin/python tests/e2e/megatron_gpt_oss_test.py build/cmd/dcpctl
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "interop")]
D = HERE.parent / "fixtures" / "layouts" / "megatron_gpt_oss"

from testlib import check, summary  # noqa: E402


def main(dcpctl: str) -> int:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    import dcp_oracle
    from megatron_format_test import megatron_python
    from skip import skip_or_fail

    doc = json.loads((D / "expected.json").read_text())
    want = load_file(str(D / "expected_hf.safetensors"))
    lg = load_file(str(D / "logits.safetensors"))

    def run(*args):
        return subprocess.run([dcpctl, *map(str, args)], capture_output=True, text=True)

    def folder(p: Path) -> dict:
        out = {}
        for f in sorted(p.glob("*.safetensors")):
            out.update(load_file(str(f)))
        return out

    def export(tmp: Path, name: str, *extra):
        """consolidate --map megatron (or a map file) into tmp/name/: (rc, stderr, --json's map, tensors, logits diff)."""
        out = tmp / name
        r = run("consolidate", D / "ckpt", "-o", f"{out}/", "--assets", D / "hf", "--json", *extra)
        if r.returncode != 0:
            return r.returncode, r.stderr, None, None, None
        model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32)
        check(not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), f"{name}: from_pretrained: {info}")
        with torch.no_grad():
            diff = (model.eval()(lg["tokens"]).logits.float() - lg["logits"]).abs().max().item()
        return 0, r.stderr, json.loads(r.stdout).get("map") or {}, folder(out), diff

    def wrong_map(tmp: Path, name: str, edit) -> Path:
        m = json.loads((ROOT / "src" / "maps" / "megatron.json").read_text())
        m["name"] = name
        del m["aliases"]
        m["layer_rules"] = [r for r in (edit(dict(r)) for r in m["layer_rules"]) if r is not None]
        p = tmp / f"{name}.json"
        p.write_text(json.dumps(m))
        return p

    # the map's semantics in plain torch (map_reference.py, independent of the C++ engine), both ways
    import map_reference as mr

    cfg_d = json.loads((D / "config.json").read_text())
    flat = {k: v for k, v in dcp_oracle.flat_state_from_dcp(D / "ckpt").items() if isinstance(v, torch.Tensor)}
    for src, ref, what in ((flat, want, "megatron->hf"), (want, flat, "hf->megatron")):
        out, rep = mr.apply_map(mr.load_map("megatron"), src, cfg_d)
        check(rep["direction"] == what and sorted(out) == sorted(ref) and all(torch.equal(out[k], ref[k]) for k in ref),
              f"map_reference {what}: not the fixture's tensors bit for bit")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # ---- Megatron -> Hugging Face ----
        rc, err, m, got, diff = export(tmp, "hf", "--map", "megatron")
        check(rc == 0, f"megatron -> hf: exit {rc}: {err[-800:]}")
        if rc == 0:
            check(m.get("variant") == "gpt_oss" and m.get("direction") == "megatron->hf" and m.get("mapped") == len(doc["model_keys"])
                  and not m.get("dropped") and not m.get("missing"),
                  f"megatron -> hf: map summary {({k: m.get(k) for k in ('variant', 'direction', 'mapped', 'dropped', 'missing')})}")
            check(sorted(got) == sorted(want), f"megatron -> hf: keys {sorted(set(got) ^ set(want))} differ")
            bad = [k for k in want if k in got and not (got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]))]
            check(not bad, f"megatron -> hf: {bad} differ from the conversion megatron's logits confirm")
            check(diff <= doc["logits"]["atol"], f"megatron -> hf: GptOssForCausalLM's logits differ from megatron's by {diff}")
            print(f"megatron_gpt_oss: GptOssForCausalLM on the export vs megatron's logits: max abs diff {diff:.3g}")
        # the control: the same family without the interleave (gate/up kept as megatron's [gate; up])
        def no_interleave(r):
            r.pop("interleave", None)
            return r
        rc, err, _, bad_t, bad_d = export(tmp, "halves", "--map", wrong_map(tmp, "megatron-halves", no_interleave))
        check(rc == 0, f"control without interleave: exit {rc}: {err[-600:]}")
        if rc == 0:
            moved = sorted(k for k in want if not torch.equal(bad_t[k], want[k]))
            check(moved == sorted(k for k in want if k.endswith(("gate_up_proj", "gate_up_proj_bias"))) and bad_d > 1e-3,
                  f"control without interleave: moved {moved}, logits diff {bad_d} (want every gate_up_proj and its bias, > 1e-3)")
            print(f"megatron_gpt_oss: gate/up not interleaved moves the logits by {bad_d:.3g}")
        # the expert biases or the sinks without a rule: refused, nothing written
        for what, drop, key in (("expert biases", ("mlp.experts.experts.linear_fc1.bias", "mlp.experts.experts.linear_fc2.bias"),
                                 "mlp.experts.experts.linear_fc1.bias"),
                                ("sinks", ("self_attention.core_attention.softmax_offset",), "core_attention.softmax_offset"),
                                ("router bias", ("mlp.router.bias",), "mlp.router.bias")):
            name = "no-" + what.replace(" ", "-")
            p = wrong_map(tmp, "megatron-" + name,
                          lambda r, drop=drop: None if r.get("megatron") in drop and "gpt_oss" in r.get("variants", []) else r)
            out = tmp / name
            r = run("consolidate", D / "ckpt", "-o", f"{out}/", "--assets", D / "hf", "--map", p)
            check(r.returncode == 5 and key in r.stderr and not out.exists(),
                  f"without the {what} rules: exit {r.returncode} (want 5 naming {key}), {r.stderr[-400:]!r}")
        # ---- the training arguments (megatron_gpt_oss_run: Megatron-LM's save_checkpoint, its args in the common state) ----
        run_ckpt = D.parent / "megatron_gpt_oss_run" / "run" / "iter_0000001"
        r = run("consolidate", run_ckpt, "-o", f"{tmp / 'run-hf'}/", "--map", "megatron", "--assets", D / "hf", "--json")
        check(r.returncode == 0, f"the run -> hf: exit {r.returncode}: {r.stderr[-800:]}")
        if r.returncode == 0:
            m = json.loads(r.stdout).get("map") or {}
            fields = {c["config"]: c for c in m.get("args_checked") or []}
            print(f"megatron_gpt_oss_run: args compared: {sorted(fields)}")
            for f in ("sliding_window", "layer_types", "rope_parameters.rope_type", "rope_parameters.factor",
                      "rope_parameters.original_max_position_embeddings", "rope_parameters.beta_fast", "rope_parameters.beta_slow",
                      "rope_parameters.truncate", "rope_parameters.rope_theta", "swiglu_limit", "swiglu_alpha",
                      "the model's learnable attention sinks (self_attn.sinks)", "GPT-OSS's (up + 1) in its gated MLP",
                      "num_experts_per_tok", "rms_norm_eps"):
                check(f in fields, f"the run: args_checked lacks {f}: {sorted(fields)}")
            check(bool(m.get("args_from")) and "common_state" in m["args_from"], f"the run: args_from {m.get('args_from')}")
            got = folder(tmp / "run-hf")
            check(sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want),
                  "the run -> hf: not megatron_gpt_oss's export")
        cfg = json.loads((D / "hf" / "config.json").read_text())
        for what, edit, word in (("sliding_window 8", lambda c: c.update(sliding_window=8), "sliding_window = 8"),
                                 ("layer types swapped", lambda c: c.update(layer_types=["full_attention", "sliding_attention"]),
                                  "layer_types"),
                                 ("YaRN factor 16", lambda c: c["rope_parameters"].update(factor=16.0), "rope_parameters.factor = 16"),
                                 ("YaRN truncate", lambda c: c["rope_parameters"].update(truncate=True), "rope_parameters.truncate = True"),
                                 ("no YaRN", lambda c: c.update(rope_parameters={"rope_type": "default", "rope_theta": 150000.0}),
                                  "rope_parameters.rope_type"),
                                 ("RoPE base", lambda c: c["rope_parameters"].update(rope_theta=10000.0), "rope_theta = 10000"),
                                 ("swiglu_limit 10", lambda c: c.update(swiglu_limit=10.0), "swiglu_limit = 10")):
            c = json.loads(json.dumps(cfg))
            edit(c)
            p = tmp / "bad-config.json"
            p.write_text(json.dumps(c))
            out = tmp / "bad-out"
            r = run("consolidate", run_ckpt, "-o", f"{out}/", "--map", "megatron", "--config", p)
            check(r.returncode == 5 and word in r.stderr and not out.exists(),
                  f"the run under a config.json with {what}: exit {r.returncode} (want 5 naming {word!r}): {r.stderr[-600:]!r}")
        # ---- Hugging Face -> Megatron ----
        back = tmp / "back"
        r = run("reshard", D / "hf", "-o", back, "--map", "megatron", "--format", "megatron")
        check(r.returncode == 0, f"hf -> megatron: exit {r.returncode}: {r.stderr[-800:]}")
        if r.returncode == 0:
            got = {k: v for k, v in dcp_oracle.flat_state_from_dcp(back).items() if isinstance(v, torch.Tensor)}
            ref = {k: v for k, v in dcp_oracle.flat_state_from_dcp(D / "ckpt").items() if isinstance(v, torch.Tensor)}
            check(sorted(got) == sorted(ref), f"hf -> megatron: keys {sorted(set(got) ^ set(ref))} differ")
            bad = [k for k in ref if k in got and not torch.equal(got[k], ref[k])]
            check(not bad, f"hf -> megatron: {bad} differ from what megatron-core wrote")
            mpy = megatron_python()
            if not mpy:
                skip_or_fail("megatron-core 0.19.2 is not importable: no .venv-megatron (tools/dev.sh setup makes it)")
            r = subprocess.run([mpy, HERE / "megatron_gpt_oss_load.py", back, D / "logits.safetensors", tmp / "found.json"],
                               capture_output=True, text=True, timeout=240)
            check(r.returncode == 0, f"megatron's load exit {r.returncode}: {r.stdout[-1500:]} {r.stderr[-3000:]}")
            if r.returncode == 0:
                f = json.loads((tmp / "found.json").read_text())
                print(f"megatron_gpt_oss: dist_checkpointing.load of the reverse: {f}")
                check(not f["missing"] and not f["unexpected"], f"megatron's load: missing {f['missing']}, unexpected {f['unexpected']}")
                check(f["max_abs_diff"] <= doc["logits"]["atol"], f"megatron's forward of the reverse differs by {f['max_abs_diff']}")
        # ---- --quantize mxfp4 after the map ----
        two = tmp / "two"
        r = run("consolidate", tmp / "hf", "-o", f"{two}/", "--quantize", "mxfp4", "-q")
        check(r.returncode == 0, f"consolidate --quantize mxfp4 of the export: exit {r.returncode}: {r.stderr[-600:]}")
        one = tmp / "one"
        r = run("consolidate", D / "ckpt", "-o", f"{one}/", "--map", "megatron", "--assets", D / "hf", "--quantize", "mxfp4", "--json", "-q")
        check(r.returncode == 0, f"consolidate --map megatron --quantize mxfp4: exit {r.returncode}: {r.stderr[-600:]}")
        if r.returncode == 0 and two.exists():
            check(json.loads(r.stdout).get("quantized", {}).get("weights") == 2 * doc["dims"]["layers"],
                  f"--map --quantize mxfp4: {json.loads(r.stdout).get('quantized')} (want the 4 expert stacks)")
            a, b = folder(one), folder(two)
            check(sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in b),
                  "--map megatron --quantize mxfp4: not the two-step path's tensors")
            check(json.loads((one / "config.json").read_text()).get("quantization_config")
                  == json.loads((two / "config.json").read_text()).get("quantization_config"),
                  "--map megatron --quantize mxfp4: quantization_config differs from the two-step path's")
    return summary("e2e-megatron-gpt-oss")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
