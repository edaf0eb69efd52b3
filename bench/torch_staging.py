#!/usr/bin/env python3
"""Time PyTorch's own GPU -> host staging, for comparison with `dcpctl bench staging`.

For every size: a device tensor of that many bytes is copied
  pinned    into a cached page-locked buffer: pinned.copy_(gpu, non_blocking=True), the buffer
            allocated once (the pinning cost is reported), as PyTorch advises for async_save;
            timed with CUDA events, and with the host clock up to the synchronize;
  pageable  with gpu.cpu(): a fresh pageable tensor every time; host clock.
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
    stream = torch.cuda.current_stream(dev)
    report = {
        "schema_version": 1,
        "benchmark": "torch-staging",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "device": {"index": args.device, "name": props.name, "compute_capability": f"{props.major}.{props.minor}",
                   "memory_bytes": props.total_memory},
        "config": {"sizes": args.sizes, "iters": args.iters, "warmup": args.warmup},
        "results": [],
    }
    for n in args.sizes:
        gpu = torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev)
        torch.cuda.synchronize(dev)

        # Cached pinned buffer, allocated once.
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
        ok = bool(torch.equal(pinned.to(dev), gpu))
        secs = summary(ev)
        report["results"].append({
            "mode": "pinned", "method": "pinned.copy_(gpu, non_blocking=True), cached pin_memory buffer",
            "direction": "d2h", "bytes": n, "copies": 1, "timing": "cuda-events", "iters": args.iters,
            "warmup": args.warmup, "seconds": secs, "host_seconds": summary(host), "gbps": rates(n, secs),
            "pin_seconds": summary([pin]), "pin_seconds_per_gib": pin / (n / 2**30),
            "verified": ok, "status": "ok" if ok else "failed", "reason": "" if ok else "wrong bytes"})
        del pinned

        # gpu.cpu(): fresh pageable memory every time.
        host = []
        cpu = None
        for i in range(args.warmup + args.iters):
            del cpu
            t0 = time.perf_counter()
            cpu = gpu.cpu()
            t1 = time.perf_counter()
            if i >= args.warmup:
                host.append(t1 - t0)
        ok = bool(torch.equal(cpu.to(dev), gpu))
        secs = summary(host)
        report["results"].append({
            "mode": "pageable", "method": "gpu.cpu(), a fresh pageable tensor every time",
            "direction": "d2h", "bytes": n, "copies": 1, "timing": "host-clock", "iters": args.iters,
            "warmup": args.warmup, "seconds": secs, "host_seconds": secs, "gbps": rates(n, secs),
            "pin_seconds": None, "pin_seconds_per_gib": None,
            "verified": ok, "status": "ok" if ok else "failed", "reason": "" if ok else "wrong bytes"})
        del cpu, gpu
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
    args = p.parse_args(argv)
    try:
        args.sizes = parse_sizes(args.sizes)
    except ValueError as e:
        p.error(str(e))
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be at least 1 and --warmup at least 0")
    rc, report = measure(args)
    if report is not None:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
