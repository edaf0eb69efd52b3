#!/usr/bin/env python3
"""The plan's own figures from a `consolidate --dry-run --json` report (bench/plan_405b.sh,
bench/plan_1t.sh): tensors and bytes written, records, pieces and bytes read, the largest record's
buffer, and each process's memory from the one memory model (src/plan/memory.h).

    python3 bench/plan_figures.py PLAN.json
"""
import json
import sys

d = json.load(open(sys.argv[1]))
plan, deal = d["plan"], d["deal"]
pieces = sum(len(r["pieces"]) for r in plan)
read = sum(p["bytes"] for r in plan for p in r["pieces"])
largest = max(r["need"] for r in plan)
print(f"  tensors {d['tensors']}, written {d['tensor_bytes'] / 2**40:.2f} TiB in {len(d['files'])} files ({d['format']})")
print(f"  records {len(plan)}, pieces {pieces} (chunks read), bytes read {read} ({read / 2**40:.2f} TiB)")
print(f"  largest record buffer {largest / 2**20:.1f} MiB; lanes {deal['lanes']}, processes {deal['processes']}")
for p in deal["per_process"]:
    m = p["memory"]
    print(f"  rank {p['rank']}: tasks {p['tasks']}, files {p['files']}, memory buffers {m['buffers'] / 2**20:.1f} MiB, "
          f"set aside {m['set_aside']}, upload {m['upload']}, total {m['total'] / 2**20:.1f} MiB of budget {m['budget'] / 2**30:.0f} GiB; "
          f"gate {p['memory_gate'] / 2**30:.1f} GiB")
