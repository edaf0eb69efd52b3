#!/usr/bin/env python3
"""A/B of two dcpctl binaries' outputs: every derived-tensor path (dequantize fp8 blocks and MXFP4,
LoRA adapter and merge, key maps, casts) on the repository's fixtures, each output compared byte for
byte (files and folders), and the --json summaries compared with timings removed.

For refactors that must not change a byte (the view layer, issue 48's first step):

    tools/ab_outputs.py OLD/dcpctl build/cmd/dcpctl        # exit 0: every output identical
    tools/ab_outputs.py OLD NEW --new-key map.variant      # a summary field NEW adds is not a difference
    tools/ab_outputs.py OLD NEW --only map --only diff     # the cases whose name holds a word

The torchrun cases run each binary's ranks with LibTorch's plugin beside it (a build's cmd/), else
DCPCTL_TORCH_PLUGIN (a copied binary: DCPCTL_TORCH_PLUGIN=/work/main/build/cmd/libdcpctl_torch.so).

Run with the project's virtualenv (.venv/bin/python): the MXFP4 case writes its GPT-OSS folder with
transformers, as tests/interop/fp8_test.py does. Prints one line per case; exit 1 on any difference.
"""
import filecmp
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
L = ROOT / "tests/fixtures/layouts"
sys.path.insert(0, str(ROOT / "tests/interop"))

