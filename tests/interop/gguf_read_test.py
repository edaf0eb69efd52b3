#!/usr/bin/env python3
"""GGUF files as input (gguf/reader.cpp, docs/gguf.md "Reading a GGUF"): inspect, verify and
consolidate of files written by gguf-py 0.19.0's GGUFWriter (the writer llama.cpp's converter uses),
read back against gguf-py's GGUFReader; then the same file damaged by hand, each damage a refusal
that names the file, the offset and the key or tensor.

    gguf_read_test.py DCPCTL

What is checked:
- inspect --json: layout gguf, every tensor's name, shape (torch's order: GGUFReader's reversed)
  and dtype (F32/F16/BF16/I32 as torch's, Q8_0 and Q4_0 by ggml's name), every key's value
  (strings, numbers, a 300-token array as its length);
- verify: exit 0 on the file as written; exit 3 naming gguf-truncated (the last bytes cut),
  gguf-offset (a tensor's offset moved), and exit 3 at the byte for a bad magic, a key or string
  count past the file, a duplicate key, a row that is not whole blocks; exit 5 for
  version 1 and for a ggml type id dcpctl does not know;
- consolidate -o .safetensors of the plain tensors (--include): each equal to GGUFReader's data,
  byte for byte; a quantized tensor read for its values without --dtype is exit 5 naming it; with
  --dtype float32 the Q8_0 and Q4_0 tensors equal gguf-py's quants.dequantize bit for bit;
- verify against the architecture's table (gguf/arch_check.h): a tiny llama GGUFWriter wrote with
  llama.cpp's names and shapes passes; copies written with a tensor renamed, one dropped, one of
  another shape, and a layer past block_count are exit 3 naming the code, the tensor and (but for
  a missing one) its offset; the converter's own files pass in gguf-converter;
- split files (GGUFWriter's split_max_tensors=2: 3 shards): inspect of the first and of the last
  lists every tensor GGUFReader finds in the shards, with the first's keys; verify passes; the
  plain tensors consolidated from them equal GGUFReader's data; exit 3 naming the shard for a shard
  removed (missing-shard), a wrong split.no, a later shard's split.count (read by neither: exit 0), a wrong
  split.tensors.count (gguf-split), and a first shard renamed (its name no longer finds the others).

Exit status: 0 pass, 1 failure, 77 skip (the virtualenv lacks gguf or numpy; a failure under CI).
"""
from __future__ import annotations

import json
import shutil
import struct
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tools"))
import gguf_oracle  # noqa: E402
from skip import skip_or_fail  # noqa: E402
from testlib import check, expect_rc, run, summary  # noqa: E402

try:
    import gguf
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize
    from safetensors.numpy import load_file
except ImportError as e:
    skip_or_fail(f"the virtualenv lacks {e.name} (tools/requirements.txt)")


