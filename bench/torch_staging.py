#!/usr/bin/env python3
"""Time PyTorch's own GPU -> host staging, for comparison with `dcpctl bench staging`.

For every size, a device tensor of that many bytes is copied to the host, per --modes (all by
default):
  pinned          into a cached page-locked buffer: pinned.copy_(gpu, non_blocking=True), the
                  buffer allocated once (the pinning cost is reported), as PyTorch advises for
                  async_save; timed with CUDA events, and with the host clock up to the synchronize;
  pageable        gpu.cpu(): a fresh pageable tensor every time; host clock;
  to-nonblocking  gpu.to("cpu", non_blocking=True) and a stream synchronize: torch pins the result
                  itself (its caching host allocator, so the pinned block is reused once warm);
                  host clock; "memory" says whether the result really was pinned;
  stager          torch.distributed.checkpoint's DefaultStager(StagingOptions()), kept across saves
                  as async_save(async_stager=...) uses it: shared memory pinned in place, copied on
                  its own stream from a background thread, its staged storage cached and reused;
                  host clock from stage() to the future's result; the first save, which allocates
                  and pins, is reported as the pinning cost. Skipped when /dev/shm lacks the room;
  async-save      what dcp.async_save stages with by default (no async_stager): a new DefaultStager
                  with every option off per save, fresh pageable memory and blocking copies (a
                  FileSystemWriter passed as storage_writer stages alike); host clock.
Warm-up iterations first, then --iters timed ones (median/min/max), then the copied bytes are
compared with the device tensor. Prints JSON (schema_version 1) with field names that match
dcpctl's, so bench/staging.sh can put the two side by side.

Without a usable CUDA device it prints one line on stderr and exits 5, like dcpctl.
Importing this file does not import torch; `--help` works without it.
"""
import argparse
import json
import re
import statistics
import sys
import time

UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
DEFAULT_SIZES = "4MiB,64MiB,256MiB,1GiB"
MODES = ["pinned", "pageable", "to-nonblocking", "stager", "async-save"]


def parse_size(text):
    """`4MiB` (binary), `5GB` (decimal), `1.5GiB` or plain bytes, as dcpctl reads them."""
    m = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?\s*([A-Za-z]*)\s*", text)
    if not m:
        raise ValueError(f"size {text!r}: write e.g. 4MiB, 1GiB, 5GB or a number of bytes")
    unit = m.group(3).lower()
    if unit not in UNITS:
        raise ValueError(f"size {text!r}: unknown unit {m.group(3)!r}")
    mult = UNITS[unit]
    frac = m.group(2) or ""
    num = int(m.group(1) + frac) * mult
    den = 10 ** len(frac)
    if num % den:
        raise ValueError(f"size {text!r}: not a whole number of bytes")
    n = num // den
    if n <= 0:
        raise ValueError(f"size {text!r}: must be at least 1 byte")
    return n


def parse_sizes(text):
    out = []
    for part in text.split(","):
        n = parse_size(part)
        if n not in out:
            out.append(n)
    return out


def summary(samples):
    s = sorted(samples)
    return {"n": len(s), "median": statistics.median(s), "min": s[0], "max": s[-1], "mean": statistics.fmean(s)}


def rates(nbytes, secs):
    def r(t):
        return nbytes / t / 1e9 if t > 0 else None
    return {"median": r(secs["median"]), "min": r(secs["max"]), "max": r(secs["min"])}


def host_timed(args, fn):
    """fn() run --warmup + --iters times; the host-clock seconds of the timed ones and fn's last result."""
    out, secs = None, []
    for i in range(args.warmup + args.iters):
        out = None  # the previous copy is freed before the next is made
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        if i >= args.warmup:
            secs.append(t1 - t0)
    return secs, out


def result(args, mode, method, memory, n, timing, secs, host=None, pin=None, ok=True, reason=""):
    s = summary(secs) if secs else None
    return {"mode": mode, "method": method, "memory": memory, "direction": "d2h", "bytes": n, "copies": 1,
            "timing": timing, "iters": args.iters, "warmup": args.warmup, "seconds": s,
            "host_seconds": summary(host) if host else s, "gbps": rates(n, s) if s else None,
            "pin_seconds": summary([pin]) if pin is not None else None,
            "pin_seconds_per_gib": pin / (n / 2**30) if pin is not None else None,
            "verified": ok if secs else None, "status": "skipped" if not secs else ("ok" if ok else "failed"),
            "reason": reason if not secs else ("" if ok else "wrong bytes")}


