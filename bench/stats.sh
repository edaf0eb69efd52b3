#!/usr/bin/env bash
# Benchmark: `dcpctl stats` of a >= 4 GB checkpoint (8 ranks, written by real torch:
# bench/make_big_ckpt.py, generated on first use, never committed) side by side with a
# consolidate of the same bytes and with reading them: the issue's target is that stats runs at
# the speed of the disk, as consolidate does.
#
#   bench/stats.sh [WORKDIR]          (default /tmp/dcpctl-bench; needs ~10 GB free there)
#
# Environment: DCPCTL (default build/cmd/dcpctl), DCPCTL_OTHER (optional: a second dcpctl, e.g.
# an older build, whose stats is timed too), PYTHON (default .venv/bin/python), REPEAT (rounds,
# default 1; the table shows medians), THREADS (stats --threads, default dcpctl's).
#
# Runs, each under /usr/bin/time -v (wall clock, CPU, max RSS), page cache dropped before each when
# /proc/sys/vm/drop_caches is writable (else every command runs once untimed first: all warm):
#   (a) dcpctl stats CKPT -q
#   (b) DCPCTL_OTHER stats CKPT -q                          (when set)
#   (c) dcpctl consolidate CKPT -o WORK/out.safetensors -q  (reads the same bytes, writes them)
#   (d) cat CKPT/*.distcp > /dev/null                       (reading the same bytes)
# then (a) and (b) again with the checkpoint in the page cache (CPU-bound: the kernel's speed),
# and prints a table: seconds, GB/s of checkpoint data, CPU seconds (user + sys), max RSS, ratio
# to cat.
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

other=${DCPCTL_OTHER:-}
threads=${THREADS:+--threads $THREADS}
out=$work/out.safetensors

names=(a_stats)
[ -n "$other" ] && names+=(b_stats_other)
names+=(c_consolidate d_cat)
cmd_for() {
  case $1 in
    a_stats | a_stats_warm) echo "'$dcpctl' stats '$ckpt' -q $threads" ;;
    b_stats_other | b_stats_other_warm) echo "'$other' stats '$ckpt' -q $threads" ;;
    c_consolidate) echo "rm -f '$out'; '$dcpctl' consolidate '$ckpt' -o '$out' -q" ;;
    d_cat) echo "cat '$ckpt'/*.distcp > /dev/null" ;;
  esac
}

after_round() {
  # warm: the checkpoint read once more into the page cache, then stats without touching the disk
  cat "$ckpt"/*.distcp > /dev/null
  local n
  for n in a_stats_warm ${other:+b_stats_other_warm}; do time_one stime "$n" "$1"; done
}
warm_up
repeat=${REPEAT:-1}
run_rounds stime
rm -f "$out"

"$py" - "$work" "$ckpt" "$cold" "$repeat" "$root/bench" <<'EOF'
import os, sys
work, ckpt, cold, repeat = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
sys.path.insert(0, sys.argv[5])
from timing import runs, summary
a = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt) if f.endswith(".distcp"))
rows = {}
for n in ["a_stats", "b_stats_other", "c_consolidate", "d_cat", "a_stats_warm", "b_stats_other_warm"]:
    if not os.path.exists(os.path.join(work, f"stime_{n}_1.txt")):
        continue
    m = summary(runs(work, "stime", n, repeat))
    rows[n] = (m["secs"], m["cpu"], m["rss"], m["rc"])
print()
print(f"checkpoint {ckpt}: {a/1e9:.2f} GB of .distcp; page cache {'dropped before each cold run' if cold else 'warm'}; median of {repeat}")
print(f"{'run':20} {'exit':>4} {'seconds':>8} {'GB/s':>6} {'CPU s':>6} {'max RSS':>10} {'vs cat':>7}")
cat_s = rows["d_cat"][0]
for n, (s, cpu, rss, rc) in rows.items():
    print(f"{n:20} {rc:>4} {s:8.2f} {a/1e9/s if s else 0:6.2f} {cpu:6.2f} {rss/2**20:8.0f} MiB {s/cat_s if cat_s else 0:6.2f}x")
EOF