def write_model(path: Path, split_max_tensors: int = 0) -> dict:
    """A small file as GGUFWriter writes one: keys of every kind, plain and quantized tensors; with
    split_max_tensors, GGUFWriter's split files (PATH-00001-of-0000N.gguf)."""
    rng = np.random.default_rng(7)
    # An architecture llama.cpp does not have: its tensors are no model's (verify notes that it
    # cannot check them against a table; check_arch below writes a llama that it checks).
    w = gguf.GGUFWriter(str(path), "reader", split_max_tensors=split_max_tensors)
    w.add_name("Tiny Reader")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(64)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_token_list([f"tok{i}" for i in range(300)])
    w.add_array("llama.small_list", [1, 2, 3])
    tensors = {
        "token_embd.weight": rng.standard_normal((10, 64)).astype(np.float32),  # F32 [10, 64]
        "blk.0.attn_norm.weight": rng.standard_normal(64).astype(np.float32),
        "blk.0.ffn_up.weight": rng.standard_normal((6, 96)).astype(np.float16),  # F16
        "blk.0.rows.weight": np.arange(12, dtype=np.int32).reshape(3, 4),       # I32
    }
    for name, a in tensors.items():
        w.add_tensor(name, a)
    q8 = rng.standard_normal((4, 64)).astype(np.float32)
    w.add_tensor("blk.0.attn_q.weight", quantize(q8, T.Q8_0), raw_dtype=T.Q8_0)
    q4 = rng.standard_normal((2, 32)).astype(np.float32)
    w.add_tensor("blk.0.attn_k.weight", quantize(q4, T.Q4_0), raw_dtype=T.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def check_read_gguf(path: Path) -> None:
    """tools/gguf_oracle.py's read_gguf (which the GGUF tests use where gguf-py's reader would
    spend seconds on a vocabulary) reads what GGUFReader reads: every key in order with its
    contents(), every tensor's name, shape, type and data offset."""
    kv, tensors = gguf_oracle.read_gguf(path)
    r = gguf.GGUFReader(str(path))
    fields = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    check(list(kv) == list(fields), f"read_gguf({path.name}): keys {list(kv)[:6]}..., GGUFReader's {list(fields)[:6]}...")
    differ = [k for k in kv if k in fields and kv[k] != fields[k]]
    check(not differ, f"read_gguf({path.name}): values differ from GGUFReader's: {differ[:6]}")
    want = [(t.name, [int(x) for x in t.shape], int(t.tensor_type), int(t.data_offset)) for t in r.tensors]
    got = [(t["name"], t["shape"], t["type"], t["offset"]) for t in tensors]
    check(got == want, f"read_gguf({path.name}): tensors {got[:3]}..., GGUFReader's {want[:3]}...")
    # gguf_fields, what gguf_test.py's comparisons read: each key's types too, each tensor's bytes.
    kv, ts = gguf_oracle.gguf_fields(path)
    want_kv = {k: ([t.name for t in f.types], f.contents()) for k, f in r.fields.items() if not k.startswith("GGUF.")}
    check(kv == want_kv, f"gguf_fields({path.name}): keys or types differ from GGUFReader's: "
                         f"{[k for k in want_kv if kv.get(k) != want_kv[k]][:6]}")
    want_ts = {t.name: (t.tensor_type.name, [int(x) for x in t.shape], np.asarray(t.data).tobytes()) for t in r.tensors}
    check(ts == want_ts, f"gguf_fields({path.name}): tensors differ from GGUFReader's: "
                         f"{[n for n in want_ts if ts.get(n) != want_ts[n]][:6]}")


def main() -> int:
    dcpctl = sys.argv[1]
    try:
        vocab = gguf_oracle.fetch() / "models" / "ggml-vocab-llama-spm.gguf"
    except Exception as e:  # noqa: BLE001
        skip_or_fail(f"llama-cpp-python's sdist not fetched ({e}); tools/dev.sh setup fetches it")
    check_read_gguf(vocab)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "in").mkdir()
        model = tmp / "in" / "tiny.gguf"
        write_model(model)
        reader = gguf.GGUFReader(str(model))
        check_read_gguf(model)
        r = run(dcpctl, "inspect", model, "--json")
        check(r.returncode == 0, f"inspect exit {r.returncode}: {r.stderr[-600:]}")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check(doc.get("layout") == "gguf", f"layout {doc.get('layout')}")
        got = {t["key"]: t for t in doc.get("items", []) if t.get("kind") == "tensor"}
        for t in reader.tensors:
            mine = got.get(t.name)
            if not check(mine is not None, f"inspect lists {t.name}"):
                continue
            want_shape = [int(x) for x in reversed(t.shape.tolist())]
            check(mine["shape"] == want_shape, f"{t.name}: shape {mine['shape']}, GGUFReader's reversed {want_shape}")
            plain = {T.F32: "float32", T.F16: "float16", T.BF16: "bfloat16", T.I32: "int32"}
            want_dtype = plain.get(t.tensor_type, t.tensor_type.name)
            check(mine["dtype"] == want_dtype, f"{t.name}: dtype {mine['dtype']}, wanted {want_dtype}")
        check(len(got) == len(reader.tensors), f"{len(got)} tensors listed, the file has {len(reader.tensors)}")
        values = (doc.get("gguf") or {}).get("keys") or {}
        check(values.get("general.architecture") == "'reader'", f"general.architecture {values.get('general.architecture')!r}")
        check(values.get("reader.block_count") == "1", f"block_count {values.get('reader.block_count')!r}")
        check(values.get("tokenizer.ggml.tokens") == "[300 string]", f"tokens {values.get('tokenizer.ggml.tokens')!r}")
        check(values.get("llama.small_list") == "[1, 2, 3]", f"small_list {values.get('llama.small_list')!r}")
        check(values.get("tokenizer.ggml.add_bos_token") == "True", f"add_bos {values.get('tokenizer.ggml.add_bos_token')!r}")

        r = run(dcpctl, "verify", model)
        expect_rc(r, 0, "verify of the file as written", "gguf-arch-not-checked", "'reader'")

        # The plain tensors, consolidated, equal GGUFReader's data byte for byte.
        out = tmp / "plain.safetensors"
        r = run(dcpctl, "consolidate", model, "--exclude", "blk.0.attn_q.weight", "--exclude", "blk.0.attn_k.weight", "-o", out)
        if expect_rc(r, 0, "consolidate of the plain tensors"):
            st = load_file(str(out))
            for t in reader.tensors:
                if t.tensor_type in (T.Q8_0, T.Q4_0):
                    continue
                want = np.asarray(t.data).reshape([int(x) for x in reversed(t.shape.tolist())])
                a = st.get(t.name)
                check(a is not None and a.dtype == want.dtype and a.tobytes() == want.tobytes(),
                      f"{t.name}: consolidated equals GGUFReader's data")
        r = run(dcpctl, "consolidate", model, "-o", tmp / "all.safetensors")
        expect_rc(r, 5, "consolidate of a Q8_0 tensor's values", "blk.0.attn_q.weight", "Q8_0", "--dtype")
        # Under --dtype the block tensors are decoded: equal to gguf-py's dequantize bit for bit.
        out = tmp / "decoded.safetensors"
        r = run(dcpctl, "consolidate", model, "--dtype", "float32", "-o", out)
        if expect_rc(r, 0, "consolidate --dtype float32 of the Q8_0 and Q4_0 tensors"):
            st = load_file(str(out))
            for t in reader.tensors:
                if t.tensor_type in (T.Q8_0, T.Q4_0):
                    want = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
                    a = st.get(t.name)
                    check(a is not None and a.dtype == np.float32 and a.tobytes() == want.tobytes(),
                          f"{t.name}: {t.tensor_type.name} decoded equals gguf-py's dequantize")

        data = model.read_bytes()
        first = reader.tensors[0]
        # Hostile copies: each names its file, and the offset or the tensor.
        def damaged(name: str, b: bytes) -> Path:
            p = tmp / f"{name}.gguf"
            p.write_bytes(b)
            return p

        p = damaged("truncated", data[:-40])
        expect_rc(run(dcpctl, "verify", p), 3, "verify of a truncated file", "gguf-truncated", "blk.0.attn_k.weight")
        r = run(dcpctl, "inspect", p, "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check(r.returncode == 0 and doc["summary"]["complete"] is False and
              any(x["code"] == "gguf-truncated" for x in doc.get("problems", [])),
              f"inspect of a truncated file: exit {r.returncode}, incomplete with gguf-truncated: {r.stdout[-400:]} {r.stderr[-400:]}")
        # The first tensor's offset field: the last 8 bytes of its info.
        def info_end(t) -> int:  # where a tensor's info ends: its offset the last 8 bytes, its type the 4 before
            return t.field.offset + sum(p.nbytes for p in t.field.parts)
        off_at = info_end(first) - 8
        moved = bytearray(data)
        moved[off_at:off_at + 8] = struct.pack("<Q", 64)
        expect_rc(run(dcpctl, "verify", damaged("moved", bytes(moved))), 3, "verify of a moved offset", "gguf-offset", first.name)
        bad = bytearray(data)
        bad[0:4] = b"GGUX"
        expect_rc(run(dcpctl, "verify", damaged("magic", bytes(bad))), 3, "bad magic", "offset 0", "GGUF")
        v1 = bytearray(data)
        v1[4:8] = struct.pack("<I", 1)
        expect_rc(run(dcpctl, "inspect", damaged("v1", bytes(v1))), 5, "version 1", "version 1")
        huge = bytearray(data)
        huge[16:24] = struct.pack("<Q", 1 << 60)
        expect_rc(run(dcpctl, "inspect", damaged("kvcount", bytes(huge))), 3, "a key count past the file", "offset 16")
        # The first key's length: past the file.
        klen = bytearray(data)
        klen[24:32] = struct.pack("<Q", 1 << 40)
        expect_rc(run(dcpctl, "inspect", damaged("keylen", bytes(klen))), 3, "a key length past the file", "offset 24")
        # A duplicate key: general.name's bytes made general.architecture's (same length keys are not
        # available, so the architecture key's name is written over the next key of its length).
        fields = list(reader.fields.values())
        arch = next(f for f in fields if f.name == "general.architecture")
        twin = next((f for f in fields if f.name != arch.name and len(f.name) == len(arch.name)), None)
        if twin is not None:
            dup = bytearray(data)
            name_at = twin.offset + 8
            dup[name_at:name_at + len(arch.name)] = arch.name.encode()
            expect_rc(run(dcpctl, "inspect", damaged("dupkey", bytes(dup))), 3, "a duplicate key", "general.architecture", "second time")
        # The Q8_0 tensor's type made Q4_K (rows of 64 are not whole blocks of 256).
        q8 = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
        type_at = info_end(q8) - 12
        blocks = bytearray(data)
        blocks[type_at:type_at + 4] = struct.pack("<I", int(T.Q4_K))
        expect_rc(run(dcpctl, "inspect", damaged("blocks", bytes(blocks))), 3, "rows not whole blocks", "blk.0.attn_q.weight", "Q4_K", "256")
        # The first tensor's dimensions made 2^60 x 4 float32: 2^62 elements (within int64), 2^64 bytes.
        n_dims_at = first.field.offset + 8 + len(first.name.encode())
        big = bytearray(data)
        big[n_dims_at + 4:n_dims_at + 12] = struct.pack("<Q", 1 << 60)
        big[n_dims_at + 12:n_dims_at + 20] = struct.pack("<Q", 4)
        expect_rc(run(dcpctl, "inspect", damaged("bytes", bytes(big))), 3, "more bytes than 2^64", first.name, "more bytes than any file")
        unknown = bytearray(data)
        unknown[type_at:type_at + 4] = struct.pack("<I", 200)
        expect_rc(run(dcpctl, "inspect", damaged("unknown", bytes(unknown))), 5, "an unknown ggml type", "ggml type 200", "blk.0.attn_q.weight")
        check_split(dcpctl, tmp)
        check_arch(dcpctl, tmp)
    return summary("gguf-read", min_checks=20)


