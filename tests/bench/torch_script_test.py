#!/usr/bin/env python3
"""bench/torch_staging.py: importable without touching torch, --help works, sizes parse as dcpctl
parses them, and a run exits 5 with one line where there is no GPU (or, on a GPU, prints JSON
with a row per mode and size whose every copy is verified).

    torch_script_test.py PATH/TO/torch_staging.py      (run with the project's venv python)
"""
import importlib.util
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402


def stop(msg):
    """This test stops at its first failure."""
    testlib.fail(msg)
    sys.exit(1)


def expect(ok, msg):
    """One check (counted: testlib's tally), stopping the test when it fails."""
    if not testlib.check(ok, msg):
        sys.exit(1)
    return True


def main():
    script = sys.argv[1]
    spec = importlib.util.spec_from_file_location("torch_staging", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    expect("torch" not in sys.modules, "importing torch_staging.py imported torch")
    got = mod.parse_sizes("4MiB,64MiB,5GB,1.5GiB,4096,4MiB")
    expect(got == [4 << 20, 64 << 20, 5 * 10**9, 3 << 29, 4096], f"parse_sizes: {got}")
    for bad in ("4K", "0", "1.5B", "x"):
        try:
            mod.parse_size(bad)
            stop(f"parse_size({bad!r}) did not fail")
        except ValueError:
            pass
    p = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
    expect(not (p.returncode != 0 or "--sizes" not in p.stdout), f"--help: exit {p.returncode}: {p.stderr}")
    p = subprocess.run([sys.executable, script, "--sizes", "4K"], capture_output=True, text=True)
    expect(p.returncode == 2, f"--sizes 4K: exit {p.returncode}, expected 2")

    p = subprocess.run([sys.executable, script, "--sizes", "4MiB,5000001", "--iters", "2", "--warmup", "1"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode == 5:
        lines = p.stderr.strip().splitlines()
        expect(not (len(lines) != 1 or "needs a GPU" not in lines[0] or p.stdout),
               f"no-GPU run: expected one line on stderr and no stdout: {p.stderr!r} {p.stdout!r}")
        print(f"ok: importable, --help, sizes; no GPU here: {lines[0]}")
        return testlib.TALLY.summary("bench-torch-staging-script")
    expect(p.returncode == 0, f"run: exit {p.returncode}: {p.stderr}")
    j = json.loads(p.stdout)
    expect(not (j["schema_version"] != 1 or [r["mode"] for r in j["results"]] != mod.MODES * 2),
           f"unexpected report: {p.stdout[:500]}")
    for r in j["results"]:
        if r["status"] == "skipped" and r["reason"]:  # the stager when /dev/shm is too small
            continue
        expect(not (r["verified"] is not True or not r["gbps"]["median"] > 0), f"{r['mode']} {r['bytes']}: {r}")
    print("ok: " + ", ".join(f"{r['mode']} {r['bytes']} " + (f"{r['gbps']['median']:.1f} GB/s" if r["gbps"] else
                             "skipped: " + r["reason"]) for r in j["results"]))
    return testlib.TALLY.summary("bench-torch-staging-script")


if __name__ == "__main__":
    sys.exit(main())
