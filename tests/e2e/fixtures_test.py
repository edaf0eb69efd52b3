#!/usr/bin/env python3
"""dcpctl inspect/verify on every fixture, checked against the fixture's expected.json.

expected.json was written from real torch's view of each checkpoint (tests/fixtures/make_fixtures.py),
so this compares dcpctl with torch, not with itself. Needs only the Python standard library.
usage: fixtures_test.py DCPCTL FIXTURES_DIR
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ledger  # noqa: E402
import testlib  # noqa: E402

# repr comparison for values JSON cannot hold exactly (NaN, sets, bytes, dtypes).
REPR_TYPES = {"set", "bytes", "float", "dtype", "str", "int", "tuple", "list", "bool", "NoneType", "dict"}

# The committed fixtures with an expected.json (docs/testing.md#no-test-passes-on-nothing).
MIN_CASES = 14


def stdout_of(args, want_rc=0):
    """The stdout of a run that must exit want_rc (else AssertionError, which the caller records)."""
    p = testlib.run(args)
    if p.returncode != want_rc or testlib.TALLY.failures:
        raise AssertionError(f"{' '.join(args)}: exit {p.returncode}, wanted {want_rc}\n{p.stderr}")
    return p.stdout


def check_case(dcpctl, case_dir, failures):
    ckpt = os.path.join(case_dir, "ckpt")
    exp = json.load(open(os.path.join(case_dir, "expected.json")))
    keys = exp["keys"]
    name = os.path.basename(case_dir)

    rep = json.loads(stdout_of([dcpctl, "inspect", "--json", ckpt]))
    items = {it["key"]: it for it in rep["items"]}
    if set(items) != set(keys):
        failures.append(f"{name}: inspect keys differ: missing {sorted(set(keys) - set(items))[:5]}, "
                        f"extra {sorted(set(items) - set(keys))[:5]}")
    for k, e in keys.items():
        it = items.get(k)
        if it is None:
            continue
        if it["kind"] != e["kind"]:
            failures.append(f"{name}: {k}: kind {it['kind']} != {e['kind']}")
            continue
        if e["kind"] == "tensor":
            if it["dtype"] != e["dtype"] or it["shape"] != e["shape"]:
                failures.append(f"{name}: {k}: {it['dtype']}{it['shape']} != {e['dtype']}{e['shape']}")
            if it["bytes"] != e["nbytes"]:
                failures.append(f"{name}: {k}: bytes {it['bytes']} != {e['nbytes']}")
            if "chunks" in e and it["chunks"] != e["chunks"]:
                failures.append(f"{name}: {k}: chunks {it['chunks']} != {e['chunks']}")
            if not it["complete"]:
                failures.append(f"{name}: {k}: reported incomplete")
    if not rep["summary"]["complete"] or rep["problems"]:
        failures.append(f"{name}: inspect reports problems: {rep['problems'][:3]}")

    ver = json.loads(stdout_of([dcpctl, "verify", "--deep", "--checksum", "--json", ckpt]))
    if not ver["ok"]:
        failures.append(f"{name}: verify --deep found problems: {ver['problems'][:3]}")
    for k, e in keys.items():
        if e["kind"] == "tensor" and ver["checksums"].get(k) != e["sha256"]:
            failures.append(f"{name}: {k}: sha256 {ver['checksums'].get(k)} != torch's {e['sha256']}")

    # Each --value is one process start (~0.3 s with LibTorch loaded): check every value of the
    # small cases and the first 12 of the big ones.
    bytes_keys = [k for k, e in keys.items() if e["kind"] == "bytes"]
    for k in bytes_keys if len(bytes_keys) <= 24 else bytes_keys[:12]:
        e = keys[k]
        got = json.loads(stdout_of([dcpctl, "inspect", "--json", "--value", k, ckpt]))
        if e["value"] is not None and got["value"] != e["value"]:
            failures.append(f"{name}: {k}: value {got['value']!r} != {e['value']!r}")
        elif e["python_type"] in REPR_TYPES and len(e["repr"]) < 200 and got["repr"] != e["repr"]:
            failures.append(f"{name}: {k}: repr {got['repr']!r} != {e['repr']!r}")
    return len(keys)


def check_zstd_reshard(dcpctl, case_dir, failures):
    """Resharding the zstd fixture (9 zstd chunks) to 8 ranks reads most chunks for several target
    chunks: each is decoded once (chunk_decodes), and the output holds torch's bytes."""
    import tempfile
    exp = json.load(open(os.path.join(case_dir, "expected.json")))["keys"]
    with tempfile.TemporaryDirectory(prefix="dcpctl-e2e-") as tmp:
        out = os.path.join(tmp, "w8")
        rep = json.loads(stdout_of([dcpctl, "reshard", os.path.join(case_dir, "ckpt"), "-o", out, "-w", "8", "--json", "-q"]))
        if rep.get("chunk_decodes") != 9:
            failures.append(f"zstd reshard -w 8: {rep.get('chunk_decodes')} chunk decodes, want 9 (each zstd chunk once)")
        ver = json.loads(stdout_of([dcpctl, "verify", "--deep", "--checksum", "--json", out]))
        for k, e in exp.items():
            if e["kind"] == "tensor" and ver["checksums"].get(k) != e["sha256"]:
                failures.append(f"zstd reshard -w 8: {k}: sha256 {ver['checksums'].get(k)} != torch's {e['sha256']}")


def main():
    dcpctl, fixtures = sys.argv[1], sys.argv[2]
    failures = []
    cases = sorted(d for d in os.listdir(fixtures) if os.path.isfile(os.path.join(fixtures, d, "expected.json")))
    if not cases:
        print("no fixtures found", file=sys.stderr)
        return 1
    total = 0
    for c in cases:
        total += check_case(dcpctl, os.path.join(fixtures, c), failures)
    check_zstd_reshard(dcpctl, os.path.join(fixtures, "zstd"), failures)
    for f in failures:
        print("FAIL", f)
    print(f"{len(cases)} fixtures, {total} keys checked against torch's expected.json: {len(failures)} failures")
    # Each key of each fixture is a check (inspect's and verify's view against torch's); every
    # committed fixture with an expected.json must be there, one lost fails (tests/ledger.py).
    ledger.record(total, "fixture keys checked against expected.json")
    if len(cases) < MIN_CASES:
        print(f"FAIL {len(cases)} fixtures with expected.json under {fixtures}, fewer than the {MIN_CASES} committed")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
