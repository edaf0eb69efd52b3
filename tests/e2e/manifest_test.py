#!/usr/bin/env python3
"""dcpctl's manifest (issue 49 item 4; meta/manifest.h, docs/integrity.md).

    manifest_test.py DCPCTL FIXTURES_DIR

reshard, cast and consolidate (to a folder and to one .safetensors file) write
`dcpctl-manifest.json` (beside a file: `FILE.dcpctl-manifest.json`), by default version 2 with
CRC-32 digests (checked here with zlib.crc32), with `--manifest sha256` version 1 with SHA-256
(checked with hashlib): every file's size and digest and every tensor's digest (computed as
written, write/tensor_hash.h), equal to those `verify --write-manifest` records for the same output
(and, SHA-256, to `verify --checksum`'s digests; CRC-32, for a .safetensors output, to zlib's CRC
of each tensor's bytes); one tensor's bytes changed in an output, `verify --checksum` names that
tensor alone.
`verify` checks it when present: exit 0 on the output as written; exit 3 with
manifest-mismatch (a byte changed, a file cut short), manifest-missing-file (a file removed),
manifest-unlisted-file (a file added), manifest-tensor-mismatch (--checksum against a tensor digest
the manifest records otherwise), manifest-invalid (not the format). `verify --write-manifest` writes
one for an existing checkpoint (the sample, written by torch) and only when it passes; `latest
--verified` and `ls --verified` want a manifest that holds.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
import tempfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import EXIT_INVALID, EXIT_OK, check, expect_rc, run, summary  # noqa: E402

MANIFEST = "dcpctl-manifest.json"
# The manifest's digest (meta/manifest.h): the version that records it and Python's reference.
VERSION = {"crc32": 2, "sha256": 1}


def digest(alg: str, data: bytes) -> str:
    return f"{zlib.crc32(data):08x}" if alg == "crc32" else hashlib.sha256(data).hexdigest()


def alg_of(manifest: dict) -> str:
    return manifest.get("algorithm", "?")


def verify_json(dcpctl, path, *extra):
    r = run(dcpctl, "verify", path, "--json", *extra)
    try:
        return r, json.loads(r.stdout)
    except json.JSONDecodeError:
        check(False, f"verify --json {path}: not JSON: {r.stdout[:300]} {r.stderr[-300:]}")
        return r, {}


def codes(doc) -> list[str]:
    return sorted({p["code"] for p in doc.get("problems", [])})


def check_files(folder: Path, manifest: dict, what: str) -> None:
    listed = manifest.get("files", {})
    on_disk = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)
    check(sorted(listed) == on_disk, f"{what}: manifest lists {sorted(listed)}, the folder holds {on_disk}")
    for name, d in listed.items():
        data = (folder / name).read_bytes()
        check(digest(alg_of(manifest), data) == d and manifest["sizes"][name] == len(data),
              f"{what}: {name}: the manifest's size or {alg_of(manifest)} is not Python's")


def damage_cases(dcpctl, out: Path, what: str, victim: str) -> None:
    """Each damage on a fresh copy of `out`: exit 3 and its code."""
    def fresh(tag: str) -> Path:
        d = out.parent / f"{out.name}-{tag}"
        shutil.copytree(out, d)
        return d

    d = fresh("flip")
    data = bytearray((d / victim).read_bytes())
    data[len(data) // 2] ^= 0x5A
    (d / victim).write_bytes(bytes(data))
    r, doc = verify_json(dcpctl, d)
    check(r.returncode == EXIT_INVALID and "manifest-mismatch" in codes(doc), f"{what}: a byte changed: {r.returncode} {codes(doc)}")

    d = fresh("cut")
    data = (d / victim).read_bytes()
    (d / victim).write_bytes(data[:-1])
    r, doc = verify_json(dcpctl, d)
    check(r.returncode == EXIT_INVALID and "manifest-mismatch" in codes(doc), f"{what}: a file cut short: {r.returncode} {codes(doc)}")

    d = fresh("gone")
    (d / victim).unlink()
    r, doc = verify_json(dcpctl, d)
    check(r.returncode == EXIT_INVALID and "manifest-missing-file" in codes(doc), f"{what}: a file removed: {r.returncode} {codes(doc)}")

    d = fresh("added")
    (d / "notes.txt").write_text("written after the save\n")
    r, doc = verify_json(dcpctl, d)
    check(r.returncode == EXIT_INVALID and codes(doc) == ["manifest-unlisted-file"], f"{what}: a file added: {r.returncode} {codes(doc)}")

    if m_tensors(out):
        d = fresh("tensor")
        m = json.loads((d / MANIFEST).read_text())
        key = sorted(m["tensors"])[0]
        m["tensors"][key] = "0" * len(m["tensors"][key])  # well-formed, and not the tensor's
        (d / MANIFEST).write_text(json.dumps(m))
        r, doc = verify_json(dcpctl, d)  # without --checksum the tensors are not read
        check(r.returncode == EXIT_OK, f"{what}: a tensor digest changed, verify without --checksum: {r.returncode} {codes(doc)}")
        r, doc = verify_json(dcpctl, d, "--checksum")
        check(r.returncode == EXIT_INVALID and codes(doc) == ["manifest-tensor-mismatch"],
              f"{what}: a tensor digest changed, --checksum: {r.returncode} {codes(doc)}")

    d = fresh("invalid")
    (d / MANIFEST).write_text('{"algorithm": "sha256", "files": {}}')
    r, doc = verify_json(dcpctl, d)
    check(r.returncode == EXIT_INVALID and codes(doc) == ["manifest-invalid"], f"{what}: not the format: {r.returncode} {codes(doc)}")


def safetensors_ranges(path: Path) -> dict[str, tuple[int, int]]:
    """Each tensor's bytes in a .safetensors file: (start, end) in the file."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return {k: (8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"}


