#!/usr/bin/env python3
"""The GGUF reader held to the other readers' standard (issue 78 item 5; gguf/reader.cpp): real
GGUF files cut at every byte and mutated across the header, the keys and the tensor infos, by the
sweep program (tests/corruption/gguf_mutations.cpp: the reader in process, its allocations and CPU
watched), then a sample of the same damage through the dcpctl binary, whose verify must exit 3
naming the file and the offset.

    gguf_corruption.py CORRUPTION_GGUF DCPCTL [--stride N]

The files, all written by llama.cpp's own software:
- small.gguf: gguf-py 0.19.0's GGUFWriter (the writer convert_hf_to_gguf.py writes with), keys of
  every kind, F32/F16/I32/Q8_0/Q4_0 tensors (gguf_read_test.write_model): every cut, every header
  byte mutated four ways, 3,000 seeded random mutations;
- llama.gguf: a tiny llama with llama.cpp's tensor names and shapes (gguf_read_test.write_llama),
  which the architecture check reads too: every cut before its data (and one every 4,099 bytes of
  it), every header byte, 1,000 random mutations;
- ggml-vocab-qwen2.gguf: the vocabulary file llama.cpp's converter wrote for Qwen2 (151,646
  tokens, 5.9 MB of keys), from the llama-cpp-python 0.3.36 sdist (tools/gguf_oracle.py): a cut and
  four mutations every 262,147 bytes (each read walks the whole vocabulary).
--stride N thins the first two (the sanitizer tree's time is CI's).

Exit status: 0 pass, 1 failure, 77 skip (no virtualenv with gguf-py; a failure under CI).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "interop"))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from skip import skip_or_fail  # noqa: E402
from testlib import check, expect_rc, run, summary  # noqa: E402

try:
    import gguf_read_test as grt  # gguf-py and numpy
    import gguf_oracle
except ImportError as e:
    skip_or_fail(f"the virtualenv lacks {e.name} (tools/requirements.txt)")


def sweep(binary: str, *args) -> None:
    r = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=1800)
    print(r.stdout, end="")
    check(r.returncode == 0, f"corruption_gguf {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr[-3000:]}")


def main(argv: list[str]) -> int:
    binary, dcpctl = argv[0], argv[1]
    stride = int(argv[argv.index("--stride") + 1]) if "--stride" in argv else 1
    try:
        vocab = gguf_oracle.fetch() / "models" / "ggml-vocab-qwen2.gguf"
    except Exception as e:  # noqa: BLE001
        skip_or_fail(f"llama-cpp-python's sdist not fetched ({e}); tools/dev.sh setup fetches it")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small, llama = tmp / "small.gguf", tmp / "llama.gguf"
        grt.write_model(small)
        grt.write_llama(llama, grt.llama_tensors())
        sweep(binary, small, "--stride", stride, "--random", 3000, "--seed", 1)
        sweep(binary, llama, "--stride", stride, "--random", 1000, "--seed", 2)
        sweep(binary, vocab, "--stride", 262147, "--random", 20, "--seed", 3)

        # The same damage through the binary: verify's exit 3, the file and the byte offset named.
        data = small.read_bytes()
        cases = [
            ("cut in the magic", data[:3], "offset"),
            ("cut in the keys", data[:200], "offset"),
            ("cut in the tensor infos", data[: data.find(b"blk.0.attn_k.weight") + 5], "offset"),
            ("cut in the data", data[:-100], "gguf-truncated"),
            ("a string length past the file", data[:24] + b"\xff" * 8 + data[32:], "offset"),
            ("a tensor count past the file", data[:8] + b"\xff\xff\xff\x0f\x00\x00\x00\x00" + data[16:], "offset"),
        ]
        # A layer count past what the tensors can hold: one finding, not a table of 4 billion layers
        # (the sweep found verify building one: 192 MiB at byte 99 of llama.gguf, then killed).
        lb = llama.read_bytes()
        at = lb.find(b"llama.block_count") + len(b"llama.block_count") + 4  # past the key and its u32 type
        cases.append(("a block_count of 0xffffff02", lb[:at + 1] + b"\xff\xff\xff" + lb[at + 4:], "llama.block_count"))
        for what, damaged, name in cases:
            p = tmp / "damaged.gguf"
            p.write_bytes(damaged)
            r = run(dcpctl, "verify", p)
            expect_rc(r, 3, what, "damaged.gguf", name)
            # inspect refuses a header it cannot read (3) and lists a file whose data is cut as incomplete.
            r = run(dcpctl, "inspect", p, "--json")
            ok = {"offset": r.returncode == 3, "gguf-truncated": r.returncode == 0 and '"complete": false' in r.stdout}.get(name, r.returncode == 0)
            check(ok, f"inspect of {what}: exit {r.returncode}: {r.stderr[-300:]}")
    return summary("gguf-corruption", min_checks=17)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
