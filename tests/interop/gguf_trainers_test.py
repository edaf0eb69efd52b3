#!/usr/bin/env python3
"""A trainer's checkpoint to llama.cpp's GGUF in one command (docs/gguf.md, issue 71):

    gguf_trainers_test.py DCPCTL [CASE:OUTTYPE ...]   (default: titan:f16 titan:q8_0 megatron:f16 megatron:q8_0)

CASE titan: tests/fixtures/layouts/titan_qwen3_gguf (make_titan_gguf.py: REAL torchtitan 0.3.0's Qwen 3,
tied, vocabulary 151,936, exported by its CheckpointManager with last_save_model_only and export_dtype
bfloat16, 2 ranks) through `--map torchtitan-qwen3`; CASE megatron: megatron_qwen3_gguf
(make_megatron_gguf.py: REAL Megatron-LM's save_checkpoint, torch_dist, TP 2, a Qwen3-style GPT in
bfloat16, tied, 151,936 tokens padded to 152,064) through `--map megatron`.

For each fixture, an assets folder holds its config.json and the real Qwen2 tokenizer
tools/gguf_oracle.py rebuilds (the converter names a tokenizer by its digest: only a real one
converts, and its ids need Qwen 3's vocabulary). The one command under test is
`dcpctl consolidate CKPT --map M --assets A -o tiny.gguf --outtype T`. The oracle is the two-step
route: `dcpctl consolidate CKPT --map M --assets A -o hf/tiny/`, whose tensors must be the fixture's
expected_hf (torchtitan's own Qwen3StateDictAdapter.to_hf; for Megatron the plain-torch conversion
make_megatron_qwen3.py's logits prove), dtype, shape and SHA-256, tensor for tensor; then llama.cpp's
convert_hf_to_gguf.py (llama-cpp-python 0.3.36, the oracle of gguf_test.py) on hf/tiny. The two files
must be equal byte for byte (where not, gguf_test.compare names every key and tensor that differs).
torchtitan's checkpoint holds the tied lm_head.weight as well; to_hf and save_pretrained leave it
out, so the route's export excludes it, and the GGUF leaves it out by itself (config.json ties it).
`dcpctl diff CKPT tiny.gguf --map M --assets A` exits 0 (docs/gguf.md, "Diff against the source").
Controls: the same checkpoint without --map is refused (exit 5 naming a trainer key, no file), and
a tensor of hf/ altered by one element fails the SHA-256 check.

Exit status: 0 pass, 1 failure, 77 skip (as gguf_test.py; a failure under CI, tests/skip.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gguf_test as gt  # noqa: E402  (skips when the virtualenv lacks gguf, torch, transformers, ...)
from gguf_test import TALLY, check, fail, gguf_oracle, problems, skip_or_fail, torch  # noqa: E402

LAYOUTS = HERE.parent / "fixtures" / "layouts"
CASES = {
    "titan": dict(fixture="titan_qwen3_gguf", ckpt="run/step-2", map="torchtitan-qwen3",
                  hf_args=["--exclude", "lm_head.weight"]),
    "megatron": dict(fixture="megatron_qwen3_gguf", ckpt="run/iter_0000001", map="megatron", hf_args=[]),
}


def sha(t) -> str:
    return hashlib.sha256(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def hf_tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for p in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(p)))
    return out


def hf_problems(got: dict, want: dict) -> list[str]:
    """hf/'s tensors against expected.json's expected_hf: keys, dtype, shape, SHA-256."""
    bad = []
    if set(got) != set(want):
        bad.append(f"hf/ keys: only dcpctl's {sorted(set(got) - set(want))}, only the oracle's "
                   f"{sorted(set(want) - set(got))}")
    for k in sorted(set(got) & set(want)):
        d = {"dtype": str(got[k].dtype).removeprefix("torch."), "shape": list(got[k].shape), "sha256": sha(got[k])}
        w = {f: want[k][f] for f in ("dtype", "shape", "sha256")}
        if d != w:
            bad.append(f"hf/ {k}: dcpctl {d}, the oracle {w}")
    return bad


def run(cmd: list) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True)


# What each case always makes: the converter's exit, dcpctl's, the comparison of the files and the
# diff's exit; fewer checks mean a case was dropped (docs/testing.md#no-test-passes-on-nothing).
CHECKS_PER_CASE = 4

def main(argv: list[str]) -> int:
    dcpctl = argv[0]
    cases = argv[1:] or ["titan:f16", "titan:q8_0", "megatron:f16", "megatron:q8_0"]
    try:
        llama = gguf_oracle.fetch()
    except Exception as e:  # noqa: BLE001
        skip_or_fail(f"llama-cpp-python's sdist not fetched ({e}); tools/dev.sh setup fetches it")
    env = dict(os.environ, PYTHONPATH=str(llama / "gguf-py"))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ready = set()
        for case in cases:
            name, outtype = case.split(":")
            c = CASES[name]
            fixture = LAYOUTS / c["fixture"]
            ckpt = fixture / c["ckpt"]
            assets, hf = tmp / name / "assets", tmp / name / "hf" / "tiny"
            if name not in ready:
                ready.add(name)
                gguf_oracle.tokenizer("qwen2", assets)
                hf.parent.mkdir(parents=True)
                shutil.copyfile(fixture / "config.json", assets / "config.json")
                # the two-step route's first step, checked against the trainer's own conversion
                r = run([dcpctl, "consolidate", ckpt, "--map", c["map"], "--assets", assets, "-o", f"{hf}/", "-q",
                         *c["hf_args"]])
                if not check(r.returncode == 0, f"{name}: consolidate -o hf/: exit {r.returncode}: {r.stderr[-2000:]}"):
                    continue
                doc = json.loads((fixture / "expected.json").read_text())
                expected = doc["expected_hf"]
                got = hf_tensors(hf)
                problems([f"{name}: {p}" for p in hf_problems(got, expected)])
                # control: one element of one tensor off, the check must see it (and only it)
                k = sorted(got)[-1]
                got[k] = got[k].clone()
                got[k].view(-1)[0] += 1
                check([p.split(":")[0] for p in hf_problems(got, expected)] == [f"hf/ {k}"],
                      f"{name}: the SHA-256 check did not single out {k} altered")
                # control: the trainer's checkpoint without its map
                bad = tmp / name / "nomap.gguf"
                r = run([dcpctl, "consolidate", ckpt, "--assets", assets, "-o", bad])
                named = [k for k in doc["checkpoint_tensors"] if re.search(rf"(?<![\w.]){re.escape(k)}(?![\w.])", r.stderr)]
                check(not (r.returncode != 5 or not named or bad.exists()),
                      f"{name} without --map: exit {r.returncode}, {r.stderr[-600:]!r}")
            if not hf.is_dir():
                continue
            root = tmp / name / outtype
            want, got = root / "converter" / "tiny.gguf", root / "dcpctl" / "tiny.gguf"
            want.parent.mkdir(parents=True)
            got.parent.mkdir(parents=True)
            r = gguf_oracle.convert(hf, want, ["--outtype", outtype], env)
            if not check(r.returncode == 0, f"{case}: the converter failed: {r.stderr[-2000:]}"):
                continue
            # the one command
            r = run([dcpctl, "consolidate", ckpt, "--map", c["map"], "--assets", assets, "-o", got, "--outtype", outtype,
                     "-q"])
            if not check(r.returncode == 0, f"{case}: dcpctl exit {r.returncode}: {r.stderr[-2000:]}"):
                continue
            gt.compare(case, want, got)
            # diff of the trainer's checkpoint through the map against the file: every tensor within
            # its type's bound, the keys config.json makes equal (docs/gguf.md, "Diff against the source").
            r = run([dcpctl, "diff", ckpt, got, "--map", c["map"], "--assets", assets, "-q"])
            check(r.returncode == 0,
                  f"{case}: diff {ckpt.name} {got.name} --map {c['map']}: exit {r.returncode}: {r.stderr[-800:]}")
            print(f"{case}: {'ok' if not gt.FAILS else 'FAILED'}", flush=True)
    return TALLY.summary("gguf-trainers", min_checks=CHECKS_PER_CASE * len(cases))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