CASES = [
    # (name, args); {out} is the output path, each case run once per binary.
    ("fp8-deepseek bf16 .safetensors", ["consolidate", L / "hf_fp8_deepseek/ckpt", "--dtype", "bf16", "-o", "{out}.safetensors"]),
    ("fp8-deepseek fp32 HF folder", ["consolidate", L / "hf_fp8_deepseek/ckpt", "--dtype", "fp32", "-o", "{out}/"]),
    ("fp8-deepseek bf16 .pt", ["consolidate", L / "hf_fp8_deepseek/ckpt", "--dtype", "bf16", "-o", "{out}.pt"]),
    ("fp8-deepseek bf16 reshard -w 3", ["reshard", L / "hf_fp8_deepseek/ckpt", "--dtype", "bf16", "-w", "3", "-o", "{out}"]),
    ("fp8-deepseek kept as saved", ["consolidate", L / "hf_fp8_deepseek/ckpt", "-o", "{out}.safetensors"]),
    ("fp8-transformers bf16", ["consolidate", L / "hf_fp8_transformers/ckpt", "--dtype", "bf16", "-o", "{out}.safetensors"]),
    ("fp8-block fp16 HF folder", ["consolidate", L / "hf_fp8_block", "--dtype", "fp16", "-o", "{out}/"]),
    ("fp8-deepseek --map torchtitan", ["consolidate", L / "hf_fp8_deepseek/ckpt", "--dtype", "fp32", "--map", "torchtitan-deepseek-v3",
                                       "-o", "{out}.safetensors"]),
    ("lora adapter", ["consolidate", L / "peft_lora/ckpt", "--lora", "adapter", "-o", "{out}/"]),
    ("lora merge HF folder", ["consolidate", L / "peft_lora/ckpt", "--lora", "merge", "-o", "{out}/", "--assets", L / "peft_lora/base"]),
    ("lora merge bf16 .pt", ["consolidate", L / "peft_lora/ckpt", "--lora", "merge", "--dtype", "bf16", "-o", "{out}.pt"]),
    ("lora merge --map", ["consolidate", L / "peft_lora/ckpt", "--lora", "merge", "--map", "torchtitan-llama3", "--config",
                          L / "peft_lora/base/config.json", "-o", "{out}.safetensors"]),
    ("lora dora adapter", ["consolidate", L / "peft_dora/ckpt", "--lora", "adapter", "--lora-config",
                                        L / "peft_dora/expected_adapter/adapter_config.json", "-o", "{out}/"]),
    ("lora accelerate merge", ["consolidate", L / "peft_accelerate/state/pytorch_model_fsdp_0", "--lora", "merge", "--lora-alpha", "16", "-o", "{out}.safetensors"]),
    ("map qwen3 HF folder", ["consolidate", L / "titan_qwen3/run/step-2", "--map", "torchtitan-qwen3", "--assets", L / "titan_qwen3/hf", "-o", "{out}/"]),
    ("map deepseek-v3 reshard", ["reshard", L / "titan_deepseek_v3/hf", "--map", "torchtitan-deepseek-v3", "-w", "2", "-o", "{out}"]),
    ("map deepseek-v3 --quantize fp8-block", ["consolidate", L / "titan_deepseek_v3/run/step-2", "--map", "torchtitan-deepseek-v3", "--config",
                                             L / "titan_deepseek_v3/config.json", "--quantize", "fp8-block", "-o", "{out}/"]),
    ("map gpt-oss torchtitan->hf (expert_bias_E zeros, dropped)", ["consolidate", L / "titan_gpt_oss/run/step-2", "--map",
                                                                  "torchtitan-gpt-oss", "--config", L / "titan_gpt_oss/config.json", "-o", "{out}/"]),
    ("map qwen3_5 torchtitan->hf (expert_bias_E zeros, dropped)", ["consolidate", L / "titan_qwen3_5/run/step-2", "--map",
                                                                   "torchtitan-qwen3_5", "--config", L / "titan_qwen3_5/config.json", "-o", "{out}/"]),
    ("map gpt-oss cast bf16", ["cast", L / "titan_gpt_oss/hf", "--map", "torchtitan-gpt-oss", "--dtype", "bf16", "-o", "{out}"]),
    # key maps from and to megatron-core (the megatron map family and its old names)
    *[(f"map {f} megatron->hf --map {m}", ["consolidate", L / f / "ckpt", "--map", m, "--assets", L / f / "hf", "-o", "{out}/"])
      for f, m in [("megatron_llama", "megatron-gpt"), ("megatron_qwen", "megatron-gpt"), ("megatron_qwen3", "megatron-gpt"),
                   ("megatron_qwen3_moe", "megatron-gpt"), ("megatron_qwen2_moe", "megatron-gpt"), ("megatron_qwen3_mtp", "megatron-gpt"),
                   ("megatron_qwen3_moe_mixed", "megatron-gpt"), ("megatron_qwen3_moe_mixed", "megatron-gpt-layers"),
                   ("megatron_mixtral", "megatron-mixtral"), ("megatron_mixtral", "megatron-gpt")]],
    *[(f"map {f} hf->megatron --map {m}", ["reshard", L / f / "hf", "--map", m, "-w", "2", "-o", "{out}"])
      for f, m in [("megatron_llama", "megatron-gpt"), ("megatron_qwen", "megatron-gpt"), ("megatron_qwen3", "megatron-gpt"),
                   ("megatron_qwen3_moe", "megatron-gpt"), ("megatron_qwen2_moe", "megatron-gpt"), ("megatron_qwen3_mtp", "megatron-gpt"),
                   ("megatron_qwen3_moe_mixed", "megatron-gpt-layers"), ("megatron_qwen3_moe_mixed", "megatron-gpt"),
                   ("megatron_mixtral", "megatron-mixtral"), ("megatron_mixtral", "megatron-gpt")]],
    ("map qwen3_moe hf->megatron --format megatron", ["reshard", L / "megatron_qwen3_moe/hf", "--map", "megatron-gpt", "-w", "2",
                                                      "--format", "megatron", "-o", "{out}"]),
    ("map megatron-fsdp->hf", ["consolidate", L / "run_megatron_fsdp/run/iter_0000002", "--map", "megatron-gpt", "--assets",
                               L / "megatron_fsdp_hf", "-o", "{out}/"]),
    ("map megatron-gpt tp2 dry-run", ["consolidate", L / "megatron_gpt_tp2/ckpt", "--map", "megatron-gpt", "--dry-run", "-o", "{out}/"]),
    # the map's write paths (issue 58 item 1: one path for every map): .pt (stored records), --dtype,
    # --max-memory, the tied head (titan_qwen3 ties: an HF folder leaves it out, a reshard from hf/
    # copies it), --exclude, and --dry-run --json (every record's pieces and memory need, the deal)
    ("map llama3 .pt", ["consolidate", L / "titan_llama3/run/step-2", "--map", "torchtitan-llama3", "--config",
                        L / "titan_llama3/config.json", "-o", "{out}.pt"]),
    ("map qwen3 .pt (tied head kept)", ["consolidate", L / "titan_qwen3/run/step-2", "--map", "torchtitan-qwen3", "--config",
                                        L / "titan_qwen3/config.json", "-o", "{out}.pt"]),
    ("map llama3 --dtype bf16 .safetensors", ["consolidate", L / "titan_llama3/run/step-2", "--map", "torchtitan-llama3", "--config",
                                              L / "titan_llama3/config.json", "--dtype", "bf16", "-o", "{out}.safetensors"]),
    ("map llama3 --max-memory 16KiB", ["consolidate", L / "titan_llama3/run/step-2", "--map", "torchtitan-llama3", "--config",
                                       L / "titan_llama3/config.json", "--max-memory", "16KiB", "-o", "{out}.safetensors"]),
    ("map qwen3 --exclude lm_head HF folder", ["consolidate", L / "titan_qwen3/run/step-2", "--map", "torchtitan-qwen3", "--exclude",
                                               "output.weight", "--assets", L / "titan_qwen3/hf", "-o", "{out}/"]),
    ("map qwen3 hf->titan reshard (tied head copied)", ["reshard", L / "titan_qwen3/hf", "--map", "torchtitan-qwen3", "-w", "2", "-o", "{out}"]),
    ("map qwen3 HF folder --dry-run (tied)", ["consolidate", L / "titan_qwen3/run/step-2", "--map", "torchtitan-qwen3", "--assets",
                                              L / "titan_qwen3/hf", "--dry-run", "-o", "{out}/"]),
    ("map llama3 .pt --dry-run", ["consolidate", L / "titan_llama3/run/step-2", "--map", "torchtitan-llama3", "--config",
                                  L / "titan_llama3/config.json", "--dry-run", "-o", "{out}.pt"]),
    ("map deepseek-v3 reshard --dry-run", ["reshard", L / "titan_deepseek_v3/hf", "--map", "torchtitan-deepseek-v3", "-w", "2",
                                           "--dry-run", "-o", "{out}"]),
    ("map deepseek-v3 .safetensors --dry-run", ["consolidate", L / "titan_deepseek_v3/run/step-2", "--map", "torchtitan-deepseek-v3",
                                                "--config", L / "titan_deepseek_v3/config.json", "--dry-run", "-o", "{out}.safetensors"]),
    ("map deepseek-v3 --quantize --dry-run", ["consolidate", L / "titan_deepseek_v3/run/step-2", "--map", "torchtitan-deepseek-v3",
                                              "--config", L / "titan_deepseek_v3/config.json", "--quantize", "fp8-block", "--dry-run",
                                              "-o", "{out}/"]),
    # --quantize after the map: outputs no codec takes (gpt-oss's transposed expert stacks) are the
    # map table's derived tensors, streamed into a .pt (the written map table stores such a record)
    ("map gpt-oss --quantize fp8-block .pt", ["consolidate", L / "titan_gpt_oss/run/step-2", "--map", "torchtitan-gpt-oss", "--config",
                                              L / "titan_gpt_oss/config.json", "--quantize", "fp8-block", "-o", "{out}.pt"]),
    ("map gpt-oss --quantize fp8-block .pt --dry-run", ["consolidate", L / "titan_gpt_oss/run/step-2", "--map", "torchtitan-gpt-oss",
                                                        "--config", L / "titan_gpt_oss/config.json", "--quantize", "fp8-block",
                                                        "--dry-run", "-o", "{out}.pt"]),
    ("map deepseek-v3 --quantize fp8-block .pt", ["consolidate", L / "titan_deepseek_v3/run/step-2", "--map", "torchtitan-deepseek-v3",
                                                  "--config", L / "titan_deepseek_v3/config.json", "--quantize", "fp8-block", "-o", "{out}.pt"]),
    ("map gpt-oss .pt", ["consolidate", L / "titan_gpt_oss/run/step-2", "--map", "torchtitan-gpt-oss", "--config",
                         L / "titan_gpt_oss/config.json", "-o", "{out}.pt"]),
    ("map megatron_qwen3_moe hf->megatron --dry-run", ["reshard", L / "megatron_qwen3_moe/hf", "--map", "megatron-gpt", "-w", "2",
                                                       "--dry-run", "-o", "{out}"]),
    ("map lora merge --map --dry-run", ["consolidate", L / "peft_lora/ckpt", "--lora", "merge", "--map", "torchtitan-llama3", "--config",
                                        L / "peft_lora/base/config.json", "--dry-run", "-o", "{out}.safetensors"]),
    # diff and stats through a map (--json: every key's status and numbers, the audit's counts)
    ("diff --map llama3 titan vs hf", ["diff", L / "titan_llama3/run/step-2", L / "titan_llama3/hf", "--map", "torchtitan-llama3",
                                       "--config", L / "titan_llama3/config.json"]),
    ("diff --map qwen3 titan vs hf (tied)", ["diff", L / "titan_qwen3/run/step-2", L / "titan_qwen3/hf", "--map", "torchtitan-qwen3",
                                             "--config", L / "titan_qwen3/config.json"]),
    ("diff --map deepseek-v3 titan vs hf", ["diff", L / "titan_deepseek_v3/run/step-2", L / "titan_deepseek_v3/hf", "--map",
                                            "torchtitan-deepseek-v3", "--config", L / "titan_deepseek_v3/config.json"]),
    ("diff --map megatron_qwen3_moe vs hf", ["diff", L / "megatron_qwen3_moe/ckpt", L / "megatron_qwen3_moe/hf", "--map", "megatron-gpt",
                                             "--config", L / "megatron_qwen3_moe/hf/config.json"]),
    ("diff --map megatron_qwen3_moe without a config (refused)", ["diff", L / "megatron_qwen3_moe/ckpt", L / "megatron_qwen3_moe/hf", "--map",
                                                                  "megatron-gpt"]),
    ("diff --map hf vs megatron (B mapped too: on A's side)", ["diff", L / "megatron_qwen3_moe/hf", L / "megatron_qwen3_moe/ckpt", "--map",
                                                               "megatron-gpt", "--config", L / "megatron_qwen3_moe/hf/config.json"]),
    ("diff --map llama3 titan vs itself (both mapped)", ["diff", L / "titan_llama3/run/step-2", L / "titan_llama3/run/step-2",
                                                                  "--map", "torchtitan-llama3", "--config", L / "titan_llama3/config.json"]),
    ("diff --map llama3 titan vs qwen3 hf (values and shapes differ)", ["diff", L / "titan_llama3/run/step-2", L / "titan_qwen3/hf",
                                                                        "--map", "torchtitan-llama3", "--config", L / "titan_llama3/config.json"]),
    ("diff --map --include llama3 (B's names not selected)", ["diff", L / "titan_llama3/run/step-2", L / "titan_llama3/hf", "--map", "torchtitan-llama3",
                                    "--config", L / "titan_llama3/config.json", "--include", "layers.0.*"]),
    ("stats --map llama3", ["stats", L / "titan_llama3/run/step-2", "--map", "torchtitan-llama3", "--config", L / "titan_llama3/config.json"]),
    ("stats --map deepseek-v3", ["stats", L / "titan_deepseek_v3/run/step-2", "--map", "torchtitan-deepseek-v3", "--config",
                                 L / "titan_deepseek_v3/config.json"]),
    ("stats --map megatron_qwen3_moe", ["stats", L / "megatron_qwen3_moe/ckpt", "--map", "megatron-gpt", "--config",
                                        L / "megatron_qwen3_moe/hf/config.json"]),
    ("stats --map gpt-oss", ["stats", L / "titan_gpt_oss/run/step-2", "--map", "torchtitan-gpt-oss", "--config", L / "titan_gpt_oss/config.json"]),
    ("sample bf16 HF folder", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--select", "app.model", "--dtype", "bf16", "-o", "{out}/"]),
    # the precision policy: a DIR/ output records --keep-dtype's globs in its headers' __metadata__
    # (meta/keep_dtype_entry.h); a file output and a DIR/ without --keep-dtype do not
    ("precision --keep-dtype HF folder", ["consolidate", L / "titan_deepseek_v3/hf", "--dtype", "bf16", "--keep-dtype", "model.norm.*",
                                          "-o", "{out}/"]),
    ("precision --keep-dtype .safetensors", ["consolidate", L / "titan_deepseek_v3/hf", "--dtype", "bf16", "--keep-dtype", "model.norm.*",
                                             "-o", "{out}.safetensors"]),
    ("precision --dtype bf16 HF folder", ["consolidate", L / "titan_deepseek_v3/hf", "--dtype", "bf16", "-o", "{out}/"]),
    ("sample reshard -w 4", ["reshard", ROOT / "tests/fixtures/sample/ckpt", "-w", "4", "-o", "{out}"]),
    ("sample cast fp16", ["cast", ROOT / "tests/fixtures/sample/ckpt", "--dtype", "fp16", "-o", "{out}"]),
    # the options' checks (src/args/: each command's options checked in one place for the command
    # line and Python): refusals, their messages and their order; and the dry runs' plan, as text
    # ("text": no --json) and as --json
    *[(f"options: {what}", args) for what, args in [
        ("stats --depth -1", ["stats", ROOT / "tests/fixtures/sample/ckpt", "--depth", "-1"]),
        ("stats --config without --map", ["stats", ROOT / "tests/fixtures/sample/ckpt", "--config", L / "titan_llama3/config.json"]),
        ("stats --max-memory lots", ["stats", ROOT / "tests/fixtures/sample/ckpt", "--max-memory", "lots"]),
        ("stats --filter --include --exclude --select", ["stats", ROOT / "tests/fixtures/sample/ckpt", "--select", "app.model", "--filter",
                                                         "*weight*", "--include", "*norm*", "--exclude", "*layers.1*", "--threads", "0"]),
        ("diff --config without --map", ["diff", ROOT / "tests/fixtures/sample/ckpt", ROOT / "tests/fixtures/sample/ckpt", "--config",
                                         L / "titan_llama3/config.json"]),
        ("diff --max-memory 0", ["diff", ROOT / "tests/fixtures/sample/ckpt", ROOT / "tests/fixtures/sample/ckpt", "--max-memory", "0"]),
        ("diff --atol --rtol --select", ["diff", ROOT / "tests/fixtures/sample/ckpt", ROOT / "tests/fixtures/sample/ckpt", "--atol", "0.5",
                                         "--rtol", "0", "--select", "app.model", "--equal-nan", "--ignore-dtype"]),
        ("reshard without -w", ["reshard", ROOT / "tests/fixtures/sample/ckpt", "-o", "{out}"]),
        ("reshard -w 2 --layout keep", ["reshard", ROOT / "tests/fixtures/sample/ckpt", "-w", "2", "--layout", "keep", "-o", "{out}"]),
        ("reshard --iteration", ["reshard", ROOT / "tests/fixtures/sample/ckpt", "-w", "2", "--iteration", "3", "-o", "{out}"]),
        ("reshard --megatron-args without --format megatron", ["reshard", ROOT / "tests/fixtures/sample/ckpt", "-w", "2", "--megatron-args",
                                                              "args.json", "-o", "{out}"]),
        ("reshard --dry-run text", ["text", "reshard", ROOT / "tests/fixtures/sample/ckpt", "-w", "3", "--dtype", "bf16", "-n", "-o", "{out}"]),
        ("cast --dry-run text", ["text", "cast", ROOT / "tests/fixtures/sample/ckpt", "--dtype", "bf16", "-n", "-o", "{out}"]),
        ("consolidate --dry-run text", ["text", "consolidate", ROOT / "tests/fixtures/sample/ckpt", "--select", "app.model", "-n", "-o",
                                        "{out}.safetensors"]),
        ("consolidate text", ["text", "consolidate", ROOT / "tests/fixtures/sample/ckpt", "--select", "app.model", "--dtype", "bf16", "-o",
                              "{out}.safetensors"]),
        ("consolidate --iteration", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--iteration", "3", "-o", "{out}.safetensors"]),
        ("consolidate --format megatron --flat", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--format", "megatron", "--flat",
                                                  "-o", "{out}"]),
        ("consolidate --lora-name without --lora", ["consolidate", L / "peft_lora/ckpt", "--lora-name", "x", "-o", "{out}/"]),
        ("consolidate --lora merge --lora-base", ["consolidate", L / "peft_lora/ckpt", "--lora", "merge", "--lora-base", "x", "-o", "{out}/"]),
        ("consolidate --lora-alpha -1", ["consolidate", L / "peft_lora/ckpt", "--lora", "merge", "--lora-alpha=-1", "-o", "{out}/"]),
        ("consolidate --lora adapter --format hf", ["consolidate", L / "peft_lora/ckpt", "--lora", "adapter", "--format", "hf", "-o", "{out}/"]),
        ("consolidate --max-shard-size of a file", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--max-shard-size", "1GB", "-o",
                                                    "{out}.safetensors"]),
        ("consolidate an unknown output name", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "-o", "{out}.xyz"]),
        ("consolidate --dtype fp9", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--dtype", "fp9", "-o", "{out}.safetensors"]),
        ("consolidate --keep-dtype without --dtype", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--keep-dtype", "*", "-o",
                                                      "{out}.safetensors"]),
        ("consolidate --cast-all --keep-dtype", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--dtype", "bf16", "--cast-all",
                                                 "--keep-dtype", "*", "-o", "{out}.safetensors"]),
        ("consolidate --quantize-block without --quantize", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--quantize-block", "3x3",
                                                             "-o", "{out}/"]),
        ("consolidate --quantize-block 1y2", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--quantize", "fp8-block",
                                              "--quantize-block", "1y2", "-o", "{out}/"]),
        ("consolidate --quantize-group 12", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--quantize", "w4a16",
                                             "--quantize-group", "12", "-o", "{out}/"]),
        ("consolidate --assets of a file", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--assets", L / "titan_llama3/hf", "-o",
                                            "{out}.safetensors"]),
        ("consolidate --outtype of a .safetensors", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--outtype", "q8_0", "-o",
                                                     "{out}.safetensors"]),
        ("consolidate --config without --map", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--config", L / "titan_llama3/config.json",
                                                "-o", "{out}.safetensors"]),
        ("consolidate --parallel-write of a file", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--parallel-write", "-o",
                                                    "{out}.safetensors"]),
        ("consolidate --parallel-write without torchrun", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--parallel-write", "-o",
                                                           "{out}/"]),
    ]],
]


