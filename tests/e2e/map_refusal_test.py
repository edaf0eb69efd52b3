#!/usr/bin/env python3
"""A key map never drops a model weight without saying so in the exit code (issue 49, item 1), end
to end on a checkpoint real megatron-core wrote.

    map_refusal_test.py DCPCTL FIXTURES_DIR

tests/fixtures/layouts/megatron_gpt_tp2 is megatron-core 0.19.2's GPT-2-style GPTModel (local
spec, LayerNorm with biases, biased linears, learned position embeddings; make_megatron.py).
`--map megatron-gpt` maps megatron-core's Llama/Qwen2 keys to Hugging Face's, the linear biases
included (linear_qkv, linear_proj, linear_fc1, linear_fc2: LlamaForCausalLM's attention_bias and
mlp_bias); four of this model's weights, the LayerNorms' biases and the learned position embeddings,
have no Hugging Face Llama tensor and no rule, so every write command (consolidate to a folder and
to one file, reshard, cast) and diff refuse with exit 5, naming the map and the four keys, and
write nothing, in a dry run too; excluding those four alone maps the rest (exit 0), the linear
biases among it. `--exclude` is how a user leaves them out on
purpose: then it maps (exit 0) and the summary and --json's `map.excluded` list them. The keys
outside the model (`_extra_state`, `common_state`: non-tensor items) are left out as before.

The config.json given for the map's numbers (1 layer, 2 heads, hidden 16, fc1 of 2 x 32 rows) is
written here: it only sizes the rules, and the output of the --exclude run is the mechanics of
--exclude, not a Llama (a GPT-2 MLP is not [gate; up]).
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import EXIT_OK, EXIT_UNSUPPORTED, check, expect_rc, run, summary  # noqa: E402

UNCOVERED = [  # sorted (dcpctl lists them in the checkpoint's order): LayerNorm biases, learned positions
    "decoder.final_layernorm.bias",
    "decoder.layers.mlp.linear_fc1.layer_norm_bias",
    "decoder.layers.self_attention.linear_qkv.layer_norm_bias",
    "embedding.position_embeddings.weight",
]
# the linear biases megatron-gpt maps (Llama's attention_bias and mlp_bias), which *bias also matches
LINEAR_BIASES = [
    "decoder.layers.mlp.linear_fc1.bias",
    "decoder.layers.mlp.linear_fc2.bias",
    "decoder.layers.self_attention.linear_proj.bias",
    "decoder.layers.self_attention.linear_qkv.bias",
]
CONFIG = {"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "hidden_size": 16,
          "intermediate_size": 32}


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    ckpt = fixtures / "layouts" / "megatron_gpt_tp2" / "ckpt"
    with tempfile.TemporaryDirectory(prefix="dcpctl-map-refusal-") as tmp:
        tmp = Path(tmp)
        cfg = tmp / "config.json"
        cfg.write_text(json.dumps(CONFIG))
        # The loss is found before any parameter is asked for: no --config needed to refuse.
        cases = {
            "consolidate to a folder": ["consolidate", ckpt, "-o", f"{tmp / 'hf'}/"],
            "consolidate to a file": ["consolidate", ckpt, "-o", tmp / "x.safetensors"],
            "consolidate --dry-run": ["consolidate", ckpt, "-o", tmp / "x.safetensors", "--dry-run", "--json"],
            "consolidate with --config": ["consolidate", ckpt, "-o", tmp / "x.safetensors", "--config", cfg],
            "reshard": ["reshard", ckpt, "-o", tmp / "re", "-w", "2"],
            "cast": ["cast", ckpt, "-o", tmp / "cast", "--dtype", "bf16"],
        }
        for what, argv in cases.items():
            r = run(dcpctl, *argv, "--map", "megatron-gpt")
            if expect_rc(r, EXIT_UNSUPPORTED, f"{what} --map megatron-gpt", "map megatron-gpt (megatron->hf)",
                         "would lose 4 of the model's weights", "--exclude GLOB", *UNCOVERED):
                listed = [ln.strip() for ln in r.stderr.splitlines() if ln.startswith("    ")]
                check(sorted(listed) == UNCOVERED, f"{what}: the refusal lists {listed}, wanted exactly {UNCOVERED}")
                check("_extra_state" not in r.stderr and "common_state" not in r.stderr,
                      f"{what}: the refusal names keys outside the model: {r.stderr}")
                check(not any(k in r.stderr for k in LINEAR_BIASES),
                      f"{what}: the refusal names a linear bias megatron-gpt maps: {r.stderr}")
            left = sorted(p.name for p in tmp.iterdir())
            check(left == ["config.json"], f"{what}: the refusal left {left} behind")
        # diff: the same map on the first input; the second (the same checkpoint) is on its side too.
        r = run(dcpctl, "diff", ckpt, ckpt, "--map", "megatron-gpt")
        expect_rc(r, EXIT_UNSUPPORTED, "diff --map megatron-gpt", "map megatron-gpt", *UNCOVERED)

        # --exclude: the same keys left out on purpose.
        excl = ["--exclude", "*bias", "--exclude", "embedding.position_embeddings.*"]
        r = run(dcpctl, "consolidate", ckpt, "-o", tmp / "x.safetensors", "--map", "megatron-gpt", "--config", cfg,
                "--dry-run", "--json", *excl)
        if expect_rc(r, EXIT_OK, "consolidate --map megatron-gpt --exclude ... --dry-run --json"):
            m = json.loads(r.stdout)["map"]
            check(sorted(m["excluded"]) == sorted(UNCOVERED + LINEAR_BIASES),
                  f"--json map.excluded {m['excluded']}: wanted the four and the linear biases (which *bias also matches)")
            check(m["model"] == ["embedding.", "decoder.", "output_layer.", "mtp.", "model.module."], f"--json map.model {m['model']}")
            check(all("_extra_state" in k or "common_state" in k for k in m["left_out"]) and m["left_out"],
                  f"--json map.left_out {m['left_out']}: only the non-tensor items outside the model")
            check(m["dropped"] == [] and m["missing"] == [] and m["drop_reasons"] == {}, f"--json map {m}")
        r = run(dcpctl, "consolidate", ckpt, "-o", tmp / "x.safetensors", "--map", "megatron-gpt", "--config", cfg, *excl)
        if expect_rc(r, EXIT_OK, "consolidate --map megatron-gpt --exclude ...", "excluded 8 by --exclude (first: "):
            check((tmp / "x.safetensors").is_file(), "consolidate --exclude: no output written")
        r = run(dcpctl, "reshard", ckpt, "-o", tmp / "re", "-w", "2", "--map", "megatron-gpt", "--config", cfg, "--json", *excl)
        if expect_rc(r, EXIT_OK, "reshard --map megatron-gpt --exclude ... --json"):
            check(len(json.loads(r.stdout)["map"]["excluded"]) == 8, "reshard --json: map.excluded")
        # Excluding only some of them still refuses, naming the rest.
        r = run(dcpctl, "consolidate", ckpt, "-o", tmp / "y.safetensors", "--map", "megatron-gpt", "--config", cfg,
                "--exclude", "*bias")
        if expect_rc(r, EXIT_UNSUPPORTED, "consolidate --exclude '*bias' (positions still uncovered)",
                     "would lose 1 of the model's weights", "embedding.position_embeddings.weight"):
            check("layer_norm_bias" not in r.stderr, f"the refusal names an excluded key: {r.stderr}")
        check(not (tmp / "y.safetensors").exists(), "the partial --exclude refusal left its output")
        # Excluding exactly the four maps the rest: the linear biases are mapped, not refused or left out.
        four = ["--exclude", "*layer_norm_bias", "--exclude", "decoder.final_layernorm.bias",
                "--exclude", "embedding.position_embeddings.*"]
        r = run(dcpctl, "consolidate", ckpt, "-o", tmp / "z.safetensors", "--map", "megatron-gpt", "--config", cfg,
                "--dry-run", "--json", *four)
        if expect_rc(r, EXIT_OK, "consolidate --map megatron-gpt --exclude the four --dry-run --json"):
            doc = json.loads(r.stdout)
            m = doc["map"]
            sources = {k for rec in doc["plan"] for k in rec["from"]["keys"]}
            check(sorted(m["excluded"]) == UNCOVERED and not any(k in m["left_out"] for k in LINEAR_BIASES)
                  and all(k in sources for k in LINEAR_BIASES),
                  f"--exclude the four: excluded {m['excluded']}, the linear biases planned from "
                  f"{sorted(k for k in sources if k in LINEAR_BIASES)}")
    return summary("map_refusal_test")


if __name__ == "__main__":
    sys.exit(main())
