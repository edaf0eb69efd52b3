#!/usr/bin/env python3
"""Corrupted data files and bad paths, through the real binary.

For a few fixtures written by real torch: copy the checkpoint to a temporary directory, damage
one thing (truncate a .distcp inside a zip header, inside data.pkl, inside tensor data; flip a byte
of a zip local header, of the central directory, of data.pkl; delete a .distcp; put a directory
where a .distcp should be), then run `dcpctl verify --deep --json`. It must exit 3 and report a
problem naming the damaged file (with the offset and key where the damage is inside an item),
never crash or print a sanitizer report, and leave the input unchanged.

Damage inside raw tensor bytes can legitimately go unnoticed (torch keeps no checksums either):
those runs only have to finish cleanly.

Then `dcpctl inspect` on paths that are not checkpoints: clear message naming the path and the
documented exit code.

usage: item_corruption.py DCPCTL FIXTURES_DIR [--sanitized]
"""
import io
import json
import os
import shutil
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import EXIT_INVALID, EXIT_IO, EXIT_OK, EXIT_USAGE  # noqa: E402

CASES = ["plain_single", "multi_file", "dtensor_shard0_uneven", "odd_keys_values", "zstd"]


def items_of(chk, dcpctl, ckpt):
    """(file, offset, length, key, kind) of every item, from dcpctl's own reading of .metadata."""
    r = chk.run([dcpctl, "inspect", "--json", "--chunks", ckpt])
    if not chk.expect(r.rc == EXIT_OK, f"inspect of the intact copy failed: {r.describe()}"):
        return []
    rep = json.loads(r.stdout)
    out = []
    for it in rep["items"]:
        if it["kind"] == "bytes":
            if it["file"] is not None:
                out.append((it["file"], it["offset"], it["length"], it["key"], "bytes", it.get("transforms")))
        else:
            for c in it["chunk_list"]:
                if c["file"] is not None and c["length"] > 0:
                    out.append((c["file"], c["offset"], c["length"], it["key"], "tensor", c.get("transforms")))
    return out


def zip_layout(blob):
    """Offsets inside one untransformed item (a torch.save zip): records and the central directory."""
    z = zipfile.ZipFile(io.BytesIO(blob))
    recs = {}
    for info in z.infolist():
        name = info.filename.split("/", 1)[1]
        # data starts after the 30-byte local header, the name and the extra field
        lh = blob[info.header_offset:info.header_offset + 30]
        n, x = int.from_bytes(lh[26:28], "little"), int.from_bytes(lh[28:30], "little")
        recs[name] = (info.header_offset, info.header_offset + 30 + n + x, info.file_size)
    eocd = blob.rfind(b"PK\x05\x06")
    cd_offset = int.from_bytes(blob[eocd + 16:eocd + 20], "little")
    return recs, cd_offset


