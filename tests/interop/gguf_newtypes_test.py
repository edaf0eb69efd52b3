#!/usr/bin/env python3
"""ggml's newest block types read from a GGUF (issue 79 item 3; docs/gguf.md "Reading a GGUF"):
NVFP4 (40), Q1_0 (41) and Q2_0 (42), each in a file llama.cpp itself wrote.

    gguf_newtypes_test.py DCPCTL [TYPE ...]      TYPE: nvfp4, q1_0, q2_0 (default: all three)

The writers are llama.cpp's own, llama-cpp-python 0.3.36 built from its sdist (tools/gguf_oracle.py
build), run on the F32 file dcpctl writes of a tiny llama transformers saved (hidden 128, so that
every row is whole blocks of Q1_0's 128; Llama 2's SentencePiece tokenizer, 32,000 tokens): Q1_0
and Q2_0 by `llama_model_quantize` (llama-quantize's code, pure, no importance matrix); NVFP4, which
that llama_model_quantize refuses ("invalid output file type 39"), by ggml's own quantize_nvfp4
(ggml_quantize_chunk) of every 2-D tensor, the file written by gguf-py's GGUFWriter with the F32
file's keys and the other tensors as they are (the converter writes NVFP4 only by repacking an
NVFP4 checkpoint, gguf-lowbit's case, whose values have no float source to diff). gguf-py 0.19.0 knows
NVFP4 and decodes it; it names Q1_0 but has no decoder for it, and does not know Q2_0 at all: the
oracle of the decoded values is ggml's own dequantize_row_nvfp4 / _q1_0 / _q2_0 of that build
(libggml-base, through ctypes), and for NVFP4 gguf-py's quants.dequantize too. For each type:

- inspect --json lists every tensor of the file (tools/gguf_oracle.py's read_gguf, which reads any
  type id) with its shape and ggml's name of its type (float32 for the norms);
- verify exits 0;
- diff HF FILE exits 0, every tensor within its type's bound (gguf/bound.h) of transformers' weights;
  a copy with one block scale of blk.0.attn_q.weight doubled exits 1 naming exactly that tensor, and
  so does diff FILE COPY (two GGUFs: their decoded values);
- consolidate FILE --dtype float32 -o .safetensors: every tensor equal, bit for bit, to ggml's
  dequantization of its bytes (and to gguf-py's, for NVFP4); without --dtype exit 5 naming a tensor
  and --dtype; stats FILE --json: each tensor's min, max and zero count those of the decoded values;
- damaged copies: the file cut inside its last tensor's blocks (verify exit 3, gguf-truncated, and
  consolidate --dtype exit 3), and a tensor's row length made a non-multiple of the type's block
  (exit 3 naming the tensor, the type and the block).

And the older block types --dtype decodes (Q4_0, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), each a tensor
ggml's own quantizer wrote (ggml_quantize_chunk) into a file of gguf-py's GGUFWriter: consolidate
--dtype float32 equals ggml's dequantize_row_* and gguf-py's quants.dequantize, bit for bit.

Exit status: 0 pass, 1 failure, 77 skip (llama-cpp-python not built by tools/dev.sh setup, or the
virtualenv lacks torch/transformers/gguf; a failure instead under CI, tests/skip.py).
"""
from __future__ import annotations

import ctypes
import json
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
from skip import skip_or_fail  # noqa: E402
from testlib import check, expect_rc, run, summary  # noqa: E402

try:
    import numpy as np
    import gguf
    import gguf_oracle
    import gguf_llama_test
    import gguf_test
    from safetensors.numpy import load_file
except ImportError as e:
    skip_or_fail(f"the virtualenv lacks {e.name} (tools/requirements.txt)")

# Each type: llama.cpp's LLAMA_FTYPE_MOSTLY_* (include/llama.h), ggml's type id and name (ggml.h),
# elements and bytes a block (ggml-common.h), and where a block's scale sits and how to double it.
TYPES = {
    "nvfp4": dict(ftype=39, id=40, name="NVFP4", block=64, bytes=36),
    "q1_0": dict(ftype=40, id=41, name="Q1_0", block=128, bytes=18),
    "q2_0": dict(ftype=41, id=42, name="Q2_0", block=64, bytes=18),
}
PLAIN = {0: "float32", 1: "float16", 30: "bfloat16"}
HIDDEN = 128
# Checks each type always makes (the floor: fewer means a case was dropped; docs/testing.md).
CHECKS_PER_TYPE = 15

