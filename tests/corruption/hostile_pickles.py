#!/usr/bin/env python3
"""Hand-made hostile `.metadata` pickles, through the real binary.

Each file is assembled opcode by opcode (no pickle module, no torch: most of these cannot be made
by pickle.dump). dcpctl must never execute anything, must not trust any length or count it reads,
and must stay fast and small: every run is checked for its exit code, a message naming the file,
time, peak RSS (and, outside sanitizer builds, a 2 GiB address-space limit), signals and
sanitizer reports. A marker file proves that nothing ran: the hostile `os.system` calls would
create it.

usage: hostile_pickles.py DCPCTL FIXTURES_DIR [--sanitized]
"""
import io
import json
import os
import shutil
import struct
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import EXIT_INVALID, EXIT_OK, EXIT_UNSUPPORTED  # noqa: E402

M = "torch.distributed.checkpoint.metadata"

# --- a tiny pickle assembler (protocol 4 opcodes) ---------------------------------------------


def s(text):
    b = text.encode("utf-8")
    return b"\x8c" + bytes([len(b)]) + b if len(b) < 256 else b"X" + struct.pack("<I", len(b)) + b


def g(module, name):
    return s(module) + s(name) + b"\x93"


def i(v):
    if 0 <= v < 256:
        return b"K" + bytes([v])
    if -(2**31) <= v < 2**31:
        return b"J" + struct.pack("<i", v)
    n = (v.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True)


def tup(*items):
    return b"(" + b"".join(items) + b"t"


def size(dims):
    return g("torch", "Size") + tup(*(i(d) for d in dims)) + b"\x85R"


def newobj(module, cls):
    return g(module, cls) + b")\x81"


def obj(module, cls, fields):
    """NEWOBJ + dict BUILD, as CPython pickles a dataclass."""
    return newobj(module, cls) + b"}(" + b"".join(s(k) + v for k, v in fields) + b"ub"


def props(dtype="float32"):
    layout = g("torch.serialization", "_get_layout") + s("torch.strided") + b"\x85R"
    enum = g(M, "_MEM_FORMAT_ENCODING") + b"K\x00\x85R"
    return newobj(M, "TensorProperties") + b"(" + g("torch", dtype) + layout + b"\x89" + enum + b"\x89tb"


def chunk(offsets, sizes):
    return obj(M, "ChunkStorageMetadata", [("offsets", size(offsets)), ("sizes", size(sizes))])


def tensor_md(shape, chunks):
    return obj(M, "TensorStorageMetadata",
               [("properties", props()), ("size", size(shape)), ("chunks", b"](" + b"".join(chunks) + b"e")])


def metadata(sdm_items, storage_items=b"", extra=b""):
    return (b"\x80\x04" + newobj(M, "Metadata") + b"}(" + s("state_dict_metadata") + b"}(" + sdm_items + b"u" +
            s("planner_data") + b"N" + s("storage_data") + b"}(" + storage_items + b"u" + extra + b"ub.")


def os_system(cmd):
    return b"c" + b"os\nsystem\n" + s(cmd) + b"\x85R"


MEMOIZE = b"\x94"


def get(idx):
    return b"j" + struct.pack("<I", idx)


# --- the hostile files ------------------------------------------------------------------------


