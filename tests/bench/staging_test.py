#!/usr/bin/env python3
"""End-to-end tests of `dcpctl bench staging` (standard library only).

    staging_test.py CASE DCPCTL SOURCE_DIR

CASE is one of:
  no-gpu          without a GPU: exit 5, one line on stderr, nothing on stdout (skips with 77
                  where testlib.gpu_present() finds one)
  host-only       --host-only runs anywhere: JSON fields, table, --write-to, usage errors
  checkpoint      --from-checkpoint: one copy per tensor chunk of the rank, checked against
                  torch's own view of the fixture (expected.json)
  gpu             the device modes on a real GPU, every copy's bytes checked (skips with 77 only
                  where testlib.gpu_present() finds no GPU; with one there, any exit but 0 fails)
  no-driver-link  the binary does not link libcuda and starts without it
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from skip import SKIP, skip_or_fail_code  # noqa: E402
from testlib import gpu_present, run as run_argv  # noqa: E402
import testlib  # noqa: E402
MODES = ["pinned", "registered", "pageable", "cold"]
ROW_FIELDS = {"mode", "direction", "memory", "bytes", "copies", "streams", "chunk_bytes", "timing", "iters",
              "warmup", "seconds", "gbps", "pin_seconds", "pin_seconds_per_gib", "host_bytes",
              "host_bytes_locked_between_saves", "verified", "status", "reason"}
TOP_FIELDS = {"schema_version", "benchmark", "dcpctl_version", "host_only", "config", "checkpoint", "cuda", "device",
              "pcie", "host", "results", "notes"}


def stop(msg):
    """This test stops at its first failure (what follows builds on what failed)."""
    testlib.fail(msg)
    sys.exit(1)


def expect(ok, msg):
    """One check (counted: testlib's tally and the test's ledger), stopping the test when it fails."""
    if not testlib.check(ok, msg):
        sys.exit(1)
    return True


def dcpctl_rc(dcpctl, *args):
    p = run_argv(dcpctl, *args)  # a crash or a timeout fails by itself (testlib.run)
    if testlib.TALLY.failures:
        sys.exit(1)
    return p.returncode, p.stdout, p.stderr


def want_rc(want, got, args, err):
    expect(got == want, f"dcpctl {' '.join(args)}: exit {got}, expected {want}; stderr: {err.strip()}")


def parse_json(out, args):
    try:
        return json.loads(out)
    except json.JSONDecodeError as e:
        stop(f"dcpctl {' '.join(args)}: stdout is not JSON ({e}): {out[:300]}")


def check_summary(s, n, what):
    expect(not (not isinstance(s, dict) or s.get("n") != n), f"{what}: expected a summary of {n} samples, got {s}")
    expect(0 <= s["min"] <= s["median"] <= s["max"], f"{what}: min <= median <= max does not hold: {s}")


def check_report(j, iters, host_only):
    missing = TOP_FIELDS - set(j)
    expect(not missing, f"JSON lacks {sorted(missing)}")
    expect(not (j["schema_version"] != 1 or j["benchmark"] != "staging" or j["host_only"] is not host_only),
           f"schema_version/benchmark/host_only: {j['schema_version']} {j['benchmark']} {j['host_only']}")
    for k in ("sizes", "modes", "iters", "warmup", "streams", "chunk_bytes", "write_to", "fsync"):
        expect(k in j["config"], f"config lacks {k}")
    for k in ("compiled", "usable", "reason", "runtime_version", "driver_version", "device_count", "gate", "toolkit"):
        expect(k in j["cuda"], f"cuda lacks {k}")
    for k in ("cpu_threads", "memory_bytes", "memlock_limit_bytes", "memlock_exempt", "pinned_memory"):
        expect(k in j["host"], f"host lacks {k}")
    ok = 0
    for r in j["results"]:
        what = f"{r.get('mode')} {r.get('bytes')}"
        missing = ROW_FIELDS - set(r)
        expect(not missing, f"{what}: row lacks {sorted(missing)}")
        if r["status"] == "skipped":
            expect(r["reason"], f"{what}: skipped without a reason")
            continue
        expect(r["status"] == "ok", f"{what}: status {r['status']}: {r['reason']}")
        expect(r["verified"] is True, f"{what}: bytes not verified")
        check_summary(r["seconds"], iters, what + " seconds")
        expect(r["gbps"]["median"] > 0 and r["gbps"]["min"] <= r["gbps"]["median"] <= r["gbps"]["max"],
               f"{what}: bad gbps {r['gbps']}")
        expect_dir = "h2file" if r["mode"].startswith("write") else ("h2h" if host_only else "d2h")
        expect(r["direction"] == expect_dir, f"{what}: direction {r['direction']}, expected {expect_dir}")
        if r["mode"] in ("pinned", "registered", "cold"):
            expect(not (r["pin_seconds"] is None or not r["pin_seconds_per_gib"] > 0), f"{what}: no pinning cost")
        ok += 1
    return ok


def case_no_gpu(dcpctl, src):
    args = ["bench", "staging", "--sizes", "4MiB", "--iters", "1", "--warmup", "0", "--modes", "pinned"]
    if gpu_present():  # probed without dcpctl: /dev/nvidia*, nvidia-smi
        print("SKIP: a GPU is present, so the no-GPU path cannot be tested here", file=sys.stderr)
        return SKIP
    rc, out, err = dcpctl_rc(dcpctl, *args)
    want_rc(5, rc, args, err)
    lines = err.strip().splitlines()
    expect(len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err!r}")
    line = lines[0]
    expect(line.startswith("dcpctl: error: bench staging needs a GPU, but "), f"unexpected message: {line}")
    expect("--host-only" in line, f"the message does not point to --host-only: {line}")
    expect("no usable CUDA device" in line or "CUDA support was not compiled in" in line,
           f"the message does not say why: {line}")
    expect(not out, f"stdout is not empty: {out!r}")
    rc, out, err = dcpctl_rc(dcpctl, *args, "--json")
    want_rc(5, rc, args + ["--json"], err)
    expect(not out, f"--json: stdout is not empty: {out!r}")
    print(f"ok: exit 5 with: {line}")
    return 0


def case_host_only(dcpctl, src):
    args = ["bench", "staging", "--host-only", "--sizes", "4MiB", "--iters", "3", "--json"]
    rc, out, err = dcpctl_rc(dcpctl, *args)
    want_rc(0, rc, args, err)
    j = parse_json(out, args)
    expect(check_report(j, 3, True) != 0, "nothing was measured")
    expect([r["mode"] for r in j["results"]] == MODES, f"modes: {[r['mode'] for r in j['results']]}")
    expect(not any(r["bytes"] != 4 << 20 for r in j["results"]), "a row does not copy 4 MiB")
    expect(not (j["config"]["sizes"] != [4 << 20] or j["config"]["iters"] != 3 or j["device"] is not None),
           f"config/device: {j['config']} {j['device']}")
    expect(not (not j["cuda"]["usable"] and j["host"]["pinned_memory"] != "mlock"),
           "without CUDA the pinned stand-in must be mlock")
    expect(not (not j["cuda"]["usable"] and not any("stand-in" in n for n in j["notes"])),
           "the notes do not say that mlock stands in for pinned memory")
    print(f"ok: --host-only JSON, {len(j['results'])} rows")

    # The table, with two threads, chunks and the write leg.
    tmp = tempfile.mkdtemp(prefix="dcpctl-bench-e2e-")
    try:
        targs = ["bench", "staging", "--host-only", "--sizes", "1MiB,3MiB", "--iters", "2", "--warmup", "1",
                 "--streams", "2", "--chunk", "512KiB", "--modes", "pageable,pinned", "--write-to", tmp, "--fsync"]
        rc, out, err = dcpctl_rc(dcpctl, *targs)
        want_rc(0, rc, targs, err)
        for want in ("MODE", "MEDIAN", "GB/s", "pinned", "pageable", "write-fsync", "Memory", "Note:"):
            expect(want in out, f"the table lacks {want!r}:\n{out}")
        expect(not os.listdir(tmp), f"--write-to left files behind: {os.listdir(tmp)}")
        rc, out, err = dcpctl_rc(dcpctl, *targs, "--json")
        want_rc(0, rc, targs, err)
        j = parse_json(out, targs)
        check_report(j, 2, True)
        modes = [r["mode"] for r in j["results"]]
        expect(modes == ["pinned", "pageable", "write", "write-fsync"] * 2, f"rows: {modes}")
        expect(not (j["results"][4]["copies"] != 6 or j["results"][4]["chunk_bytes"] != 512 << 10),
               f"3 MiB in 512 KiB chunks should be 6 copies: {j['results'][4]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok: table, chunks and --write-to")

    # Usage and I/O errors.
    for bad, code in ((["--sizes", "4K"], 2), (["--sizes", "0"], 2), (["--modes", "bogus"], 2), (["--fsync"], 2),
                      (["--rank", "1"], 2), (["--chunk", "1XB"], 2), (["--iters", "0"], 2), (["--streams", "65"], 2),
                      (["--write-to", "/nonexistent/dir"], 4)):
        a = ["bench", "staging", "--host-only", "--iters", "1", "--sizes", "4KiB", *bad]
        rc, out, err = dcpctl_rc(dcpctl, *a)
        want_rc(code, rc, a, err)
        expect(err.strip(), f"dcpctl {' '.join(a)}: exit {code} without a message")
    rc, out, err = dcpctl_rc(dcpctl, "bench")
    want_rc(2, rc, ["bench"], err)
    print("ok: usage errors exit 2, I/O errors 4")
    return 0


def torch_chunks(src, fixture, rank):
    """In-memory bytes and count of the tensor chunks `rank` wrote, from torch's expected.json."""
    with open(os.path.join(src, "tests", "fixtures", fixture, "expected.json")) as f:
        keys = json.load(f)["keys"]
    total = count = 0
    for item in keys.values():
        if item["kind"] != "tensor":
            continue
        numel = 1
        for d in item["shape"]:
            numel *= d
        if numel == 0:
            continue
        itemsize = item["nbytes"] // numel
        for c, s in zip(item["chunk_list"], item["storage"]):
            if int(s["file"][2:].split("_")[0]) != rank:
                continue
            n = 1
            for d in c["sizes"]:
                n *= d
            total += n * itemsize
            count += 1
    return total, count


