#!/usr/bin/env python3
"""A/B of two build trees' compile costs, unit by unit: each translation unit (a unity batch or a
source compiled alone) whose text differs between the two trees is compiled from both, one after
the other, interleaved, with the commands CMake wrote (compile_commands.json), and its CPU time
(user+sys) printed. On a shared machine the CPU time of one compile moves by ±10 % with the load,
and two whole builds run at different times move by more; compiling the same unit of both trees
back to back is what tells a change of a few CPU-s from the noise (docs/performance.md, "A first
run from source", 2026-11-28).

    KEEP=1 bench/build_time.sh /tmp/old        # in the old checkout
    KEEP=1 bench/build_time.sh /tmp/new        # in the new one
    bench/build_units_ab.py /tmp/old /tmp/new [--rounds N] [--all] [--list] [UNIT...]

UNIT: a unit's file name without .cpp (dcpctl_core_4, dcpctl_format_cold_0, vm); default every
unit whose text or command differs (--all: every unit). Objects go to a temporary file; the trees
are not touched.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def units(tree):
    out = {}
    for c in json.load(open(Path(tree) / "compile_commands.json")):
        f = Path(c["file"])
        text = f.read_text(errors="replace") if f.exists() else ""
        out[f.stem] = (c["directory"], c["command"], text)
    return out


def cpu_of(directory, command, obj):
    command = re.sub(r" -o \S+", f" -o {obj}", command, count=1)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, shell=True, cwd=directory, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("unit", nargs="*")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--all", action="store_true", help="every unit, changed or not")
    ap.add_argument("--list", action="store_true", help="only name the units it would compile")
    a = ap.parse_args()
    old, new = units(a.old), units(a.new)
    strip = lambda cmd, tree: cmd.replace(str(Path(tree).resolve()), "TREE").replace(a.old, "TREE").replace(a.new, "TREE")
    names = a.unit or sorted(n for n in set(old) | set(new)
                             if a.all or n not in old or n not in new or old[n][2] != new[n][2]
                             or strip(old[n][1], a.old) != strip(new[n][1], a.new))
    print(f"== load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; units: {' '.join(names) or '(none differ)'}")
    if a.list:
        return 0
    sums = {"old": 0.0, "new": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "unit.o"
        print("| unit | old CPU-s | new CPU-s |\n|---|---|---|")
        for n in names:
            cells = []
            for side, tree in (("old", old), ("new", new)):
                if n not in tree:
                    cells.append("-")
                    continue
                t = min(cpu_of(tree[n][0], tree[n][1], obj) for _ in range(a.rounds))
                sums[side] += t
                cells.append(f"{t:.1f}")
            print(f"| {n} | {cells[0]} | {cells[1]} |", flush=True)
        print(f"| **sum** | **{sums['old']:.1f}** | **{sums['new']:.1f}** |")
    print(f"== load after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