def hostile_files(marker):
    touch = f"touch {marker}"
    f = {}
    # Code execution attempts: the root object is a call, not a Metadata.
    f["root REDUCE os.system (protocol 2 GLOBAL)"] = (b"\x80\x02cos\nsystem\nX" + struct.pack("<I", len(touch)) +
                                                      touch.encode() + b"\x85R.", [EXIT_INVALID])
    f["root REDUCE os.system (protocol 4 STACK_GLOBAL)"] = (b"\x80\x04" + g("os", "system") + s(touch) + b"\x85R.",
                                                            [EXIT_INVALID])
    f["root REDUCE builtins.eval"] = (b"\x80\x04" + g("builtins", "eval") + s(f"__import__('os').system('{touch}')") +
                                      b"\x85R.", [EXIT_INVALID])
    f["root INST os.system"] = (b"(" + s(touch) + b"ios\nsystem\n.", [EXIT_INVALID])
    f["root OBJ subprocess.Popen"] = (b"\x80\x04(" + g("subprocess", "Popen") + s(touch) + b"o.", [EXIT_INVALID])
    f["root NEWOBJ + BUILD __setstate__ bait"] = (b"\x80\x04" + g("os", "system") + b")\x81" + s(touch) + b"b.",
                                                  [EXIT_INVALID])
    f["Metadata whose state_dict_metadata holds an os.system call"] = (
        metadata(s("w") + os_system(touch)), [EXIT_INVALID, EXIT_UNSUPPORTED])
    # Lengths that lie.
    f["BINUNICODE8 claiming 2^63 bytes"] = (b"\x80\x04\x8d" + struct.pack("<Q", 2**63) + b"abc.", [EXIT_INVALID])
    f["BINUNICODE8 claiming 2^64-1 bytes"] = (b"\x80\x04\x8d" + struct.pack("<Q", 2**64 - 1) + b"abc.", [EXIT_INVALID])
    f["BINBYTES8 claiming 2^62 bytes"] = (b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"abc.", [EXIT_INVALID])
    f["BINUNICODE claiming 4 GiB"] = (b"\x80\x04X\xff\xff\xff\xffabc.", [EXIT_INVALID])
    f["BINSTRING with a negative length"] = (b"\x80\x02T\xff\xff\xff\xffabc.", [EXIT_INVALID])
    f["LONG4 claiming 2 GiB"] = (b"\x80\x02\x8b\xff\xff\xff\x7f\x01.", [EXIT_INVALID])
    f["FRAME claiming 1 GiB"] = (b"\x80\x04\x95" + struct.pack("<Q", 1 << 30) + b"N.", [EXIT_INVALID])
    f["FRAME claiming 2^64-1 bytes"] = (b"\x80\x04\x95" + struct.pack("<Q", 2**64 - 1) + b"N.", [EXIT_INVALID])
    f["BYTEARRAY8 claiming 2^63 bytes"] = (b"\x80\x05\x96" + struct.pack("<Q", 2**63) + b".", [EXIT_INVALID])
    # Nesting.
    n = 100_000
    f["100k nested lists (EMPTY_LIST ... APPEND)"] = (b"\x80\x04" + b"]" * n + b"a" * (n - 1) + b".", [EXIT_INVALID])
    f["100k nested tuples (MARK ... TUPLE)"] = (b"\x80\x04" + b"(" * n + b"t" * n + b".", [EXIT_INVALID])
    f["100k nested TUPLE1"] = (b"\x80\x04N" + b"\x85" * n + b".", [EXIT_INVALID])
    f["100k nested dicts (SETITEM)"] = (b"\x80\x04" + (b"}" + s("k")) * n + b"N" + b"s" * n + b".", [EXIT_INVALID])
    # a.b(a.b(...a.b(None)...)): the callable pushed n times (shared through the memo), then
    # TUPLE1 REDUCE n times.
    f["100k nested REDUCE calls"] = (b"\x80\x04ca\nb\n\x94" + b"h\x00" * (n - 1) + b"N" + b"\x85R" * n + b".",
                                     [EXIT_INVALID])
    f["100k nested OBJ calls"] = (b"\x80\x04ca\nb\n\x94\x30" + b"(h\x00" * n + b"N" + b"o" * n + b".", [EXIT_INVALID])
    f["1.1 million MARKs"] = (b"\x80\x04" + b"(" * (1 << 20 | 1000) + b"N.", [EXIT_INVALID])
    f["10 million NONEs (a 10 MB flat stack)"] = (b"\x80\x04" + b"N" * 10_000_000 + b".", [EXIT_INVALID])
    # The memo.
    f["BINGET of an unset memo index"] = (b"\x80\x04N\x94h\x05.", [EXIT_INVALID])
    f["LONG_BINGET 0xffffffff"] = (b"\x80\x04j\xff\xff\xff\xff.", [EXIT_INVALID])
    f["GET before PUT (protocol 0)"] = (b"g3\nN.", [EXIT_INVALID])
    f["GET of a 20-digit index"] = (b"g99999999999999999999\n.", [EXIT_INVALID, EXIT_UNSUPPORTED])
    f["PUT at index 2^50"] = (b"Np1125899906842624\n.", [EXIT_INVALID])
    f["LONG_BINPUT 0xffffffff then GET"] = (b"\x80\x04Nr\xff\xff\xff\xffj\xff\xff\xff\xff.", [EXIT_INVALID])
    # Odds and ends.
    f["empty file"] = (b"", [EXIT_INVALID])
    f["PROTO only"] = (b"\x80\x04", [EXIT_INVALID])
    f["pickle protocol 6"] = (b"\x80\x06N.", [EXIT_UNSUPPORTED])
    f["EXT1 (copyreg registry)"] = (b"\x80\x02\x82\x01.", [EXIT_UNSUPPORTED])
    f["NEXT_BUFFER (out-of-band)"] = (b"\x80\x05\x97.", [EXIT_UNSUPPORTED])
    f["invalid UTF-8 in a key"] = (metadata(b"\x8c\x02\xff\xfe" + tensor_md([4], [chunk([0], [4])])), [EXIT_INVALID])
    f["negative dimension"] = (metadata(s("w") + tensor_md([-4], [chunk([0], [4])])), [EXIT_INVALID])
    f["dimension 2^62"] = (metadata(s("w") + tensor_md([2**62, 2**62], [chunk([0, 0], [2**62, 2**62])])),
                           [EXIT_OK, EXIT_INVALID])
    # A dict BUILT with itself as its state: the VM must not read the items it is appending to.
    f["dict BUILD with itself as state"] = (b"\x80\x04}(K\x01K\x02K\x03K\x04u2b.", [EXIT_INVALID])
    f["a Metadata that is a list"] = (b"\x80\x04]" + newobj(M, "Metadata") + b"a.", [EXIT_INVALID])
    return f


