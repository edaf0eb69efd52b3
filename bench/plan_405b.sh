#!/usr/bin/env bash
# A 405B plan on a laptop: dcpctl plans the consolidation of a Llama-3.1-405B FSDP2 checkpoint
# saved over 2,048 ranks with Adam, from its `.metadata` alone.
#
#   bench/plan_405b.sh [DIR] [DCPCTL]
#
# DIR (default /tmp/dcpctl-bench/llama405b) is made by bench/make_big_metadata.py when it holds no
# .metadata (--model llama3-405b --ranks 2048 --prefix app: real torch classes, pickle.dump; 126
# layers, 1,137 parameters in float32, each with Adam's exp_avg, exp_avg_sq and step: 4,548
# tensors, 6,213,411 chunks, 884 MB; 6 minutes on an idle 2-core machine, 35 on a busy one; ~15 GB of RAM). No data file is written:
# a dry run reads only `.metadata`.
#
# Rows, the file in the page cache, RUNS times each (default 3), medians; wall time and peak RSS
# of the whole process (/usr/bin/time):
#   (a) cat .metadata > /dev/null                                    the anchor: reading the file
#   (b) dcpctl inspect --json DIR > /dev/null                        parse and describe everything
#   (c) dcpctl consolidate DIR --select app.model -o OUT/ --dry-run --json --max-memory 16GiB
#       the plan and deal of the HF folder, and the plan's own figures: tensors and bytes read,
#       output files, records and pieces, the largest record buffer, and each process's memory
#       from the one memory model (src/plan/memory.h)
#   (d) python: pickle.load of .metadata with torch imported (what every torch loader does first:
#       dcp.load, dcp_to_torch_save), once; SKIP_PYTHON=1 skips it (~15 GB, a minute or more)
# Beside them, not run here (docs/performance.md): DeepSpeed's zero_to_fp32 on a 405B
# checkpoint, and torch's dcp_to_torch_save, which holds the whole state_dict in RAM.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-/tmp/dcpctl-bench/llama405b}
DCPCTL=${2:-$ROOT/build/cmd/dcpctl}
PY=${DCPCTL_PYTHON:-$ROOT/.venv/bin/python}
RUNS=${RUNS:-3}
MD=$DIR/.metadata

[ -x "$DCPCTL" ] || { echo "no dcpctl binary at $DCPCTL" >&2; exit 2; }
[ -f "$MD" ] || "$PY" "$ROOT/bench/make_big_metadata.py" "$DIR" --model llama3-405b --ranks 2048 --prefix app
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat "$MD" >/dev/null

field() { sed -n "s/^[[:space:]]*$2: //p" "$1"; }
wall_s() { field "$1" "Elapsed (wall clock) time (h:mm:ss or m:ss)" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }'; }
rss_mb() { field "$1" "Maximum resident set size (kbytes)" | awk '{ printf "%.0f\n", $1 / 1024 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $MD: $(stat -c %s "$MD") bytes"
for k in $(seq "$RUNS"); do  # interleaved rounds
  /usr/bin/time -v -o "$TMP/a$k" cat "$MD" >/dev/null
  /usr/bin/time -v -o "$TMP/b$k" "$DCPCTL" inspect --json "$DIR" >/dev/null
  rc=0
  /usr/bin/time -v -o "$TMP/c$k" "$DCPCTL" consolidate "$DIR" --select app.model -o "$TMP/out/" --dry-run --json \
    --max-memory 16GiB --no-assets >"$TMP/plan.json" || rc=$?
  [ "$rc" = 0 ] || { echo "consolidate --dry-run exited $rc" >&2; exit 1; }
done
if [ "${SKIP_PYTHON:-0}" != 1 ]; then
  /usr/bin/time -v -o "$TMP/d" "$PY" -c "import pickle, sys, time, torch.distributed.checkpoint
t = time.time(); pickle.load(open(sys.argv[1], 'rb')); print(f'{time.time() - t:.2f}', file=sys.stderr)" "$MD" 2>"$TMP/d.load"
fi

row() {  # row LABEL PREFIX
  local w r
  w=$(for k in $(seq "$RUNS"); do wall_s "$TMP/$2$k"; done | median)
  r=$(for k in $(seq "$RUNS"); do rss_mb "$TMP/$2$k"; done | median)
  printf '| %-58s | %8s s | %8s MB |\n' "$1" "$w" "$r"
}
echo
printf '| %-58s | %10s | %11s |\n' "run (median of $RUNS, file in the page cache)" "wall" "peak RSS"
echo "|---|---|---|"
row "(a) cat .metadata" a
row "(b) dcpctl inspect --json" b
row "(c) dcpctl consolidate --select app.model --dry-run --json" c
if [ -f "$TMP/d" ]; then
  printf '| %-58s | %8s s | %8s MB |\n' "(d) python: import torch; pickle.load (load alone $(tail -1 "$TMP/d.load") s)" \
    "$(wall_s "$TMP/d")" "$(rss_mb "$TMP/d")"
fi
echo
echo "The plan's own figures (c):"
python3 "$ROOT/bench/plan_figures.py" "$TMP/plan.json"
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