def case_checkpoint(dcpctl, src):
    ckpt = os.path.join(src, "tests", "fixtures", "sample", "ckpt")
    for rank in (0, 1):
        args = ["bench", "staging", "--host-only", "--from-checkpoint", ckpt, "--rank", str(rank), "--iters", "2", "--json"]
        rc, out, err = dcpctl_rc(dcpctl, *args)
        want_rc(0, rc, args, err)
        j = parse_json(out, args)
        check_report(j, 2, True)
        want_bytes, want_count = torch_chunks(src, "sample", rank)
        c = j["checkpoint"]
        expect((c["bytes"], c["chunks"], c["rank"], c["ranks"]) == (want_bytes, want_count, rank, [0, 1]),
               f"rank {rank}: checkpoint {c}, torch says {want_bytes} bytes in {want_count} chunks")
        rows = {r["mode"]: r for r in j["results"]}
        expect(list(rows) == ["per-tensor", "flat"], f"rows: {list(rows)}")
        expect(not (rows["per-tensor"]["copies"] != want_count or rows["flat"]["copies"] != 1),
               f"copies: {rows['per-tensor']['copies']} and {rows['flat']['copies']}")
        expect(not (rows["per-tensor"]["bytes"] != want_bytes or rows["flat"]["bytes"] != want_bytes),
               "per-tensor and flat must copy the rank's bytes")
    args = ["bench", "staging", "--host-only", "--from-checkpoint", ckpt, "--rank", "9", "--iters", "1"]
    rc, out, err = dcpctl_rc(dcpctl, *args)
    want_rc(2, rc, args, err)
    expect("ranks with tensor data: 0,1" in err, f"the error does not list the ranks: {err}")
    args = ["bench", "staging", "--host-only", "--from-checkpoint", ckpt, "--modes", "pinned"]
    rc, out, err = dcpctl_rc(dcpctl, *args)
    want_rc(2, rc, args, err)
    print("ok: --from-checkpoint copies each tensor chunk of the rank, as torch saved them")
    return 0


