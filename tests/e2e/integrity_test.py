#!/usr/bin/env python3
"""megatron-core's integrity.json and metadata.json, on the checkpoint real megatron-core wrote.

    integrity_test.py DCPCTL FIXTURES_DIR

Fixture: tests/fixtures/layouts/megatron_gpt_tp2 (megatron-core 0.19.2,
dist_checkpointing.save(..., verify_integrity=True); tests/fixtures/layouts/make_megatron.py). Its
expected.json records what megatron's OWN verification said of copies with one byte flipped in
each listed file (at the offset it records) and with each listed file removed; dcpctl must agree:
  - `verify` of the intact checkpoint exits 0, with `integrity` naming the 4 files it hashed;
  - one flipped byte in any listed file (a copy): exit 3, `integrity-mismatch` naming that file,
    with or without --deep;
  - a listed file removed: exit 3, `integrity-missing` naming it;
  - a manifest that is not megatron's (not JSON, another algorithm, a name outside the
    directory, a short digest): exit 3, `integrity-invalid`; an unlisted file: a warning, exit 0;
  - `inspect` shows metadata.json's backend (text and --json), and `framework` is null for a
    plain DCP checkpoint and "lightning" beside a meta.pt.
Standard-library Python only. Exit status: 0 pass, 1 failure.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testlib import check, run, summary  # noqa: E402


def verify_json(dcpctl: str, ckpt: Path, *extra: str) -> tuple[int, dict]:
    r = run(dcpctl, "verify", "--json", *extra, str(ckpt))
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        check(False, f"verify --json {ckpt}: not JSON (exit {r.returncode}): {r.stdout[-300:]} {r.stderr[-300:]}")
        return r.returncode, {}


def codes(doc: dict, key: str = "problems") -> list[tuple[str, str]]:
    return [(p["code"], os.path.basename(p["file"])) for p in doc.get(key, [])]


def main() -> int:
    dcpctl, fixtures = os.path.abspath(sys.argv[1]), Path(sys.argv[2]).resolve()
    case = fixtures / "layouts" / "megatron_gpt_tp2"
    ckpt = case / "ckpt"
    expected = json.loads((case / "expected.json").read_text())
    listed = expected["integrity_json"]["files"]
    oracle = expected["megatron_verify"]

    rc, doc = verify_json(dcpctl, ckpt)
    check(rc == 0 and doc.get("ok") is True, f"intact: verify exit {rc}: {doc.get('problems')}")
    check(oracle["intact"] is None, "the fixture: megatron itself refused the intact checkpoint")
    integ = doc.get("integrity") or {}
    check(integ.get("files") == len(listed) and integ.get("algorithm") == "sha256" and
          integ.get("bytes_read") == sum((ckpt / n).stat().st_size for n in listed),
          f"intact: integrity summary {integ}")
    r = run(dcpctl, "verify", str(ckpt))
    check(r.returncode == 0 and f"integrity.json: {len(listed)} files" in r.stdout, f"intact: verify text: {r.stdout[-400:]}")

    with tempfile.TemporaryDirectory(prefix="dcpctl-integrity-") as t:
        tmp = Path(t)
        for name in listed:
            # one byte flipped where megatron's own check was shown to catch it
            at = oracle["per_file"][name]["flip_offset"]
            check(oracle["per_file"][name]["flipped"] is not None and name in oracle["per_file"][name]["flipped"],
                  f"the fixture: megatron did not name {name}")
            d = tmp / f"flip{len(list(tmp.iterdir()))}"
            shutil.copytree(ckpt, d)
            with open(d / name, "r+b") as f:
                f.seek(at)
                b = f.read(1)
                f.seek(at)
                f.write(bytes([b[0] ^ 0xFF]))
            for extra in ([], ["--deep"]):
                rc, doc = verify_json(dcpctl, d, *extra)
                check(rc == 3 and ("integrity-mismatch", name) in codes(doc),
                      f"{name} flipped at {at} {extra}: exit {rc}, problems {codes(doc)}")
            r = run(dcpctl, "verify", str(d))
            check(r.returncode == 3 and "[integrity-mismatch]" in r.stdout and f"/{name}:" in r.stdout,
                  f"{name} flipped: verify text does not name it: {r.stdout[-500:]}")
            # removed
            d = tmp / f"gone{len(list(tmp.iterdir()))}"
            shutil.copytree(ckpt, d)
            (d / name).unlink()
            check(oracle["per_file"][name]["removed"] is not None, f"the fixture: megatron accepted {name} removed")
            rc, doc = verify_json(dcpctl, d)
            check(rc == 3 and ("integrity-missing", name) in codes(doc), f"{name} removed: exit {rc}, problems {codes(doc)}")

        # a manifest that is not megatron's
        manifest = json.loads((ckpt / "integrity.json").read_text())
        bad_manifests = {
            "not JSON": "{\"algorithm\": \"sha256\", \"files\": {",
            "md5": json.dumps(dict(manifest, algorithm="md5")),
            "no files": json.dumps({"algorithm": "sha256"}),
            "outside": json.dumps({"algorithm": "sha256", "files": {"../expected.json": "0" * 64}}),
            "short digest": json.dumps({"algorithm": "sha256", "files": {".metadata": "abc"}}),
        }
        for what, text in bad_manifests.items():
            d = tmp / f"manifest-{what.replace(' ', '-')}"
            shutil.copytree(ckpt, d)
            (d / "integrity.json").write_text(text)
            rc, doc = verify_json(dcpctl, d)
            check(rc == 3 and ("integrity-invalid", "integrity.json") in codes(doc),
                  f"manifest {what}: exit {rc}, problems {codes(doc)}")
        # a file written after the save: a warning only
        d = tmp / "unlisted"
        shutil.copytree(ckpt, d)
        (d / "notes.txt").write_text("added later\n")
        rc, doc = verify_json(dcpctl, d)
        check(rc == 0 and ("integrity-unlisted", "notes.txt") in codes(doc, "warnings"),
              f"unlisted file: exit {rc}, warnings {codes(doc, 'warnings')}")

    # inspect: metadata.json's backend
    r = run(dcpctl, "inspect", "--json", str(ckpt))
    fw = json.loads(r.stdout).get("framework") if r.returncode == 0 else None
    md = expected["metadata_json"]
    check(fw is not None and fw["name"] == "megatron-core" and fw["backend"] == md["sharded_backend"] and
          fw["backend_version"] == md["sharded_backend_version"] and fw["config"] == md and
          fw["files"] == ["metadata.json", "integrity.json"], f"inspect --json framework: {fw}")
    r = run(dcpctl, "inspect", str(ckpt))
    check(r.returncode == 0 and f"metadata.json: backend {md['sharded_backend']} version {md['sharded_backend_version']}" in r.stdout,
          f"inspect text lacks the backend: {r.stdout[:600]}")
    for plain in (fixtures / "sample" / "ckpt",):
        r = run(dcpctl, "inspect", "--json", str(plain))
        check(r.returncode == 0 and json.loads(r.stdout)["framework"] is None, f"{plain}: framework is not null")
        rc, doc = verify_json(dcpctl, plain)
        check(rc == 0 and doc.get("integrity", "absent") is None, f"{plain}: verify integrity is not null: {doc.get('integrity')}")
    light = fixtures / "layouts" / "lightning_fabric" / "ckpt"
    r = run(dcpctl, "inspect", "--json", str(light))
    check(r.returncode == 0 and json.loads(r.stdout)["framework"] == {"name": "lightning", "files": ["meta.pt"]},
          f"{light}: framework {r.stdout[:200]}")

    return summary("integrity_test")


if __name__ == "__main__":
    sys.exit(main())
