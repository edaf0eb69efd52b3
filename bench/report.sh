#!/usr/bin/env bash
# Benchmark: `dcpctl report` of a run folder against reading its steps' files with `cat`. The run
# (bench/make_report_run.py: STEPS steps of a Llama-shaped model with Adam state, written by real
# torch; generated on first use under WORKDIR/report-run-*, never committed) is read:
#   (a) dcpctl report RUN --json > /dev/null        every figure of every step (lockstep passes)
#   (b) dcpctl report RUN --html PAGE -q             the same, and the page
#   (c) dcpctl stats STEP -q, each step in turn      per-step figures only (no update ratio)
#   (d) cat RUN/step-*/*.distcp > /dev/null          reading every step's bytes once: the anchor
# each under /usr/bin/time -v, page cache dropped before each where it can be (common.sh), and
# prints seconds, GB/s of step data, CPU seconds, max RSS and the ratio to cat.
#
#   bench/report.sh [WORKDIR]      (default /tmp/dcpctl-bench; needs STEPS x ~0.53 GB free there)
#
# Environment: DCPCTL, PYTHON, REPEAT (rounds, default 1; medians), STEPS (default 4), LAYERS
# (4), DIM (768), EXPERTS (0: dense), THREADS (report/stats --threads, default dcpctl's).
set -euo pipefail
own_ckpt=1
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
steps=${STEPS:-4} layers=${LAYERS:-4} dim=${DIM:-768} experts=${EXPERTS:-0}
run=$work/report-run-${steps}s-${layers}l-${dim}d-${experts}e
if [ ! -f "$run/step-$steps/.metadata" ]; then
  echo "== generating the run under $run ($steps steps, real torch)"
  rm -rf "$run"
  "$py" "$root/bench/make_report_run.py" "$run" --steps "$steps" --layers "$layers" --dim "$dim" --experts "$experts"
fi
threads=${THREADS:+--threads $THREADS}
page=$work/report.html

names=(a_report_json b_report_html c_stats_each d_cat)
cmd_for() {
  case $1 in
    a_report_json) echo "'$dcpctl' report '$run' --json $threads > /dev/null" ;;
    b_report_html) echo "'$dcpctl' report '$run' --html '$page' --force -q $threads" ;;
    c_stats_each) echo "for s in '$run'/step-*; do '$dcpctl' stats \"\$s\" -q $threads || exit 1; done" ;;
    d_cat) echo "cat '$run'/step-*/*.distcp > /dev/null" ;;
  esac
}
warm_up
repeat=${REPEAT:-1}
run_rounds rtime

"$py" - "$work" "$run" "$cold" "$repeat" "$root/bench" "$page" <<'PY'
import glob, os, sys
work, run, cold, repeat, page = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), sys.argv[6]
sys.path.insert(0, sys.argv[5])
from timing import runs, summary
size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(run, "step-*", "*.distcp")))
rows = {n: summary(runs(work, "rtime", n, repeat)) for n in ["a_report_json", "b_report_html", "c_stats_each", "d_cat"]}
print()
print(f"run {run}: {len(glob.glob(os.path.join(run, 'step-*')))} steps, {size/1e9:.2f} GB of .distcp; "
      f"page cache {'dropped before each run' if cold else 'warm'}; median of {repeat}; page {os.path.getsize(page)/1e3:.0f} kB")
print(f"{'run':16} {'exit':>4} {'seconds':>8} {'GB/s':>6} {'CPU s':>6} {'max RSS':>10} {'vs cat':>7}")
cat_s = rows["d_cat"]["secs"]
for n, m in rows.items():
    s = m["secs"]
    print(f"{n:16} {m['rc']:>4} {s:8.2f} {size/1e9/s if s else 0:6.2f} {m['cpu']:6.2f} {m['rss']/2**20:8.0f} MiB {s/cat_s if cat_s else 0:6.2f}x")
PY