# Keys the new binary's summary may add (a field an old binary did not print): dropped from the new
# summary when the old one lacks them, and said so (--new-key map.variant: the megatron map family's
# chosen variant).
NEW_KEYS: list[str] = []


def drop_new(old, new):
    for path in NEW_KEYS:
        *head, last = path.split(".")
        a, b = old, new
        for h in head:
            a = a.get(h) if isinstance(a, dict) else None
            b = b.get(h) if isinstance(b, dict) else None
        if isinstance(b, dict) and last in b and not (isinstance(a, dict) and last in a):
            del b[last]
    return new


def scrub(summary):
    """The summary without what differs run to run (times, rates, paths under the work folder) or
    binary to binary without changing a byte (how much of the output its manifest read back)."""
    if isinstance(summary, dict):
        return {k: scrub(v) for k, v in summary.items()
                if not any(w in k for w in ("second", "elapsed", "per_s", "rss", "time", "read_back"))}
    if isinstance(summary, list):
        return [scrub(v) for v in summary]
    return summary


UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def same_file(a: Path, b: Path) -> bool:
    """Byte for byte; a DCP .metadata less what every run writes anew (its save_id, a uuid4, and the
    output's path in its storage_meta: the two runs' paths differ in one letter, -a and -b)."""
    if a.name.endswith("dcpctl-manifest.json"):  # dcpctl's manifest: every digest but the .metadata's (above)
        ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
        for j in (ja, jb):
            for v in j.values():
                if isinstance(v, dict):
                    v.pop(".metadata", None)
        return ja == jb
    if a.name != ".metadata":
        return filecmp.cmp(a, b, shallow=False)
    da, db = a.read_bytes(), b.read_bytes()
    da = UUID.sub(b"U" * 36, da).replace(str(a.parent).encode(), b"P" * len(str(a.parent)))
    db = UUID.sub(b"U" * 36, db).replace(str(b.parent).encode(), b"P" * len(str(b.parent)))
    return da == db


