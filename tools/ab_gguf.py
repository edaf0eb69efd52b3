#!/usr/bin/env python3
"""A/B of two dcpctl binaries' GGUF outputs (consolidate -o x.gguf), byte for byte, on the tiny models
of tests/interop/gguf_test.py (its default cases' architectures, made by the same functions: a
transformers folder and a DCP checkpoint of it), at every --outtype, from both sources. For changes
to the GGUF writer that must not change a byte (issue 82 item 3: tensors converted in windows of
rows):

    tools/ab_gguf.py OLD/dcpctl build/cmd/dcpctl            # exit 0: every output identical
    tools/ab_gguf.py OLD NEW --new-args=--max-memory=1MiB    # NEW run with extra arguments
    tools/ab_gguf.py OLD NEW --only llama --only gpt-oss     # the architectures named
    tools/ab_gguf.py OLD NEW --outtype q8_0 --outtype q4_k   # those types only

Run with the project's virtualenv (.venv/bin/python). An output refused by both with the same exit
code is equal; one line per case, exit 1 on any difference.
"""
import argparse
import filecmp
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests/interop"))
sys.argv = [sys.argv[0]] + sys.argv[1:]

ARCHS = ["llama", "qwen2-tied", "qwen3-bf16", "qwen3moe", "mixtral", "deepseek2", "kimi-k2", "deepseekv2", "glm4moe-mtp", "gpt-oss",
         "gpt-oss-mxfp4"]
OUTTYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--new-args", default="", help="extra arguments of NEW's runs, '='-separated")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--outtype", action="append", default=[], help="the --outtype words to run (default: all)")
    a = ap.parse_args()
    import gguf_test  # noqa: E402  (the tiny models)
    extra = [x for x in a.new_args.split("=") if x] if a.new_args else []
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for arch in ARCHS:
            if a.only and not any(w in arch for w in a.only):
                continue
            hf, dcp = tmp / arch / "hf" / "tiny", tmp / arch / "dcp"
            gguf_test.tiny_model(arch, hf)
            gguf_test.dcp_of(hf, dcp)
            if arch == "kimi-k2":
                gguf_test.kimi_config(hf, dcp)
            for outtype in a.outtype or OUTTYPES:
                for src in (hf, dcp):
                    outs = []
                    for name, binary, more in (("old", a.old, []), ("new", a.new, extra)):
                        out = tmp / name / "tiny.gguf"
                        out.parent.mkdir(exist_ok=True)
                        out.unlink(missing_ok=True)
                        r = subprocess.run([binary, "consolidate", str(src), "-o", str(out), "--outtype", outtype, "-q", *more],
                                           capture_output=True, text=True)
                        outs.append((r.returncode, out, r.stderr.strip()[-300:]))
                    (rc_a, out_a, err_a), (rc_b, out_b, err_b) = outs
                    same = rc_a == rc_b and (rc_a != 0 or filecmp.cmp(out_a, out_b, shallow=False))
                    case = f"{arch} {outtype} from {src.name}"
                    print(f"{'same' if same else 'DIFFERENT'}: {case} (exit {rc_a}{'' if rc_a == rc_b else f' / {rc_b}: {err_b}'})")
                    if not same:
                        differ += 1
                        if rc_a != rc_b:
                            print(f"  old: {err_a}\n  new: {err_b}")
    print(f"{differ} different" if differ else "every output identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
