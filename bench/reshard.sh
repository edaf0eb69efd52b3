#!/usr/bin/env bash
# Benchmark: `dcpctl reshard` against the torch way and a plain copy, on a >= 4 GB checkpoint
# written by real torch with 8 ranks (bench/make_big_ckpt.py, defaults; generated on first use,
# never committed), resharded to 2 ranks.
#
#   bench/reshard.sh [WORKDIR]          (default /tmp/dcpctl-bench; needs ~20 GB free there)
#
# Environment: DCPCTL (default build/cmd/dcpctl), PYTHON (default .venv/bin/python), WORLD (target
# ranks, default 2), REPEAT (rounds, default 3, the order shuffled each round: the table shows
# medians), VERIFY=0 to skip the final comparison, KEEP=1 to keep the outputs.
#
# Runs, each under /usr/bin/time -v (wall clock, max RSS of the largest process), page cache
# dropped before each when /proc/sys/vm/drop_caches is writable (else every command runs once
# untimed first, so all of them run warm):
#   (a) dcpctl reshard CKPT -o out_dcpctl -w 2
#   (b) torch: 2 processes dcp.load into Shard(0) DTensors, then dcp.save (bench/torch_reshard.py)
#   (c) cp -r CKPT copy                                  (the same bytes, plain copy)
#   (d) cp -r CKPT copy && sync                          (the copy made durable: dcpctl fsyncs its
#                                                         files before renaming; torch and cp do not)
# /usr/bin/time's max RSS is the largest single process; for (b) the two ranks hold about the same,
# so the torch total is ~2x the figure shown (also printed). Then a table (seconds, GB/s of tensor
# data, max RSS, ratios; the ratios round by round too) and the targets: dcpctl >= 5x faster than
# torch, <= 1.5x cp -r (medians); dcpctl's peak RSS <= the largest target chunk + 512 MiB (bounded,
# independent of the checkpoint size). Finally (VERIFY=1)
# torch compares dcpctl's output with torch's own: chunk lists, chunk files, every byte.
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
world=${WORLD:-2}

o_d=$work/reshard_dcpctl o_t=$work/reshard_torch o_c=$work/reshard_copy
clean() { rm -rf "$o_d" "$o_t" "$o_c" "$work"/.reshard_*dcpctl-tmp*; }
names=(a_dcpctl_reshard b_torch_load_save c_cp d_cp_sync)
cmd_for() {
  case $1 in
    a_dcpctl_reshard) echo "'$dcpctl' reshard '$ckpt' -o '$o_d' -w $world -q" ;;
    b_torch_load_save) echo "'$py' '$root/bench/torch_reshard.py' '$ckpt' '$o_t' -w $world > '$work/torch_phases.json'" ;;
    c_cp) echo "cp -r '$ckpt' '$o_c'" ;;
    d_cp_sync) echo "cp -r '$ckpt' '$o_c' && sync" ;;
  esac
}

clean
before_run() {
  case $1 in a_*) rm -rf "$o_d" ;; b_*) rm -rf "$o_t" ;; esac
  rm -rf "$o_c"  # disk space: only the two compared outputs stay
}
after_run() { if [ "${1:0:1}" = b ]; then tail -n 1 "$work/torch_phases.json" > "$work/torch_phases_$2.json" || true; fi; }
warm_up
repeat=${REPEAT:-3}
rm -f "$work"/torch_phases*.json
run_rounds time_reshard
rm -rf "$o_c"
"$dcpctl" reshard "$ckpt" -o "$work/plan.unused" -w "$world" --dry-run --json > "$work/reshard_plan.json"