def value_at(reader, key: str) -> int:
    """The offset of a key's value in the file GGUFReader read."""
    f = reader.fields[key]
    return f.offset + sum(p.nbytes for p in f.parts[:-1])


def check_split(dcpctl: str, tmp: Path) -> None:
    folder = tmp / "split"
    folder.mkdir()
    tensors = write_model(folder / "tiny.gguf", split_max_tensors=2)
    names = sorted(p.name for p in folder.iterdir())
    if not check(names == [f"tiny-0000{i}-of-00003.gguf" for i in (1, 2, 3)], f"GGUFWriter wrote {names}"):
        return
    readers = [gguf.GGUFReader(str(folder / n)) for n in names]
    want = {t.name: [int(x) for x in reversed(t.shape.tolist())] for r in readers for t in r.tensors}
    for name in (names[0], names[2]):
        r = run(dcpctl, "inspect", folder / name, "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        got = {t["key"]: t["shape"] for t in doc.get("items", []) if t.get("kind") == "tensor"}
        check(got == want, f"inspect of {name}: exit {r.returncode}, {sorted(got)} against gguf-py's {sorted(want)} {r.stderr[-300:]}")
        keys = (doc.get("gguf") or {}).get("keys") or {}
        check(keys.get("general.architecture") == "'reader'" and keys.get("split.count") == "3",
              f"inspect of {name}: the first shard's keys: {sorted(keys)[:8]}")
    expect_rc(run(dcpctl, "verify", folder / names[0]), 0, "verify of a split")
    out = tmp / "split-plain.safetensors"
    r = run(dcpctl, "consolidate", folder / names[1], "--exclude", "blk.0.attn_q.weight", "--exclude", "blk.0.attn_k.weight", "-o", out)
    if expect_rc(r, 0, "consolidate of a split's plain tensors"):
        st = load_file(str(out))
        check(sorted(st) == sorted(tensors) and all(st[k].tobytes() == a.tobytes() for k, a in tensors.items()),
              f"a split's plain tensors consolidated equal what was written: {sorted(st)}")

    def damaged(label: str, change) -> Path:
        copy = tmp / f"split-{label}"
        shutil.copytree(folder, copy)
        change(copy)
        return copy / names[0]

    def patch(copy: Path, shard: int, key: str, fmt: str, value: int) -> None:
        p = copy / names[shard]
        b = bytearray(p.read_bytes())
        at = value_at(readers[shard], key)
        b[at:at + struct.calcsize(fmt)] = struct.pack(fmt, value)
        p.write_bytes(bytes(b))

    first = damaged("removed", lambda c: (c / names[1]).unlink())
    expect_rc(run(dcpctl, "verify", first), 3, "a shard removed", "missing-shard", names[1])
    expect_rc(run(dcpctl, "consolidate", first, "-o", tmp / "x.safetensors", "--exclude", "blk.0.attn_q.weight",
                  "--exclude", "blk.0.attn_k.weight"), 3,
              "consolidate of a split without a shard", names[1])
    first = damaged("no", lambda c: patch(c, 2, "split.no", "<H", 1))
    expect_rc(run(dcpctl, "verify", first), 3, "a wrong split.no", "gguf-split", names[2], "split.no is 1")
    # a later shard's own split.count: llama.cpp reads the first shard's alone, and loads this
    first = damaged("count", lambda c: patch(c, 1, "split.count", "<H", 4))
    expect_rc(run(dcpctl, "verify", first), 0, "a later shard's split.count is not read (llama.cpp reads the first's)")
    first = damaged("total", lambda c: patch(c, 0, "split.tensors.count", "<i", 5))
    expect_rc(run(dcpctl, "verify", first), 3, "a wrong split.tensors.count", "gguf-split", "split.tensors.count is 5")
    renamed = tmp / "split-renamed"
    shutil.copytree(folder, renamed)
    (renamed / names[0]).rename(renamed / "tiny.gguf")
    expect_rc(run(dcpctl, "inspect", renamed / "tiny.gguf"), 3, "a first shard renamed", "tiny.gguf", "-00001-of-00003.gguf")



def llama_tensors() -> dict:
    """A tiny llama as llama.cpp's loader asks for it (torch's order): hidden 64, 4 heads of 16, 2 KV
    heads, feed-forward 128, 2 layers, 300 tokens."""
    rng = np.random.default_rng(3)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    t = {"token_embd.weight": f(300, 64), "output_norm.weight": f(64), "output.weight": f(300, 64)}
    for i in range(2):
        b = f"blk.{i}."
        t.update({b + "attn_norm.weight": f(64), b + "attn_q.weight": f(64, 64), b + "attn_k.weight": f(32, 64),
                  b + "attn_v.weight": f(32, 64), b + "attn_output.weight": f(64, 64), b + "ffn_norm.weight": f(64),
                  b + "ffn_gate.weight": f(128, 64), b + "ffn_down.weight": f(64, 128), b + "ffn_up.weight": f(128, 64)})
    return t


def write_llama(path: Path, tensors: dict) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_token_list([f"tok{i}" for i in range(300)])
    for name, a in tensors.items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_arch(dcpctl: str, tmp: Path) -> None:
    good = llama_tensors()
    write_llama(tmp / "llama.gguf", good)
    r = run(dcpctl, "verify", tmp / "llama.gguf")
    expect_rc(r, 0, "verify of a llama with llama.cpp's names and shapes")
    check("gguf-arch-not-checked" not in r.stdout, f"a llama is checked against its table: {r.stdout[-300:]}")

    def copy(label: str, change) -> Path:
        t = dict(good)
        change(t)
        p = tmp / f"llama-{label}.gguf"
        write_llama(p, t)
        return p

    def offset_of(p: Path, name: str) -> str:
        r = gguf.GGUFReader(str(p))
        return f"offset {next(x.data_offset for x in r.tensors if x.name == name)}"

    p = copy("renamed", lambda t: t.update({"blk.1.attn_x.weight": t.pop("blk.1.attn_q.weight")}))
    expect_rc(run(dcpctl, "verify", p), 3, "a renamed tensor", "gguf-tensor-unexpected", "blk.1.attn_x.weight",
              offset_of(p, "blk.1.attn_x.weight"), "gguf-tensor-missing", "blk.1.attn_q.weight")
    p = copy("dropped", lambda t: t.pop("blk.0.ffn_up.weight"))
    expect_rc(run(dcpctl, "verify", p), 3, "a dropped tensor", "gguf-tensor-missing", "blk.0.ffn_up.weight")
    p = copy("shape", lambda t: t.update({"blk.0.attn_k.weight": np.zeros((64, 64), np.float32)}))
    expect_rc(run(dcpctl, "verify", p), 3, "a wrong shape", "gguf-shape-mismatch", "blk.0.attn_k.weight", "[64, 64]", "[32, 64]",
              offset_of(p, "blk.0.attn_k.weight"))
    p = copy("layer", lambda t: t.update({"blk.2.attn_norm.weight": np.ones(64, np.float32)}))
    expect_rc(run(dcpctl, "verify", p), 3, "a layer past block_count", "gguf-tensor-unexpected", "blk.2.attn_norm.weight")
    p = copy("tied", lambda t: t.pop("output.weight"))
    expect_rc(run(dcpctl, "verify", p), 0, "a tied head (no output.weight: the embeddings serve)")


if __name__ == "__main__":
    sys.exit(main())