def tensor_damage(dcpctl, path: Path, shard: Path, what: str) -> None:
    """One tensor's bytes changed in `shard` (of the output at `path`): verify --checksum names it, and it alone."""
    key, (a, b) = next((k, r) for k, r in sorted(safetensors_ranges(shard).items()) if r[1] > r[0])
    data = bytearray(shard.read_bytes())
    data[(a + b) // 2] ^= 0x5A
    shard.write_bytes(bytes(data))
    r, doc = verify_json(dcpctl, path, "--checksum")
    named = sorted(p.get("key") for p in doc.get("problems", []) if p["code"] == "manifest-tensor-mismatch")
    check(r.returncode == EXIT_INVALID and named == [key] and "manifest-mismatch" in codes(doc),
          f"{what}: {key}'s bytes changed: exit {r.returncode}, tensors named {named}, codes {codes(doc)}")


def written_vs_verify(dcpctl, out: Path, m: dict, what: str) -> None:
    """The digests written are verify --checksum's (SHA-256; a CRC-32 manifest's are compared by it,
    each), zlib's CRC of each tensor's bytes in a .safetensors output (CRC-32), and verify
    --write-manifest's for a copy of the output."""
    alg = alg_of(m)
    r, doc = verify_json(dcpctl, out, "--checksum")
    check(r.returncode == EXIT_OK and isinstance(m.get("tensors"), dict) and len(m["tensors"]) > 0
          and (alg == "crc32" or doc.get("checksums") == m["tensors"])
          and doc.get("manifest", {}).get("tensors_compared") == len(m["tensors"])
          and doc.get("manifest", {}).get("algorithm") == alg,
          f"{what}: the written tensor digests are not verify --checksum's: {r.returncode} {codes(doc)} {doc.get('manifest')}")
    shards = [out] if out.suffix == ".safetensors" else sorted(out.glob("*.safetensors"))
    if alg == "crc32" and shards:
        got = {}
        for shard in shards:
            raw = shard.read_bytes()
            for k, (a, b) in safetensors_ranges(shard).items():
                got[k] = f"{zlib.crc32(raw[a:b]):08x}"
        check(got == m["tensors"], f"{what}: the written tensor CRC-32s are not zlib's of each tensor's bytes")
    copy = out.parent / f"{out.stem}-rewritten{out.suffix}"
    if out.is_dir():
        shutil.copytree(out, copy)
        (copy / MANIFEST).unlink()
        expect_rc(run(dcpctl, "verify", copy, "--write-manifest", "--manifest", alg), EXIT_OK, f"{what}: verify --write-manifest of a copy")
        again = json.loads((copy / MANIFEST).read_text())
    else:
        shutil.copy(out, copy)
        expect_rc(run(dcpctl, "verify", copy, "--write-manifest", "--manifest", alg), EXIT_OK, f"{what}: verify --write-manifest of a copy")
        again = json.loads(Path(f"{copy}.{MANIFEST}").read_text())
    check(again.get("tensors") == m["tensors"], f"{what}: verify --write-manifest's tensor digests differ from the written ones")


def m_tensors(d: Path):
    return json.loads((d / MANIFEST).read_text()).get("tensors")


def write_outputs(dcpctl, sample: Path, tmp: Path, alg: str) -> None:
    """Each write command's output with a manifest in `alg` (crc32: the default, asked for by no
    option): its digests Python's, verify's, and each damage found."""
    tmp.mkdir()
    ask = [] if alg == "crc32" else ["--manifest", alg]
    outputs = {
        "reshard": (["reshard", sample, "-o", tmp / "re", "-w", "2"], tmp / "re", "__1_0.distcp"),
        "cast": (["cast", sample, "-o", tmp / "cast", "--dtype", "bf16"], tmp / "cast", "__0_0.distcp"),
        "consolidate DIR/": (["consolidate", sample, "-o", f"{tmp / 'hf'}/", "--max-shard-size", "8KB"], tmp / "hf",
                             "model-00001-of-00008.safetensors"),
    }
    for what, (argv, out, victim) in outputs.items():
        what = f"{what} ({alg})"
        r = run(dcpctl, *argv, *ask, "--json")
        if not expect_rc(r, EXIT_OK, what):
            continue
        check(json.loads(r.stdout).get("manifest") == str(out / MANIFEST), f"{what}: --json manifest: {r.stdout[-300:]}")
        check(json.loads(r.stdout).get("manifest_bytes", {}).get("read_back") == 0,
              f"{what}: the output was read back: {json.loads(r.stdout).get('manifest_bytes')}")
        m = json.loads((out / MANIFEST).read_text())
        check(m.get("format") == "dcpctl-manifest" and m.get("version") == VERSION[alg] and alg_of(m) == alg
              and m.get("source") == str(sample)
              and m.get("written_by", {}).get("tool") == "dcpctl", f"{what}: manifest header {dict(list(m.items())[:3])}")
        check_files(out, m, what)
        written_vs_verify(dcpctl, out, m, what)
        damage_cases(dcpctl, out, what, victim)
        if out.name == "hf":
            d = tmp / "hf-one-tensor"
            shutil.copytree(out, d)
            tensor_damage(dcpctl, d, d / victim, what)

    # One file: the manifest beside it, its name the file's own.
    f = tmp / "one.safetensors"
    r = run(dcpctl, "consolidate", sample, "-o", f, "--select", "app.model", *ask)
    if expect_rc(r, EXIT_OK, f"consolidate -o FILE ({alg})"):
        side = tmp / f"one.safetensors.{MANIFEST}"
        m = json.loads(side.read_text())
        check(m["files"] == {"one.safetensors": digest(alg, f.read_bytes())}, f"consolidate -o FILE ({alg}): manifest {m}")
        expect_rc(run(dcpctl, "verify", f), EXIT_OK, f"verify FILE with its manifest ({alg})", MANIFEST)
        written_vs_verify(dcpctl, f, m, f"consolidate -o FILE ({alg})")
        (tmp / "damaged").mkdir()
        g = tmp / "damaged" / "one.safetensors"
        shutil.copy(f, g)
        shutil.copy(side, tmp / "damaged" / f"one.safetensors.{MANIFEST}")
        tensor_damage(dcpctl, g, g, f"consolidate -o FILE ({alg})")
        data = bytearray(f.read_bytes())
        data[-3] ^= 1
        f.write_bytes(bytes(data))
        expect_rc(run(dcpctl, "verify", f), EXIT_INVALID, f"verify FILE changed after its manifest ({alg})", "manifest-mismatch")


def main() -> int:
    dcpctl, fixtures = sys.argv[1], Path(sys.argv[2])
    sample = fixtures / "sample" / "ckpt"
    with tempfile.TemporaryDirectory(prefix="dcpctl-manifest-") as tmp:
        tmp = Path(tmp)
        for alg in ("crc32", "sha256"):
            write_outputs(dcpctl, sample, tmp / alg, alg)

        # verify --write-manifest on the sample (torch wrote it), in a run folder beside a step without.
        runs = tmp / "run"
        shutil.copytree(sample, runs / "step-1")
        shutil.copytree(sample, runs / "step-2")
        expect_rc(run(dcpctl, "verify", runs / "step-1", "--write-manifest"), EXIT_OK, "verify --write-manifest", "wrote")
        m = json.loads((runs / "step-1" / MANIFEST).read_text())
        check_files(runs / "step-1", m, "verify --write-manifest")
        check(m["source"] is None and len(m["tensors"]) > 0, f"verify --write-manifest: source {m['source']}, tensors")
        r, doc = verify_json(dcpctl, runs / "step-1", "--checksum")
        check(r.returncode == EXIT_OK and alg_of(m) == "crc32" and m.get("version") == 2
              and doc.get("manifest", {}).get("tensors_compared") == len(m["tensors"]),
              f"--write-manifest's tensor digests: {codes(doc)} {doc.get('manifest')}")
        wm = tmp / "written-manifest"
        shutil.copytree(runs / "step-1", wm)
        damage_cases(dcpctl, wm, "verify --write-manifest's", "__1_0.distcp")
        r = run(dcpctl, "latest", runs)
        check(r.returncode == 0 and r.stdout.strip().endswith("step-2"), f"latest: {r.stdout} {r.stderr}")
        r = run(dcpctl, "latest", runs, "--verified")
        check(r.returncode == 0 and r.stdout.strip().endswith("step-1"), f"latest --verified: {r.stdout} {r.stderr}")
        r = run(dcpctl, "ls", runs, "--verified", "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check([c.get("verified") for c in doc.get("checkpoints", [])] == [True, False]
              and str(doc.get("newest_verified", "")).endswith("step-1"), f"ls --verified --json: {r.stdout[-400:]}")
        # A step whose file changed after its manifest is no longer verified.
        victim = runs / "step-1" / "__0_0.distcp"
        data = bytearray(victim.read_bytes())
        data[100] ^= 1
        victim.write_bytes(bytes(data))
        expect_rc(run(dcpctl, "latest", runs, "--verified"), EXIT_INVALID, "latest --verified, the manifest broken",
                  "manifest-mismatch", "step-2", MANIFEST)
        # A checkpoint with problems gets no manifest.
        expect_rc(run(dcpctl, "verify", runs / "step-1", "--write-manifest"), EXIT_INVALID, "--write-manifest of a damaged one",
                  "no manifest written")
    return summary("manifest")


if __name__ == "__main__":
    sys.exit(main())