def tiny_llama(out: Path) -> None:
    """A tiny llama saved by transformers (gguf_llama_test.py's save_model) with Llama 2's tokenizer."""
    out.mkdir(parents=True)
    vocab = gguf_test.spm_tokenizer("llama-spm", out, None)
    gguf_llama_test.save_model("llama", out, HIDDEN, vocab, False, False, {})


def ggml_lib():
    lib = ctypes.CDLL(str(gguf_oracle.build() / "llama_cpp" / "lib" / "libggml-base.so"))
    for t in TYPES:
        f = getattr(lib, f"dequantize_row_{t}")
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        f.restype = None
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    return lib


def ggml_dequantize(lib, kind: str, raw: bytes, n: int) -> np.ndarray:
    out = np.empty(n, np.float32)
    src = ctypes.create_string_buffer(raw, len(raw))
    getattr(lib, f"dequantize_row_{kind}")(src, out.ctypes.data, n)
    return out


def tensors_of(path: Path) -> dict:
    """{name: (type id, shape in torch's order, its bytes)} by read_gguf (any type id)."""
    data = path.read_bytes()
    _, infos = gguf_oracle.read_gguf(path)
    out = {}
    for t in infos:
        n = int(np.prod(t["shape"]))
        ty = t["type"]
        size = {0: 4, 1: 2, 30: 2}.get(ty)
        nbytes = n * size if size else n // next(v for v in TYPES.values() if v["id"] == ty)["block"] * \
            next(v for v in TYPES.values() if v["id"] == ty)["bytes"]
        out[t["name"]] = (ty, list(reversed(t["shape"])), data[t["offset"]:t["offset"] + nbytes], t["offset"])
    return out