def case_gpu(dcpctl, src):
    args = ["bench", "staging", "--sizes", "4MiB,64MiB", "--iters", "3", "--warmup", "1", "--json"]
    # Skips only where the probe finds no GPU; with one there, exit 5 (dcpctl found none) fails.
    if not gpu_present():
        print("SKIP: no GPU on this machine (no /dev/nvidia*, nvidia-smi -L lists none)", file=sys.stderr)
        return SKIP
    rc, out, err = dcpctl_rc(dcpctl, *args)
    want_rc(0, rc, args, err)
    j = parse_json(out, args)
    expect(not (j["device"] is None or not j["cuda"]["usable"]), "a GPU run without a device in the report")
    expect(check_report(j, 3, False) == 8, "expected 8 measured rows (4 modes x 2 sizes)")
    for r in j["results"]:
        want = "cuda-events" if r["mode"] in ("pinned", "registered") else "host-clock"
        expect(r["timing"] == want, f"{r['mode']}: timing {r['timing']}, expected {want}")
        expect(not r["reason"], f"{r['mode']}: {r['reason']}")
    print(f"ok: {j['device']['name']}: " + ", ".join(
        f"{r['mode']} {r['bytes'] >> 20} MiB {r['gbps']['median']:.1f} GB/s" for r in j["results"]))

    tmp = tempfile.mkdtemp(prefix="dcpctl-bench-gpu-")
    try:
        ckpt = os.path.join(src, "tests", "fixtures", "sample", "ckpt")
        args = ["bench", "staging", "--sizes", "3MiB,5000001", "--iters", "2", "--warmup", "1", "--streams", "3",
                "--chunk", "1MiB", "--from-checkpoint", ckpt, "--rank", "0", "--write-to", tmp, "--json"]
        rc, out, err = dcpctl_rc(dcpctl, *args)
        want_rc(0, rc, args, err)
        j = parse_json(out, args)
        check_report(j, 2, False)
        expect(not os.listdir(tmp), f"--write-to left files behind: {os.listdir(tmp)}")
        modes = [r["mode"] for r in j["results"]]
        expect(not (modes.count("per-tensor") != 1 or modes.count("flat") != 1), f"rows: {modes}")
        expect(not (j["results"][0]["copies"] != 3 or j["results"][0]["streams"] != 3),
               f"3 MiB in 1 MiB chunks over 3 streams: {j['results'][0]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok: streams, chunks, odd sizes, a checkpoint's tensors and --write-to on the GPU")
    return 0