def stage_modes(args, torch, dev, gpu, n):
    """The rows of one size, in --modes order."""
    stream = torch.cuda.current_stream(dev)
    rows = []
    for mode in args.modes:
        if mode == "pinned":  # cached pinned buffer, allocated once, CUDA events
            t0 = time.perf_counter()
            pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            pin = time.perf_counter() - t0
            ev, host = [], []
            for i in range(args.warmup + args.iters):
                pinned.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0 = time.perf_counter()
                start.record(stream)
                pinned.copy_(gpu, non_blocking=True)
                end.record(stream)
                end.synchronize()
                t1 = time.perf_counter()
                if i >= args.warmup:
                    ev.append(start.elapsed_time(end) / 1e3)
                    host.append(t1 - t0)
            rows.append(result(args, mode, "pinned.copy_(gpu, non_blocking=True), cached pin_memory buffer",
                               "page-locked (pin_memory), cached", n, "cuda-events", ev, host, pin,
                               bool(torch.equal(pinned.to(dev), gpu))))
            del pinned
        elif mode == "pageable":
            secs, cpu = host_timed(args, gpu.cpu)
            rows.append(result(args, mode, "gpu.cpu(), a fresh pageable tensor every time", "pageable, fresh", n,
                               "host-clock", secs, ok=bool(torch.equal(cpu.to(dev), gpu))))
            del cpu
        elif mode == "to-nonblocking":
            def to_cpu():
                t = gpu.to("cpu", non_blocking=True)
                stream.synchronize()
                return t
            secs, cpu = host_timed(args, to_cpu)
            memory = "page-locked (torch's caching host allocator)" if cpu.is_pinned() else "pageable"
            rows.append(result(args, mode, 'gpu.to("cpu", non_blocking=True) + stream synchronize', memory, n,
                               "host-clock", secs, ok=bool(torch.equal(cpu.to(dev), gpu))))
            del cpu
        elif mode in ("stager", "async-save"):
            # A torch whose stager fails (torch 2.11's DefaultStager raises KeyError <class 'type'>
            # from its deepcopy, seen on an H200 on 2026-11-26) gives a skipped row naming the
            # error, not a crash that loses the other modes' rows.
            try:
                rows.append(stager_row(args, torch, dev, gpu, n, mode))
            except Exception as e:  # noqa: BLE001 - any failure of torch's stager is reported as such
                rows.append(result(args, mode, "DefaultStager", "", n, "host-clock", [],
                                   reason=f"torch's DefaultStager failed: {type(e).__name__}: {e}"))
    return rows


def stager_row(args, torch, dev, gpu, n, mode):
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError as e:
        return result(args, mode, "DefaultStager", "", n, "host-clock", [], reason=f"torch lacks DefaultStager: {e}")
    if mode == "async-save":
        def save():
            s = DefaultStager(StagingOptions(use_pinned_memory=False, use_shared_memory=False,
                                             use_async_staging=False, use_non_blocking_copy=False))
            try:
                return s.stage({"t": gpu})["t"]
            finally:
                s.close()
        secs, cpu = host_timed(args, save)
        return result(args, mode, "dcp.async_save's own stager: DefaultStager(StagingOptions(False, False, False, "
                      "False)), new per save", "pageable, fresh", n, "host-clock", secs,
                      ok=bool(torch.equal(cpu.to(dev), gpu)))
    import os
    st = os.statvfs("/dev/shm")
    free = st.f_bavail * st.f_frsize
    if free < n + (64 << 20):
        return result(args, mode, "DefaultStager(StagingOptions())", "", n, "host-clock", [],
                      reason=f"/dev/shm has {free} bytes free; DefaultStager's shared memory needs {n} (and headroom)")
    stager = DefaultStager(StagingOptions())
    try:
        t0 = time.perf_counter()
        stager.stage({"t": gpu}).result()  # allocates the shared memory and pins it
        pin = time.perf_counter() - t0
        secs, sd = host_timed(args, lambda: stager.stage({"t": gpu}).result())
        cpu = sd["t"]
        memory = "shared memory, page-locked in place, cached" if cpu.is_pinned() else "shared memory, cached"
        return result(args, mode, "DefaultStager(StagingOptions()) kept across saves: stage(sd).result()", memory, n,
                      "host-clock", secs, pin=pin, ok=bool(torch.equal(cpu.to(dev), gpu)))
    finally:
        stager.close()


def measure(args):
    import torch  # deferred: --help and importing this module need no torch

    if not torch.cuda.is_available() or torch.cuda.device_count() <= args.device:
        reason = "torch.cuda.is_available() is False" if not torch.cuda.is_available() else \
            f"no CUDA device {args.device} ({torch.cuda.device_count()} present)"
        print(f"torch_staging.py: error: needs a GPU, but {reason}", file=sys.stderr)
        return 5, None
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    report = {
        "schema_version": 1,
        "benchmark": "torch-staging",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "device": {"index": args.device, "name": props.name, "compute_capability": f"{props.major}.{props.minor}",
                   "memory_bytes": props.total_memory},
        "config": {"sizes": args.sizes, "modes": args.modes, "iters": args.iters, "warmup": args.warmup},
        "results": [],
    }
    for n in args.sizes:
        gpu = torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev)
        torch.cuda.synchronize(dev)
        report["results"] += stage_modes(args, torch, dev, gpu, n)
        del gpu
        torch.cuda.empty_cache()
    failed = sum(r["status"] == "failed" for r in report["results"])
    return (1 if failed else 0), report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Exit codes: 0 ok, 1 wrong bytes, 2 usage, 5 no usable GPU.")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma-separated sizes (default {DEFAULT_SIZES})")
    p.add_argument("--iters", type=int, default=10, help="timed iterations (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first (default 2)")
    p.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {','.join(MODES)} (default all)")
    args = p.parse_args(argv)
    try:
        args.sizes = parse_sizes(args.sizes)
    except ValueError as e:
        p.error(str(e))
    args.modes = [m for m in args.modes.split(",") if m]
    if not args.modes or set(args.modes) - set(MODES):
        p.error(f"--modes: choose from {','.join(MODES)}")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be at least 1 and --warmup at least 0")
    rc, report = measure(args)
    if report is not None:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
