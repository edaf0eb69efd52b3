#!/usr/bin/env python3
"""One bit flipped inside a record that torch.save wrote: every command that reads it must stop.

Every record torch.save writes (a DCP item's data.pkl and data/<key>, a .pt/.bin file's) carries
its CRC-32. For every fixture layout that stores such records (written by real torch: DCP from
torch 2.14 and 2.6, rank-local metadata, torchtitan and Ray Train run folders, zstd items,
Hugging Face .bin files), this test flips one bit:
  - in tensor data (the largest data/<key> record of a data file), leaving headers and .metadata
    intact: verify --deep must report a crc-mismatch finding naming the file, the record's offset
    and a key (exit 3); consolidate (.safetensors and .pt), reshard, cast, diff, stats and
    inspect --value of that key must exit 3 and leave no output;
  - in a non-tensor value (the data.pkl of an item holding no tensor): verify --deep, consolidate
    to .pt (which keeps the values), reshard (which copies the item) and inspect --value;
  - inside a zstd item (torch's ZStandard extension writes frames without a content checksum, so
    what catches a flip there is the CRC-32 of the zip records inside, once decoded).
Each command is first run on the intact copy: it must succeed there (so a refusal on the flipped
copy is the flip's doing, not an unsupported layout's). Standard library only.

    crc_test.py DCPCTL FIXTURES [--sanitized]
    crc_test.py --flip-tensor FILE   flips one bit in FILE's largest tensor record (for the
                                     torchrun tests) and prints that record's offset
"""
import concurrent.futures
import io
import json
import os
import shutil
import struct
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import TALLY, check, fail, run  # noqa: E402

DCPCTL, FIXTURES = sys.argv[1:3] if len(sys.argv) > 2 else ("", "")
SANITIZED = "--sanitized" in sys.argv[3:]
TIMEOUT = 600 if SANITIZED else 120
# What a full run always makes (docs/testing.md#no-test-passes-on-nothing): the checkpoints of the
# committed fixtures that hold torch.save records or zstd frames, and the checks made on them.
MIN_CASES = 51
MIN_CHECKS = 1


def dcpctl(*args):
    """dcpctl ARGS; a crash, a hang or a sanitizer report is a failure by itself (testlib.run)."""
    return run(DCPCTL, *args, timeout=TIMEOUT)


def zip_items(data):
    """(start, end) of each zip archive in a .distcp file: DCP writes its items back to back, each
    ending with an end-of-central-directory record (no comment)."""
    out, start, at = [], 0, 0
    while True:
        p = data.find(b"PK\x05\x06", at)
        if p < 0:
            return out
        end = p + 22 + struct.unpack_from("<H", data, p + 20)[0]
        out.append((start, end))
        start = at = end


def records(data):
    """(name, payload offset in the file, size) of every record of every item, read by Python's
    zipfile (the central directory), payload offset from each local header."""
    out = []
    for start, end in zip_items(data):
        with zipfile.ZipFile(io.BytesIO(data[start:end])) as z:
            names = [i for i in z.infolist()]
        for info in names:
            h = start + info.header_offset
            nl, el = struct.unpack_from("<HH", data, h + 26)
            out.append((info.filename, h + 30 + nl + el, info.file_size, start))
    return out


def flip(path, pos):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ 0x10]))


def data_files(ckpt):
    return sorted(os.path.join(ckpt, n) for n in os.listdir(ckpt) if n.endswith((".distcp", ".bin")))


def keys_of(ckpt):
    p = dcpctl("inspect", "--json", ckpt)
    return {i["key"]: i for i in json.loads(p.stdout)["items"]} if p.returncode == 0 else {}


def writes(ckpt, out):
    """The commands that read every item, with where each writes."""
    return {
        "consolidate-safetensors": (["consolidate", ckpt, "-o", out + "/m.safetensors", "-q"], out + "/m.safetensors"),
        "consolidate-pt": (["consolidate", ckpt, "-o", out + "/m.pt", "-q"], out + "/m.pt"),
        "reshard": (["reshard", ckpt, "-o", out + "/r", "--world-size", "2", "-q"], out + "/r"),
        "cast": (["cast", ckpt, "-o", out + "/c", "--dtype", "bf16", "-q"], out + "/c"),
    }