def same_tree(a: Path, b: Path) -> str:
    if a.is_file() or b.is_file():
        return "" if a.is_file() and b.is_file() and same_file(a, b) else f"{a.name} differs"
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only:
        return f"files differ: {cmp.left_only} / {cmp.right_only}"
    for f in cmp.common_files:
        if not same_file(a / f, b / f):
            return f"{f} differs"
    for d in cmp.common_dirs:
        if why := same_tree(a / d, b / d):
            return why
    return ""


def ranks(argv: list, n: int) -> subprocess.CompletedProcess:
    """`argv` as torchrun runs it: n processes (gloo) with RANK, WORLD_SIZE, MASTER_*; rank 0's
    output and the worst exit status."""
    import os
    import socket
    env = dict(os.environ)
    # LibTorch's plugin beside the binary (a build's cmd/), else DCPCTL_TORCH_PLUGIN as given
    if (Path(argv[0]).parent / "libdcpctl_torch.so").exists():
        env.pop("DCPCTL_TORCH_PLUGIN", None)
    for attempt in range(2):
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        procs = [subprocess.Popen(argv + ["--timeout", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(env, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))) for r in range(n)]
        res = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
        if attempt == 0 and any("ddress already in use" in err for _, err, _ in res):
            continue
        break
    rc = next((c for _, _, c in res if c != 0), 0)
    return subprocess.CompletedProcess(argv, rc, res[0][0], "".join(err for _, err, _ in res))


