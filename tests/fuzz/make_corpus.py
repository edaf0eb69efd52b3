#!/usr/bin/env python3
"""Regenerates the fuzz seed corpus (tests/fuzz/corpus): every fixture's `.metadata`, the data.pkl
of a few items per fixture (torch.save's protocol-2 tensor and object pickles), and small
pickles of builtin values at every protocol (standard library pickle) so the fuzzer starts from
every opcode family. Standard library only; deterministic.

usage: make_corpus.py [FIXTURES_DIR [CORPUS_DIR]]
"""
import io
import os
import pickle
import shutil
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKL_PER_FIXTURE = 3


def data_pkls(distcp):
    """data.pkl of every torch.save zip concatenated in a .distcp, in file order."""
    with open(distcp, "rb") as f:
        blob = f.read()
    out, pos = [], 0
    while True:
        e = blob.find(b"PK\x05\x06", pos)
        if e < 0:
            return out
        # zipfile finds the archive that ends at e + 22, whatever precedes it.
        try:
            z = zipfile.ZipFile(io.BytesIO(blob[:e + 22]))
            names = [n for n in z.namelist() if n.endswith("/data.pkl")]
            if names:
                out.append(z.read(names[0]))
        except zipfile.BadZipFile:
            pass
        pos = e + 4


def builtin_seeds():
    values = {
        "nested": {"a": [1, 2.5, None, True], "b": ("x", b"\x00\xff", bytearray(b"ba")), "c": {1, 2}, "d": frozenset([3])},
        "ints": [0, 255, 65535, -1, 2**31, 2**63, -2**70, 10**30],
        "strings": ["", "é", "日本", "a" * 300, "line\nbreak"],
        "floats": [0.1, -0.0, float("inf"), 1e308],
    }
    shared = [1, 2]
    values["shared"] = [shared, shared, (shared,)]
    rec = []
    rec.append(rec)
    values["recursive"] = rec
    seeds = {}
    for name, v in values.items():
        for proto in range(0, 6):
            seeds[f"py_{name}_p{proto}"] = pickle.dumps(v, protocol=proto)
    return seeds


def main():
    fixtures = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "fixtures")
    corpus = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "corpus")
    shutil.rmtree(corpus, ignore_errors=True)
    os.makedirs(corpus)
    n = 0
    for case in sorted(os.listdir(fixtures)):
        ckpt = os.path.join(fixtures, case, "ckpt")
        md = os.path.join(ckpt, ".metadata")
        if not os.path.isfile(md):
            continue
        shutil.copyfile(md, os.path.join(corpus, f"metadata_{case}"))
        n += 1
        pkls = []
        for name in sorted(os.listdir(ckpt)):
            if name.endswith(".distcp"):
                pkls += data_pkls(os.path.join(ckpt, name))
        seen = set()
        for k, p in enumerate(pkls):
            if p in seen or len(seen) >= PKL_PER_FIXTURE:
                continue
            seen.add(p)
            with open(os.path.join(corpus, f"datapkl_{case}_{k}"), "wb") as f:
                f.write(p)
            n += 1
    for name, data in builtin_seeds().items():
        with open(os.path.join(corpus, name), "wb") as f:
            f.write(data)
        n += 1
    print(f"{n} seeds in {corpus}")


if __name__ == "__main__":
    main()
