#!/usr/bin/env python3
"""A/B of two dcpctl binaries' outputs: every derived-tensor path (dequantize fp8 blocks and MXFP4,
LoRA adapter and merge, key maps, casts) on the repository's fixtures, each output compared byte for
byte (files and folders), and the --json summaries compared with timings removed.

For refactors that must not change a byte (the view layer, issue 48's first step):

    tools/ab_outputs.py OLD/dcpctl build/cmd/dcpctl        # exit 0: every output identical
    tools/ab_outputs.py OLD NEW --new-key map.variant      # a summary field NEW adds is not a difference

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
    ("sample bf16 HF folder", ["consolidate", ROOT / "tests/fixtures/sample/ckpt", "--select", "app.model", "--dtype", "bf16", "-o", "{out}/"]),
    ("sample reshard -w 4", ["reshard", ROOT / "tests/fixtures/sample/ckpt", "-w", "4", "-o", "{out}"]),
    ("sample cast fp16", ["cast", ROOT / "tests/fixtures/sample/ckpt", "--dtype", "fp16", "-o", "{out}"]),
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


def run(binary: str, args: list, out: Path):
    argv = [binary] + [str(x).replace("{out}", str(out)) for x in args] + ["--json", "-q"]
    r = subprocess.run(argv, capture_output=True, text=True)
    summary = None
    try:
        summary = json.loads(r.stdout.replace(str(out.parent), "WORK"))
    except json.JSONDecodeError:
        pass
    if isinstance(summary, dict):
        summary.pop("checkpoint", None)
        summary.pop("output", None)
    return r.returncode, scrub(summary), r.stderr.replace(str(out.parent), "WORK")


def main() -> int:
    args = sys.argv[1:]
    while "--new-key" in args:
        i = args.index("--new-key")
        NEW_KEYS.append(args[i + 1])
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
