"""Reading what bench/common.sh's run_rounds left: one GNU `time -v` file per command and round."""

from __future__ import annotations

import os
import re
import statistics


def parse_time(path: str) -> dict:
    """Wall seconds, user and system CPU seconds, max RSS (bytes) and exit status of one run. A
    command killed by a signal (GNU time: "Exit status: 0" after "Command terminated by signal N")
    gets the shell's status 128 + N, e.g. 137 for the OOM killer's SIGKILL."""
    t = open(path).read()
    sig = re.search(r"Command terminated by signal (\d+)", t)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (.*)", t).group(1).strip()
    return {
        "secs": sum(float(p) * 60 ** i for i, p in enumerate(reversed(wall.split(":")))),
        "user": float(re.search(r"User time \(seconds\): ([\d.]+)", t).group(1)),
        "sys": float(re.search(r"System time \(seconds\): ([\d.]+)", t).group(1)),
        "rss": int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) * 1024,
        "rc": 128 + int(sig.group(1)) if sig else int(re.search(r"Exit status: (\d+)", t).group(1)),
    }


def parse_disk(path: str) -> dict | None:
    """The disk's work during one run (common.sh's time_one: /proc/diskstats before and after):
    seconds with requests in flight, requests and MB each way. None where it was not recorded."""
    if not os.path.exists(path):
        return None
    lines = open(path).read().split("\n")
    a, b = ([int(x) for x in line.split()] for line in lines[:2])
    d = [y - x for x, y in zip(a, b)]
    return {"busy": d[4] / 1000, "reads": d[0], "read_mb": d[1] * 512 / 1e6, "writes": d[2], "write_mb": d[3] * 512 / 1e6}


def kib_per_request(d: dict) -> float:
    return (d["read_mb"] + d["write_mb"]) * 1e6 / 1024 / max(1, d["reads"] + d["writes"])


def runs(work: str, tag: str, name: str, repeat: int) -> list[dict]:
    out = []
    for r in range(1, repeat + 1):
        x = parse_time(os.path.join(work, f"{tag}_{name}_{r}.txt"))
        x["disk"] = parse_disk(os.path.join(work, f"{tag}_{name}_{r}.disk"))
        out.append(x)
    return out


def summary(rs: list[dict]) -> dict:
    """Median wall and CPU seconds over the rounds; the worst RSS and exit status; the median
    seconds the disk was busy (None where not recorded)."""
    disk = statistics.median(x["disk"]["busy"] for x in rs) if all(x.get("disk") for x in rs) else None
    return {"secs": statistics.median(x["secs"] for x in rs), "cpu": statistics.median(x["user"] + x["sys"] for x in rs),
            "user": statistics.median(x["user"] for x in rs), "sys": statistics.median(x["sys"] for x in rs),
            "rss": max(x["rss"] for x in rs), "rc": max(x["rc"] for x in rs), "disk": disk}


def paired(work: str, tag: str, a: str, b: str, repeat: int) -> list[float]:
    """a's time over b's in each round: the two ran minutes apart, so on a machine whose page cache
    costs drift from one period to the next (this project's VM) the ratio is steadier than the
    ratio of the medians."""
    return [x["secs"] / y["secs"] if y["secs"] else 0.0 for x, y in zip(runs(work, tag, a, repeat), runs(work, tag, b, repeat))]


def report(work: str, tag: str, name: str, repeat: int, width: int = 24) -> tuple[float, int, int]:
    """Prints one line per command with every round's figures; returns (median seconds, worst RSS,
    worst exit status)."""
    rs = runs(work, tag, name, repeat)
    col = lambda k, fmt: " ".join(fmt.format(x[k]) for x in rs)  # noqa: E731
    disk = ""
    if all(x["disk"] for x in rs):
        # The disk's side of each round: seconds with requests in flight, and the mean request.
        busy = " ".join(f"{x['disk']['busy']:.2f}" for x in rs)
        req = " ".join(f"{kib_per_request(x['disk']):.0f}" for x in rs)
        disk = f"; disk busy {busy} s, {req} KiB/request"
    print(f"  {name:{width}} wall {col('secs', '{:.2f}')} s; user {col('user', '{:.2f}')}; sys {col('sys', '{:.2f}')};"
          f" max RSS {' '.join(str(x['rss'] >> 20) for x in rs)} MiB{disk}")
    m = summary(rs)
    return m["secs"], m["rss"], m["rc"]


def table(rows: dict[str, tuple[float, int, int]], repeat: int, width: int = 24) -> None:
    """report()'s results, a line each: median seconds, worst max RSS and exit status."""
    print(f"median of {repeat} round(s); max RSS and exit: the worst round")
    print(f"{'run':{width}} {'exit':>4} {'seconds':>8} {'max RSS':>11}")
    for n, (s, rss, rc) in rows.items():
        print(f"{n:{width}} {rc:>4} {s:8.2f} {rss / 2**20:7.0f} MiB")


def print_paired(work: str, tag: str, a: str, b: str, repeat: int) -> None:
    """paired() as one line: a's time over b's, round by round."""
    print(f"{a} / {b}, round by round: " + " ".join(f"{x:.2f}x" for x in paired(work, tag, a, b, repeat)))


def print_paired_cpu(work: str, tag: str, a: str, b: str, repeat: int) -> None:
    """a's CPU seconds (user + sys) over b's and their difference, round by round: on a machine
    others load, the CPU a run took moves less than its wall clock."""
    pairs = zip(runs(work, tag, a, repeat), runs(work, tag, b, repeat))
    cpu = [(x["user"] + x["sys"], y["user"] + y["sys"]) for x, y in pairs]
    print(f"{a} / {b} in CPU seconds, round by round: "
          + " ".join(f"{x / y:.2f}x ({x - y:+.2f} CPU-s)" if y else "-" for x, y in cpu))