def check_case(name, ckpt, kind):
    """kind: 'tensor' (flip in tensor data), 'value' (in a non-tensor item's data.pkl), 'zstd'."""
    work = tempfile.mkdtemp(prefix="dcpctl-crc-")
    try:
        good, bad = os.path.join(work, "good"), os.path.join(work, "bad")
        shutil.copytree(ckpt, good)
        shutil.copytree(ckpt, bad)
        # The record to damage, and the key it belongs to (from the error, checked against the keys).
        target = None
        for f in data_files(bad):
            data = open(f, "rb").read()
            if kind == "zstd":
                first = data.find(b"\x28\xb5\x2f\xfd")
                if first >= 0:
                    nxt = data.find(b"\x28\xb5\x2f\xfd", first + 4)
                    end = nxt if nxt > 0 else len(data)
                    target = (f, first + (end - first) * 2 // 3, None, None)
                    break
                continue
            recs = records(data)
            if kind == "tensor":
                cands = [r for r in recs if "/data/" in "/" + r[0] and r[2] > 0]
                if cands:
                    r = max(cands, key=lambda r: r[2])
                    target = (f, r[1] + r[2] // 2, r[1], r[2])
                    break
            else:  # a value: data.pkl of an item that holds no storage record
                by_item = {}
                for r in recs:
                    by_item.setdefault(r[3], []).append(r)
                for item in by_item.values():
                    if not any("/data/" in "/" + r[0] for r in item):
                        pkl = [r for r in item if r[0].endswith("data.pkl")][0]
                        # a byte in the middle of the pickle, past its PROTO/first opcodes
                        target = (f, pkl[1] + pkl[2] // 2, pkl[1], pkl[2])
                        break
                if target:
                    break
        if not target:
            return f"{name}: no {kind} record to damage"
        path, pos, rec_off, rec_size = target
        flip(path, pos)
        where = f"{name} ({kind} flip at {os.path.basename(path)}:{pos})"

        # verify --deep names it. A folder of .bin files is valid input verify does not read: exit 5
        # (unsupported), never 3 (damaged) for what it has not read; stats and diff read it below.
        p = dcpctl("verify", "--deep", "--json", bad)
        v = json.loads(p.stdout) if p.stdout.strip() else {}
        probs = v.get("problems", [])
        want = 5 if "hf_bin" in name else 3
        check(p.returncode == want, f"{where}: verify --deep exit {p.returncode}, want {want}: {probs}")
        crc = [q for q in probs if q["code"] == "crc-mismatch"]
        key = None
        if "hf_bin" in name:  # a folder of .bin files is no checkpoint verify takes: stats and diff below
            probs, crc = ["skipped"], []
        elif kind != "zstd":
            check(crc, f"{where}: verify --deep reported no crc-mismatch: {probs}")
            for q in crc:
                check(not (q["file"] != path or q["offset"] != rec_off or not q["key"]),
                      f"{where}: crc-mismatch names {q['file']}:{q['offset']} key {q['key']!r}, want {path}:{rec_off}")
                key = key or q["key"]
        elif not probs:
            fail(f"{where}: verify --deep found nothing")
        elif crc:
            key = crc[0]["key"]
        check(not (key and key not in keys_of(good)),
              f"{where}: the finding names key {key!r}, which the checkpoint does not hold")

        # Every command that reads the damaged item stops with exit 3 and leaves nothing.
        out_good, out_bad = os.path.join(work, "out-good"), os.path.join(work, "out-bad")
        os.makedirs(out_good)
        os.makedirs(out_bad)
        cmds_good, cmds_bad = writes(good, out_good), writes(bad, out_bad)
        wanted = list(cmds_good) if kind != "value" else ["consolidate-pt", "reshard"]
        ran = 0
        for c in wanted:
            args, _ = cmds_good[c]
            if dcpctl(*args).returncode != 0:
                continue  # this layout is not one the command takes
            ran += 1
            args, dest = cmds_bad[c]
            p = dcpctl(*args)
            if check(p.returncode == 3, f"{where}: {c} exit {p.returncode}, want 3 ({p.stderr.strip()[-300:]})") \
                    and kind != "zstd":
                check("CRC-32" in p.stderr, f"{where}: {c} did not name the CRC-32 check: {p.stderr.strip()[-300:]}")
            if not check(not os.listdir(out_bad), f"{where}: {c} left {os.listdir(out_bad)} behind"):
                for n in os.listdir(out_bad):
                    shutil.rmtree(os.path.join(out_bad, n), ignore_errors=True)
                    if os.path.exists(os.path.join(out_bad, n)):
                        os.remove(os.path.join(out_bad, n))
        check(not (kind == "tensor" and ran == 0 and "hf_bin" not in name),
              f"{where}: no write command ran on the intact copy")
        readers = []
        if kind != "value":
            readers += [["stats", "{}"], ["diff", "{}", good]]
        if key and (kind == "value" or keys_of(good).get(key, {}).get("numel", 1 << 30) <= 10000):
            readers.append(["inspect", "--value", key, "{}"])
        read = 0
        for args in readers:
            if dcpctl(*[good if a == "{}" else a for a in args]).returncode != 0:
                continue
            read += 1
            p = dcpctl(*[bad if a == "{}" else a for a in args])
            check(p.returncode == 3, f"{where}: {args[0]} exit {p.returncode}, want 3 ({p.stderr.strip()[-300:]})")
        check(not (kind != "value" and read == 0), f"{where}: neither stats nor diff ran on the intact copy")
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    cases = []
    for base in ["", "layouts"]:
        root = os.path.join(FIXTURES, base)
        for n in sorted(os.listdir(root)):
            ck = os.path.join(root, n, "ckpt")
            if not os.path.isdir(ck):
                continue
            # Items that are torch.save zips or zstd frames; safetensors items carry no CRC.
            heads = [open(f, "rb").read(4) for f in data_files(ck)]
            if any(h == b"PK\x03\x04" or h == b"\x28\xb5\x2f\xfd" for h in heads):
                cases.append((os.path.join(base, n), ck))
    # Run folders: one checkpoint of each trainer.
    cases.append(("layouts/run_torchtitan step-4", os.path.join(FIXTURES, "layouts/run_torchtitan/run/step-4")))
    ray = os.path.join(FIXTURES, "layouts/run_ray/run")
    ray_ck = sorted(d for d in os.listdir(ray) if d.startswith("checkpoint_"))[0]
    cases.append(("layouts/run_ray " + ray_ck, os.path.join(ray, ray_ck)))
    # torch.save files read as checkpoints (diff, stats): a Hugging Face .bin folder.
    cases.append(("hf_bin/sharded", os.path.join(FIXTURES, "hf_bin/sharded")))

    jobs = []
    for name, ck in cases:
        jobs.append((name, ck, "zstd" if "zstd" in name else "tensor"))
        if "zstd" not in name and "hf_bin" not in name:
            jobs.append((name, ck, "value"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        notes = list(ex.map(lambda j: check_case(*j), jobs))
    skipped = [n for n in notes if n]
    for n in skipped:
        print("note:", n)
    # A case may lack a non-tensor item (or, safetensors items, a tensor record): each must have
    # had something damaged.
    done = {j[0] for j, n in zip(jobs, notes) if not n}
    untouched = sorted({j[0] for j in jobs} - done)
    check(not untouched, f"cases with nothing to damage: {untouched}")
    print(f"crc_test: {len(jobs) - len(skipped)} cases damaged and checked, {len(TALLY.failures)} failure(s)")
    # The layouts found by listing the fixtures: a fixture lost or no longer recognised must not
    # shrink the sweep in silence (MIN_CASES: the cases of the committed fixtures).
    check(len(cases) >= MIN_CASES, f"{len(cases)} checkpoints with torch.save records or zstd frames found under "
                                   f"{FIXTURES}, fewer than the {MIN_CASES} committed: {[c[0] for c in cases]}")
    return TALLY.summary("corruption-crc", min_checks=MIN_CHECKS)


def flip_tensor(path):
    recs = [r for r in records(open(path, "rb").read()) if "/data/" in "/" + r[0] and r[2] > 0]
    r = max(recs, key=lambda r: r[2])
    flip(path, r[1] + r[2] // 2)
    print(r[1])


if __name__ == "__main__":
    if sys.argv[1] == "--flip-tensor":
        flip_tensor(sys.argv[2])
        sys.exit(0)
    sys.exit(main())