def run(binary: str, args: list, out: Path):
    # ("torchrun", N, *args): N processes as torchrun launches them
    n = 1
    if args[0] == "torchrun":
        n, args = args[1], args[2:]
    # --json everywhere but ("text", *args): what a command prints without it; -q (no progress
    # line) where it means that: diff's -q stops at the first difference
    text = args[0] == "text"
    args = args[1:] if text else args
    quiet = ["-q"] if args[0] in ("consolidate", "reshard", "cast") and not text else []
    argv = [binary] + [str(x).replace("{out}", str(out)) for x in args] + ([] if text else ["--json"]) + quiet
    r = subprocess.run(argv, capture_output=True, text=True) if n == 1 else ranks(argv, n)
    summary = None
    try:
        summary = json.loads(r.stdout.replace(str(out.parent), "WORK"))
    except json.JSONDecodeError:
        summary = r.stdout.replace(str(out.parent), "WORK") if text else None
    if isinstance(summary, dict):
        summary.pop("checkpoint", None)
        summary.pop("output", None)
    return r.returncode, scrub(summary), r.stderr.replace(str(out.parent), "WORK")


def f4_folder(d: Path, fp8_scale: bool = False) -> None:
    """An HF folder holding safetensors F4 (safetensors' save_file, as f4_test.py writes one): a
    weight beside an F8_E8M0 `_scale`, one without, an orphan scale, and a quantization_config, so
    that verify's HF checks and the planner's scale names meet the F4 row; with `fp8_scale`, also a
    float8 weight beside a `_scale` (which --dtype refuses to cast without it)."""
    import torch
    from safetensors.torch import save_file
    d.mkdir(parents=True)
    g = torch.Generator().manual_seed(5)
    f4 = lambda *s: torch.randint(0, 256, s, generator=g, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    e8 = lambda *s: torch.randint(100, 140, s, generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    save_file({"model.layers.0.mlp.down_proj.weight": f4(8, 4), "model.layers.0.mlp.down_proj.weight_scale": e8(8, 1),
               "model.layers.0.mlp.up_proj.weight": f4(8, 4), "model.layers.1.mlp.up_proj.weight_scale": e8(8, 1),
               "model.norm.weight": torch.ones(8, dtype=torch.bfloat16),
               **({"model.layers.1.mlp.down_proj.weight": torch.ones(8, 8).to(torch.float8_e4m3fn),
                   "model.layers.1.mlp.down_proj.weight_scale": torch.ones(1)} if fp8_scale else {})}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "dtype": "bfloat16", "num_hidden_layers": 2,
                                               "quantization_config": {"quant_method": "fp4", "modules_to_not_convert": ["model.layers.0.mlp.up_proj"]}}))


