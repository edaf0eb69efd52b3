#!/usr/bin/env python3
"""consolidate -o model.gguf with the families' tokenizers as they ship, against llama.cpp's converter.

    gguf_tokenizers_test.py DCPCTL [ARCH/TOKENIZER:OUTTYPE[:refused] ...]   (default: CASES)

The converter names a BPE tokenizer (tokenizer.ggml.pre) by the digest of the ids transformers'
AutoTokenizer gives its check text, and which tokenizer AutoTokenizer builds depends on
tokenizer_config.json's class and config.json's model type (src/gguf/hf_tokenizer.h). Each case is
a tiny model of ARCH (gguf_test.py's, saved by transformers) with TOKENIZER, one of
tools/gguf_oracle.py's FAMILIES (rebuilt from llama.cpp's vocab files with the normalizer, class and
post-processor the release ships, and checked there against llama.cpp's .inp/.out token vectors
and the converter's digest table). The converter writes tiny.gguf from the folder; dcpctl's must
equal it byte for byte. A `refused` case is one whose tokenizer transformers rebuilds into one the
converter's table does not know: the converter fails ("BPE pre-tokenizer was not recognized") and
dcpctl must refuse too (exit 5 naming tokenizer.ggml.pre, no file): a digest computed otherwise than
transformers computes it is never written. The families' own architectures carry their tokenizers
in gguf_test.py's cases (starcoder2, command-r, falcon, mpt); these are the class paths beside them.

Exit status: 0 pass, 1 failure, 77 skip (as gguf_test.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_test as gt  # noqa: E402  (skips, as gguf_test.py does, without its packages)
from gguf_test import TALLY, check, fail  # noqa: E402

# A handful, each a path of its own: the class transformers loads, then the normalizer.
CASES = [
    "qwen2/qwen2-nfc:f16",         # Qwen2Tokenizer (model_type qwen2 forces it), NFC
    "qwen3/qwen2-nfc:q8_0",        # Qwen3's: tokenizer_class Qwen2Tokenizer under model_type qwen3
    "llama/deepseek-llm:f16",      # the empty normalizer Sequence; LlamaTokenizerFast over ByteLevel, add_bos_token
    "qwen3/deepseek-coder:f16",
    "llama/gpt-2:f16",             # GPT2Tokenizer; LlamaModel.set_vocab's add_space_prefix false (gguf/spm.h)
    "qwen3/starcoder:f16",         # GPT2Tokenizer named over qwen3's Qwen2Tokenizer: Digits dropped, 38 special tokens
]
# `:refused` (config.json's vocab_size 8 past the file's, for the tokens a rebuilding class adds):
# no pair tried yet gives a digest the converter refuses: qwen2/starcoder and qwen2/deepseek-coder
# (Qwen2Tokenizer forced over their files) give the ids of the file's own name, and both programs
# write the file.


# What each case always makes: the converter's exit (or its refusal), dcpctl's exit (or its
# refusal), and for a written case the files compared byte for byte; fewer checks mean a case was
# dropped (docs/testing.md#no-test-passes-on-nothing).
CHECKS_PER_CASE = 2
CHECKS_PER_WRITTEN_CASE = 3


def main(argv: list[str]) -> int:
    dcpctl = argv[0]
    cases = argv[1:] or CASES
    try:
        gt.gguf_oracle.fetch()
    except Exception as e:  # noqa: BLE001
        gt.skip_or_fail(f"llama-cpp-python's sdist not fetched ({e}); tools/dev.sh setup fetches it")
    least = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for case in cases:
            spec, outtype, *flags = case.split(":")
            if flags not in ([], ["refused"]):
                fail(f"{case}: unknown flag {flags}")
                continue
            refused = flags == ["refused"]
            least += CHECKS_PER_CASE if refused else CHECKS_PER_WRITTEN_CASE
            arch, tokenizer = spec.split("/")
            root = tmp / case.replace(":", "-").replace("/", "-")
            hf = root / "tiny"
            gt.tiny_model(arch, hf, tokenizer, extra_vocab=8 if refused else 0)
            want = root / "converter" / "tiny.gguf"
            want.parent.mkdir(parents=True)
            r = gt.gguf_oracle.convert(hf, want, ["--outtype", outtype])
            got = root / "dcpctl" / "tiny.gguf"
            got.parent.mkdir(parents=True)
            d = subprocess.run([dcpctl, "consolidate", str(hf), "-o", str(got), "--outtype", outtype, "-q"], capture_output=True, text=True)
            before = len(gt.FAILS)
            if refused:
                check(r.returncode != 0 and "BPE pre-tokenizer was not recognized" in r.stderr,
                      f"{case}: the converter: exit {r.returncode}, not its unknown digest: {r.stderr[-1200:]}")
                check(d.returncode == 5 and "tokenizer.ggml.pre" in d.stderr and not got.exists(),
                      f"{case}: dcpctl exit {d.returncode}, want 5 naming tokenizer.ggml.pre and no file: {d.stderr[-1200:]}")
                print(f"{case}: {'ok' if len(gt.FAILS) == before else 'FAILED'} (both refuse)", flush=True)
                continue
            if not check(r.returncode == 0, f"{case}: the converter failed: {r.stderr[-2000:]}"):
                continue
            if not check(d.returncode == 0, f"{case}: dcpctl exit {d.returncode}: {d.stderr[-2000:]}"):
                continue
            if not check(want.read_bytes() == got.read_bytes(), f"{case}: dcpctl's file is not the converter's byte for byte"):
                gt.compare(case, want, got)  # which keys and tensors differ
            pre = json.dumps(gt.gguf_oracle.read_gguf(got)[0]["tokenizer.ggml.pre"])
            print(f"{case}: {'ok' if len(gt.FAILS) == before else 'FAILED'} (tokenizer.ggml.pre {pre})", flush=True)
    return TALLY.summary("gguf-tokenizers", min_checks=least)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
