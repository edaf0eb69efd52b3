#!/usr/bin/env python3
"""Start-up cost of dcpctl, side by side with `python -c 'import torch'` (bench/startup.sh).

Each command is run --runs times after --warmup runs (page cache warm: this measures start-up,
not the disk); prints the median and 90th percentile wall time and the peak RSS of each. No
command loads LibTorch (src/torchlib/) outside torchrun: not the readers, and not the writers of
torch.save archives (reshard, consolidate to .pt) either, which the table shows on the sample.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time


def run_once(argv):
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ,
                         file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                                       (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    _, status, _ = os.wait4(pid, 0)
    seconds = time.perf_counter() - start
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        sys.exit(f"{' '.join(argv)} exited {rc}")
    return seconds


def peak_rss_mib(argv):
    """GNU time's maximum resident set size (a spawned child's own ru_maxrss can include the
    parent's memory from before exec)."""
    import subprocess
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, check=True)
    return int(r.stderr.strip().splitlines()[-1]) / 1024.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dcpctl", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--sample", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    d, s = a.dcpctl, a.sample
    tmp = tempfile.mkdtemp(prefix="dcpctl-startup-")
    cases = [
        ("dcpctl --version", [d, "--version"]),
        ("dcpctl --help", [d, "--help"]),
        ("dcpctl inspect SAMPLE", [d, "inspect", s]),
        ("dcpctl inspect --json SAMPLE", [d, "inspect", "--json", s]),
        ("dcpctl verify SAMPLE", [d, "verify", s]),
        ("dcpctl verify --deep SAMPLE", [d, "verify", "--deep", s]),
        ("dcpctl consolidate SAMPLE -o X.pt", [d, "consolidate", s, "-o", os.path.join(tmp, "x.pt"), "--force", "-q"]),
        ("dcpctl reshard SAMPLE -w 2", [d, "reshard", s, "--world-size", "2", "-o", os.path.join(tmp, "w2"), "--force", "-q"]),
        ("python -c 'import torch' (anchor)", [a.python, "-c", "import torch"]),
        ("/bin/true (the floor: one process start)", ["/bin/true"]),
    ]
    print(f"{'command':<46} {'median ms':>10} {'p90 ms':>8} {'peak RSS MiB':>13}")
    for name, argv in cases:
        for _ in range(a.warmup):
            run_once(argv)
        times = [run_once(argv) * 1000 for _ in range(a.runs)]
        rss = peak_rss_mib(argv)
        times.sort()
        p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
        print(f"{name:<46} {statistics.median(times):>10.1f} {p90:>8.1f} {rss:>13.1f}", flush=True)
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
