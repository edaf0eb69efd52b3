#!/usr/bin/env python3
"""Megatron's padded vocabulary exported to Hugging Face (issue 69 item 1, check/megatron_vocab.h).

Fixtures megatron_vocab_{untied,tied} (tests/fixtures/layouts/make_megatron_vocab.py): Megatron-LM's
own parse_args pads a 250-token NullTokenizer to 256 rows (128 x TP 2), save_checkpoint writes the
model from 2 TP ranks (torch_dist, args in the common state); hf/config.json says vocab_size 250;
logits.safetensors holds megatron-core's own forward (first 250 columns).

  * consolidate --map megatron exits 0, writes embed_tokens (and lm_head) of 250 rows, --json's
    map.vocab says 6 rows dropped, the rule and where it was read; transformers' logits of the
    export equal megatron's within 1e-5 (the first 250 rows: taking them from the back, i.e. the
    padding from the front, moves them by 10, make_megatron_vocab.py);
  * diff --map of the checkpoint against the export exits 0; stats --map shows 250 rows;
  * a config.json whose vocab_size the rows are not the padding of (200, while args.vocab_size is
    250) is exit 5, naming the counts, and nothing is written.

    .venv/bin/python tests/e2e/megatron_vocab_test.py build/cmd/dcpctl
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
L = HERE.parent / "fixtures" / "layouts"

from testlib import check, summary  # noqa: E402


def main(dcpctl: str) -> int:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    for case, heads in (("megatron_vocab_untied", 2), ("megatron_vocab_tied", 1)):
        d = L / case
        ckpt = d / "run" / "iter_0000001"
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "hf"
            r = subprocess.run([dcpctl, "consolidate", ckpt, "-o", f"{out}/", "--map", "megatron", "--assets", d / "hf", "--json"],
                               capture_output=True, text=True)
            check(r.returncode == 0, f"{case}: consolidate exit {r.returncode}: {r.stderr[-800:]}")
            if r.returncode != 0:
                continue
            v = json.loads(r.stdout)["map"].get("vocab") or {}
            check(v.get("rows") == 256 and v.get("rows_dropped") == 6 and v.get("vocab_size") == 250
                  and len(v.get("tensors", [])) == heads and "128 x tensor_model_parallel_size 2" in v.get("rule", "")
                  and "common_state" in v.get("rule_from", ""), f"{case}: --json map.vocab {v}")
            sd = load_file(str(out / "model.safetensors"))
            check(sd["model.embed_tokens.weight"].shape[0] == 250, f"{case}: embed_tokens {sd['model.embed_tokens.weight'].shape}")
            want = load_file(str(d / "logits.safetensors"))
            m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
            with torch.no_grad():
                got = m(want["tokens"]).logits.float()
            diff = (got - want["logits"]).abs().max().item()
            check(diff <= 1e-5, f"{case}: transformers' logits of the export differ from megatron's by {diff}")
            print(f"{case}: logits max abs diff {diff:.3g}")
            r = subprocess.run([dcpctl, "diff", ckpt, out, "--map", "megatron", "--config", d / "hf" / "config.json"],
                               capture_output=True, text=True)
            check(r.returncode == 0, f"{case}: diff --map exit {r.returncode}: {r.stdout[-600:]} {r.stderr[-600:]}")
        r = subprocess.run([dcpctl, "stats", ckpt, "--map", "megatron", "--config", d / "hf" / "config.json", "--json"],
                           capture_output=True, text=True)
        shapes = {t.get("key") or t.get("name"): t.get("shape") for t in json.loads(r.stdout).get("tensors", [])} if r.returncode == 0 else {}
        check(shapes.get("model.embed_tokens.weight") == [250, 16], f"{case}: stats --map exit {r.returncode}, embed {shapes.get('model.embed_tokens.weight')}")
        with tempfile.TemporaryDirectory() as tmp:
            cfg = json.loads((d / "hf" / "config.json").read_text())
            cfg["vocab_size"] = 200
            (Path(tmp) / "config.json").write_text(json.dumps(cfg))
            out = Path(tmp) / "out"
            r = subprocess.run([dcpctl, "consolidate", ckpt, "-o", f"{out}/", "--map", "megatron", "--config", Path(tmp) / "config.json"],
                               capture_output=True, text=True)
            check(r.returncode == 5 and "256 rows" in r.stderr and "args.vocab_size (the tokenizer's) = 250, not 200" in r.stderr
                  and not out.exists(), f"{case}: vocab_size 200: exit {r.returncode} (want 5), {r.stderr[-600:]}")
    return summary("e2e-megatron-vocab")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