def codec_cases(work: Path, old: str) -> list:
    """Every codec path of the codec list (meta/codecs/, view/codecs/): --quantize fp8-block on 2-D
    weights and on stacked experts, --quantize mxfp4, their refusals and --dry-run --json, F4 through
    the planner and verify, inspect's description, verify's HF checks and diff's audit of quantized
    exports (made once here by OLD, the same bytes the cases above compare)."""
    import torch
    sys.argv[1:] = [old, str(ROOT / "tests/fixtures")]  # quantize_test reads them at import
    import quantize_test as qt
    shutil.rmtree(qt.WORK, ignore_errors=True)
    qwen, gemma, gptoss, f4 = work / "qwen3", work / "gemma4", work / "gpt-oss", work / "f4"
    qt.make_model(torch.bfloat16, qwen)
    qt.make_gemma4(gemma)
    qt.make_gpt_oss(gptoss)
    f4_folder(f4)
    f4_folder(work / "f4-fp8", fp8_scale=True)
    made = {}
    for name, args in [("qwen3-q", [qwen, "--quantize", "fp8-block", "--quantize-block", "16x16"]),
                       ("gemma4-q", [gemma, "--quantize", "fp8-block", "--quantize-block", "16x16"]),
                       ("gpt-oss-q", [gptoss, "--quantize", "mxfp4"]),
                       ("ds-q", [L / "titan_deepseek_v3/run/step-2", "--map", "torchtitan-deepseek-v3", "--config",
                                 L / "titan_deepseek_v3/config.json", "--quantize", "fp8-block"])]:
        made[name] = work / name
        subprocess.run([old, "consolidate", *map(str, args), "-o", f"{made[name]}/", "-q"], check=True)
    ds_step = L / "titan_deepseek_v3/run/step-2"
    return [
        ("qwen3 --quantize fp8-block HF", ["consolidate", qwen, "--quantize", "fp8-block", "--quantize-block", "16x16", "-o", "{out}/"]),
        ("qwen3 --quantize fp8-block .safetensors", ["consolidate", qwen, "--quantize", "fp8-block", "-o", "{out}.safetensors"]),
        ("qwen3 cast --dtype fp32 --quantize fp8-block", ["cast", qwen, "--dtype", "fp32", "--quantize", "fp8-block", "-o", "{out}"]),
        ("qwen3 --quantize-skip", ["consolidate", qwen, "--quantize", "fp8-block", "--quantize-skip", "*.o_proj.weight", "-o", "{out}/"]),
        ("gemma4 stacks --quantize fp8-block HF", ["consolidate", gemma, "--quantize", "fp8-block", "--quantize-block", "16x16", "-o", "{out}/"]),
        ("gemma4 stacks --quantize fp8-block reshard -w 2", ["reshard", gemma, "--quantize", "fp8-block", "--quantize-block", "16x16", "-w", "2", "-o", "{out}"]),
        ("gemma4 stacks partial blocks kept", ["consolidate", gemma, "--quantize", "fp8-block", "--quantize-block", "32x32", "-o", "{out}/"]),
        ("gpt-oss --quantize mxfp4 HF", ["consolidate", gptoss, "--quantize", "mxfp4", "-o", "{out}/"]),
        ("gpt-oss --quantize mxfp4 reshard -w 2", ["reshard", gptoss, "--quantize", "mxfp4", "-w", "2", "-o", "{out}"]),
        ("gpt-oss --quantize fp8-block (stacks kept)", ["consolidate", gptoss, "--quantize", "fp8-block", "--quantize-block", "16x16", "-o", "{out}/"]),
        ("--quantize mxfp4 --dry-run --json", ["consolidate", gptoss, "--quantize", "mxfp4", "--dry-run", "-o", "{out}/"]),
        ("--quantize fp8-block --dry-run --json", ["consolidate", gemma, "--quantize", "fp8-block", "--dry-run", "-o", "{out}/"]),
        ("--dtype bf16 of fp8 --dry-run --json", ["consolidate", L / "hf_fp8_deepseek/ckpt", "--dtype", "bf16", "--dry-run", "-o", "{out}/"]),
        ("mxfp4 export dequantized --dtype bf16", ["consolidate", made["gpt-oss-q"], "--dtype", "bf16", "-o", "{out}.safetensors"]),
        ("stacked fp8 export dequantized --dtype fp32", ["consolidate", made["gemma4-q"], "--dtype", "fp32", "-o", "{out}/"]),
        ("refused: --quantize mxfp4 --quantize-block", ["consolidate", gptoss, "--quantize", "mxfp4", "--quantize-block", "32x32", "-o", "{out}/"]),
        ("refused: --quantize unknown", ["consolidate", gptoss, "--quantize", "int4", "-o", "{out}/"]),
        ("refused: --quantize mxfp4 of qwen3", ["consolidate", qwen, "--quantize", "mxfp4", "-o", "{out}/"]),
        ("refused: --quantize fp8-block of fp8", ["consolidate", L / "hf_fp8_deepseek/ckpt", "--quantize", "fp8-block", "-o", "{out}/"]),
        ("refused: --quantize mxfp4 of mxfp4", ["consolidate", made["gpt-oss-q"], "--quantize", "mxfp4", "-o", "{out}/"]),
        ("refused: --dtype fp8_e4m3 of fp8", ["consolidate", L / "hf_fp8_deepseek/ckpt", "--dtype", "fp8_e4m3", "-o", "{out}.safetensors"]),
        ("refused: --dtype fp8_e4m3 of mxfp4", ["consolidate", made["gpt-oss-q"], "--dtype", "fp8_e4m3", "-o", "{out}.safetensors"]),
        ("refused: mxfp4 --dtype without its config", ["consolidate", made["gpt-oss-q"], "--dtype", "bf16", "--assets", qwen, "-o", "{out}/"]),
        ("F4 --dtype bf16", ["consolidate", f4, "--dtype", "bf16", "-o", "{out}.safetensors"]),
        ("F4 kept as saved HF", ["consolidate", f4, "-o", "{out}/"]),
        ("refused: --dtype of fp8 beside a _scale", ["consolidate", work / "f4-fp8", "--dtype", "bf16", "-o", "{out}.safetensors"]),
        ("inspect fp8-deepseek", ["inspect", L / "hf_fp8_deepseek/ckpt"]),
        ("inspect mxfp4 export", ["inspect", made["gpt-oss-q"]]),
        ("inspect stacked fp8 export", ["inspect", made["gemma4-q"]]),
        ("inspect F4", ["inspect", f4]),
        ("verify fp8 export", ["verify", made["qwen3-q"]]),
        ("verify stacked fp8 export", ["verify", made["gemma4-q"]]),
        ("verify mxfp4 export", ["verify", made["gpt-oss-q"]]),
        ("verify fp8-deepseek", ["verify", L / "hf_fp8_deepseek/ckpt"]),
        ("verify F4", ["verify", f4]),
        ("diff audit of an fp8 export", ["diff", ds_step, made["ds-q"], "--map", "torchtitan-deepseek-v3", "--config",
                                         L / "titan_deepseek_v3/config.json"]),
        ("diff audit of an mxfp4 export refused", ["diff", L / "titan_gpt_oss/run/step-2", made["gpt-oss-q"], "--map", "torchtitan-gpt-oss"]),
    ]