def damages(items, ckpt):
    """(label, action, expect) triples. expect: 'detected' (exit 3, problem naming the file) or
    'clean' (any of 0/3, only no crash)."""
    files = sorted({f for f, *_ in items})
    plain = [i for i in items if not i[5]]
    first = plain[0] if plain else items[0]
    f, off, length, key, kind, tr = first
    size = os.path.getsize(os.path.join(ckpt, f))
    out = []

    def truncate(fname, at):
        def act(d):
            with open(os.path.join(d, fname), "r+b") as fh:
                fh.truncate(at)
        return act

    def flip(fname, at, mask=0xFF):
        def act(d):
            with open(os.path.join(d, fname), "r+b") as fh:
                fh.seek(at)
                b = fh.read(1)[0]
                fh.seek(at)
                fh.write(bytes([b ^ mask]))
        return act

    def delete(fname):
        return lambda d: os.remove(os.path.join(d, fname))

    def make_dir(fname):
        def act(d):
            os.remove(os.path.join(d, fname))
            os.mkdir(os.path.join(d, fname))
        return act

    out.append((f"truncate {f} to 0 bytes", f, truncate(f, 0), "detected", None))
    out.append((f"truncate {f} inside the first zip local header ({off + 10})", f, truncate(f, off + 10), "detected", None))
    out.append((f"truncate {f} one byte short ({size - 1})", f, truncate(f, size - 1), "detected", None))
    out.append((f"delete {f}", f, delete(f), "detected", None))
    out.append((f"{f} replaced by a directory", f, make_dir(f), "detected", None))
    if not tr:
        with open(os.path.join(ckpt, f), "rb") as fh:
            fh.seek(off)
            blob = fh.read(length)
        recs, cd = zip_layout(blob)
        pkl_hdr, pkl_data, pkl_len = recs["data.pkl"]
        out.append((f"truncate {f} inside data.pkl of '{key}'", f, truncate(f, off + pkl_data + pkl_len // 2), "detected", None))
        out.append((f"flip the local header signature of data.pkl in '{key}'", f, flip(f, off + pkl_hdr), "detected", (off, key)))
        out.append((f"flip the local header signature of version in '{key}'", f, flip(f, off + recs["version"][0]), "clean", None))
        out.append((f"flip the central directory signature in '{key}'", f, flip(f, off + cd), "detected", (off, key)))
        out.append((f"flip the end-of-central-directory signature in '{key}'", f,
                    flip(f, off + blob.rfind(b"PK\x05\x06")), "detected", (off, key)))
        out.append((f"flip data.pkl's PROTO opcode in '{key}'", f, flip(f, off + pkl_data), "detected", (off, key)))
        out.append((f"flip data.pkl's STOP opcode in '{key}'", f, flip(f, off + pkl_data + pkl_len - 1), "detected", (off, key)))
        out.append((f"flip the middle of data.pkl in '{key}'", f, flip(f, off + pkl_data + pkl_len // 2), "clean", None))
        if "data/0" in recs and recs["data/0"][2] > 0:
            d0 = off + recs["data/0"][1]
            out.append((f"truncate {f} inside the tensor data of '{key}'", f, truncate(f, d0 + 1), "detected", None))
            out.append((f"flip a byte of the tensor data of '{key}'", f, flip(f, d0), "clean", None))
    else:
        # A transformed (zstd) item: damage inside the compressed stream.
        out.append((f"flip the zstd frame magic of '{key}'", f, flip(f, off), "detected", (off, key)))
        out.append((f"flip the middle of the zstd stream of '{key}'", f, flip(f, off + length // 2), "clean", None))
        out.append((f"truncate {f} inside the zstd stream of '{key}'", f, truncate(f, off + length // 2), "detected", None))
    # A later item in another file, when there is one: the damage report must name that file.
    others = [i for i in items if i[0] != f]
    if others:
        g, goff, *_ = others[-1]
        out.append((f"truncate {g} inside its last item", g, truncate(g, goff + 5), "detected", None))
    if len(files) > 1:
        out.append((f"delete {files[-1]}", files[-1], delete(files[-1]), "detected", None))
    return out


def check_verify(chk, dcpctl, case, tmp, label, fname, expect, where):
    d = os.path.join(tmp, "ckpt")
    before = harness.tree_digest(d)
    r = chk.run([dcpctl, "verify", "--deep", "--json", d])
    after = harness.tree_digest(d)
    chk.expect(before == after, f"{case}: {label}: verify changed its input")
    if expect == "clean":
        chk.expect(r.rc in (EXIT_OK, harness.EXIT_INVALID), f"{case}: {label}: {r.describe()}")
        return r
    if not chk.expect(r.rc == EXIT_INVALID, f"{case}: {label}: wanted exit 3: {r.describe()}"):
        return r
    try:
        rep = json.loads(r.stdout)
    except ValueError:
        chk.fail(f"{case}: {label}: verify --json printed no JSON: {r.stdout[:200]!r}")
        return r
    chk.expect(rep.get("schema_version") == 1 and rep.get("ok") is False, f"{case}: {label}: report {rep}")
    probs = rep.get("problems", [])
    path = os.path.join(d, fname)
    naming = [p for p in probs if p["file"] == path or p["file"].endswith("/" + fname)]
    chk.expect(naming, f"{case}: {label}: no problem names {fname}: {probs[:3]}")
    if where and naming:
        off, key = where
        chk.expect(any(p["offset"] is not None and p["key"] for p in naming),
                   f"{case}: {label}: no problem gives an offset and key: {naming[:3]}")
    for p in probs:
        chk.expect(p["message"] and p["code"], f"{case}: {label}: empty problem {p}")
    return r


def check_inspect_paths(chk, dcpctl, fixtures, tmp):
    src = os.path.join(fixtures, "plain_single", "ckpt")
    nomd = os.path.join(tmp, "no_metadata")
    shutil.copytree(src, nomd)
    os.remove(os.path.join(nomd, ".metadata"))
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    trunc = os.path.join(tmp, "truncated")
    shutil.copytree(src, trunc)
    with open(os.path.join(trunc, ".metadata"), "r+b") as fh:
        fh.truncate(os.path.getsize(os.path.join(src, ".metadata")) // 2)
    zero = os.path.join(tmp, "zero")
    shutil.copytree(src, zero)
    open(os.path.join(zero, ".metadata"), "wb").close()
    mddir = os.path.join(tmp, "metadata_is_dir")
    shutil.copytree(src, mddir)
    os.remove(os.path.join(mddir, ".metadata"))
    os.mkdir(os.path.join(mddir, ".metadata"))
    cases = [
        ("a directory without .metadata (but with .distcp files)", nomd, [EXIT_INVALID], os.path.join(nomd, ".metadata")),
        ("an empty directory", empty, [EXIT_INVALID], empty),
        ("a .distcp file", os.path.join(src, "__0_0.distcp"), [EXIT_IO, EXIT_USAGE], os.path.join(src, "__0_0.distcp")),
        ("a .metadata file", os.path.join(src, ".metadata"), [EXIT_USAGE, EXIT_IO], os.path.join(src, ".metadata")),
        ("a path that does not exist", os.path.join(tmp, "nope"), [EXIT_IO], os.path.join(tmp, "nope")),
        ("a truncated .metadata", trunc, [EXIT_INVALID], os.path.join(trunc, ".metadata")),
        ("an empty .metadata", zero, [EXIT_INVALID], os.path.join(zero, ".metadata")),
        ("a .metadata that is a directory", mddir, [EXIT_INVALID, EXIT_IO], os.path.join(mddir, ".metadata")),
    ]
    for label, path, codes, named in cases:
        for args in (["inspect"], ["inspect", "--json"], ["verify"], ["verify", "--json", "--deep"]):
            r = chk.run([dcpctl] + args + [path])
            # verify reports a bad .metadata as a finding in its report (stdout), not on stderr.
            text = r.stdout + r.stderr if args[0] == "verify" else r.stderr
            chk.expect(r.rc in codes, f"{' '.join(args)} on {label}: exit {r.rc}, wanted {codes}: {r.describe()}")
            chk.expect(named in text, f"{' '.join(args)} on {label}: message does not name {named}: {text.strip()[:300]}")
            if args == ["inspect", "--json"] and r.rc != EXIT_OK:
                # A script that asked for JSON gets a JSON error document, with the same exit code.
                try:
                    err = json.loads(r.stdout)["error"]
                    ok = err["exit_code"] == r.rc and named in err["file"] + ": " + err["message"]
                except (ValueError, KeyError, TypeError):
                    ok = False
                chk.expect(ok, f"inspect --json on {label}: no JSON error document with exit {r.rc} naming {named}: {r.stdout[:300]}")
    # The offset of the truncation is part of the message.
    r = chk.run([dcpctl, "inspect", trunc])
    chk.expect("offset" in r.stderr, f"inspect on a truncated .metadata gives no offset: {r.stderr.strip()}")


def main():
    args, sanitized = harness.parse_args(sys.argv)
    dcpctl, fixtures = os.path.abspath(args[0]), os.path.abspath(args[1])
    chk = harness.Checker(sanitized)
    counts = {"detected": 0, "clean": 0}
    fixtures_before = harness.tree_digest(fixtures)
    with tempfile.TemporaryDirectory(prefix="dcpctl-corrupt-") as base:
        for case in CASES:
            src = os.path.join(fixtures, case, "ckpt")
            if not os.path.isdir(src):
                chk.fail(f"fixture {case} is missing")
                continue
            items = items_of(chk, dcpctl, src)
            if not items:
                continue
            for label, fname, act, expect, where in damages(items, src):
                tmp = os.path.join(base, "work")
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(src, os.path.join(tmp, "ckpt"))
                act(os.path.join(tmp, "ckpt"))
                r = check_verify(chk, dcpctl, case, tmp, label, fname, expect, where)
                counts[expect] += 1
                print(f"{case:24s} {label}: exit {r.rc}")
        check_inspect_paths(chk, dcpctl, fixtures, base)
    chk.expect(harness.tree_digest(fixtures) == fixtures_before, "the fixtures changed")
    print(f"{counts['detected']} damages that must be detected, {counts['clean']} that must only not crash")
    return harness.finish(chk, "corruption-items")


if __name__ == "__main__":
    sys.exit(main())
