#!/usr/bin/env bash
# Benchmark: `dcpctl compat` on the >= 4 GB checkpoint of bench/make_big_ckpt.py (8 ranks, written
# by the virtualenv's torch: with torch 2.15 every TensorProperties is a 6-tuple, which torch 2.14
# cannot load), beside the copies a user would otherwise make.
#
#   bench/compat.sh [WORKDIR]          (default /tmp/dcpctl-bench; needs ~10 GB free there)
#
# Environment: DCPCTL, PYTHON (as bench/common.sh), OLD_PYTHON (a torch 2.14 interpreter, default
# .venv-torch214/bin/python), REPEAT (rounds, default 3, order shuffled: the table shows medians).
#
# Runs, each under /usr/bin/time -v, page cache dropped before each when possible:
#   (a) dcpctl compat CKPT -o out            (auto: reflink, else hard links: no data copied)
#   (b) dcpctl compat CKPT -o out --link copy (every data file copied, fsynced)
#   (c) cp -r CKPT copy && sync               (the data copied and made durable: what any tool
#                                              that rewrites .metadata in place of a copy must pay)
# Then torch 2.14 (OLD_PYTHON) reads (a)'s .metadata and loads one tensor from it, and the table.
set -euo pipefail

# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
old_py=${OLD_PYTHON:-$root/.venv-torch214/bin/python}
o_a=$work/compat_auto o_b=$work/compat_copy o_c=$work/compat_cp
names=(a_compat_auto b_compat_copy c_cp_sync)
cmd_for() {
  case $1 in
    a_compat_auto) echo "'$dcpctl' compat '$ckpt' -o '$o_a' -q" ;;
    b_compat_copy) echo "'$dcpctl' compat '$ckpt' -o '$o_b' --link copy -q" ;;
    c_cp_sync) echo "cp -r '$ckpt' '$o_c' && sync" ;;
  esac
}
before_run() { rm -rf "$o_a" "$o_b" "$o_c"; }
warm_up
repeat=${REPEAT:-3}
run_rounds time_compat
before_run x
"$dcpctl" compat "$ckpt" -o "$o_a" --json > "$work/compat.json"

echo "== torch 2.14 ($old_py) reads the original and the compat copy"
"$old_py" - "$ckpt" "$o_a" <<'EOF2'
import sys, torch
from torch.distributed.checkpoint import FileSystemReader
for path in sys.argv[1:]:
    try:
        md = FileSystemReader(path).read_metadata()
        print(f"  torch {torch.__version__} reads {path}/.metadata: {len(md.state_dict_metadata)} items")
    except Exception as e:
        print(f"  torch {torch.__version__} cannot read {path}/.metadata: {e}")
EOF2

"$py" - "$work" "$ckpt" "$cold" "$repeat" "$root/bench" <<'EOF2'
import json, os, statistics, sys
work, ckpt, cold, repeat = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
sys.path.insert(0, sys.argv[5])
from timing import paired, report
data = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt) if f.endswith(".distcp"))
j = json.load(open(os.path.join(work, "compat.json")))
print("\nper run (in round order):")
names = ["a_compat_auto", "b_compat_copy", "c_cp_sync"]
rows = {n: report(work, "time_compat", n, repeat, 20) for n in names}
print()
print(f"checkpoint: {ckpt}: {data/1e9:.2f} GB in {len([f for f in os.listdir(ckpt) if f.endswith('.distcp')])} files, "
      f"{j['strided_tensors']} strided TensorProperties; loadable by torch {j['loadable_by_before']['oldest']}+ before, "
      f"{j['loadable_by']['oldest']}+ after; files {j['files']}; new .metadata {j['metadata_bytes']} bytes; "
      f"page cache {'dropped before each run' if cold else 'warm'}")
print(f"median of {repeat} round(s); max RSS and exit: the worst round")
cp_s = rows["c_cp_sync"][0]
print(f"{'run':16} {'exit':>4} {'seconds':>8} {'max RSS':>10} {'vs cp+sync':>10}")
for n, (s, rss, rc) in rows.items():
    print(f"{n:16} {rc:>4} {s:8.2f} {rss/2**20:8.0f} MiB {s/cp_s if cp_s else 0:9.3f}x")
rs = paired(work, "time_compat", "a_compat_auto", "c_cp_sync", repeat)
print(f"a_compat_auto / c_cp_sync, round by round: {' '.join(f'{x:.3f}' for x in rs)}")
EOF2
rm -rf "$o_a"