def splice_attribute(md_bytes, name, value):
    """Adds `name: value` to the Metadata's attribute dict of a real torch-written .metadata: the
    file ends with SETITEMS BUILD STOP, the SETITEMS closing that dict."""
    assert md_bytes.endswith(b"ub."), md_bytes[-8:]
    return md_bytes[:-3] + s(name) + value + b"ub."


def amplification_bomb(copies, chunks):
    """A few MB that expand to copies x chunks chunks: one TensorStorageMetadata with `chunks`
    chunk references (one chunk object shared through the memo), referenced by `copies` keys.
    Python's pickle.load keeps the sharing (small); a reader that copies per key does not."""
    c = chunk([0], [1]) + MEMOIZE  # memo 0... (indices below are counted by MEMOIZE only)
    chunk_list = b"](" + c + get(0) * (chunks - 1) + b"e"
    t = obj(M, "TensorStorageMetadata", [("properties", props()), ("size", size([1])), ("chunks", chunk_list)])
    sdm = s("w0") + t + MEMOIZE + b"".join(s(f"w{k}") + get(1) for k in range(1, copies))
    return metadata(sdm)


def lookup_bomb(entries, chunks):
    """storage_data keys whose index is wrong and whose offsets match no chunk: a reader that scans
    every chunk for every key does entries x chunks work."""
    c = chunk([0], [1]) + MEMOIZE
    chunk_list = b"](" + c + get(0) * (chunks - 1) + b"e"
    t = obj(M, "TensorStorageMetadata", [("properties", props()), ("size", size([1])), ("chunks", chunk_list)])
    key = obj(M, "MetadataIndex", [("fqn", s("w")), ("index", b"N"), ("offset", size([7]))]) + MEMOIZE
    info = obj("torch.distributed.checkpoint.filesystem", "_StorageInfo",
               [("relative_path", s("__0_0.distcp")), ("offset", i(0)), ("length", i(1))]) + MEMOIZE
    items = key + info + (get(1) + get(2)) * (entries - 1)
    return metadata(s("w") + t, items)


def laughs(levels):
    """L0 = []; Ln = (Ln-1, Ln-1): 2^levels leaves from a few hundred bytes."""
    out = b"\x80\x02]q\x00"
    for k in range(levels):
        out += b"j" + struct.pack("<I", k) + b"j" + struct.pack("<I", k) + b"\x86r" + struct.pack("<I", k + 1)
    return out + b"."


