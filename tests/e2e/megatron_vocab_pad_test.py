#!/usr/bin/env python3
"""Hugging Face -> Megatron-LM with a padded vocabulary (issue 69 item 1, check/megatron_vocab.h's
pad_megatron_vocab), round trip on megatron_vocab_{untied,tied} (make_megatron_vocab.py: Megatron-LM's
parse_args padded 250 tokens to 256 at TP 2, save_checkpoint wrote them):

  * consolidate the fixture to Hugging Face (250 rows: Megatron's padding cut), then
    reshard it --map megatron --format megatron --iteration 1 --tensor-model-parallel-size 2: --json's
    map.vocab says 250 rows padded to 256 (128 x 2), 6 added; map.megatron_args holds
    padded_vocab_size 256, no_save_optim / no_save_rng True;
  * in megatron-core's Python (.venv-megatron, megatron_vocab_pad_load.py): Megatron-LM's own
    load_checkpoint (its parse_args with TP 1, no --no-load-optim) resumes at iteration 1, and
    dist_checkpointing.load reads the same weights; megatron-core's forward of either equals
    transformers' logits of the Hugging Face model (first 250 columns, 1e-5); the 6 padding rows of
    the embedding (and output layer) are zeros;
  * --make-vocab-size-divisible-by 100 with --megatron-args saying 128 is exit 2 naming both; the
    options without --format megatron are exit 2.

    .venv/bin/python tests/e2e/megatron_vocab_pad_test.py build/cmd/dcpctl
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "interop")]
L = HERE.parent / "fixtures" / "layouts"

from testlib import check, summary  # noqa: E402


def main(dcpctl: str) -> int:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    from megatron_format_test import megatron_python
    from skip import skip_or_fail

    mpy = megatron_python()
    if not mpy:
        skip_or_fail("megatron-core 0.19.2 is not importable: no .venv-megatron (tools/dev.sh setup makes it)")
    for case, tied in (("megatron_vocab_untied", False), ("megatron_vocab_tied", True)):
        d = L / case
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            hf, run = tmp / "hf", tmp / "run"
            r = subprocess.run([dcpctl, "consolidate", d / "run" / "iter_0000001", "-o", f"{hf}/", "--map", "megatron",
                                "--assets", d / "hf", "-q"], capture_output=True, text=True)
            check(r.returncode == 0, f"{case}: consolidate exit {r.returncode}: {r.stderr[-600:]}")
            if r.returncode != 0:
                continue
            if not tied:  # refusals before anything is written
                (tmp / "args.json").write_text(json.dumps({"make_vocab_size_divisible_by": 128, "tensor_model_parallel_size": 2}))
                for extra, what in ((["--format", "megatron", "--megatron-args", tmp / "args.json", "--make-vocab-size-divisible-by", "100"],
                                     "--make-vocab-size-divisible-by 100, but --megatron-args says make_vocab_size_divisible_by = 128"),
                                    (["--tensor-model-parallel-size", "2", "-w", "1"], "they go with --format megatron")):
                    r = subprocess.run([dcpctl, "reshard", hf, "-o", tmp / "out", "--map", "megatron", *extra],
                                       capture_output=True, text=True)
                    check(r.returncode == 2 and what in r.stderr and not (tmp / "out").exists(),
                          f"{extra}: exit {r.returncode} (want 2), {r.stderr[-500:]}")
            r = subprocess.run([dcpctl, "reshard", hf, "-o", run, "--map", "megatron", "--format", "megatron", "--iteration", "1",
                                "--tensor-model-parallel-size", "2", "--json"], capture_output=True, text=True)
            check(r.returncode == 0, f"{case}: reshard exit {r.returncode}: {r.stderr[-800:]}")
            if r.returncode != 0:
                continue
            m = json.loads(r.stdout)["map"]
            v, a = m.get("vocab") or {}, (m.get("megatron_args") or {}).get("fields", {})
            check(v.get("vocab_size") == 250 and v.get("rows") == 256 and v.get("rows_added") == 6
                  and len(v.get("tensors", [])) == (1 if tied else 2) and "x tensor_model_parallel_size 2" in v.get("rule", ""),
                  f"{case}: --json map.vocab {v}")
            check(a.get("padded_vocab_size") == 256 and a.get("vocab_size") == 250 and a.get("no_save_optim") is True
                  and a.get("no_save_rng") is True and a.get("untie_embeddings_and_output_weights") is (not tied),
                  f"{case}: --json map.megatron_args.fields {a}")
            # transformers' logits of the Hugging Face model: what the Megatron side must compute
            want = load_file(str(d / "logits.safetensors"))
            model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
            with torch.no_grad():
                hf_logits = model(want["tokens"]).logits.float()
            save_file({"tokens": want["tokens"], "logits": hf_logits.contiguous()}, str(tmp / "hf_logits.safetensors"))
            r = subprocess.run([mpy, HERE / "megatron_vocab_pad_load.py", "tied" if tied else "untied", run,
                                tmp / "hf_logits.safetensors", tmp / "found.json"], capture_output=True, text=True, timeout=240)
            check(r.returncode == 0, f"{case}: megatron's load exit {r.returncode}: {r.stdout[-1500:]} {r.stderr[-3000:]}")
            if r.returncode != 0:
                continue
            f = json.loads((tmp / "found.json").read_text())
            print(f"{case}: {f}")
            check(f["iteration"] == 1, f"{case}: load_checkpoint resumed at {f['iteration']}, want 1")
            check(f["rows"] == 256 and f["padded_vocab_size"] == 256, f"{case}: rows {f['rows']}, padded {f['padded_vocab_size']}")
            check(f["load_checkpoint_vs_hf"] <= 1e-5 and f["dist_checkpointing_vs_hf"] <= 1e-5,
                  f"{case}: megatron's logits differ from transformers' by {f['load_checkpoint_vs_hf']} "
                  f"(load_checkpoint) / {f['dist_checkpointing_vs_hf']} (dist_checkpointing.load)")
            check(f["padding_max_abs"] == 0.0, f"{case}: the padding rows are not zeros (max |x| {f['padding_max_abs']})")
            check(f["same_weights"], f"{case}: load_checkpoint and dist_checkpointing.load gave different weights")
    return summary("e2e-megatron-vocab-pad")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