def case_no_driver_link(dcpctl, src):
    if not shutil.which("readelf"):
        return skip_or_fail_code("readelf (binutils, installed with g++) is not installed")
    dyn = subprocess.run(["readelf", "-d", dcpctl], capture_output=True, text=True, check=True).stdout
    needed = [l.split("[", 1)[1].rstrip("]") for l in dyn.splitlines() if "(NEEDED)" in l]
    bad = [n for n in needed if n.startswith("libcuda.") or n.startswith("libcudart.")]
    expect(not bad, f"dcpctl needs {bad} at load time; it must start without a driver (link cudart_static)")
    rc, out, err = dcpctl_rc(dcpctl, "--version")
    want_rc(0, rc, ["--version"], err)
    rc, out, err = dcpctl_rc(dcpctl, "inspect", os.path.join(src, "tests", "fixtures", "sample", "ckpt"))
    want_rc(0, rc, ["inspect"], err)
    print(f"ok: NEEDED {needed}; --version and inspect run")
    return 0


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    case, dcpctl, src = sys.argv[1:]
    cases = {"no-gpu": case_no_gpu, "host-only": case_host_only, "checkpoint": case_checkpoint, "gpu": case_gpu,
             "no-driver-link": case_no_driver_link}
    if case not in cases:
        print(f"unknown case {case}", file=sys.stderr)
        return 2
    rc = cases[case](dcpctl, src)
    return testlib.TALLY.summary(f"bench-staging-{case}") if rc == 0 else rc


if __name__ == "__main__":
    sys.exit(main())