def config_cases(work: Path):
    """Where the model's config.json comes from (issue 58 item 2: one config read): --assets over the
    one beside the checkpoint, --config over --assets for a map, a sharded/ folder's parent, a
    trainer's run folder, a LoRA adapter's base; each edited copy says in its output which was read."""
    def edited(src: Path, dst: Path, **extra) -> Path:
        dst.mkdir(parents=True, exist_ok=True)
        j = json.loads(src.read_text())
        j.update(extra)
        (dst / "config.json").write_text(json.dumps(j, indent=2))
        return dst
    fp8_assets = edited(L / "hf_fp8_deepseek/ckpt/config.json", work / "cfg-fp8-assets", dcpctl_ab="assets")
    qwen_assets = edited(L / "titan_qwen3/hf/config.json", work / "cfg-qwen3-assets", dcpctl_ab="assets")
    shp = work / "cfg-sharded-parent"
    shutil.copytree(L / "hf_consolidated/ckpt/sharded", shp / "sharded")
    edited(L / "hf_transformers/ckpt/config.json", shp, dcpctl_ab="parent of sharded/")
    tt = work / "cfg-torchtune"
    shutil.copytree(L / "torchtune_lora/dist_epoch_0", tt / "dist_epoch_0")
    shutil.copy(L / "torchtune_lora/adapter_config.json", tt)
    shutil.copytree(L / "torchtune_lora/base", tt / "base")
    return [
        ("config --assets over beside (fp8 --dtype bf16 HF folder)", ["consolidate", L / "hf_fp8_deepseek/ckpt", "--dtype", "bf16",
                                                                      "--assets", fp8_assets, "-o", "{out}/"]),
        ("config beside (fp8 --dtype bf16 HF folder)", ["consolidate", L / "hf_fp8_deepseek/ckpt", "--dtype", "bf16", "-o", "{out}/"]),
        ("config map --config over --assets HF folder", ["consolidate", L / "titan_qwen3/run/step-2", "--map", "torchtitan-qwen3", "--config",
                                                          L / "titan_qwen3/config.json", "--assets", qwen_assets, "-o", "{out}/"]),
        ("config map --assets alone HF folder --dtype bf16", ["consolidate", L / "titan_qwen3/run/step-2", "--map", "torchtitan-qwen3",
                                                               "--assets", qwen_assets, "--dtype", "bf16", "-o", "{out}/"]),
        ("config map --config --dtype bf16 HF folder", ["consolidate", L / "titan_qwen3/run/step-2", "--map", "torchtitan-qwen3", "--config",
                                                         L / "titan_qwen3/config.json", "--dtype", "bf16", "-o", "{out}/"]),
        ("config sharded/ parent --dtype bf16 HF folder", ["consolidate", shp / "sharded", "--dtype", "bf16", "-o", "{out}/"]),
        ("config sharded/ parent --dtype bf16 .safetensors", ["consolidate", shp / "sharded", "--dtype", "bf16", "-o", "{out}.safetensors"]),
        ("config sharded/ parent --dtype bf16 --dry-run", ["consolidate", shp / "sharded", "--dtype", "bf16", "--dry-run", "-o", "{out}/"]),
        ("config beside --dtype bf16 (policy) HF folder", ["consolidate", L / "hf_transformers/ckpt", "--dtype", "bf16", "-o", "{out}/"]),
        ("config beside --dtype fp16 .safetensors", ["consolidate", L / "hf_transformers/ckpt", "--dtype", "fp16", "-o", "{out}.safetensors"]),
        ("config run folder --dtype bf16 HF folder", ["consolidate", L / "run_hf_trainer/run/checkpoint-1", "--dtype", "bf16", "-o", "{out}/"]),
        ("config torchtune --lora adapter (base's heads)", ["consolidate", tt / "dist_epoch_0", "--lora", "adapter", "-o", "{out}/"]),
        ("config torchtune --lora merge --map HF folder", ["consolidate", tt / "dist_epoch_0", "--lora", "merge", "--map", "torchtune-llama3",
                                                           "--assets", tt / "base", "-o", "{out}/"]),
        ("config lora merge --dtype bf16 HF folder --assets base", ["consolidate", L / "peft_lora/ckpt", "--lora", "merge", "--dtype", "bf16",
                                                                    "--assets", L / "peft_lora/base", "-o", "{out}/"]),
    ]


