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


def runs(work: str, tag: str, name: str, repeat: int) -> list[dict]:
    return [parse_time(os.path.join(work, f"{tag}_{name}_{r}.txt")) for r in range(1, repeat + 1)]


def summary(rs: list[dict]) -> dict:
    """Median wall and CPU seconds over the rounds; the worst RSS and exit status."""
    return {"secs": statistics.median(x["secs"] for x in rs), "cpu": statistics.median(x["user"] + x["sys"] for x in rs),
            "rss": max(x["rss"] for x in rs), "rc": max(x["rc"] for x in rs)}


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
    print(f"  {name:{width}} wall {col('secs', '{:.2f}')} s; user {col('user', '{:.2f}')}; sys {col('sys', '{:.2f}')};"
          f" max RSS {' '.join(str(x['rss'] >> 20) for x in rs)} MiB")
    m = summary(rs)
    return m["secs"], m["rss"], m["rc"]
