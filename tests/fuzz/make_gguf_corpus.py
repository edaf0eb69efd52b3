#!/usr/bin/env python3
"""Regenerates fuzz_gguf's seed corpus (tests/fuzz/corpus_gguf): small files written by gguf-py
0.19.0's GGUFWriter (the writer llama.cpp's converter writes with): the reader test's file of keys
of every kind and plain and quantized tensors, and a file of keys alone.

usage: .venv/bin/python tests/fuzz/make_gguf_corpus.py [CORPUS_DIR]
"""
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "interop"))
import gguf  # noqa: E402
import gguf_read_test as grt  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "corpus_gguf"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    grt.write_model(out / "seed_0")
    w = gguf.GGUFWriter(str(out / "seed_1"), "qwen3")
    w.add_name("keys only")
    w.add_uint32("qwen3.block_count", 2)
    w.add_token_list(["a", "b", "<|x|>"])
    w.add_token_types([1, 1, 3])
    w.add_array("tokenizer.ggml.merges", ["a b"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for p in sorted(out.iterdir()):
        print(p, p.stat().st_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