def gguf_cases(work: Path, old: str) -> list:
    """The GGUF module's paths (src/gguf/): consolidate -o .gguf at every --outtype and split, from an
    HF folder and a DCP checkpoint of tiny models with real tokenizers (gguf_test.py's, transformers
    and tools/gguf_oracle.py), the refusals of the format's options, and inspect, verify and diff of
    a GGUF file (made once here by OLD)."""
    import gguf_test as gt
    made = {}
    for arch in ("llama", "qwen2-tied", "qwen3moe", "gpt-oss-mxfp4", "kimi-k2"):
        hf, dcp_dir = work / "gguf" / arch / "tiny", work / "gguf" / arch / "dcp"
        gt.tiny_model(arch, hf)
        gt.dcp_of(hf, dcp_dir)
        if arch == "kimi-k2":
            gt.kimi_config(hf, dcp_dir)
        made[arch] = (hf, dcp_dir)
    hf, dcp_dir = made["llama"]
    ref = work / "gguf" / "ref"
    ref.mkdir()
    for name, args in [("q8_0.gguf", [hf, "--outtype", "q8_0"]), ("q4_k.gguf", [hf, "--outtype", "q4_k"])]:
        r = subprocess.run([old, "consolidate", *map(str, args), "-o", str(ref / name), "-q"], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"ab_outputs: {old} did not write {name}: {r.stderr}")
    split = ["--split-max-tensors", "7", "--split-max-size", "30K"]
    cases = []
    for arch, (hf, dcp_dir) in made.items():
        for outtype in ("f16", "bf16", "f32", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"):
            if arch != "llama" and outtype not in ("f16", "q8_0"):
                continue
            cases.append((f"gguf {arch} HF --outtype {outtype}", ["consolidate", hf, "--outtype", outtype, "-o", "{out}.gguf"]))
        cases.append((f"gguf {arch} DCP --outtype q8_0", ["consolidate", dcp_dir, "--outtype", "q8_0", "-o", "{out}.gguf"]))
    hf, dcp_dir = made["llama"]
    cases += [
        ("gguf llama split", ["consolidate", hf, *split, "-o", "{out}.gguf"]),
        ("gguf llama --dry-run", ["consolidate", dcp_dir, "--outtype", "q8_0", "--dry-run", "-o", "{out}.gguf"]),
        ("gguf llama --max-memory 64KiB (refused)", ["consolidate", hf, "--max-memory", "64KiB", "-o", "{out}.gguf"]),
        ("gguf --outtype with .safetensors (refused)", ["consolidate", hf, "--outtype", "q8_0", "-o", "{out}.safetensors"]),
        ("gguf --split-max-tensors with DIR/ (refused)", ["consolidate", hf, "--split-max-tensors", "3", "-o", "{out}/"]),
        ("gguf --split-max-size bad (refused)", ["consolidate", hf, "--split-max-size", "12Q", "-o", "{out}.gguf"]),
        ("gguf --outtype bad (refused)", ["consolidate", hf, "--outtype", "q4_k_m", "-o", "{out}.gguf"]),
        ("gguf --dtype (refused)", ["consolidate", hf, "--dtype", "bf16", "-o", "{out}.gguf"]),
        ("gguf trainer keys without --map (refused)", ["consolidate", L / "titan_qwen3/run/step-2", "--assets", L / "titan_qwen3/hf",
                                                       "-o", "{out}.gguf"]),
        ("gguf inspect q8_0", ["inspect", ref / "q8_0.gguf"]),
        ("gguf inspect q4_k --chunks", ["inspect", ref / "q4_k.gguf", "--chunks"]),
        ("gguf verify --deep q8_0", ["verify", "--deep", ref / "q8_0.gguf"]),
        ("gguf stats q8_0", ["stats", ref / "q8_0.gguf"]),
        ("gguf consolidate q8_0 -> .safetensors (refused)", ["consolidate", ref / "q8_0.gguf", "-o", "{out}.safetensors"]),
        ("gguf diff HF vs q8_0", ["diff", hf, ref / "q8_0.gguf"]),
        ("gguf diff q4_k vs DCP", ["diff", ref / "q4_k.gguf", dcp_dir]),
        ("gguf diff --assets without a GGUF (refused)", ["diff", hf, dcp_dir, "--assets", hf]),
    ]
    return cases


def main() -> int:
    args = sys.argv[1:]
    while "--new-key" in args:
        i = args.index("--new-key")
        NEW_KEYS.append(args[i + 1])
        del args[i:i + 2]
    only = []  # --only WORD (repeatable): the cases whose name holds one of them
    while "--only" in args:
        i = args.index("--only")
        only.append(args[i + 1])
        del args[i:i + 2]
    old, new = args[0], args[1]
    work = Path(tempfile.mkdtemp(prefix="dcpctl-ab-"))
    cases = list(CASES)
    try:
        from fp8_test import mxfp4_folder
        mx = work / "mxfp4"
        mxfp4_folder(mx)
        cases += [("mxfp4 bf16 .safetensors", ["consolidate", mx, "--dtype", "bf16", "-o", "{out}.safetensors"]),
                  ("mxfp4 fp32 --map gpt-oss-mxfp4 HF", ["consolidate", mx, "--dtype", "fp32", "--map", "gpt-oss-mxfp4", "-o", "{out}/"]),
                  ("mxfp4 refused without --dtype", ["consolidate", mx, "--map", "gpt-oss-mxfp4", "-o", "{out}/"])]
    except ImportError as e:
        print(f"SKIP mxfp4 cases: {e}")
    # The map under torchrun (2 ranks, gloo: the deal's chunk exchange) and --local-files (each
    # rank reads only its own copy of the files: .metadata and __0_0 in r0, __1_0 in r1).
    tr = []
    for name in ("titan_llama3", "titan_deepseek_v3", "titan_qwen3"):
        split = work / f"split-{name}"
        for r in (0, 1):
            (split / f"r{r}").mkdir(parents=True)
            shutil.copy(L / name / f"run/step-2/__{r}_0.distcp", split / f"r{r}")
        shutil.copy(L / name / "run/step-2/.metadata", split / "r0")
    m = {"titan_llama3": "torchtitan-llama3", "titan_deepseek_v3": "torchtitan-deepseek-v3", "titan_qwen3": "torchtitan-qwen3"}
    for name, out in [("titan_llama3", "{out}.safetensors"), ("titan_llama3", "{out}.pt"), ("titan_deepseek_v3", "{out}.pt"),
                      ("titan_deepseek_v3", "{out}.safetensors"), ("titan_qwen3", "{out}/")]:
        opts = ["--map", m[name], "--config", L / name / "config.json"] + (["--assets", L / name / "hf"] if out.endswith("/") else [])
        tr.append((f"map {name} torchrun x2 -o {out[5:] if out != '{out}/' else 'HF/'}", ["torchrun", 2, "consolidate", L / name / "run/step-2", *opts, "-o", out]))
        tr.append((f"map {name} torchrun x2 --local-files -o {out[5:] if out != '{out}/' else 'HF/'}",
                   ["torchrun", 2, "consolidate", work / f"split-{name}/r{{rank}}", "--local-files", *opts, "-o", out]))
    tr.append(("map deepseek-v3 torchrun x2 reshard -w 3", ["torchrun", 2, "reshard", L / "titan_deepseek_v3/run/step-2", "--map",
                                                            "torchtitan-deepseek-v3", "--config", L / "titan_deepseek_v3/config.json",
                                                            "-w", "3", "-o", "{out}"]))
    tr.append(("map deepseek-v3 torchrun x2 .pt --dry-run", ["torchrun", 2, "consolidate", L / "titan_deepseek_v3/run/step-2", "--map",
                                                             "torchtitan-deepseek-v3", "--config", L / "titan_deepseek_v3/config.json",
                                                             "--dry-run", "-o", "{out}.pt"]))
    cases += tr
    cases += config_cases(work)
    try:
        cases += codec_cases(work, old)
    except ImportError as e:
        print(f"SKIP codec cases: {e}")
    try:
        cases += gguf_cases(work, old)
    except ImportError as e:
        print(f"SKIP gguf cases: {e}")
    if only:
        cases = [c for c in cases if any(w in c[0] for w in only)]
    bad = 0
    for i, (name, args) in enumerate(cases):
        outs = [work / f"{i}-a" / "o", work / f"{i}-b" / "o"]
        for o in outs:
            o.parent.mkdir(parents=True)
        (ra, sa, ea), (rb, sb, eb) = run(old, args, outs[0]), run(new, args, outs[1])
        sb = drop_new(sa, sb)
        why = ""
        if ra != rb:
            why = f"exit {ra} vs {rb}: {ea.strip()[:200]} | {eb.strip()[:200]}"
        elif sa != sb:
            why = f"summaries differ: {json.dumps(sa)[:300]} vs {json.dumps(sb)[:300]}"
        elif ra == 0:
            # The output, and beside a single file its manifest (write/manifest.h).
            made = sorted(p.name for p in outs[0].parent.iterdir())
            if made != sorted(p.name for p in outs[1].parent.iterdir()):
                why = f"outputs: {made}"
            for f in made:
                why = why or same_tree(outs[0].parent / f, outs[1].parent / f)
        elif ea != eb:
            why = f"messages differ: {ea.strip()[:200]} | {eb.strip()[:200]}"
        print(f"{'SAME' if not why else 'DIFF'} {name} (exit {ra}){': ' + why if why else ''}")
        bad += bool(why)
    shutil.rmtree(work, ignore_errors=True)
    print(f"{len(cases) - bad} same, {bad} different")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