def ggml_nvfp4_file(lib, f32: Path, out: Path) -> None:
    """f32 with every 2-D tensor quantized by ggml's quantize_nvfp4 (ggml_quantize_chunk, no
    importance matrix), written by gguf-py's GGUFWriter with f32's keys in their order (read by
    tools/gguf_oracle.py's read_gguf, which gguf_read_test.py checks against GGUFReader: GGUFReader
    itself spends seconds on the 32,000-token vocabulary)."""
    V = gguf.GGUFValueType
    data = f32.read_bytes()
    kv, infos = gguf_oracle.read_gguf(f32, types=True)
    w = gguf.GGUFWriter(str(out), kv["general.architecture"][1])
    for key, (types, value) in kv.items():
        if key != "general.architecture":
            w.add_key_value(key, value, V[types[0]], sub_type=V[types[-1]] if types[0] == "ARRAY" else None)
    for t in infos:
        shape = list(reversed(t["shape"]))
        a = np.frombuffer(data, np.float32, int(np.prod(shape)), t["offset"]).reshape(shape)
        if a.ndim != 2:
            w.add_tensor(t["name"], a)
            continue
        rows, cols = a.shape
        dst = np.empty((rows, cols // 64 * 36), np.uint8)
        src = np.ascontiguousarray(a)
        n = lib.ggml_quantize_chunk(TYPES["nvfp4"]["id"], src.ctypes.data, dst.ctypes.data, 0, rows, cols, None)
        assert n == dst.nbytes, (t["name"], n, dst.nbytes)
        w.add_tensor(t["name"], dst, raw_dtype=gguf.GGMLQuantizationType.NVFP4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def written(kind: str, lib, lc, f32: Path, q: Path) -> bool:
    """The file of `kind` as llama.cpp's code writes it (the module's docstring says which)."""
    if kind == "nvfp4":
        ggml_nvfp4_file(lib, f32, q)
        return check(q.exists(), f"{kind}: ggml's quantize_nvfp4 and GGUFWriter wrote {q.name}")
    p = lc.llama_model_quantize_default_params()
    p.ftype = TYPES[kind]["ftype"]
    p.pure = True
    p.nthread = 1
    rc = lc.llama_model_quantize(str(f32).encode(), str(q).encode(), ctypes.byref(p))
    return check(rc == 0, f"{kind}: llama_model_quantize returned {rc}")


def check_type(dcpctl: str, lib, kind: str, hf: Path, f32: Path, tmp: Path, lc) -> None:
    spec = TYPES[kind]
    q = tmp / "gguf" / f"{kind}.gguf"
    if not written(kind, lib, lc, f32, q):
        return
    ts = tensors_of(q)
    typed = sorted(n for n, (ty, *_r) in ts.items() if ty == spec["id"])
    check(len(typed) >= 14 and "blk.0.attn_q.weight" in typed,
          f"{kind}: llama.cpp wrote {len(typed)} {spec['name']} tensors: {typed[:6]}")

    r = run(dcpctl, "inspect", q, "--json")
    doc = json.loads(r.stdout) if r.returncode == 0 else {}
    got = {t["key"]: (t["dtype"], t["shape"]) for t in doc.get("items", []) if t.get("kind") == "tensor"}
    want = {n: (PLAIN.get(ty, spec["name"]), shape) for n, (ty, shape, *_r) in ts.items()}
    check(r.returncode == 0 and got == want,
          f"{kind}: inspect --json: exit {r.returncode}, differs at {[n for n in want if got.get(n) != want[n]][:4]} "
          f"{r.stderr[-300:]}")
    expect_rc(run(dcpctl, "verify", q), 0, f"{kind}: verify of llama.cpp's file")
    check_diff(dcpctl, kind, hf, q, None)

    out = tmp / "out" / f"{kind}.safetensors"
    r = run(dcpctl, "consolidate", q, "--dtype", "float32", "-o", out, "--json")
    if expect_rc(r, 0, f"{kind}: consolidate --dtype float32"):
        said = json.loads(r.stdout).get("dequantized", {})
        check(said.get("gguf") == len(typed) and said.get("types") == {spec["name"]: len(typed)},
              f"{kind}: consolidate --json says {said.get('gguf')} GGUF block tensors {said.get('types')}, "
              f"the file has {len(typed)} {spec['name']}")
        st = load_file(str(out))
        bad = []
        for n, (ty, shape, raw, _off) in ts.items():
            numel = int(np.prod(shape))
            ref = np.frombuffer(raw, np.float32) if ty == 0 else ggml_dequantize(lib, kind, raw, numel)
            a = st.get(n)
            if a is None or a.dtype != np.float32 or list(a.shape) != shape or a.tobytes() != ref.tobytes():
                bad.append(n)
            elif ty == spec["id"] and kind == "nvfp4":
                py = gguf.quants.dequantize(np.frombuffer(raw, np.uint8).reshape(shape[0], -1), gguf.GGMLQuantizationType.NVFP4)
                if py.astype(np.float32).tobytes() != a.tobytes():
                    bad.append(n + " (gguf-py)")
        check(not bad and sorted(st) == sorted(ts),
              f"{kind}: consolidated values are ggml's dequantization of llama.cpp's bytes: differ {bad[:6]}, "
              f"keys {len(st)} of {len(ts)}")
        # stats reads the decoded values too: each tensor's min, max and zeros are ggml's decode's.
        r = run(dcpctl, "stats", q, "--json")
        got = {t["key"]: t for t in json.loads(r.stdout).get("tensors", [])} if r.returncode == 0 else {}
        off = [n for n, a in st.items() if n not in got or (got[n]["min"], got[n]["max"], got[n]["zeros"]) !=
               (float(a.min()), float(a.max()), int((a == 0).sum()))]
        check(r.returncode == 0 and not off, f"{kind}: stats of the file: exit {r.returncode}, differ {off[:4]}")
    expect_rc(run(dcpctl, "consolidate", q, "-o", tmp / "out" / f"{kind}-raw.safetensors"), 5, f"{kind}: consolidate without --dtype",
           spec["name"], "--dtype")
    check_damaged(dcpctl, kind, hf, q, ts, tmp)


# The older block types --dtype decodes with the same decoders diff uses: each quantized by ggml's
# own quantizer (ggml_quantize_chunk, no importance matrix), as ggml type id: its dequantize_row_*.
OLDER = {"Q4_0": (2, "q4_0"), "Q5_0": (6, "q5_0"), "Q5_1": (7, "q5_1"), "Q8_0": (8, "q8_0"),
         "Q4_K": (12, "q4_K"), "Q5_K": (13, "q5_K"), "Q6_K": (14, "q6_K")}


def check_older_types(dcpctl: str, lib, tmp: Path) -> None:
    """A file gguf-py's GGUFWriter wrote of one [8, 512] tensor a type of OLDER (rows of normal values
    at several scales, a row of zeros), each quantized by ggml: consolidate --dtype float32 equals
    ggml's dequantize_row_* of its bytes, and gguf-py's quants.dequantize, bit for bit."""
    rng = np.random.default_rng(79)
    x = (rng.standard_normal((8, 512)) * np.exp2(rng.integers(-6, 4, (8, 1)))).astype(np.float32)
    x[3] = 0
    path = tmp / "gguf" / "older.gguf"
    w = gguf.GGUFWriter(str(path), "older")
    raws = {}
    for name, (ty, _fn) in OLDER.items():
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ty)]
        dst = np.empty((8, 512 // block * size), np.uint8)
        n = lib.ggml_quantize_chunk(ty, x.ctypes.data, dst.ctypes.data, 0, 8, 512, None)
        assert n == dst.nbytes, (name, n, dst.nbytes)
        w.add_tensor(f"t.{name}", dst, raw_dtype=gguf.GGMLQuantizationType(ty))
        raws[name] = dst
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = tmp / "out" / "older.safetensors"
    if not expect_rc(run(dcpctl, "consolidate", path, "--dtype", "float32", "-o", out, "-q"), 0,
                  "consolidate --dtype float32 of Q4_0, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K"):
        return
    st = load_file(str(out))
    bad = []
    for name, (ty, fn) in OLDER.items():
        f = getattr(lib, f"dequantize_row_{fn}")
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        ref = np.empty(8 * 512, np.float32)
        f(raws[name].ctypes.data, ref.ctypes.data, 8 * 512)
        py = gguf.quants.dequantize(raws[name], gguf.GGMLQuantizationType(ty)).astype(np.float32)
        a = st.get(f"t.{name}")
        if a is None or a.dtype != np.float32 or a.tobytes() != ref.tobytes():
            bad.append(f"{name} (ggml)")
        elif py.tobytes() != a.tobytes():
            bad.append(f"{name} (gguf-py)")
    check(not bad, f"the older block types decoded equal ggml's and gguf-py's dequantization: differ {bad}")


def check_diff(dcpctl: str, kind: str, hf: Path, file: Path, changed_one) -> None:
    r = run(dcpctl, "diff", hf, file, "--json")
    try:
        keys = json.loads(r.stdout)["keys"]
    except (ValueError, KeyError):
        check(False, f"{kind}: diff exit {r.returncode}: {r.stderr[-800:]}")
        return
    changed = sorted(k["key"] for k in keys if k["status"] not in ("identical", "tied"))
    if changed_one is None:
        check(r.returncode == 0 and not changed and len(keys) >= 14,
              f"{kind}: diff against the HF folder: exit {r.returncode}, changed {changed[:8]} of {len(keys)}")
    else:
        check(r.returncode == 1 and changed == [changed_one],
              f"{kind}: diff with a block scale doubled: exit {r.returncode}, changed {changed[:8]}")


def check_damaged(dcpctl: str, kind: str, hf: Path, q: Path, ts: dict, tmp: Path) -> None:
    spec = TYPES[kind]
    data = q.read_bytes()
    # One block scale of blk.0.attn_q.weight doubled: NVFP4's first UE4M3 scale a step of its
    # exponent up (+8), Q1_0's and Q2_0's fp16 d an exponent up (+0x0400) -- the second block, whose
    # scale is not zero.
    _ty, _shape, raw, off = ts["blk.0.attn_q.weight"]
    at = off + spec["bytes"]  # the second block
    b = bytearray(data)
    if kind == "nvfp4":
        b[at] = (b[at] + 8) & 0x7F if b[at] not in (0, 0x7F) else 0x38
    else:
        d = struct.unpack_from("<H", b, at)[0]
        struct.pack_into("<H", b, at, d + 0x0400)
    scaled = tmp / "gguf" / f"{kind}-scaled.gguf"
    scaled.write_bytes(bytes(b))
    check_diff(dcpctl, kind, hf, scaled, "blk.0.attn_q.weight")
    # Two GGUFs: compared as the values their blocks decode to, the 16 MiB embedding and head read in
    # windows of whole blocks (--max-memory 4MiB).
    r = run(dcpctl, "diff", q, scaled, "--json", "--max-memory", "4MiB")
    changed = sorted(k["key"] for k in json.loads(r.stdout)["keys"] if k["status"] != "identical") if r.stdout else None
    check(r.returncode == 1 and changed == ["blk.0.attn_q.weight"],
          f"{kind}: diff of the file and its copy with a block scale doubled: exit {r.returncode}, changed {changed} "
          f"{r.stderr[-300:]}")
    # Cut inside the last tensor's blocks.
    last = max(ts, key=lambda n: ts[n][3])
    cut = tmp / "gguf" / f"{kind}-cut.gguf"
    cut.write_bytes(data[:ts[last][3] + len(ts[last][2]) // 2])
    expect_rc(run(dcpctl, "verify", cut), 3, f"{kind}: verify of a cut file", "gguf-truncated")
    expect_rc(run(dcpctl, "consolidate", cut, "--dtype", "float32", "-o", tmp / "out" / f"{kind}-cut.safetensors"), 3,
           f"{kind}: consolidate --dtype of a cut file")
    # blk.0.attn_q.weight's rows made a block and a half long (ne[0] in its info: after the name's
    # length and bytes, n_dims).
    name = b"blk.0.attn_q.weight"
    info = data.index(struct.pack("<Q", len(name)) + name)
    ne0 = info + 8 + len(name) + 4
    shaped = bytearray(data)
    struct.pack_into("<Q", shaped, ne0, spec["block"] * 3 // 2)
    wrong = tmp / "gguf" / f"{kind}-shape.gguf"
    wrong.write_bytes(bytes(shaped))
    expect_rc(run(dcpctl, "verify", wrong), 3, f"{kind}: rows not whole blocks", "blk.0.attn_q.weight", spec["name"],
           f"whole blocks of {spec['block']}")


def main(argv: list[str]) -> int:
    dcpctl = argv[0]
    kinds = argv[1:] or list(TYPES)
    unknown = [k for k in kinds if k not in TYPES]
    if unknown:
        print(f"unknown type(s) {unknown}; known: {list(TYPES)}", file=sys.stderr)
        return 1
    try:
        gguf_oracle.fetch()
    except Exception as e:  # noqa: BLE001
        skip_or_fail(f"llama-cpp-python's sdist not fetched ({e}); tools/dev.sh setup fetches it")
    if not (gguf_oracle.build_dir() / "built").exists():
        skip_or_fail("llama-cpp-python is not built (tools/dev.sh setup runs tools/gguf_oracle.py build)")
    lc = gguf_oracle.llama_cpp()
    lib = ggml_lib()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.monotonic()
        (tmp / "out").mkdir()
        (tmp / "gguf").mkdir()
        hf = tmp / "tiny"
        tiny_llama(hf)
        f32 = tmp / "gguf" / "f32.gguf"
        r = run(dcpctl, "consolidate", hf, "-o", f32, "--outtype", "f32", "-q")
        if check(r.returncode == 0, f"dcpctl's F32 file: exit {r.returncode}: {r.stderr[-1500:]}"):
            for kind in kinds:
                t1 = time.monotonic()
                check_type(dcpctl, lib, kind, hf, f32, tmp, lc)
                print(f"{kind}: {time.monotonic() - t1:.1f} s")
        t1 = time.monotonic()
        check_older_types(dcpctl, lib, tmp)
        print(f"older types: {time.monotonic() - t1:.1f} s")
        shutil.rmtree(hf)
        print(f"gguf-newtypes: {time.monotonic() - t0:.1f} s")
    return summary("gguf-newtypes", min_checks=3 + CHECKS_PER_TYPE * len(kinds))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