def bytes_item_checkpoint(d, value_pickle):
    """A checkpoint with one bytes item `x` whose torch.save zip holds `value_pickle` as data.pkl."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", value_pickle)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    blob = buf.getvalue()
    with open(os.path.join(d, "__0_0.distcp"), "wb") as fh:
        fh.write(blob)
    key = obj(M, "MetadataIndex", [("fqn", s("x")), ("index", b"N")])
    info = obj("torch.distributed.checkpoint.filesystem", "_StorageInfo",
               [("relative_path", s("__0_0.distcp")), ("offset", i(0)), ("length", i(len(blob)))])
    with open(os.path.join(d, ".metadata"), "wb") as fh:
        fh.write(metadata(s("x") + newobj(M, "BytesStorageMetadata"), key + info))


def main():
    args, sanitized = harness.parse_args(sys.argv)
    dcpctl, fixtures = os.path.abspath(args[0]), os.path.abspath(args[1])
    chk = harness.Checker(sanitized)
    # CPU seconds (harness.Checker.run measures the child's own): a loaded machine stretches the wall
    # clock of these runs, not their CPU time.
    max_seconds = 60 if sanitized else 10
    with tempfile.TemporaryDirectory(prefix="dcpctl-hostile-") as base:
        marker = os.path.join(base, "pwned_dcpctl")
        files = hostile_files(marker)
        files["amplification bomb: 5000 keys x 50000 shared chunks"] = (amplification_bomb(5000, 50000),
                                                                          [EXIT_OK, EXIT_INVALID])
        files["lookup bomb: 50000 storage keys x 50000 chunks"] = (lookup_bomb(50_000, 50_000), [EXIT_OK, EXIT_INVALID])
        for n, (label, (data, codes)) in enumerate(files.items()):
            d = os.path.join(base, f"case{n}")
            os.mkdir(d)
            md = os.path.join(d, ".metadata")
            with open(md, "wb") as fh:
                fh.write(data)
            for cmd in (["inspect"], ["inspect", "--json"], ["verify", "--json", "--deep"]):
                r = chk.run([dcpctl] + cmd + [d], timeout=max_seconds * 3)
                line = (f"{label:56s} {' '.join(cmd):20s} exit {r.rc}  {r.seconds:5.2f} s  {r.cpu_seconds:5.2f} CPU-s  "
                        f"{r.max_rss_mb:5.0f} MiB")
                print(line, flush=True)
                # One vocabulary of failure: inspect and verify give the same exit code (5 for
                # well-formed input this version does not read, 3 for invalid).
                want = codes
                chk.expect(r.rc in want, f"{label}: {' '.join(cmd)}: exit {r.rc}, wanted {want}: {r.describe()}")
                chk.expect(r.cpu_seconds < max_seconds, f"{label}: {' '.join(cmd)} took {r.cpu_seconds:.1f} s of CPU")
                if r.rc not in (EXIT_OK,):
                    text = r.stderr if cmd[0] == "inspect" else r.stdout
                    chk.expect(md in text, f"{label}: {' '.join(cmd)}: message does not name {md}: {text.strip()[:300]}")
                chk.expect(not os.path.exists(marker), f"{label}: {' '.join(cmd)}: the marker file was created!")
        # A bytes item whose value is a "billion laughs": 2^60 leaves through shared references.
        d = os.path.join(base, "laughs")
        os.mkdir(d)
        bytes_item_checkpoint(d, laughs(60))
        for cmd in (["inspect", "--value", "x"], ["inspect", "--json", "--value", "x"], ["verify", "--deep", "--json"]):
            r = chk.run([dcpctl] + cmd + [d], timeout=max_seconds * 3)
            print(f"{'bytes item holding 2^60 shared leaves':56s} {' '.join(cmd):20s} exit {r.rc}  {r.seconds:5.2f} s  "
                  f"{r.cpu_seconds:5.2f} CPU-s  {r.max_rss_mb:5.0f} MiB", flush=True)
            chk.expect(r.rc == EXIT_OK, f"laughs: {' '.join(cmd)}: {r.describe()}")
            chk.expect(r.cpu_seconds < max_seconds, f"laughs: {' '.join(cmd)} took {r.cpu_seconds:.1f} s of CPU")
            if "--json" in cmd and r.rc == EXIT_OK and cmd[0] == "inspect":
                v = json.loads(r.stdout)
                chk.expect(v["value"] is None and v["repr"].endswith("..."), f"laughs: --json --value: {r.stdout[:300]}")
        # A real checkpoint whose Metadata carries an extra attribute that calls os.system.
        d = os.path.join(base, "real_with_os_system")
        shutil.copytree(os.path.join(fixtures, "plain_single", "ckpt"), d)
        md = os.path.join(d, ".metadata")
        with open(md, "rb") as fh:
            orig = fh.read()
        with open(md, "wb") as fh:
            fh.write(splice_attribute(orig, "evil", os_system(f"touch {marker}")))
        r = chk.run([dcpctl, "verify", "--deep", "--json", d])
        print(f"{'real checkpoint + os.system attribute':56s} {'verify --deep --json':20s} exit {r.rc}")
        if chk.expect(r.rc == EXIT_INVALID, f"os.system attribute: verify: {r.describe()}"):
            rep = json.loads(r.stdout)
            codes = sorted({p["code"] for p in rep["problems"]})
            chk.expect(codes == ["dangerous-global"], f"os.system attribute: verify problems {rep['problems']}")
            chk.expect(any("os.system" in p["message"] and p["file"] == md for p in rep["problems"]),
                       f"os.system attribute: the problem does not name os.system and {md}: {rep['problems']}")
        r = chk.run([dcpctl, "inspect", "--json", d])
        print(f"{'real checkpoint + os.system attribute':56s} {'inspect --json':20s} exit {r.rc}")
        if chk.expect(r.rc == EXIT_OK, f"os.system attribute: inspect: {r.describe()}"):
            m = json.loads(r.stdout)["metadata"]
            chk.expect("os.system" in m["unknown_globals"], f"os.system attribute: unknown_globals {m['unknown_globals']}")
            chk.expect("evil" in m["extra_attributes"], f"os.system attribute: extra_attributes {m['extra_attributes']}")
        r = chk.run([dcpctl, "inspect", d])
        chk.expect(r.rc == EXIT_OK and "os.system" in r.stdout, f"os.system attribute: inspect text: {r.describe()}")
        chk.expect(not os.path.exists(marker), "the marker file was created!")
    return harness.finish(chk, "corruption-hostile-pickles")


if __name__ == "__main__":
    sys.exit(main())