"$py" - "$work" "$ckpt" "$cold" "$world" "$repeat" "$root/bench" <<'EOF'
import json, os, statistics, sys
work, ckpt, cold, world, repeat = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), int(sys.argv[5])
sys.path.insert(0, sys.argv[6])
from timing import paired, report
data = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt) if f.endswith(".distcp"))
plan = json.load(open(os.path.join(work, "reshard_plan.json")))
tensor_bytes = plan["tensor_bytes"]
try:
    import torch
    from torch.distributed.checkpoint import FileSystemReader
    md = FileSystemReader(ckpt).read_metadata()
    largest_chunk = 0
    for m in md.state_dict_metadata.values():
        if hasattr(m, "size") and len(m.size):
            n = m.size[0]
            rows = -(-n // world)
            largest_chunk = max(largest_chunk, rows * (m.size.numel() // n if n else 0) * torch.empty(0, dtype=m.properties.dtype).element_size())
except Exception:
    largest_chunk = 0
phases = []
for r in range(1, repeat + 1):
    try:
        phases.append(json.loads(open(os.path.join(work, f"torch_phases_{r}.json")).read().strip()))
    except Exception:
        pass
def parse(n):
    return report(work, "time_reshard", n, repeat, 20)
names = ["a_dcpctl_reshard", "b_torch_load_save", "c_cp", "d_cp_sync"]
print("\nper run (in round order):")
rows = {n: parse(n) for n in names}
torch_s, cp_s, cps_s = rows["b_torch_load_save"][0], rows["c_cp"][0], rows["d_cp_sync"][0]
print()
print(f"checkpoint: {ckpt}: {data/1e9:.2f} GB in {len([f for f in os.listdir(ckpt) if f.endswith('.distcp')])} files "
      f"({tensor_bytes/1e9:.2f} GB of tensors), resharded to {world} ranks; largest target chunk "
      f"{largest_chunk/2**20:.0f} MiB; page cache {'dropped before each run' if cold else 'warm (each run once untimed first)'}")
print(f"median of {repeat} round(s); max RSS and exit: the worst round")
print(f"{'run':20} {'exit':>4} {'seconds':>8} {'GB/s':>6} {'max RSS':>10} {'vs torch':>9} {'vs cp':>6} {'vs cp+sync':>10}")
for n, (s, rss, rc) in rows.items():
    print(f"{n:20} {rc:>4} {s:8.2f} {tensor_bytes/1e9/s if s else 0:6.2f} {rss/2**20:8.0f} MiB "
          f"{torch_s/s if s else 0:8.2f}x {s/cp_s if cp_s else 0:5.2f}x {s/cps_s if cps_s else 0:9.2f}x")
for p in phases:
    print(f"torch phases (rank 0): setup (spawn, import, process group) {p.get('setup_s')} s, "
          f"dcp.load {p.get('load_s')} s, dcp.save {p.get('save_s')} s")
if phases:
    ls = statistics.median(p["load_s"] + p["save_s"] for p in phases)
    print(f"torch's dcp.load + dcp.save alone (median, no process start-up): {ls:.2f} s; dcpctl's whole run is "
          f"{ls / rows['a_dcpctl_reshard'][0]:.2f}x faster than that")
print(f"torch's max RSS is one process's: {world} ranks together hold about "
      f"{world * rows['b_torch_load_save'][1] / 2**30:.1f} GiB")
for anchor in ("c_cp", "b_torch_load_save"):
    rs = paired(work, "time_reshard", "a_dcpctl_reshard", anchor, repeat)
    print(f"a_dcpctl_reshard / {anchor}, round by round: {' '.join(f'{x:.2f}' for x in rs)} (median {statistics.median(rs):.2f})")
print()
s, rss, rc = rows["a_dcpctl_reshard"]
limit = largest_chunk + (512 << 20)
ok = True
for what, good in (("exit 0", rc == 0), (f">= 5x faster than torch ({torch_s/s:.2f}x)", torch_s / s >= 5),
                   (f"<= 1.5x cp -r ({s/cp_s:.2f}x)", s / cp_s <= 1.5),
                   (f"peak RSS <= largest target chunk + 512 MiB ({rss/2**20:.0f} <= {limit/2**20:.0f} MiB)", rss <= limit)):
    print(f"  dcpctl reshard: {'PASS' if good else 'MISS'} {what}")
    ok = ok and good
print("targets:", "all met" if ok else "some missed")
EOF

if [ "${VERIFY:-1}" = 1 ]; then
  echo "== comparing dcpctl's output with torch's own (torch reads both: chunk lists, files, every byte)"
  "$py" "$root/bench/torch_reshard.py" --compare "$o_d" "$o_t"
fi
[ "${KEEP:-0}" = 1 ] || rm -rf "$o_d" "$o_t" "$work/plan.unused"
